"""Default runs of the zoo's families at a chosen depth (issue 26, point 6): each model of ``tests/zoo`` rebuilt
with ``--layers`` layers (the zoo's own config otherwise; ResNet keeps its stages), exported by each exporter,
and optimized by ``eqsat optimize-model`` in its own process under ``/usr/bin/time -v``: wall time, the report's
time per phase, the measured speedup and what was shipped. One JSON per run (``--json``).

    python scripts/bench_default.py --models bert,gpt2,vit,llama,resnet,qwen2 --json results/default.json
    python scripts/bench_default.py --models bert --exporters torchscript --layers 4 -- --time-limit 10

Arguments after ``--`` go to ``eqsat optimize-model``. Run it alone on the machine (``flock``): a default run
is meant to finish, measurement included, within a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (os.path.join(ROOT, "tests"), os.path.join(ROOT, "scripts")):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_scale import optimize_one  # noqa: E402

PHASES = ("import", "blocks", "encode", "rest", "search", "extract", "export", "verify", "measure")
"""the report's phases, in run order (``times``; a phase a run does not have is left out)"""


WIDTHS = (("n_embd", "n_inner"), ("hidden_size", "intermediate_size"), ("d_model", "d_ff"), ("dim", "hidden_dim"))
"""a transformer config's width and its feed-forward width (GPT-2: None, 4 times the width; BERT/LLaMA, T5,
DistilBERT)"""


@contextlib.contextmanager
def resized(n: int | None = None, hidden: int | None = None) -> Iterator[None]:
    """While open, the zoo's transformer configs have ``n`` layers and width ``hidden`` (None: the zoo's own); a
    wider config keeps its heads (each head wider) and its feed-forward ratio (the zoo's ``configure`` sees every
    config)."""
    import zoo

    eager = zoo.configure

    def sized(config: Any) -> Any:
        if n is not None:
            for attr in ("num_hidden_layers", "num_layers", "n_layers"):
                if hasattr(config, attr):
                    setattr(config, attr, n)
            if getattr(config, "layer_types", None):  # Qwen2's per-layer attention kinds, sized at construction
                config.layer_types = [config.layer_types[0]] * n
        if hidden is not None:
            heads = next((getattr(config, a) for a in ("num_attention_heads", "n_head", "num_heads", "n_heads")
                          if getattr(config, a, None)), 1)
            if hidden % heads:
                raise ValueError(f"--hidden {hidden} is not a multiple of the model's {heads} heads")
            for width, ff in WIDTHS:
                if hasattr(config, width) and hasattr(config, ff):
                    old = getattr(config, width)
                    if getattr(config, ff) is not None:
                        setattr(config, ff, getattr(config, ff) * hidden // old)
                    setattr(config, width, hidden)
                    break
            if hasattr(config, "d_kv"):  # T5's head width is its own field
                config.d_kv = hidden // config.num_heads
            if hasattr(config, "head_dim") and hasattr(config, "num_attention_heads"):
                config.head_dim = hidden // config.num_attention_heads
        return eager(config)

    zoo.configure = sized
    try:
        yield
    finally:
        zoo.configure = eager


def export(name: str, exporter: str, opset: int, depth: int, seed: int) -> onnx.ModelProto:
    """Zoo model ``name`` at ``depth`` layers, exported by ``exporter`` at ``opset``."""
    import zoo

    with resized(depth):
        return zoo.export(name, exporter, opset, seed)


def bench(name: str, exporter: str, args: argparse.Namespace, extra: list[str], out: str) -> dict[str, Any]:
    """One model's default run: its record (wall seconds, per phase, speedup, what was returned)."""
    model = export(name, exporter, args.opset, args.layers, args.seed)
    stem = os.path.join(out, f"{name}-{exporter}")
    onnx.save(model, stem + ".onnx")
    record = optimize_one(stem, stem + ".onnx", args, extra)
    record.update(model=name, exporter=exporter, layers=args.layers, opset=args.opset, nodes=len(model.graph.node))
    return record


def line(r: dict[str, Any]) -> str:
    times = r.get("times", {})
    phases = " ".join(f"{p} {times[p]:.1f}" for p in PHASES if p in times)
    ci = r.get("ci") or [None, None]
    speed = f"{r['speedup']:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}]" if r.get("speedup") else "-"
    shipped = r.get("returned") or f"exit {r['exit_code']}"
    return f"{r['model']}/{r['exporter']:11} {r['wall_s']:5.1f} s  {speed:26} {shipped:9} | {phases}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert,gpt2,vit,llama,resnet,qwen2", help="zoo names, comma-separated")
    p.add_argument("--exporters", default="torchscript,dynamo")
    p.add_argument("--layers", type=int, default=4, help="transformer layers (the zoo's configs otherwise)")
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the records to this JSON file")
    args = p.parse_args(own)
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-default-") as out:
        for name in args.models.split(","):
            for exporter in args.exporters.split(","):
                records.append(bench(name, exporter, args, extra, out))
                print(line(records[-1]), flush=True)
                if args.json:  # after each run: a long sweep cut short keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump({"machine": platform.node(), "load": os.getloadavg(), "extra": extra,
                                   "records": records}, f, indent=2)
    return 0 if all(r["exit_code"] == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
