"""Scale benchmark (issue 28): one architecture (``transformers``' ``BertModel``, or ``LlamaModel`` with
grouped KV heads; random weights, nothing downloaded) at several depths and widths, each optimized by ``eqsat
optimize-model`` in its own process under ``/usr/bin/time -v``: wall time per phase, peak resident memory (per
phase from the report's ``memory_mb``, and the process's from ``time -v``), the measured speedup. One JSON per
run in ``--out``, and a figure of time and memory against depth (``scale.png``).

    python scripts/bench_scale.py --layers 2,4,12,24 --widths 256,768 --out results/scale
    python scripts/bench_scale.py --layers 2 --widths 64 --seq 16 --out /tmp/scale -- --time-limit 20
    python scripts/bench_scale.py --arch llama --layers 4 --widths 64 --seq 16 --compare --out /tmp/scale
    python scripts/bench_scale.py --arch llama --layers 16 --widths 2048 --seq 128 --out /tmp/llama1b

``--compare`` optimizes each model twice, by default (repeated blocks searched once) and with ``--no-blocks``
(the whole-model search), and times the original and both results in one interleaved run (``compare`` in the
record). A model of more than 2 GiB of weights is written with external data. Arguments after ``--`` go to
``eqsat optimize-model``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BERT_VOCAB = 30522
"""BERT-base's vocabulary: its embedding table is a quarter of its 440 MB of weights"""
LLAMA_VOCAB = 32000
"""LLaMA-2's vocabulary (at hidden 2048 its embedding table is 6% of the 1B parameters)"""
EXTERNAL_BYTES = 2**31 - 2**26
"""weights above this (2 GiB less 64 MiB for the graph) are written as external data"""


def export_bert(path: str, layers: int, hidden: int, seq: int, seed: int = 0, vocab: int = BERT_VOCAB) -> int:
    """Write a BERT encoder (``layers`` layers of width ``hidden``, ``hidden // 64`` heads, MLP 4 x hidden,
    random weights seeded by ``seed``) taking ``input_ids`` of shape (1, seq) to ``path``; returns its weight
    bytes."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                     max_position_embeddings=max(512, seq))
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = BertModel(cfg, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state

    return _export(Encoder().eval(), path, vocab, seq)


def export_llama(path: str, layers: int, hidden: int, seq: int, seed: int = 0, vocab: int = LLAMA_VOCAB) -> int:
    """Write a LLaMA decoder (``layers`` layers of width ``hidden``, ``hidden // 64`` heads and a quarter as many
    KV heads (grouped), gated SiLU MLP 4 x hidden, RMSNorm, rotary embedding, causal; random weights seeded by
    ``seed``) taking ``input_ids`` of shape (1, seq) to ``path``; returns its weight bytes. At hidden 2048 and 16
    layers: about 1B parameters, written with external data."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    heads = max(1, hidden // 64)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
                      max_position_embeddings=max(256, seq))
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = LlamaModel(cfg).eval()

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.llama = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.llama(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).last_hidden_state

    return _export(Decoder().eval(), path, vocab, seq)


EXPORTERS = {"bert": export_bert, "llama": export_llama}


def _export(module: object, path: str, vocab: int, seq: int) -> int:
    """Export ``module`` (input ``input_ids`` of shape (1, seq), output ``y``) to ``path`` with TorchScript at
    opset 17; weights over :data:`EXTERNAL_BYTES` go to one external data file, ``path`` + ``.data`` (copied
    tensor by tensor from the exporter's files: the weights are never held twice). Returns the weight bytes."""
    import tempfile

    import onnx
    import torch
    from onnx import numpy_helper
    from onnx.external_data_helper import (
        ExternalDataInfo,
        _get_attribute_tensors,
        load_external_data_for_tensor,
        uses_external_data,
    )

    assert isinstance(module, torch.nn.Module)
    size = sum(p.numel() * p.element_size() for p in module.parameters())
    ids = torch.randint(0, vocab, (1, seq))
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.TemporaryDirectory(dir=folder) as tmp, torch.no_grad():
        staged = os.path.join(tmp, "model.onnx")
        torch.onnx.export(module, (ids,), staged, input_names=["input_ids"], output_names=["y"],
                          opset_version=17, dynamo=False)
        model = onnx.load(staged, load_external_data=False)
        inlined = 0
        for t in _get_attribute_tensors(model):  # a Constant node's value the exporter wrote beside the model
            if uses_external_data(t):  # (LLaMA's rotary table at 1B): inlined, as its file goes with ``tmp``
                load_external_data_for_tensor(t, tmp)
                inlined += 1
        tensors = [t for t in model.graph.initializer if uses_external_data(t) or size > EXTERNAL_BYTES]
        if not tensors:
            if inlined:
                onnx.save(model, path)
            else:
                os.replace(staged, path)
            return size
        data = os.path.basename(path) + ".data"
        with open(os.path.join(folder, data), "wb") as out:
            for t in tensors:
                if uses_external_data(t):
                    info = ExternalDataInfo(t)
                    with open(os.path.join(tmp, info.location), "rb") as f:
                        f.seek(info.offset or 0)
                        raw = f.read(info.length) if info.length else f.read()
                else:
                    raw = numpy_helper.to_array(t).tobytes()
                offset = out.tell()
                out.write(raw)
                out.write(b"\0" * (-len(raw) % 4096))  # aligned, as onnx writes them
                dims, dtype, name = list(t.dims), t.data_type, t.name
                t.Clear()
                t.dims.extend(dims)
                t.data_type, t.name, t.data_location = dtype, name, onnx.TensorProto.EXTERNAL
                for key, value in (("location", data), ("offset", str(offset)), ("length", str(len(raw)))):
                    entry = t.external_data.add()
                    entry.key, entry.value = key, value
        onnx.save(model, path)
    return size


def max_rss_mb(time_v: str) -> float | None:
    """The ``Maximum resident set size`` of ``/usr/bin/time -v``'s output, in MiB."""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v)
    return int(m.group(1)) / 1024.0 if m else None


def optimize_one(stem: str, model: str, args: argparse.Namespace, extra: list[str]) -> dict:
    """Optimize ``model`` in a child process under ``/usr/bin/time -v`` (output ``stem-opt.onnx``, report
    ``stem-report.json``) and return what its record says of the run."""
    cmd = [sys.executable, "-m", "eqsat", "optimize-model", model, "-o", stem + "-opt.onnx",
           "--report", stem + "-report.json", "--seed", str(args.seed), "-q", *extra]
    timed = (["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []) + cmd
    start = time.perf_counter()
    done = subprocess.run(timed, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    record: dict = {"command": cmd, "exit_code": done.returncode, "wall_s": wall,
                    "max_rss_mb": max_rss_mb(done.stderr)}
    if done.returncode == 0:
        report = json.load(open(stem + "-report.json"))
        measured = report.get("measured") or {}
        record.update(times=report["times"], memory_mb=report.get("memory_mb", {}),
                      blocks=report.get("blocks"), returned=report["returned"],
                      speedup=measured.get("speedup"), ci=[measured.get("ci_low"), measured.get("ci_high")],
                      estimated_speedup=report["estimated_speedup"])
    else:
        record["stderr_tail"] = done.stderr[-2000:]
    return record


def compare(original: str, optimized: dict[str, str], seed: int, budget: float) -> dict:
    """The original and each optimized model (name -> path) timed in one interleaved run in onnxruntime on the
    CPU (eqsat.measurement.timing's protocol): each one's speedup over the original with its 95% interval."""
    import onnx

    from eqsat.measurement.runtimes import Program, compare_programs, make
    from eqsat.measurement.timing import Protocol

    names = list(optimized)
    measured = compare_programs(Program(onnx.load(original)), [Program(onnx.load(optimized[n])) for n in names],
                                make("ort-cpu"), Protocol(budget_s=budget, seed=seed))
    return {n: {"speedup": c.speedup, "ci": [c.ci_low, c.ci_high], "ms": c.optimized_ms,
                "original_ms": c.original_ms, "rounds": c.rounds} for n, c in zip(names, measured.comparisons)}


def run_one(arch: str, layers: int, hidden: int, args: argparse.Namespace, extra: list[str]) -> dict:
    """Export one model, optimize it in a child process (with ``--compare``: twice, by default and with
    ``--no-blocks``, then both timed against the original in one run), and return the run's record."""
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{arch}-L{layers}-H{hidden}")
    weight_bytes = EXPORTERS[arch](stem + ".onnx", layers, hidden, args.seq, args.seed)
    record: dict = {"arch": arch, "layers": layers, "hidden": hidden, "seq": args.seq,
                    "weights_mb": weight_bytes / 2**20, "machine": platform.node(),
                    **optimize_one(stem, stem + ".onnx", args, extra)}
    if args.compare:
        whole = optimize_one(stem + "-whole", stem + ".onnx", args, [*extra, "--no-blocks"])
        record["whole"] = whole
        if record["exit_code"] == 0 and whole["exit_code"] == 0:
            record["compare"] = compare(stem + ".onnx", {"blocks": stem + "-opt.onnx",
                                                         "whole": stem + "-whole-opt.onnx"},
                                        args.seed, args.compare_budget)
    with open(stem + ".json", "w") as f:
        json.dump(record, f, indent=2)
    for suffix in (".onnx", ".onnx.data", "-opt.onnx", "-opt.onnx.data", "-whole-opt.onnx", "-whole-opt.onnx.data"):
        if os.path.exists(stem + suffix):  # the models are rebuilt from the seed; keep only the records
            os.unlink(stem + suffix)
    return record


def figure(records: list[dict], path: str) -> None:
    """Total wall time, search time and peak memory against depth, one line per width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for k, (arch, hidden) in enumerate(sorted({(r["arch"], r["hidden"]) for r in records})):
        color = f"C{k}"
        rs = sorted((r for r in records if (r["arch"], r["hidden"]) == (arch, hidden) and r["exit_code"] == 0),
                    key=lambda r: r["layers"])
        depth = [r["layers"] for r in rs]
        ax_t.plot(depth, [r["wall_s"] for r in rs], "o-", color=color, label=f"total, {arch} {hidden}")
        ax_t.plot(depth, [r["times"].get("search", 0.0) for r in rs], "x--", color=color,
                  label=f"search, {arch} {hidden}")
        ax_m.plot(depth, [r["max_rss_mb"] or max(r["memory_mb"].values()) for r in rs], "o-",
                  color=color, label=f"peak RSS, {arch} {hidden}")
        ax_m.plot(depth, [r["weights_mb"] for r in rs], ":", color=color,
                  label=f"weights, {arch} {hidden}")
    ax_t.set(xlabel="layers", ylabel="seconds", title="wall time")
    ax_m.set(xlabel="layers", ylabel="MiB", title="peak resident memory")
    for ax in (ax_t, ax_m):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="2,4,12,24", help="depths, comma-separated")
    p.add_argument("--widths", default="256,768", help="hidden sizes, comma-separated (multiples of 64)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/scale")
    p.add_argument("--arch", default="bert", help="architectures, comma-separated: " + ", ".join(EXPORTERS))
    p.add_argument("--compare", action="store_true",
                   help="also optimize with --no-blocks, and time the original and both results in one run")
    p.add_argument("--compare-budget", type=float, default=10.0, help="seconds of timed rounds of --compare")
    args = p.parse_args(own)
    records = []
    for arch in args.arch.split(","):
        for hidden in (int(w) for w in args.widths.split(",")):
            for layers in (int(n) for n in args.layers.split(",")):
                rec = run_one(arch, layers, hidden, args, extra)
                records.append(rec)
                mem = rec.get("memory_mb") or {}
                print(f"{arch} L={layers:3} H={hidden:4}: exit {rec['exit_code']}, {rec['wall_s']:.1f}s, "
                      f"peak {rec['max_rss_mb'] or 0:.0f} MiB (weights {rec['weights_mb']:.0f} MiB), "
                      f"search {rec.get('times', {}).get('search', 0):.1f}s, speedup {rec.get('speedup')}, "
                      f"per phase {mem}" + (f", one interleaved run: {rec['compare']}" if "compare" in rec else ""),
                      flush=True)
    with open(os.path.join(args.out, "scale.json"), "w") as f:
        json.dump(records, f, indent=2)
    if any(r["exit_code"] == 0 for r in records):
        figure(records, os.path.join(args.out, "scale.png"))
    return 0 if all(r["exit_code"] == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
