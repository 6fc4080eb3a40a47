#!/usr/bin/env python3
"""Two ONNX programs of one function timed against each other in one interleaved run (eqsat.measurement.timing's protocol,
onnxruntime on the CPU, ORT_ENABLE_ALL, 1 intra-op thread by default): A's latency over B's, the median of paired
ratios with its bootstrap 95% interval (above 1: B is faster). Pairs given as directories compare the file NAME
(default eqsat.onnx) of each model/exporter folder both hold, as ``bench_peers.py --optimize-only`` writes them:
two commits' programs side by side.

    python scripts/compare_programs.py old.onnx new.onnx --shape input_ids=1,128
    python scripts/compare_programs.py runs/peers_old runs/peers_new --json results/old_new.json
    python scripts/compare_programs.py merged.onnx merged.opt.onnx --value use_cache_branch=1 --shape ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from eqsat.measurement.runtimes import Program, compare_programs, feeds_for, make  # noqa: E402
from eqsat.measurement.timing import Protocol  # noqa: E402
from eqsat.verification.feeds import with_values  # noqa: E402


def pairs(a: str, b: str, name: str) -> list[tuple[str, str, str]]:
    """(label, A's file, B's file): the two files, or each NAME the two directories both hold, in sorted order."""
    if not (os.path.isdir(a) and os.path.isdir(b)):
        return [(os.path.basename(b), a, b)]
    out = []
    for folder, _dirs, files in sorted(os.walk(a)):
        rel = os.path.relpath(folder, a)
        other = os.path.join(b, rel, name)
        if name in files and os.path.exists(other):
            out.append((rel, os.path.join(folder, name), other))
    return out


def shapes_of(items: list[str]) -> dict[str, tuple[int, ...]]:
    out = {}
    for item in items:
        key, _, dims = item.partition("=")
        out[key] = tuple(int(d) for d in dims.split(","))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="an ONNX file, or a directory of them (bench_peers' workdir)")
    p.add_argument("b", help="the same, the other side")
    p.add_argument("--name", default="eqsat.onnx", help="the file compared in each folder of two directories")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2",
                   help="an input's shape where it has dynamic axes (repeatable)")
    p.add_argument("--value", action="append", default=[], metavar="NAME=V1,V2",
                   help="an input's values rather than drawn ones, in its shape (repeatable; 1/0 for a bool)")
    p.add_argument("--budget", type=float, default=6.0, help="seconds of timing per pair")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    found = pairs(args.a, args.b, args.name)
    if not found:
        print(f"no {args.name} in both {args.a} and {args.b}", file=sys.stderr)
        return 2
    rows = []
    for label, fa, fb in found:
        runtime = make("ort-cpu", threads=args.threads)
        a, b, protocol = Program(onnx.load(fa)), Program(onnx.load(fb)), Protocol(budget_s=args.budget)
        feeds = with_values(feeds_for(a, b, protocol.seed, shapes_of(args.shape) or None), args.value)
        c = compare_programs(a, [b], runtime, protocol, feeds=feeds).comparisons[0]
        rows.append({"pair": label, "a": fa, "b": fb, "a_over_b": c.speedup, "ci": [c.ci_low, c.ci_high]})
        print(f"{label:32s} A / B latency {c.speedup:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"script": "compare_programs", "argv": sys.argv[1:], "threads": args.threads, "rows": rows},
                      f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
