#!/usr/bin/env python3
"""Reproduce the MCTS paper's sweep for one architecture (or all): MCTS with each (main, final) extractor
pair of the paper plus ours (greedy-dag, ilp), and TENSAT with the model's k_multi; one JSON per run in
--out, finished runs skipped (resume), runs in parallel processes.

    python scripts/reproduce.py --model nasrnn [--seeds 0-4] [--configs all|paper|ours|tensat] [--cost analytic]
                                [--jobs 2] [--out results/] [--quick]

One line per architecture (``--model all`` runs the 13):
    python scripts/reproduce.py --model bert        ... --model vit-huge
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from experiment import RunSpec, add_arguments, base_config, run_or_record_error

from eqsat.models import MODELS, build

PAPER_PAIRS = [("greedy-tree", "greedy-tree"), ("greedy-tree", "ilp"), ("greedy-constituent", "greedy-constituent"),
               ("greedy-constituent", "ilp"), ("ilp", "ilp")]
OURS = [("greedy-dag", "ilp")]


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


@functools.cache
def _weight_bytes(model: str, small: bool) -> int:
    g = build(model, small=small)  # weights are lazy: shapes only
    return sum(4 * math.prod(w.shape) for w in g.nodes() if w.op == "weight")


def weight_bytes(spec: RunSpec) -> int:
    return _weight_bytes(spec.model, spec.small)


def heavy(spec: RunSpec, limit_gb: float = 1.0) -> bool:
    """Models with more weights than ``limit_gb`` (ViT-Large, ViT-Huge) run one at a time: a run holds
    several copies of them (ViT-Huge peaks near 13 GB)."""
    return weight_bytes(spec) > limit_gb * 1e9


def _record(args, spec: RunSpec, rec: dict, index: int, total: int, start: float) -> int:
    """Write one run's JSON and a progress line; 1 if it failed."""
    with open(os.path.join(args.out, spec.key() + ".json"), "w") as f:
        json.dump(rec, f, indent=2, default=str)
    what = rec.get("error") or (f"est. speedup {rec['report']['estimated_speedup']:.3f}x, "
                                f"search {rec['report']['times']['search']:.1f}s")
    print(f"[{index}/{total} {time.perf_counter() - start:7.0f}s] {spec.key()}: {what}", file=sys.stderr, flush=True)
    return int("error" in rec)


def run_all(light: list, heavy_runs: list, jobs: int, fn, done) -> None:
    """Run ``fn`` on every spec in worker processes, calling ``done(spec, result)`` as each finishes.

    Heavy runs go one at a time to their own worker, beside ``jobs - 1`` workers for the others; once
    the heavy runs are over, that worker takes half of the runs still queued. With one job, the heavy
    runs come after the others."""
    ctx = mp.get_context("spawn")
    workers = max(1, jobs - 1) if heavy_runs else jobs
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool, \
            ProcessPoolExecutor(max_workers=1, mp_context=ctx) as heavy_pool:
        if jobs == 1:
            for spec in light:
                done(spec, pool.submit(fn, spec).result())
            light = []
        futures = {pool.submit(fn, s): s for s in light} | {heavy_pool.submit(fn, s): s for s in heavy_runs}
        heavy_busy = jobs > 1 and bool(heavy_runs)
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                done(futures[fut], fut.result())
            if heavy_busy and not any(futures[f] in heavy_runs for f in pending):
                heavy_busy = False
                for i, f in enumerate([f for f in pending if f.cancel()]):
                    moved = (heavy_pool if i % 2 == 0 else pool).submit(fn, futures[f])
                    futures[moved] = futures[f]
                    pending.remove(f)
                    pending.add(moved)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a model name, a comma list, or all")
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--configs", default="all", choices=["all", "paper", "ours", "tensat"])
    add_arguments(p)
    p.add_argument("--quick", action="store_true", help="reduced model sizes, budget 8, depth 4, seed 0")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--heavy-gb", type=float, default=1.0,
                   help="models with more weights than this run one at a time (default 1.0: ViT-Large and -Huge)")
    p.add_argument("--out", default="results")
    args = p.parse_args(argv)
    args.base = base_config(args)
    if args.quick:
        args.base, args.seeds = args.base.updated(budget=8, depth=4, ilp_time_limit=20.0), "0"
    args.seed_list = parse_seeds(args.seeds)
    models = list(MODELS) if args.model == "all" else args.model.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {' '.join(MODELS)}")
    os.makedirs(args.out, exist_ok=True)
    todo, skipped = [], 0
    for m in models:
        for spec in specs_for(m, args):
            if os.path.exists(os.path.join(args.out, spec.key() + ".json")):
                skipped += 1
            else:
                todo.append(spec)
    print(f"{len(todo)} runs to do, {skipped} already finished in {args.out}", file=sys.stderr)
    t = time.perf_counter()
    heavy_runs = [s for s in todo if heavy(s, args.heavy_gb)]
    failed = finished = 0

    def done(spec: RunSpec, rec: dict) -> None:
        nonlocal failed, finished
        finished += 1
        failed += _record(args, spec, rec, finished, len(todo), t)

    run_all([s for s in todo if s not in heavy_runs], heavy_runs, args.jobs, run_or_record_error, done)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
