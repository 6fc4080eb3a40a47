"""Scale benchmark (issue 28): one BERT architecture (``transformers`` ``BertModel``, random weights, nothing
downloaded) at several depths and widths, each optimized by ``eqsat optimize-model`` in its own process under
``/usr/bin/time -v``: wall time per phase, peak resident memory (per phase from the report's ``memory_mb``, and
the process's from ``time -v``), the measured speedup. One JSON per run in ``--out``, and a figure of time and
memory against depth (``scale.png``).

    python scripts/bench_scale.py --layers 2,4,12,24 --widths 256,768 --out results/scale
    python scripts/bench_scale.py --layers 2 --widths 64 --seq 16 --out /tmp/scale -- --time-limit 20

Arguments after ``--`` go to ``eqsat optimize-model`` (e.g. ``--no-blocks`` for the whole-model search).
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

    ids = torch.randint(0, vocab, (1, seq))
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), (ids,), path, input_names=["input_ids"], output_names=["y"],
                          opset_version=17, dynamo=False)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def max_rss_mb(time_v: str) -> float | None:
    """The ``Maximum resident set size`` of ``/usr/bin/time -v``'s output, in MiB."""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v)
    return int(m.group(1)) / 1024.0 if m else None


def run_one(layers: int, hidden: int, args: argparse.Namespace, extra: list[str]) -> dict:
    """Export one model, optimize it in a child process, and return the run's record."""
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"bert-L{layers}-H{hidden}")
    weight_bytes = export_bert(stem + ".onnx", layers, hidden, args.seq, args.seed)
    cmd = [sys.executable, "-m", "eqsat", "optimize-model", stem + ".onnx", "-o", stem + "-opt.onnx",
           "--report", stem + "-report.json", "--seed", str(args.seed), "-q", *extra]
    timed = (["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []) + cmd
    start = time.perf_counter()
    done = subprocess.run(timed, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    record: dict = {"layers": layers, "hidden": hidden, "seq": args.seq, "weights_mb": weight_bytes / 2**20,
                    "command": cmd, "exit_code": done.returncode, "wall_s": wall,
                    "max_rss_mb": max_rss_mb(done.stderr), "machine": platform.node()}
    if done.returncode == 0:
        report = json.load(open(stem + "-report.json"))
        measured = report.get("measured") or {}
        record.update(times=report["times"], memory_mb=report.get("memory_mb", {}),
                      blocks=report.get("blocks"), returned=report["returned"],
                      speedup=measured.get("speedup"), ci=[measured.get("ci_low"), measured.get("ci_high")],
                      estimated_speedup=report["estimated_speedup"])
    else:
        record["stderr_tail"] = done.stderr[-2000:]
    with open(stem + ".json", "w") as f:
        json.dump(record, f, indent=2)
    for suffix in (".onnx", "-opt.onnx"):  # the models are rebuilt from the seed; keep only the records
        if os.path.exists(stem + suffix):
            os.unlink(stem + suffix)
    return record


def figure(records: list[dict], path: str) -> None:
    """Total wall time, search time and peak memory against depth, one line per width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for k, hidden in enumerate(sorted({r["hidden"] for r in records})):
        color = f"C{k}"
        rs = sorted((r for r in records if r["hidden"] == hidden and r["exit_code"] == 0), key=lambda r: r["layers"])
        depth = [r["layers"] for r in rs]
        ax_t.plot(depth, [r["wall_s"] for r in rs], "o-", color=color, label=f"total, hidden {hidden}")
        ax_t.plot(depth, [r["times"].get("search", 0.0) for r in rs], "x--", color=color,
                  label=f"search, hidden {hidden}")
        ax_m.plot(depth, [r["max_rss_mb"] or max(r["memory_mb"].values()) for r in rs], "o-",
                  color=color, label=f"peak RSS, hidden {hidden}")
        ax_m.plot(depth, [r["weights_mb"] for r in rs], ":", color=color,
                  label=f"weights, hidden {hidden}")
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
    args = p.parse_args(own)
    records = []
    for hidden in (int(w) for w in args.widths.split(",")):
        for layers in (int(n) for n in args.layers.split(",")):
            rec = run_one(layers, hidden, args, extra)
            records.append(rec)
            mem = rec.get("memory_mb") or {}
            print(f"L={layers:3} H={hidden:4}: exit {rec['exit_code']}, {rec['wall_s']:.1f}s, "
                  f"peak {rec['max_rss_mb'] or 0:.0f} MiB (weights {rec['weights_mb']:.0f} MiB), "
                  f"search {rec.get('times', {}).get('search', 0):.1f}s, speedup {rec.get('speedup')}, "
                  f"per phase {mem}", flush=True)
    with open(os.path.join(args.out, "scale.json"), "w") as f:
        json.dump(records, f, indent=2)
    if any(r["exit_code"] == 0 for r in records):
        figure(records, os.path.join(args.out, "scale.png"))
    return 0 if all(r["exit_code"] == 0 for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
