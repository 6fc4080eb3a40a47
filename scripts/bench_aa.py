"""The shipping gate's two error rates, measured: how often a program no faster than the original ships (A/A: a
model timed against itself) and how often a program truly ~2% faster ships (A/B: the same model with and
without a cheap side branch sized to ~2% of its time, the ratio checked by timing it).

The gate is the pipeline's (eqsat.measurement.gate, sequential, alpha 1%): the design asks for an A/A ship rate of at most 1%
and an A/B ship rate of at least 90% at 2%. Each rate is printed with its 95% Wilson interval, the rounds the
gate planned (the budget's, or the pilot's spread's, up to ``--max-budget``) against those it used, the mean
seconds per comparison, and why each comparison that did not ship ended: "not faster" (the futility bound: the
whole interval below 1.005), "open at the time limit" (the budget ran out before the plan's last look) or "open
at the plan's end" (the planned rounds ran and the interval still straddles 1); and the width of the 95% interval
with the session pairs as the units over its width with the rounds as the units (above 1: the pairs' few degrees
of freedom, or their offsets, cost width; what clustering costs in power). ``--max-budget`` equal to
``--budget`` never extends the budget (the gate before its rounds were sized to the variance); ``--fixed`` runs
the fixed-rounds bootstrap protocol (the pre-gate rule) instead, for comparison. ``--ab scaled`` makes the A/B case exact: the model against its own
sessions, the second side's times divided by ``--gain`` (on a 3 ms program a side branch's share cannot be
calibrated to a fraction of a percent).

    python scripts/bench_aa.py --small --trials 20 --json results/aa.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from statistics import NormalDist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from eqsat.measurement.clock import runtime_info, wall_block_ms  # noqa: E402
from eqsat.measurement.gate import Gate, spread, trimmed_interval  # noqa: E402
from eqsat.measurement.timing import (  # noqa: E402
    EXTENSION,
    Comparison,
    Protocol,
    compare,
    compare_calls,
    decide,
    timing_feeds,
    timing_sessions,
)
from eqsat.models import build  # noqa: E402
from eqsat.onnx import export_model  # noqa: E402

DEFAULT_MODELS = "squeezenet,bert"
SIDE_OUTPUT = "aa_side_branch"


def load(name: str, small: bool) -> onnx.ModelProto:
    """A built-in architecture (eqsat.models) exported to ONNX, or an .onnx file."""
    if name.endswith(".onnx"):
        return onnx.load(name)
    return export_model(build(name, small=small))


def wilson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate."""
    if trials < 1:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


def with_side_branch(model: onnx.ModelProto, elements: int) -> onnx.ModelProto:
    """``model`` plus a side branch on its first input that changes none of its outputs: Cast to float, ReduceSum
    to a scalar, Expand to ``elements``, Tanh, ReduceSum into an extra scalar output. Its cost grows with
    ``elements`` above a fixed part (five small operators), so a model must take well over that for a 2% case."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g, x = m.graph, m.graph.input[0].name
    names = [f"aa_{k}" for k in range(5)]
    g.initializer.append(helper.make_tensor(names[0], TensorProto.INT64, [1], [elements]))
    g.node.extend([
        helper.make_node("Cast", [x], [names[1]], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", [names[1]], [names[2]], keepdims=0),
        helper.make_node("Expand", [names[2], names[0]], [names[3]]),
        helper.make_node("Tanh", [names[3]], [names[4]]),
        helper.make_node("ReduceSum", [names[4]], [SIDE_OUTPUT], keepdims=0),
    ])
    g.output.append(helper.make_tensor_value_info(SIDE_OUTPUT, TensorProto.FLOAT, []))
    return m


def paired_ratio(slower: onnx.ModelProto, model: onnx.ModelProto, threads: int, seed: int, budget: float) -> float:
    """The speedup of ``model`` over ``slower``, measured with the paired, interleaved protocol (fixed rounds)."""
    return compare(slower, model, Protocol(threads=threads, budget_s=budget, seed=seed)).speedup


def two_percent_case(model: onnx.ModelProto, gain: float, threads: int, seed: int,
                     budget: float) -> tuple[onnx.ModelProto, dict]:
    """(the model with a side branch costing ``gain - 1`` of its time, the calibration). The branch's share is
    measured where it is large enough to resolve on a busy machine (a probe of at least 10%, elements grown until
    it is), its fixed part on a one-element branch, both with the paired protocol; the elements are scaled
    linearly from them, then the ratio of the two programs is checked the same way."""
    fixed = max(paired_ratio(with_side_branch(model, 1), model, threads, seed, budget) - 1, 0.0)
    probe, ratio = 1 << 14, 1.0
    for _ in range(6):
        ratio = paired_ratio(with_side_branch(model, probe), model, threads, seed, budget)
        if ratio - 1 - fixed >= 0.1:
            break
        probe *= 4
    per_element = max(ratio - 1 - fixed, 1e-6) / probe
    elements = max(1, round(max(gain - 1 - fixed, 0.0) / per_element))
    slower = with_side_branch(model, elements)
    checked = paired_ratio(slower, model, threads, seed + 1, budget)
    return slower, {"elements": elements, "fixed_share": fixed, "probe_elements": probe, "probe_ratio": ratio,
                    "target": gain, "checked_ratio": checked,
                    "base_ms": compare(model, model, Protocol(threads=threads, budget_s=budget / 4)).original_ms}


END_REASONS = ("shipped", "not faster", "open at the time limit", "open at the plan's end")


def ended(cmp: Comparison, gate: Gate | None) -> str:
    """Why a comparison ended (END_REASONS): shipped, stopped by the futility bound, or still open when the
    time or the plan ran out (without a gate: open at the plan's end)."""
    if decide(cmp).ship:
        return "shipped"
    if gate is not None and cmp.ci_high < gate.futility:
        return "not faster"
    return "open at the time limit" if gate is not None and cmp.rounds < cmp.planned else "open at the plan's end"


class Scaled:
    """A call of the faster side of a scaled A/B case: the same program, its timings divided by the gain."""

    def __init__(self, call: Callable[[], object]):
        self.call = call

    def __call__(self) -> object:
        return self.call()


def scaled_compare(model: onnx.ModelProto, gain: float, protocol: Protocol) -> Comparison:
    """``model`` timed against its own sessions, the second side's block times divided by ``gain``: a true speedup
    of exactly ``gain`` on the real noise of two programs' sessions (what :func:`compare` does otherwise)."""
    sessions = timing_sessions([model, model], protocol)
    feeds = timing_feeds(model, [sessions[0][0], sessions[1][0]], protocol.seed)
    runs = [[functools.partial(s.run, None, feeds) for s in side] for side in sessions]

    def clock(call: Callable[[], object], repeats: int) -> float:
        ms = wall_block_ms(call, repeats)
        return ms / gain if isinstance(call, Scaled) else ms
    info = {**runtime_info(protocol.threads), "sessions_per_program": len(sessions[1])}
    return compare_calls(runs[0], [Scaled(c) for c in runs[1]], protocol, info, clock)


def trial(original: onnx.ModelProto, candidate: onnx.ModelProto | float, args: argparse.Namespace,
          seed: int) -> dict:
    """One gated comparison; ``candidate`` a gain: the scaled case (:func:`scaled_compare`)."""
    gate = None if args.fixed else Gate(alpha=args.alpha)
    protocol = Protocol(threads=args.threads, budget_s=args.budget, seed=seed, gate=gate,
                        max_budget_s=args.max_budget)
    cmp = scaled_compare(original, candidate, protocol) if isinstance(candidate, float) \
        else compare(original, candidate, protocol)
    x = np.log(np.divide(cmp.round_original_ms, cmp.round_optimized_ms))
    pairs = np.arange(x.size) % int(cmp.runtime.get("sessions_per_program", 1))  # round r: session r mod n of each
    by_pair, by_round = (trimmed_interval(x, labels, 0.95) for labels in (pairs, None))
    return {"seed": seed, "speedup": cmp.speedup, "ci_low": cmp.ci_low, "ci_high": cmp.ci_high,
            "original_ms": cmp.original_ms, "rounds": cmp.rounds, "planned": cmp.planned, "looks": cmp.looks,
            "repeats": cmp.repeats, "seconds": cmp.seconds, "spread": float(np.std(x)),
            "gate_spread": spread(x), "ship": decide(cmp).ship, "ended": ended(cmp, gate),
            "pairs_over_rounds": math.log(by_pair.ci_high / by_pair.ci_low) / math.log(by_round.ci_high / by_round.ci_low)}


def progress(label: str, row: dict) -> dict:
    """One trial on stderr as it ends (a long run's partial figures survive an interruption)."""
    print(f"    {label} seed {row['seed']}: {row['speedup']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] "
          f"{row['ended']}, rounds {row['rounds']}/{row['planned']}, {row['seconds']:.1f} s", file=sys.stderr,
          flush=True)
    return row


def rate(rows: list[dict]) -> dict:
    ships = sum(r["ship"] for r in rows)
    low, high = wilson(ships, len(rows))
    return {"trials": len(rows), "ships": ships, "rate": ships / max(len(rows), 1), "wilson_low": low,
            "wilson_high": high, "rounds_median": statistics.median(r["rounds"] for r in rows),
            "planned_median": statistics.median(r["planned"] for r in rows),
            "seconds_median": statistics.median(r["seconds"] for r in rows),
            "seconds_mean": statistics.fmean(r["seconds"] for r in rows),
            "spread_median": statistics.median(r["spread"] for r in rows),
            "gate_spread_median": statistics.median(r["gate_spread"] for r in rows),
            "ended": {k: sum(r["ended"] == k for r in rows) for k in END_REASONS},
            "pairs_over_rounds_median": statistics.median(r["pairs_over_rounds"] for r in rows),
            "speedup_median": statistics.median(r["speedup"] for r in rows)}


def check_model(name: str, model: onnx.ModelProto, args: argparse.Namespace) -> dict:
    if args.ab == "scaled":
        calibration = {"ab": "scaled", "target": args.gain, "checked_ratio": args.gain, "elements": 0,
                       "base_ms": compare(model, model, Protocol(threads=args.threads, budget_s=args.budget / 4)).original_ms}
    else:
        slower, calibration = two_percent_case(model, args.gain, args.threads, args.seed, args.budget)
    aa = [progress("A/A", trial(model, model, args, args.seed + t))
          for t in range(args.trials if "aa" in args.cases else 0)]
    ab = [progress("A/B", trial(model, args.gain, args, args.seed + t) if args.ab == "scaled"
                   else trial(slower, model, args, args.seed + t))  # original: the slower one
          for t in range(args.trials if "ab" in args.cases else 0)]
    out = {"model": name, "calibration": calibration, "aa_rows": aa, "ab_rows": ab}
    out.update({case: rate(rows) for case, rows in (("aa", aa), ("ab", ab)) if rows})
    return out


def line(label: str, r: dict) -> str:
    others = ", ".join(f"{k} {n}" for k, n in r["ended"].items() if k != "shipped" and n)
    return (f"{label} ships {r['ships']:3}/{r['trials']:<4} {r['rate']:6.1%} [{r['wilson_low']:.1%}, "
            f"{r['wilson_high']:.1%}]  rounds used/planned {r['rounds_median']:.0f}/{r['planned_median']:.0f}  "
            f"spread {r['spread_median']:.3f} (gate's {r['gate_spread_median']:.3f})  "
            f"speedup {r['speedup_median']:.3f}  {r['seconds_mean']:.1f} s mean  95% interval by session pairs / "
            f"by rounds {r['pairs_over_rounds_median']:.2f}"
            + (f"; not shipped: {others}" if others else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated built-in names or .onnx paths ({DEFAULT_MODELS})")
    ap.add_argument("--small", action="store_true", help="the reduced sizes of the built-in models (fast)")
    ap.add_argument("--trials", type=int, default=100, help="A/A and A/B comparisons per model, each")
    ap.add_argument("--cases", default="aa,ab", help="the cases run: aa (the false-ship rate), ab (the power), or both")
    ap.add_argument("--budget", type=float, default=10.0, help="timing budget of one comparison, seconds (the pipeline's)")
    ap.add_argument("--max-budget", type=float, default=None,
                    help=f"seconds the gate may extend the budget to when the pilot's spread asks for more rounds "
                         f"(default: {EXTENSION:g} x --budget; --budget: never extended, the gate before sizing)")
    ap.add_argument("--gain", type=float, default=1.02, help="the A/B case's true speedup (the side branch's share)")
    ap.add_argument("--alpha", type=float, default=Gate.alpha, help="the gate's designed false-ship rate")
    ap.add_argument("--fixed", action="store_true", help="the fixed-rounds bootstrap protocol instead of the gate")
    ap.add_argument("--ab", choices=("branch", "scaled"), default="branch",
                    help="the A/B case: branch (the model with a side branch sized to --gain, the ratio checked by "
                         "timing it); scaled (the model against its own sessions, whose times are divided by --gain: "
                         "an exact gain on the real noise, where a branch's share cannot be calibrated that finely, "
                         "e.g. 3%% of a 3 ms program)")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first trial (trial i uses seed + i)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.budget <= 0 or args.threads < 1 or args.gain <= 1:
        ap.error("--trials and --threads must be at least 1, --budget positive and --gain above 1")
    if args.max_budget is not None and args.max_budget < args.budget:
        ap.error("--max-budget must be at least --budget")
    args.cases = [c for c in args.cases.split(",") if c]
    if not args.cases or not set(args.cases) <= {"aa", "ab"}:
        ap.error(f"--cases: aa, ab or aa,ab, got {','.join(args.cases)!r}")

    load_before = os.getloadavg()
    results = []
    for name in args.models.split(","):
        s = check_model(name, load(name, args.small), args)
        results.append(s)
        c = s["calibration"]
        print(f"{name}: {c['base_ms']:.3f} ms; " + (f"A/B scaled: the second side's times divided by {c['target']:.3f}"
              if args.ab == "scaled" else f"side branch of {c['elements']} elements, checked ratio "
              f"{c['checked_ratio']:.3f} (target {c['target']:.3f})"))
        for case, label in (("aa", "A/A"), ("ab", "A/B")):
            if case in s:
                print("  " + line(label, s[case]), flush=True)
    totals = {}
    for case in args.cases:
        ships, trials = sum(s[case]["ships"] for s in results), sum(s[case]["trials"] for s in results)
        low, high = wilson(ships, trials)
        totals[case] = {"ships": ships, "trials": trials, "rate": ships / trials, "wilson_low": low,
                        "wilson_high": high}
    said = []
    if "aa" in totals:
        aa = totals["aa"]
        said.append(f"A/A ships {aa['ships']}/{aa['trials']} ({aa['rate']:.1%}, 95% Wilson {aa['wilson_low']:.1%}-"
                    f"{aa['wilson_high']:.1%}; design <= {args.alpha:.0%})")
    if "ab" in totals:
        ab = totals["ab"]
        said.append(f"A/B at {args.gain:.2f}x ships {ab['ships']}/{ab['trials']} ({ab['rate']:.1%}, "
                    f"{ab['wilson_low']:.1%}-{ab['wilson_high']:.1%}; design >= 90%)")
    print(f"all: {'; '.join(said)}; load average {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs")
    if args.json:
        out = {"models": results, **totals, "protocol": "fixed" if args.fixed else "gate",
               "config": vars(args), "load_average": {"before": load_before, "after": os.getloadavg()},
               "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(), "time": time.time()}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
