#!/usr/bin/env python3
"""MCTS against the TENSAT baseline on every built-in model: estimated speedup, optimization time,
e-graph size and rules applied of each, one JSON record per run.

    python scripts/bench_search.py [--models all] [--cost analytic|cpu] [--budget 128] [--small] [--jobs 2] [--out results/search]

Runs whose JSON is already in --out are read back instead of run again (reproduce.py writes the same
records under the same names, so a sweep's MCTS (greedy-dag, ilp) and TENSAT runs serve here too).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed

from experiment import RunSpec, add_arguments, base_config, run_or_record_error

from eqsat.models import MODELS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all")
    add_arguments(p)
    p.add_argument("--small", action="store_true")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default="results/search")
    args = p.parse_args(argv)
    names = list(MODELS) if args.models == "all" else args.models.split(",")
    os.makedirs(args.out, exist_ok=True)
    base = base_config(args)
    specs = [RunSpec.of(m, args.small, base, scheduler=s) for m in names for s in ("mcts", "tensat")]
    records: dict[str, dict] = {}
    for spec in list(specs):  # resume: a finished run (this script's or reproduce.py's, same key) is read back
        path = os.path.join(args.out, spec.key() + ".json")
        if os.path.exists(path):
            with open(path) as f:
                rec = json.load(f)
            if "error" not in rec:
                records[rec["key"]] = rec
                specs.remove(spec)
    if records:
        print(f"{len(records)} runs already finished in {args.out}", file=sys.stderr)
    # spawn, not fork: a forked child inherits locks held by torch's and egglog's threads
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_or_record_error, s): s for s in specs}
        for done, fut in enumerate(as_completed(futures), 1):
            spec, rec = futures[fut], fut.result()
            records[rec["key"]] = rec
            with open(os.path.join(args.out, rec["key"] + ".json"), "w") as f:
                json.dump(rec, f, indent=2, default=str)
            status = rec.get("error") or (f"speedup {rec['report']['estimated_speedup']:.3f}x in "
                                          f"{rec['report']['times']['search']:.1f}s")
            print(f"[{done}/{len(specs)}] {spec.model} {spec.config.scheduler}: {status}", file=sys.stderr, flush=True)
    print(f"\n{'model':12} {'MCTS speedup':>12} {'TENSAT speedup':>14} {'MCTS s':>8} {'TENSAT s':>9} "
          f"{'MCTS e-nodes':>12} {'TENSAT e-nodes':>14}  MCTS rules")
    for m in names:
        a, b = (records.get(RunSpec.of(m, args.small, base, scheduler=s).key(), {}) for s in ("mcts", "tensat"))
        if "error" in a or "error" in b or not a or not b:
            print(f"{m:12} error: {a.get('error') or b.get('error')}")
            continue
        a, b = a["report"], b["report"]
        rules = ", ".join(f"{k}x{v}" for k, v in a["rules_applied"].items())
        print(f"{m:12} {a['estimated_speedup']:>12.3f} {b['estimated_speedup']:>14.3f} {a['times']['search']:>8.1f} "
              f"{b['times']['search']:>9.1f} {a['egraph']['enodes']:>12} {b['egraph']['enodes']:>14}  {rules}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
