"""What sets the width of a timing interval on this host, for one model: how the paired log ratio of two sessions
of the model spreads with the block of calls a round times (one call, 3, 10, 30: per second of timing, which block
pairs best), and how far sessions of the model sit from each other (the between-session offset that the rounds of
one session share, so that no number of rounds averages it away), with onnxruntime's CPU arena on and off.

The measurement (:mod:`eqsat.measurement.timing`) is designed from these figures: under the gate a round times one
call of each program, and the rounds use up to 20 sessions a program in turn (docs/costs.md). Everything is timed
interleaved in one process, 1 intra-op thread, on the seeded inputs eqsat times with (``--input-shape`` fixes
dynamic dimensions, as eqsat's own flag does).

    python scripts/bench_noise.py model.onnx --input-shape input_ids=1,1 --json results/noise.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from eqsat.errors import InputError  # noqa: E402
from eqsat.measurement.clock import session_options, wall_block_ms  # noqa: E402
from eqsat.measurement.timing import timing_feeds  # noqa: E402
from eqsat.onnx.importer import parse_input_shapes  # noqa: E402


def session(model: onnx.ModelProto, arena: bool) -> ort.InferenceSession:
    opts = session_options(1)
    opts.enable_cpu_mem_arena = arena
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def block_s(run: Callable[[], object], n: int) -> float:
    """A block of ``n`` calls as the gate's clock summarizes it: the median of the calls timed one by one."""
    return wall_block_ms(run, n) / 1e3


def paired_spread(runs: Sequence[Callable[[], object]], blocks: Sequence[int], seconds: float,
                  rng: np.random.Generator) -> list[dict]:
    """Per block size: the sd of log(first session's block / second's), each pair of blocks timed one after the
    other in a random order, the block sizes interleaved; ``sd_per_second``: the sd scaled to a second of timing
    (sd x sqrt(the seconds one pair of blocks takes)), lower is better."""
    ratios: dict[int, list[float]] = {n: [] for n in blocks}
    spent: dict[int, float] = {n: 0.0 for n in blocks}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for n in rng.permutation(list(blocks)):
            t0 = time.perf_counter()
            first = rng.random() < 0.5
            a, b = (runs[0], runs[1]) if first else (runs[1], runs[0])
            ta, tb = block_s(a, n), block_s(b, n)
            ratios[n].append(float(np.log(ta / tb) if first else np.log(tb / ta)))
            spent[n] += time.perf_counter() - t0
    out = []
    for n in blocks:
        x = np.array(ratios[n])
        sd = float(x.std(ddof=1)) if x.size > 1 else float("nan")
        out.append({"block": n, "pairs": int(x.size), "sd": sd,
                    "sd_per_second": sd * float(np.sqrt(spent[n] / max(x.size, 1)))})
    return out


def session_offsets(model: onnx.ModelProto, feeds: dict, sessions: int, rounds: int, calls: int,
                    rng: np.random.Generator) -> list[dict]:
    """Per arena setting: ``sessions`` sessions (the settings' built interleaved), timed interleaved over
    ``rounds`` rounds of ``calls`` calls; the between-session sd of their mean log time (the rounds' own noise
    taken out: var(means) - within / rounds, at least 0) and the within-session sd of a round."""
    order = rng.permutation([arena for arena in (True, False) for _ in range(sessions)])
    built = [(bool(arena), session(model, bool(arena))) for arena in order]
    runs = [(arena, lambda s=s: s.run(None, feeds)) for arena, s in built]
    for _, run in runs:
        for _ in range(3):
            run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for i in rng.permutation(len(runs)):
            times[i].append(block_s(runs[i][1], calls))
    out = []
    for arena in (True, False):
        logs = np.log(np.array([t for (a, _), t in zip(runs, times) if a == arena]))
        between, within = variance_components(logs)
        out.append({"arena": arena, "ms": float(np.exp(logs.mean())) * 1e3, "between_session_sd": between,
                    "round_sd": within, "sessions_ms": [float(v) * 1e3 for v in np.exp(logs.mean(axis=1))]})
    return out


def variance_components(logs: np.ndarray) -> tuple[float, float]:
    """(between-session sd, within-session sd) of log times, one row per session and one column per round (the
    sessions timed interleaved, so that a load spike in one round reaches them all): the two-way analysis of
    variance's estimates. The rounds' common part is taken out of the residual; the spread of the sessions' means
    less what the residual puts in it is the sessions' own."""
    sessions, rounds = logs.shape
    resid = logs - logs.mean(axis=1, keepdims=True) - logs.mean(axis=0, keepdims=True) + logs.mean()
    within = float((resid ** 2).sum() / max((sessions - 1) * (rounds - 1), 1))
    between = max(float(logs.mean(axis=1).var(ddof=1)) - within / rounds, 0.0)
    return between ** 0.5, within ** 0.5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an .onnx file")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                    help="the shape of a dynamic input, as eqsat's flag (repeatable)")
    ap.add_argument("--blocks", default="1,3,10,30", help="the block sizes (calls) compared")
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds of paired blocks")
    ap.add_argument("--sessions", type=int, default=8, help="sessions per arena setting for the offsets")
    ap.add_argument("--rounds", type=int, default=30, help="rounds of the offsets' sessions")
    ap.add_argument("--calls", type=int, default=10, help="calls per round of the offsets' sessions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    blocks = [int(b) for b in args.blocks.split(",")]
    if min(blocks) < 1 or args.seconds <= 0 or args.sessions < 2 or args.rounds < 2 or args.calls < 1:
        ap.error("--blocks must be positive, --seconds positive, --sessions and --rounds at least 2, --calls at least 1")
    if not os.path.isfile(args.model):
        ap.error(f"{args.model}: no such file; give an .onnx model")
    model = onnx.load(args.model)
    try:
        shapes = parse_input_shapes(args.input_shape) or None
    except InputError as e:
        ap.error(str(e))
    rng = np.random.default_rng(args.seed)
    pair = [session(model, True), session(model, True)]
    feeds = timing_feeds(model, pair, args.seed, shapes)
    runs = [lambda s=s: s.run(None, feeds) for s in pair]
    for run in runs:
        for _ in range(10):
            run()
    spread = paired_spread(runs, blocks, args.seconds, rng)
    print(f"{args.model}: paired log ratio of two sessions, by calls per block ({args.seconds:g} s):")
    for row in spread:
        print(f"  block {row['block']:3d}: {row['pairs']:5d} pairs, sd {100 * row['sd']:.2f}%, "
              f"per second of timing {100 * row['sd_per_second']:.3f}%")
    del pair, runs
    offsets = session_offsets(model, feeds, args.sessions, args.rounds, args.calls, rng)
    print(f"between-session offsets ({args.sessions} sessions each, {args.rounds} rounds of {args.calls} calls):")
    for row in offsets:
        print(f"  arena {'on ' if row['arena'] else 'off'}: {row['ms']:.3f} ms, between-session sd "
              f"{100 * row['between_session_sd']:.2f}%, a round's sd {100 * row['round_sd']:.2f}%")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "blocks": spread, "offsets": offsets, "config": vars(args),
                       "onnxruntime": ort.__version__, "cpus": os.cpu_count(), "time": time.time()}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
