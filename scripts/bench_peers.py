#!/usr/bin/env python3
"""eqsat against the ONNX optimizers users already have (issue 26, point 1), measured end to end.

For each model (the zoo's, tests/zoo, in the exporters asked for, and any ``--onnx FILE``), every tool writes
its program from the same original:

- ``eqsat``: ``eqsat.optimize`` with default flags (its own measured gate included; ``--eqsat-time-limit``),
- ``onnxsim``: ``onnxsim.simplify``,
- ``onnxslim``: ``onnxslim.slim``,
- ``ort-transformers``: onnxruntime's transformers optimizer (``optimize_model``, model type from the name),
- ``onnxscript``: ``onnxscript.optimizer.optimize`` then ``onnxscript.rewriter.ort_fusions.optimize_for_ort``.

Each program is verified against the original in onnxruntime (``eqsat.verify``: seeded random inputs, every
output; the peers' outputs too: they break). The verified ones are then timed together with an unchanged copy
of the original (the A/A control, which shows the noise) in one process, interleaved, with eqsat.timing's
protocol (paired rounds, ORT_ENABLE_ALL on every side, the median ratio original / program with a bootstrap
95% interval), at each ``--threads`` count. A tool that is not installed, fails, or writes a program that does
not verify is reported as such with the reason, never timed. The peers are optional extras
(``pip install -e '.[peers]'``), never runtime dependencies of eqsat.

    python scripts/bench_peers.py --models bert,vit --exporters torchscript --json results/peers.json
    python scripts/bench_peers.py --models unseen --threads 1 --json results/unseen.json
    python scripts/bench_peers.py --onnx my.onnx --threads 1,2 --json results/mine.json --figure results/mine.png

One JSON document per run (``--json``): per model, per tool, the wall seconds the tool took, whether it
verified (and the worst errors), and per thread count the speedup with its interval.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import traceback
from collections.abc import Callable
from typing import Any

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "scripts")):
    if path not in sys.path:
        sys.path.insert(0, path)

from peers_report import figure  # noqa: E402
from peers_timing import time_all  # noqa: E402
from peers_tools import TOOLS, run_tool  # noqa: E402

from eqsat import timing  # noqa: E402


def bench_model(label: str, model: onnx.ModelProto, args: argparse.Namespace) -> dict[str, Any]:
    print(f"== {label}: {len(model.graph.node)} nodes", flush=True)
    tools: dict[str, dict[str, Any]] = {}
    for name in args.tools:
        tools[name] = run_tool(name, model, label, args)
        t = tools[name]
        print(f"   {name:17} {t['status']:11} {t.get('seconds', 0.0):7.1f} s  {t.get('reason', '')}", flush=True)
    verified = {n: t.pop("program") for n, t in tools.items() if t["status"] == "verified"}
    for t in tools.values():
        t.pop("program", None)
    timed = {}
    for threads in args.threads:
        timed[threads] = time_all(model, verified, threads, args)
        for name, r in timed[threads].items():
            print(f"   {threads}t {name:17} {r['speedup']:.3f}x [{r['ci_low']:.3f}, {r['ci_high']:.3f}]", flush=True)
            (tools.setdefault(name, {"status": "control"})).setdefault("timed", {})[str(threads)] = r
    return {"model": label, "nodes": len(model.graph.node), "tools": tools}


def models_from(args: argparse.Namespace) -> list[tuple[str, Callable[[], onnx.ModelProto]]]:
    out: list[tuple[str, Callable[[], onnx.ModelProto]]] = []
    if args.models:
        import zoo  # tests/zoo: small random-weight transformers models exported by torch

        groups = {"zoo": zoo.NAMES, "extra": zoo.EXTRA, "unseen": zoo.UNSEEN}
        for name in [n for m in args.models for n in groups.get(m, (m,))]:
            for exporter in args.exporters:
                out.append((f"{name}/{exporter}", functools.partial(zoo.build, name, exporter, args.opset,
                                                                     seed=args.seed)))
    for path in args.onnx:
        out.append((os.path.basename(path), functools.partial(onnx.load, path)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert,gpt2,vit,llama,resnet",
                   help="comma-separated zoo models (tests/zoo: NAMES, EXTRA, UNSEEN) or groups 'zoo', 'extra', "
                        "'unseen' (issue 26's families beyond the zoo: DistilBERT, T5 and Whisper encoders, ConvNeXt, "
                        "ResNet-50); '' for none")
    p.add_argument("--exporters", default="torchscript,dynamo", help="torchscript,dynamo")
    p.add_argument("--opset", type=int, default=18, help="the zoo export's opset")
    p.add_argument("--onnx", action="append", default=[], metavar="FILE", help="an ONNX model to add (repeatable)")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {','.join(TOOLS)}")
    p.add_argument("--threads", default="1,2", help="onnxruntime intra-op thread counts to time at")
    p.add_argument("--time-budget", type=float, default=4.0, help="seconds of timed rounds per program and count")
    p.add_argument("--eqsat-time-limit", type=float, help="eqsat's --time-limit (default: eqsat's own)")
    p.add_argument("--seed", type=int, default=0, help="weights, inputs and timing order")
    p.add_argument("--json", help="write the run's results to this JSON file")
    p.add_argument("--figure", help="write a bar chart (PNG) of the first thread count's speedups")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.exporters = [e for e in args.exporters.split(",") if e]
    args.tools = [t for t in args.tools.split(",") if t]
    args.threads = [int(t) for t in args.threads.split(",") if t]
    unknown = [t for t in args.tools if t not in TOOLS]
    if unknown or not args.threads or min(args.threads) < 1:
        p.error(f"unknown tool {', '.join(unknown)} (tools: {', '.join(TOOLS)})" if unknown
                else "--threads takes positive counts, e.g. 1,2")
    rows = []
    for label, load in models_from(args):
        try:
            rows.append(bench_model(label, load(), args))
        except Exception as exc:  # an export this torch cannot write, or a model onnxruntime cannot time
            traceback.print_exc()
            rows.append({"model": label, "error": f"{type(exc).__name__}: {exc}"})
    doc = {"script": "bench_peers", "argv": sys.argv[1:] if argv is None else argv, "seed": args.seed,
           "threads": args.threads, "machine": {"cpu": platform.processor() or platform.machine(),
                                                 "cores": os.cpu_count()},
           "runtime": timing.runtime_info(args.threads[0]), "rows": rows}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, allow_nan=False, default=str)
        print(f"wrote {args.json}")
    if args.figure:
        figure([r for r in rows if "tools" in r], args.figure, args.threads[0])
        print(f"wrote {args.figure}")
    return 0 if all("tools" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
