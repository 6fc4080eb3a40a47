"""A/A check of the timing protocol: time each model against itself, many times, and count how often the
confidence interval of the speedup excludes 1.0 (a false difference) and how often the decision would ship.

With a 95% interval the false-difference rate should stay near 5% (at most ~10%) even on a busy machine;
the ship rate (interval entirely above 1) near half of it.

    python scripts/bench_aa.py --small --trials 20 --json results/aa.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import onnx  # noqa: E402

from eqsat.models import build  # noqa: E402
from eqsat.onnx import export_model  # noqa: E402
from eqsat.timing import Protocol, compare, decide  # noqa: E402

DEFAULT_MODELS = "squeezenet,bert,nasrnn,resnet50"


def load(name: str, small: bool) -> onnx.ModelProto:
    """A built-in architecture (eqsat.models) exported to ONNX, or an .onnx file."""
    if name.endswith(".onnx"):
        return onnx.load(name)
    return export_model(build(name, small=small))


def check_model(name: str, model: onnx.ModelProto, args: argparse.Namespace) -> dict:
    rows = []
    for trial in range(args.trials):
        cmp = compare(model, model, Protocol(threads=args.threads, budget_s=args.budget, seed=args.seed + trial))
        rows.append({"trial": trial, "speedup": cmp.speedup, "ci_low": cmp.ci_low, "ci_high": cmp.ci_high,
                     "original_ms": cmp.original_ms, "rounds": cmp.rounds, "repeats": cmp.repeats,
                     "seconds": cmp.seconds, "excludes_1": not cmp.ci_low <= 1.0 <= cmp.ci_high,
                     "ship": decide(cmp).ship})
    n = len(rows)
    summary = {
        "model": name, "trials": n,
        "median_ms": statistics.median(r["original_ms"] for r in rows),
        "speedup_min": min(r["speedup"] for r in rows), "speedup_max": max(r["speedup"] for r in rows),
        "ci_halfwidth_median": statistics.median((r["ci_high"] - r["ci_low"]) / 2 for r in rows),
        "excludes_1": sum(r["excludes_1"] for r in rows), "ship": sum(r["ship"] for r in rows),
        "seconds": sum(r["seconds"] for r in rows), "rows": rows,
    }
    summary["excludes_1_rate"] = summary["excludes_1"] / n
    summary["ship_rate"] = summary["ship"] / n
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated built-in names or .onnx paths ({DEFAULT_MODELS})")
    ap.add_argument("--small", action="store_true", help="the reduced sizes of the built-in models (fast)")
    ap.add_argument("--trials", type=int, default=20, help="A/A comparisons per model")
    ap.add_argument("--budget", type=float, default=2.0, help="timing budget of one comparison, seconds")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first trial (trial i uses seed + i)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.budget <= 0 or args.threads < 1:
        ap.error("--trials and --threads must be at least 1 and --budget positive")

    load_before = os.getloadavg()
    results = []
    print(f"{'model':12} {'ms':>8} {'speedups':>13} {'CI half':>8} {'excl. 1':>8} {'ship':>6} {'s':>6}")
    for name in args.models.split(","):
        s = check_model(name, load(name, args.small), args)
        results.append(s)
        print(f"{name:12} {s['median_ms']:8.3f} {s['speedup_min']:6.3f}-{s['speedup_max']:.3f} "
              f"{s['ci_halfwidth_median']:8.3f} {s['excludes_1']:3}/{s['trials']:<4} {s['ship']:2}/{s['trials']:<3} "
              f"{s['seconds']:6.1f}", flush=True)
    total = sum(s["trials"] for s in results)
    excl, ship = sum(s["excludes_1"] for s in results), sum(s["ship"] for s in results)
    print(f"all: CI excludes 1.0 in {excl}/{total} ({excl / total:.1%}); the decision would ship {ship}/{total} "
          f"({ship / total:.1%}); load average {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        out = {"models": results, "excludes_1": excl, "ship": ship, "trials": total,
               "excludes_1_rate": excl / total, "ship_rate": ship / total,
               "config": vars(args), "load_average": {"before": load_before, "after": os.getloadavg()},
               "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(), "time": time.time()}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
