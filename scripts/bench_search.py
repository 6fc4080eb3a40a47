#!/usr/bin/env python3
"""MCTS against the TENSAT baseline on every built-in model: estimated speedup, optimization time,
e-graph size and rules applied of each, one JSON record per run.

    python scripts/bench_search.py [--models all] [--cost analytic|cpu] [--budget 128] [--small] [--jobs 2]
                                   [--ray auto|ADDRESS] [--out results/search]
    python scripts/bench_search.py --equal-time [--models squeezenet,nasneta] [--budget 16] ...

Runs whose JSON is already in --out are read back instead of run again (reproduce.py writes the same
records under the same names, so a sweep's MCTS (greedy-dag, ilp) and TENSAT runs serve here too).

``--equal-time`` compares the schedulers at equal wall time, one model after the other (no parallel runs: they
would share the cores): TENSAT runs first, then MCTS with TENSAT's search-plus-extraction seconds as its
``--time-limit``; and the reverse, MCTS with the given flags, then TENSAT with MCTS's seconds. Each run is one
JSON record; the equal-time ones carry ``equal_time: {"time_limit", "of"}`` (the run whose time they were given).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import dispatch
from experiment import RunSpec, add_arguments, base_config, run_or_record_error, write_json

from eqsat.models import BENCHMARKS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all")
    add_arguments(p)
    p.add_argument("--small", action="store_true")
    dispatch.add_arguments(p)
    p.add_argument("--out", default="results/search")
    p.add_argument("--equal-time", action="store_true",
                   help="MCTS with TENSAT's wall time as its time limit, and the reverse (runs one at a time)")
    args = p.parse_args(argv)
    names = list(BENCHMARKS) if args.models == "all" else args.models.split(",")
    os.makedirs(args.out, exist_ok=True)
    base = base_config(args)
    if args.equal_time:
        if args.ray or args.jobs != 1:
            print("--equal-time runs one at a time here: --ray and --jobs do not apply", file=sys.stderr)
        return equal_time(names, args.small, base, args.out)
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
    total, finished = len(specs), []

    def done(spec: RunSpec, rec: dict) -> None:
        records[rec["key"]] = rec
        finished.append(spec)
        write_json(os.path.join(args.out, rec["key"] + ".json"), rec)
        status = rec.get("error") or (f"speedup {rec['report']['estimated_speedup']:.3f}x in "
                                      f"{rec['report']['times']['search']:.1f}s")
        print(f"[{len(finished)}/{total}] {spec.model} {spec.config.scheduler}: {status}", file=sys.stderr, flush=True)

    if specs:
        dispatch.from_args(args).run(specs, run_or_record_error, done)
    print(f"\n{'model':12} {'MCTS speedup':>12} {'TENSAT speedup':>14} {'MCTS s':>8} {'TENSAT s':>9} {'sims/s':>7} "
          f"{'MCTS e-nodes':>12} {'TENSAT e-nodes':>14}  MCTS rules")
    for m in names:
        a, b = (records.get(RunSpec.of(m, args.small, base, scheduler=s).key(), {}) for s in ("mcts", "tensat"))
        if "error" in a or "error" in b or not a or not b:
            print(f"{m:12} error: {a.get('error') or b.get('error')}")
            continue
        a, b = a["report"], b["report"]
        rules = ", ".join(f"{k}x{v}" for k, v in a["rules_applied"].items())
        print(f"{m:12} {a['estimated_speedup']:>12.3f} {b['estimated_speedup']:>14.3f} {a['times']['search']:>8.1f} "
              f"{b['times']['search']:>9.1f} {simulations_per_second(a):>7.1f} {a['egraph']['enodes']:>12} "
              f"{b['egraph']['enodes']:>14}  {rules}")
    return 0


def simulations_per_second(report: dict) -> float:
    """MCTS simulations per second of search, from a report's JSON (0 for the other schedulers)."""
    s = report["search"]
    return s["simulations"] / s["seconds"] if s["seconds"] else 0.0


def wall_time(record: dict) -> float:
    """The seconds a run's ``--time-limit`` bounds: its import, its search and its extraction."""
    times = record["report"]["times"]
    return times.get("import", 0.0) + times.get("rest", 0.0) + times["search"] + times["extract"]


def equal_time_spec(model: str, small: bool, base, scheduler: str, given: float) -> RunSpec:
    """The run of ``scheduler`` on ``model`` with ``given`` seconds (another run's wall time) as its time limit."""
    return RunSpec.of(model, small, base, scheduler=scheduler, time_limit=max(given, 0.01))


def _run_saved(spec: RunSpec, out: str, suffix: str = "", extra: dict | None = None) -> dict:
    """Run ``spec`` (or read back its finished record) and save its record as ``<key><suffix>.json``."""
    path = os.path.join(out, spec.key() + suffix + ".json")
    if os.path.exists(path):
        with open(path) as f:
            rec = json.load(f)
        if "error" not in rec:
            return rec
    rec = run_or_record_error(spec)
    rec.update(extra or {})
    write_json(path, rec)
    return rec


def equal_time(names: list[str], small: bool, base, out: str) -> int:
    """TENSAT, then MCTS in TENSAT's wall time; MCTS, then TENSAT in MCTS's; a table of the four runs per model."""
    rows = []
    for m in names:
        recs = {}
        for first, second in (("tensat", "mcts"), ("mcts", "tensat")):
            spec = RunSpec.of(m, small, base, scheduler=first)
            a = recs[first] = _run_saved(spec, out)
            if "error" in a:
                break
            given = wall_time(a)
            eq = equal_time_spec(m, small, base, second, given)
            recs[f"{second}@{first}"] = _run_saved(eq, out, f"__eqtime-{first}",
                                                   {"equal_time": {"time_limit": eq.config.search.time_limit,
                                                                   "of": spec.key()}})
            print(f"{m} {second} in {first}'s {given:.1f}s: done", file=sys.stderr, flush=True)
        rows.append((m, recs))
    print(f"\n{'model':12} {'TENSAT':>16} {'MCTS@TENSAT time':>18} {'MCTS':>16} {'TENSAT@MCTS time':>18}  (speedup/seconds)")
    for m, recs in rows:
        cells = []
        for k in ("tensat", "mcts@tensat", "mcts", "tensat@mcts"):
            r = recs.get(k)
            if r is None or "error" in r:
                cells.append(f"{'error' if r else '-':>16}")
                continue
            cells.append(f"{r['report']['estimated_speedup']:>8.3f}x/{wall_time(r):>5.1f}s")
        print(f"{m:12} {cells[0]:>16} {cells[1]:>18} {cells[2]:>16} {cells[3]:>18}")
        for k, r in recs.items():
            if r and "error" in r:
                print(f"  {k}: {r['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
