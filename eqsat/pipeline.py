"""The optimize-model pipeline: import -> e-graph -> search -> extract -> export -> verify -> measure.

>>> from eqsat.pipeline import OptimizeConfig
>>> OptimizeConfig().final_extractor
'ilp'
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import onnx

from . import onnx_export, onnx_import, onnx_io
from .decode import build_program
from .egraph import EGraph
from .errors import InputError, VerificationError
from .ir import Graph
from .verify import measure_pair, verify


@dataclass
class OptimizeConfig:
    """Options of one optimization run (the CLI's flags). Defaults are the documented ones."""

    scheduler: str = "mcts"
    """mcts | tensat | random | none"""
    main_extractor: str = "greedy-dag"
    final_extractor: str = "ilp"
    cost: str = "analytic"
    """analytic | cpu | cuda"""
    seed: int = 0
    budget: int = 128
    depth: int = 10
    node_limit: int = 2000
    k_multi: int = 1
    time_limit: float = 600.0
    ilp_time_limit: float = 60.0
    verify_draws: int = 3
    measure: bool = True
    allow_slower: bool = False
    """keep the optimized program even when it measures slower than the original end to end"""
    slower_tolerance: float = 0.03
    """measured slowdown tolerated as noise before falling back to the original program"""
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class Result:
    """What an optimization produced; ``report`` is the JSON-ready summary."""

    original: onnx.ModelProto
    optimized: onnx.ModelProto
    graph: Graph
    report: dict[str, Any]


def make_cost_model(name: str):
    from eqsat.cost import make

    return make(name)


def _search(eg: EGraph, graph: Graph, config: OptimizeConfig, cost_model, progress) -> dict[str, Any]:
    if config.scheduler == "none":
        return {"rules_applied": {}, "steps": [], "stop_reason": "no search"}
    from eqsat.mcts import run_scheduler

    return run_scheduler(eg, graph, config, cost_model, progress)


def optimize(model: onnx.ModelProto | Graph | str, config: OptimizeConfig | None = None,
             progress: Callable[[str], None] | None = None) -> Result:
    """Optimize ``model`` (an ONNX model, a path, or an IR graph) and check the result against it."""
    from eqsat import extract as extractors
    from eqsat.cost import graph_cost, node_costs

    config = config or OptimizeConfig()
    say = progress or (lambda _msg: None)
    times: dict[str, float] = {}
    t = time.perf_counter()
    if isinstance(model, Graph):
        graph = model
        original = onnx_export.export_model(graph)
    else:
        original = model if isinstance(model, onnx.ModelProto) else onnx_import.load_model(model)
        graph = onnx_import.import_model(original, config.input_shapes)
    times["import"] = time.perf_counter() - t
    say(f"imported: {sum(graph.op_counts().values())} operators")

    t = time.perf_counter()
    cost_model = make_cost_model(config.cost)
    eg = EGraph.from_graph(graph)
    times["encode"] = time.perf_counter() - t
    initial = eg.size().enodes
    if config.node_limit < initial:
        raise InputError(f"--node-limit {config.node_limit} is below the initial e-graph's {initial} e-nodes; "
                         f"give at least {initial}")

    t = time.perf_counter()
    search = _search(eg, graph, config, cost_model, say)
    times["search"] = time.perf_counter() - t

    t = time.perf_counter()
    snap = eg.snapshot().restrict()
    costs = node_costs(snap, cost_model)
    warm = extractors.extract("greedy-dag", snap, costs)
    options = {"time_limit": config.ilp_time_limit, "warm_start": warm} if config.final_extractor == "ilp" else {}
    ext = warm if config.final_extractor == "greedy-dag" else extractors.extract(config.final_extractor, snap, costs, **options)
    times["extract"] = time.perf_counter() - t
    say(f"extracted with {ext.extractor}: estimated {ext.dag_cost:.1f} us")

    t = time.perf_counter()
    new_graph = build_program(snap, ext.choice, graph)
    optimized = onnx_export.export_model(new_graph)
    onnx_io.check(optimized)
    times["export"] = time.perf_counter() - t

    t = time.perf_counter()
    check = verify(original, optimized, seed=config.seed, draws=config.verify_draws)
    times["verify"] = time.perf_counter() - t
    if not check.passed:
        raise VerificationError(f"the optimized model does not match the original: {check.detail}; nothing was written")
    say(f"verified: max abs error {check.max_abs_error:.2e}")

    original_cost = graph_cost(graph, cost_model)
    optimized_cost = graph_cost(new_graph, cost_model)
    extracted_cost = optimized_cost
    measured = None
    fallback = None
    if config.measure:
        t = time.perf_counter()
        a, b = measure_pair(original, optimized, seed=config.seed)
        measured = {"original_ms": a, "optimized_ms": b, "speedup": a / b if b > 0 else None}
        times["measure"] = time.perf_counter() - t
        if not config.allow_slower and b > a * (1 + config.slower_tolerance):
            fallback = (f"the optimized program measured {b / a:.3f}x the original's latency in onnxruntime; "
                        "the original program is returned (use --allow-slower to keep the optimized one)")
            say(fallback)
            measured["rejected_optimized_ms"] = b
            measured["optimized_ms"], measured["speedup"] = a, 1.0
            optimized, new_graph, optimized_cost = original, graph, original_cost
    snap_size = eg.snapshot()
    report = {
        "verified": True,
        "max_abs_error": check.max_abs_error,
        "max_rel_error": check.max_rel_error,
        "seed": config.seed,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
        "times": times,
        "egraph": {"enodes": len(snap_size.nodes), "eclasses": snap_size.num_classes, "initial_enodes": initial},
        "extraction": {"extractor": ext.extractor, "dag_cost": ext.dag_cost, "optimal": ext.optimal, "gap": ext.gap,
                       "seconds": ext.seconds, "notes": ext.notes},
        "original_cost": original_cost,
        "optimized_cost": optimized_cost,
        "estimated_speedup": original_cost / optimized_cost if optimized_cost > 0 else None,
        "extracted_cost": extracted_cost,
        "measured": measured,
        "fallback": fallback,
        "cost_model": cost_model.name,
        "operators": {"original": dict(graph.op_counts()), "optimized": dict(new_graph.op_counts())},
        **search,
    }
    return Result(original, optimized, new_graph, report)


def check_output_path(path: str) -> None:
    """Fail early, before any work, if ``path`` cannot be written."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"output directory {parent} does not exist; create it or choose another -o path")
    if os.path.isdir(path):
        raise InputError(f"output path {path} is a directory; give a file name such as {os.path.join(path, 'out.onnx')}")


def write_atomic(path: str, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename, so a failure leaves ``path`` untouched."""
    parent = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".eqsat-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_report(path: str, report: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(report, indent=2, default=str) + "\n").encode())
