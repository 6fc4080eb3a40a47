#!/usr/bin/env python3
"""Calibration of the cost models against end-to-end latency in a runtime (issue 15, point 4).

For each model: its e-graph is grown (the TENSAT schedule by default), ``--programs`` distinct programs are
drawn from it by random extraction choices (seeded; eqsat.extract.sample), each is verified against the
original in onnxruntime and timed end to end against it (eqsat.measurement.timing's protocol: interleaved rounds, the
median paired ratio; a round's block of calls summarized by its fastest call, ``--clock min``, or by its
median), and estimated by every cost model of ``--cost`` (a comma list; the estimated speedup is the
original's DAG cost over the program's). Prints, per model and over all programs, Spearman's rank
correlation of estimated and measured speedups and their mean absolute difference; writes one JSON per run.

    python scripts/bench_cost_model.py --runtime ort-cpu --models squeezenet,bert --cost analytic,ort-cpu \\
        [--programs 20] [--small] [--budget 2] [--clock min] [--seed 0] [--json FILE]
    python scripts/bench_cost_model.py --models zoo:bert,zoo:llama --cost analytic,ort-cpu  # the real-model zoo
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from typing import Any

from eqsat.app.pipeline import OptimizeConfig, encode_phase, search_phase
from eqsat.cost import AnalyticCost, cost_names, graph_cost, make, node_costs
from eqsat.cost.calibration import mean_abs_error, spearman
from eqsat.cost.measure import min_ms
from eqsat.decode import build_program
from eqsat.extract.sample import sample_choices, structure_key
from eqsat.measurement.clock import runtime_info, wall_block_ms
from eqsat.measurement.timing import Protocol, compare_calls, timing_feeds, timing_sessions
from eqsat.models import BENCHMARKS, MODELS, build
from eqsat.onnx import export_model, import_model
from eqsat.verification import verify

RUNTIMES = ("ort-cpu", "torch-cuda", "torch-cpu")
"""runtimes this script can measure in: onnxruntime on the CPU (eqsat.measurement.timing, ``--clock``), or the IR
program in torch (eqsat.measurement.runtimes: on a GPU replayed as a CUDA graph and timed by CUDA events)"""


ZOO = "zoo:"
"""prefix of a real-model zoo name in ``--models`` (tests/zoo: its TorchScript export at opset 17)"""


def source(name: str, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """(the IR graph of a built-in model or of ``zoo:NAME``, the search options it takes)."""
    if name.startswith(ZOO):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if os.path.join(root, "tests") not in sys.path:
            sys.path.insert(0, os.path.join(root, "tests"))
        import zoo  # tests/zoo: builds with torch, so only imported when asked for

        return import_model(zoo.build(name[len(ZOO):], "torchscript", 17, seed=args.seed)), {}
    return build(name, small=args.small), {"k_multi": MODELS[name].k_multi, "rule_set": MODELS[name].rule_set}


def draw_programs(name: str, args: argparse.Namespace) -> tuple[Any, list[Any], dict[str, Any]]:
    """(the model's IR graph, distinct programs drawn from its grown e-graph other than the original, facts)."""
    graph, options = source(name, args)
    cfg = OptimizeConfig.of(scheduler=args.scheduler, cost="analytic", time_limit=args.search_time, seed=args.seed,
                            **options)
    t = time.perf_counter()
    egraph, search = encode_phase(graph, cfg)
    search_phase(egraph, cfg, search, AnalyticCost("cpu"), lambda _msg: None)
    snap = egraph.snapshot().restrict()
    table: dict[tuple, int] = {}
    original = structure_key(graph, table)
    programs: dict[Any, Any] = {}

    def identity(choice: dict[int, int]) -> Any:
        program = build_program(snap, choice, graph)
        key = structure_key(program, table)
        programs.setdefault(key, program)
        return key

    choices = sample_choices(snap, node_costs(snap, AnalyticCost("cpu")), args.programs + 1, args.seed, identity)
    keys = [identity(c) for c in choices]
    drawn = [programs[k] for k in keys if k != original][:args.programs]
    facts = {"enodes": len(snap.nodes), "eclasses": snap.num_classes, "grow_seconds": time.perf_counter() - t}
    return graph, drawn, facts


def min_block_ms(call: Any, repeats: int) -> float:
    """The fastest of ``repeats`` calls (ms): robust where other processes share the cores (see cost.measure.min_ms)."""
    return min_ms(call, repeats)


CLOCKS = {"min": min_block_ms, "median": wall_block_ms}
"""how a round summarizes a block of calls of one program: the fastest call, or the median (the pipeline's)"""


def measure(original: Any, program: Any, args: argparse.Namespace, graphs: tuple[Any, Any] = (None, None)) -> Any:
    """Time ``program`` against ``original`` end to end (eqsat.measurement.timing's protocol): in onnxruntime with
    ``--clock``, or in a torch runtime (``graphs``: the two IR programs it runs)."""
    protocol = Protocol(threads=args.threads, budget_s=args.budget, seed=args.seed)
    if args.runtime != "ort-cpu":
        from eqsat.measurement.runtimes import Program, compare_programs
        from eqsat.measurement.runtimes import make as make_runtime

        return compare_programs(Program(original, graphs[0]), [Program(program, graphs[1])],
                                make_runtime(args.runtime, args.threads), protocol).comparisons[0]
    sessions = timing_sessions([original, program], protocol)
    feeds = timing_feeds(original, [sessions[0][0], sessions[1][0]], args.seed)
    runs = [[functools.partial(s.run, None, feeds) for s in side] for side in sessions]
    return compare_calls(runs[0], runs[1], protocol, runtime_info(args.threads), CLOCKS[args.clock])


def summary(rows: list[dict[str, Any]], costs: list[str]) -> dict[str, Any]:
    measured = [r["measured_speedup"] for r in rows]
    out: dict[str, Any] = {"programs": len(rows)}
    for c in costs:
        estimated = [r["estimated_speedup"][c] for r in rows]
        out[c] = {"spearman": spearman(estimated, measured),
                  "mean_abs_error": mean_abs_error(estimated, measured) if rows else math.nan}
    return out


def absolute(per_model: dict[str, Any], rows: list[dict[str, Any]], costs: list[str]) -> dict[str, Any]:
    """Each cost model's estimate of the originals' latency against the measured one, over the models: the rank
    correlation and the mean absolute relative error of estimated over measured (the originals' measured
    milliseconds: their median over the model's comparisons)."""
    measured: dict[str, float] = {}
    for name in per_model:
        times = sorted(r["original_ms"] for r in rows if r["model"] == name)
        if times:
            measured[name] = times[len(times) // 2] * 1e3
    names = list(measured)
    out: dict[str, Any] = {"models": len(names), "measured_us": measured}
    for c in costs:
        est = [per_model[n]["original_estimated_us"][c] for n in names]
        out[c] = {"spearman": spearman(est, [measured[n] for n in names]),
                  "mean_abs_rel_error": (sum(abs(e / measured[n] - 1) for e, n in zip(est, names)) / len(names))
                  if names else math.nan}
    return out


def finite(value: Any) -> Any:
    """``value`` with every NaN float replaced by None (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def cost_info(model: Any) -> dict[str, Any]:
    """A cost model's name, and on a GPU its launch constant (us: a node's cost in a CUDA graph, kernel aside)."""
    return {"name": model.name, **({"launch_us": model.launch()} if getattr(model, "device", None) == "cuda" else {})}


def write(args: argparse.Namespace, models: dict[str, Any], per_model: dict[str, Any],
          rows: list[dict[str, Any]]) -> None:
    """The JSON of ``--json`` (if given): the models done so far, their rows and the summaries over them."""
    if not args.json:
        return
    costs = list(models)
    overall = {**summary(rows, costs), "absolute": absolute(per_model, rows, costs)}
    with open(args.json, "w") as f:
        json.dump(finite({"config": vars(args), "runtime": runtime_info(args.threads) if args.runtime == "ort-cpu"
                          else {"name": args.runtime}, "cost_models": {c: cost_info(m) for c, m in models.items()},
                          "per_model": per_model, "overall": overall, "rows": rows}), f, indent=2, allow_nan=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtime", default="ort-cpu", choices=RUNTIMES, help="where programs are measured end to end")
    p.add_argument("--models", default="squeezenet,resnet50,bert",
                   help=f"comma list of built-in models ({', '.join(MODELS)}; or all) and real-model zoo ones "
                        f"({ZOO}bert, {ZOO}llama, ...: tests/zoo's TorchScript export at opset 17)")
    p.add_argument("--cost", default="analytic,ort-cpu", help=f"comma list of cost models ({', '.join(cost_names())})")
    p.add_argument("--programs", type=int, default=20, help="distinct programs drawn per model")
    p.add_argument("--small", action="store_true", help="the models' reduced sizes")
    p.add_argument("--scheduler", default="tensat", help="how the e-graph is grown")
    p.add_argument("--search-time", type=float, default=60.0, help="seconds the growth may take")
    p.add_argument("--budget", type=float, default=2.0, help="seconds of timed rounds per program (eqsat.measurement.timing)")
    p.add_argument("--clock", default="min", choices=list(CLOCKS),
                   help="a round's summary of a block of calls: the fastest (robust on a shared machine) or the median")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (timing and ort-cpu costs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    names = list(BENCHMARKS) if args.models == "all" else args.models.split(",")
    costs = args.cost.split(",")
    unknown = [c for c in costs if c not in cost_names()]
    if unknown:
        p.error(f"--cost {','.join(unknown)}: choose from {', '.join(cost_names())}")
    models = {c: make(c, threads=args.threads) for c in costs}
    rows: list[dict[str, Any]] = []
    per_model: dict[str, Any] = {}
    for name in names:
        graph, programs, facts = draw_programs(name, args)
        original = export_model(graph)
        base = {c: graph_cost(graph, m) for c, m in models.items()}
        print(f"[{name}: {facts['enodes']} e-nodes, {len(programs)} programs drawn in {facts['grow_seconds']:.1f}s]",
              file=sys.stderr, flush=True)
        model_rows = []
        for i, program in enumerate(programs):
            exported = export_model(program)
            check = verify(original, exported, seed=args.seed)
            if not check.passed:
                raise SystemExit(f"{name} program {i} does not match the original: {check.detail}")
            cmp = measure(original, exported, args, (graph, program))
            est = {c: base[c] / graph_cost(program, m) for c, m in models.items()}
            row = {"model": name, "program": i, "operators": sum(program.op_counts().values()),
                   "measured_speedup": cmp.speedup, "ci_low": cmp.ci_low, "ci_high": cmp.ci_high,
                   "original_ms": cmp.original_ms, "estimated_speedup": est}
            model_rows.append(row)
            print(f"{name:12} {i:>3} measured {cmp.speedup:6.3f} [{cmp.ci_low:.3f}, {cmp.ci_high:.3f}]  "
                  + "  ".join(f"{c} {v:6.3f}" for c, v in est.items()), flush=True)
        per_model[name] = {**facts, **summary(model_rows, costs), "original_estimated_us": base}
        rows += model_rows
        write(args, models, per_model, rows)  # after each model: a run stopped at a time limit keeps what it did
    overall = summary(rows, costs)
    overall["absolute"] = absolute(per_model, rows, costs)
    print(f"\n{'model':12} {'n':>3} " + " ".join(f"{c + ' rho':>16} {c + ' MAE':>16}" for c in costs))
    for name, s in [*per_model.items(), ("overall", overall)]:
        print(f"{name:12} {s['programs']:>3} "
              + " ".join(f"{s[c]['spearman']:>16.3f} {s[c]['mean_abs_error']:>16.3%}" for c in costs))
    ab = overall["absolute"]
    print(f"\noriginals' latency, estimated against measured ({ab['models']} models): "
          + "  ".join(f"{c} rho {ab[c]['spearman']:.3f} error {ab[c]['mean_abs_rel_error']:.1%}" for c in costs))
    write(args, models, per_model, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
