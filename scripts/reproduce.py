#!/usr/bin/env python3
"""Reproduce the MCTS paper's sweep for one architecture (or all): MCTS with each (main, final) extractor
pair of the paper plus ours (greedy-dag, ilp), and TENSAT with the model's k_multi; one JSON per run in
--out, finished runs skipped (resume), runs in parallel processes or on Ray (scripts/dispatch.py); each
invocation also writes ``sweep-<UTC time>.json`` with its wall time and its runs' times per model.

    python scripts/reproduce.py --model nasrnn [--seeds 0-4] [--configs all|paper|ours|tensat] [--cost analytic]
                                [--jobs 2] [--ray auto|ADDRESS] [--out results/] [--quick]

The paper's protocol (13 models, seeds 0-4, the five extractor pairs plus ours, TENSAT), then its Table 2:
    python scripts/reproduce.py --model all --seeds 0-4 --jobs 2 --out results/paper
    python scripts/report.py results/paper -o report/paper
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import dispatch
from experiment import SCRIPT_DEFAULTS, RunSpec, add_arguments, base_config, run_or_record_error, write_json

from eqsat.models import BENCHMARKS, MODELS

PAPER_PAIRS = [("greedy-tree", "greedy-tree"), ("greedy-tree", "ilp"), ("greedy-constituent", "greedy-constituent"),
               ("greedy-constituent", "ilp"), ("ilp", "ilp")]
OURS = [("greedy-dag", "ilp")]
QUICK = SCRIPT_DEFAULTS.updated(budget=8, depth=4, ilp_time_limit=20.0)
"""--quick's config (with --quick, the flags given change it)"""


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi or lo) + 1))
    return seeds


def specs_for(model: str, args) -> list[RunSpec]:
    pairs = {"all": PAPER_PAIRS + OURS, "paper": PAPER_PAIRS, "ours": OURS, "tensat": []}[args.configs]
    out = []
    for seed in args.seed_list:
        for main, final in pairs:
            out.append(RunSpec.of(model, args.quick, args.base, scheduler="mcts", main_extractor=main,
                                  final_extractor=final, seed=seed))
        if args.configs in ("all", "tensat"):
            out.append(RunSpec.of(model, args.quick, args.base, scheduler="tensat", main_extractor="greedy-dag",
                                  final_extractor="ilp", seed=seed))
    return out


def _record(args, spec: RunSpec, rec: dict, index: int, total: int, start: float) -> int:
    """Write one run's JSON and a progress line; 1 if it failed."""
    write_json(os.path.join(args.out, spec.key() + ".json"), rec)
    what = rec.get("error") or (f"est. speedup {rec['report']['estimated_speedup']:.3f}x, "
                                f"search {rec['report']['times']['search']:.1f}s")
    print(f"[{index}/{total} {time.perf_counter() - start:7.0f}s] {spec.key()}: {what}", file=sys.stderr, flush=True)
    return int("error" in rec)


def write_sweep(args, argv, dispatcher: str, records: list[dict], skipped: int, wall: float, started: str,
                finished: bool = True) -> str:
    """Write this invocation's ``sweep-<UTC time>.json`` beside the runs: its wall time (to its last finished run
    while ``finished`` is false), the sum of its runs' times per model, the runs done, skipped (already finished)
    and failed; returns the path."""
    per_model: dict[str, dict] = {}
    for rec in records:
        m = per_model.setdefault(rec["spec"]["model"], {"runs": 0, "run_seconds": 0.0, "failed": 0})
        m["runs"] += 1
        m["run_seconds"] += rec.get("seconds", 0.0)
        m["failed"] += int("error" in rec)
    sweep = {"sweep": {"argv": list(argv), "models": args.models, "seeds": args.seed_list, "configs": args.configs,
                       "quick": args.quick, "dispatcher": dispatcher, "started_utc": started, "finished": finished,
                       "wall_seconds": wall, "runs": len(records), "skipped": skipped,
                       "failed": sum(m["failed"] for m in per_model.values()),
                       "run_seconds": sum(m["run_seconds"] for m in per_model.values()), "per_model": per_model}}
    path = os.path.join(args.out, f"sweep-{started.replace(':', '').replace('-', '')}.json")
    write_json(path, sweep)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a model name, a comma list, or all")
    p.add_argument("--seeds", help="seeds, e.g. 0-4 (the paper's five, the default) or 0,2,5; --quick: 0")
    p.add_argument("--configs", default="all", choices=["all", "paper", "ours", "tensat"])
    add_arguments(p)
    p.add_argument("--quick", action="store_true", help="reduced model sizes, budget 8, depth 4, ILP limit 20 s (unless given), seed 0")
    dispatch.add_arguments(p)
    p.add_argument("--out", default="results")
    args = p.parse_args(argv)
    args.base = base_config(args, QUICK if args.quick else SCRIPT_DEFAULTS)
    args.seed_list = parse_seeds(args.seeds or ("0" if args.quick else "0-4"))
    args.models = list(BENCHMARKS) if args.model == "all" else args.model.split(",")
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {' '.join(MODELS)}")
    os.makedirs(args.out, exist_ok=True)
    todo, skipped = [], 0
    for m in args.models:
        for spec in specs_for(m, args):
            if os.path.exists(os.path.join(args.out, spec.key() + ".json")):
                skipped += 1
            else:
                todo.append(spec)
    print(f"{len(todo)} runs to do, {skipped} already finished in {args.out}", file=sys.stderr)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    t = time.perf_counter()
    runner = dispatch.from_args(args)
    records: list[dict] = []
    failed = 0

    def save_sweep(finished: bool) -> str:
        return write_sweep(args, sys.argv[1:] if argv is None else argv, runner.name, records, skipped,
                           time.perf_counter() - t, started, finished)

    def done(spec: RunSpec, rec: dict) -> None:
        nonlocal failed
        records.append(rec)
        failed += _record(args, spec, rec, len(records), len(todo), t)
        save_sweep(finished=False)  # an interrupted sweep keeps the wall time of its finished runs

    runner.run(todo, run_or_record_error, done)
    path = save_sweep(finished=True)
    run_seconds = sum(r.get("seconds", 0.0) for r in records)
    print(f"sweep: {len(records)} runs ({failed} failed, {skipped} skipped) in {time.perf_counter() - t:.0f} s wall, "
          f"{run_seconds:.0f} s of runs ({runner.name}); {path}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
