#!/usr/bin/env python3
"""Two ONNX programs of one function timed each alone, in a process of its own, as a serving loop runs one model:
A, B and A again (the control) in turn, ``--rounds`` times, the order alternating; each process calls its program
``--calls`` times on the same seeded inputs (eqsat.measurement.timing's feeds) after ``--warmup`` calls, onnxruntime
on the CPU, ORT_ENABLE_ALL, 1 intra-op thread by default, and reports its median. Prints A's latency over B's and A's
over its second run (the A/A control), each the median of the rounds' ratios with a bootstrap 95% interval over the
rounds (above 1: B is faster).

Where a call is small and reads many weights (a decode step), two programs called in turn in one process
(compare_programs.py) evict each other's weights from the cache, so each call streams them from memory: a program
with less work there shows none of it (a MoE decode step: 1.0 interleaved, 1.235 alone; docs/benchmarks.md, the
thirty-fourth pass).

    python scripts/time_alone.py step.onnx step.opt.onnx --shape input_ids=1,1 --shape attention_mask=1,128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from compare_programs import shapes_of  # noqa: E402  (this folder: the --shape reader)

from eqsat.measurement.runtimes import Program, feeds_for  # noqa: E402


def child(path: str, feeds_path: str, calls: int, warmup: int, threads: int) -> None:
    """One program alone: prints its process id and its median milliseconds a call."""
    import time

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = threads, 1, 3
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    with np.load(feeds_path) as data:
        feeds = {k: data[k] for k in data.files}
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    print(json.dumps({"pid": os.getpid(), "ms": statistics.median(times) * 1e3}))


def interval(ratios: list[float], seed: int, resamples: int = 2000) -> tuple[float, float, float]:
    """The median of ``ratios`` and a bootstrap 95% interval of it over them."""
    rng = np.random.default_rng(seed)
    r = np.asarray(ratios)
    medians = np.median(r[rng.integers(0, len(r), (resamples, len(r)))], axis=1)
    return float(np.median(r)), float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))


def run_alone(path: str, feeds_path: str, args: argparse.Namespace) -> dict[str, float]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path, feeds_path,
                          "--calls", str(args.calls), "--warmup", str(args.warmup), "--threads", str(args.threads)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", nargs="?", help="an ONNX file")
    p.add_argument("b", nargs="?", help="the other, of the same inputs")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2",
                   help="an input's shape where it has dynamic axes (repeatable)")
    p.add_argument("--rounds", type=int, default=8, help="rounds of A, B and A again, each a process")
    p.add_argument("--calls", type=int, default=400, help="timed calls a process")
    p.add_argument("--warmup", type=int, default=20, help="untimed calls before them")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--child", nargs=2, metavar=("MODEL", "FEEDS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.calls, args.warmup, args.threads)
        return 0
    if args.rounds < 1 or args.calls < 1:
        print("--rounds and --calls must be at least 1", file=sys.stderr)
        return 2
    for path in (args.a, args.b):
        if path is None or not os.path.isfile(path):
            print(f"no such file: {path}", file=sys.stderr)
            return 2
    feeds = feeds_for(Program(onnx.load(args.a)), Program(onnx.load(args.b)), args.seed, shapes_of(args.shape) or None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        feeds_path = os.path.join(tmp, "feeds.npz")
        np.savez(feeds_path, **feeds)
        for r in range(args.rounds):
            order = [("a", args.a), ("b", args.b), ("a2", args.a)]
            if r % 2:
                order.reverse()
            row = {label: run_alone(path, feeds_path, args) for label, path in order}
            rows.append({label: row[label]["ms"] for label in ("a", "b", "a2")} | {"pids": [row[k]["pid"] for k in row]})
            print(f"round {r + 1}: A {rows[-1]['a']:.3f} ms, B {rows[-1]['b']:.3f} ms, A again {rows[-1]['a2']:.3f} ms",
                  flush=True)
    ab = interval([(x["a"] + x["a2"]) / 2 / x["b"] for x in rows], args.seed)
    aa = interval([x["a"] / x["a2"] for x in rows], args.seed)
    print(f"A / B latency {ab[0]:.3f} [{ab[1]:.3f}, {ab[2]:.3f}]; A / A {aa[0]:.3f} [{aa[1]:.3f}, {aa[2]:.3f}] "
          f"({args.rounds} rounds, each program alone in a process)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"script": "time_alone", "argv": sys.argv[1:], "threads": args.threads, "rounds": rows,
                       "a_over_b": list(ab), "a_over_a": list(aa)}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
