"""The timing of scripts/bench_peers.py: every verified program beside an unchanged copy of the original (the A/A
control), in one interleaved run (eqsat.measurement.timing's protocol), with rounds sized to the variance seen.

The budget, per model and thread count: one set of sessions per program (eqsat.measurement.timing.timing_sessions), then stages
of interleaved rounds (eqsat.measurement.timing.compare_many: each round times a block of about ``block_s`` of every program in
a seeded random order). The first stage is a pilot of ``pilot_rounds`` rounds; after each stage every program's
speedup interval (bootstrap 95%, over all the rounds so far, resampling the session pairs) is computed, and when the
widest of them, the A/A control's included, is wider than ``resolution`` (1% by default: the table resolves a 1%
difference), the next stage runs the rounds that width predicts are needed (a width shrinks as one over the root of
the rounds), at most what the rest of ``budget_s`` affords and ``max_rounds`` in all. On a quiet machine a 1%
resolution takes a few tens of rounds (a few seconds a model); a model still wider after ``budget_s`` is reported
with the width it reached (the summary marks a model whose A/A interval is wider than 2% unresolved).
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import onnx
import onnxruntime as ort

from eqsat.measurement import timing

CONTROL = "original-copy"
"""the A/A control's name: an unchanged copy of the original, timed like a program"""


@dataclass(frozen=True)
class Budget:
    """How long one model is timed at one thread count (see the module's docstring)."""

    resolution: float = 0.01
    """the widest 95% interval (ci_high - ci_low) wanted on every program's speedup, the A/A control's included"""
    budget_s: float = 20.0
    """the most seconds of timed rounds, the sessions' building aside"""
    pilot_rounds: int = 10
    max_rounds: int = 400
    max_stages: int = 6
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.resolution < 1 or self.budget_s <= 0 or not 2 <= self.pilot_rounds <= self.max_rounds:
            raise ValueError("resolution must lie in (0, 1), budget_s be positive, 2 <= pilot_rounds <= max_rounds")


def rounds_needed(rounds: int, width: float, resolution: float) -> int:
    """The rounds in all that bring an interval ``width`` wide after ``rounds`` rounds to ``resolution`` (a width
    shrinks as one over the root of the rounds), with a 20% margin.

    >>> rounds_needed(10, 0.02, 0.01)
    48
    >>> rounds_needed(40, 0.005, 0.01)
    40
    """
    if width <= resolution:
        return rounds
    return math.ceil(1.2 * rounds * (width / resolution) ** 2)


def time_all(original: onnx.ModelProto, programs: dict[str, onnx.ModelProto], threads: int,
             budget: Budget, call: Callable[[ort.InferenceSession], Callable[[], Any]] | None = None,
             input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, dict[str, Any]]:
    """The original against an unchanged copy of it (:data:`CONTROL`) and every program, interleaved: per name, the
    speedup original / program with its 95% interval, both medians (ms) and the rounds, stages and seconds spent.
    ``call``: what one timed call of a session is (a generation of tokens carrying a cache:
    ``scripts/bench_serving.py``); by default one run on seeded random inputs of ``input_shapes`` (a dynamic
    model's sizes: give them, else each dynamic dimension is 1)."""
    names = [CONTROL, *programs]
    models = [original, original, *programs.values()]
    base = timing.Protocol(threads=threads, budget_s=budget.budget_s, seed=budget.seed,
                           min_rounds=budget.pilot_rounds, max_rounds=budget.pilot_rounds)
    sessions = timing.timing_sessions(models, base)
    if call is None:
        feeds = timing.timing_feeds(original, [sessions[0][0], sessions[1][0]], budget.seed, input_shapes)
        runs = [[functools.partial(s.run, None, feeds) for s in side] for side in sessions]
    else:
        runs = [[call(s) for s in side] for side in sessions]
    info = {**timing.runtime_info(threads), "sessions_per_program": len(sessions[1])}
    ra: list[float] = []
    rb: list[list[float]] = [[] for _ in names]
    clusters: list[list[int]] = [[] for _ in names]
    start = time.perf_counter()
    stage, want = 0, budget.pilot_rounds
    estimates: list[timing.SpeedupEstimate] = []
    while True:
        left = budget.budget_s - (time.perf_counter() - start)
        protocol = timing.Protocol(threads=threads, budget_s=max(left, 1e-3), seed=budget.seed + stage,
                                   min_rounds=max(want, 2), max_rounds=max(want, 2), warmup=5 if stage == 0 else 1)
        comparisons = timing.compare_many(runs, protocol, info)
        for j, c in enumerate(comparisons):  # program j + 1 against the original; round r ran session pair ...
            rb[j].extend(c.round_optimized_ms)
            n0, nj = len(runs[0]), len(runs[j + 1])
            clusters[j].extend((r % n0) * nj + r % nj for r in range(len(c.round_optimized_ms)))
        ra.extend(comparisons[0].round_original_ms)
        stage += 1
        estimates = [timing.speedup_ci(ra, rb[j], seed=budget.seed, clusters=clusters[j]) for j in range(len(names))]
        width = max(e.ci_high - e.ci_low for e in estimates)
        spent = time.perf_counter() - start
        per_round = spent / len(ra)
        total = min(rounds_needed(len(ra), width, budget.resolution), budget.max_rounds)
        want = min(total - len(ra), int((budget.budget_s - spent) / per_round))
        if width <= budget.resolution or stage >= budget.max_stages or want < 2:
            break
    spent = time.perf_counter() - start
    return {n: {"speedup": e.speedup, "ci_low": e.ci_low, "ci_high": e.ci_high, "original_ms": statistics.median(ra),
                "program_ms": statistics.median(rb[j]), "rounds": len(ra), "stages": stage, "seconds": spent,
                "sessions_per_program": len(runs[1])}
            for j, (n, e) in enumerate(zip(names, estimates))}
