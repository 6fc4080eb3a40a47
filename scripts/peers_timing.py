"""The timing of scripts/bench_peers.py: every verified program beside an unchanged copy of the original (the A/A
control), in one interleaved run (eqsat.timing's protocol)."""

from __future__ import annotations

import argparse
import functools
from typing import Any

import onnx

from eqsat import timing


def time_all(original: onnx.ModelProto, programs: dict[str, onnx.ModelProto], threads: int,
             args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The original against an unchanged copy of it (``original-copy``, the A/A control) and every program, in
    one interleaved run: speedup original / program with its interval, per name."""
    names = ["original-copy", *programs]
    models = [original, original, *programs.values()]
    protocol = timing.Protocol(threads=threads, budget_s=args.time_budget * len(names), seed=args.seed)
    sessions = timing.timing_sessions(models, protocol)
    feeds = timing.timing_feeds(original, [sessions[0][0], sessions[1][0]], args.seed)
    runs = [[functools.partial(s.run, None, feeds) for s in side] for side in sessions]
    comparisons = timing.compare_many(runs, protocol, timing.runtime_info(threads))
    return {n: {"speedup": c.speedup, "ci_low": c.ci_low, "ci_high": c.ci_high, "original_ms": c.original_ms,
                "program_ms": c.optimized_ms, "rounds": c.rounds} for n, c in zip(names, comparisons)}
