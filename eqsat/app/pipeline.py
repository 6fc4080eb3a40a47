"""The optimize-model pipeline: import -> e-graph -> search -> extract -> export -> verify -> measure.

>>> from eqsat.app.pipeline import OptimizeConfig
>>> OptimizeConfig().final_extractor
'ilp'
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import onnx

from eqsat import onnx_export, onnx_import, onnx_io
from eqsat.decode import build_program
from eqsat.egraph import EGraph
from eqsat.errors import InputError, VerificationError
from eqsat.ir import Graph, Node
from eqsat.timing import Protocol, compare, decide
from eqsat.verify import verify


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
    node_limit: int | None = None
    """e-node limit of the search; None: max(2000, 4 x the initial e-graph's e-nodes) (see effective_node_limit)"""
    k_multi: int = 1
    time_limit: float = 600.0
    ilp_time_limit: float = 60.0
    verify_draws: int = 3
    measure: bool = True
    allow_slower: bool = False
    """keep the optimized program even when it is not measured faster with confidence than the original"""
    measure_budget: float = 10.0
    """seconds of timed rounds in the end-to-end comparison (eqsat.timing; the minimum rounds always run)"""
    measure_threads: int = 1
    """onnxruntime intra-op threads of the end-to-end comparison"""
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise InputError naming the first unusable option (see eqsat.app.config_check)."""
        from .config_check import validate

        validate(self)


DEFAULT_NODE_LIMIT = 2000
NODE_LIMIT_FACTOR = 4


ILP_FLOOR_SECONDS = 0.1


def ilp_seconds(config: OptimizeConfig, elapsed: float) -> float:
    """The ILP's time limit: what ``--time-limit`` (search plus extraction) leaves after ``elapsed`` seconds,
    at most ``--ilp-time-limit`` and at least 0.1 s (SCIP then returns its greedy warm start)."""
    return max(ILP_FLOOR_SECONDS, min(config.ilp_time_limit, config.time_limit - elapsed))


def effective_node_limit(config: OptimizeConfig, initial_enodes: int) -> int:
    """``config.node_limit`` if given, else max(2000, 4 x the initial e-graph), so that any model can grow."""
    if config.node_limit is not None:
        return config.node_limit
    return max(DEFAULT_NODE_LIMIT, NODE_LIMIT_FACTOR * initial_enodes)


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
        return {"rules_applied": {}, "steps": [], "stop_reason": "no_search"}
    from eqsat.mcts import run_scheduler

    return run_scheduler(eg, graph, config, cost_model, progress)


def same_program(a: Graph, b: Graph) -> bool:
    """Whether ``b`` computes with exactly the operators of ``a``: the same DAG up to node identity
    (compared by structure, bottom-up), with as many nodes and the same outputs."""
    if a.output_names != b.output_names or len(a.nodes()) != len(b.nodes()):
        return False
    ids: dict[tuple, int] = {}
    memo: dict[int, int] = {}

    def key(n: Node) -> tuple:
        base = (n.op, n.attrs, tuple(n.shape), n.dtype)
        return (*base, n.name) if n.op in ("input", "weight") else (*base, tuple(memo[id(c)] for c in n.inputs))

    def canon(g: Graph) -> tuple[int, ...]:
        for n in g.nodes():  # topological: children first
            memo[id(n)] = ids.setdefault(key(n), len(ids))
        return tuple(memo[id(o)] for o in g.outputs)

    return canon(a) == canon(b)


def optimize(model: onnx.ModelProto | Graph | str, config: OptimizeConfig | None = None,
             progress: Callable[[str], None] | None = None) -> Result:
    """Optimize ``model`` (an ONNX model, a path, or an IR graph) and check the result against it."""
    from eqsat import extract as extractors
    from eqsat.cost import graph_cost, node_costs

    config = config or OptimizeConfig()
    config.validate()
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
    if config.node_limit is not None and config.node_limit < initial:
        raise InputError(f"--node-limit {config.node_limit} is below the initial e-graph's {initial} e-nodes; "
                         f"give at least {initial}, or leave it out for {NODE_LIMIT_FACTOR} x that")
    config = replace(config, node_limit=effective_node_limit(config, initial))

    t = time.perf_counter()
    search = _search(eg, graph, config, cost_model, say)
    times["search"] = time.perf_counter() - t

    t = time.perf_counter()
    snap = eg.snapshot().restrict()
    costs = node_costs(snap, cost_model)
    warm = extractors.extract("greedy-dag", snap, costs)
    ilp_limit = ilp_seconds(config, times["search"] + time.perf_counter() - t)
    options = {"time_limit": ilp_limit, "warm_start": warm} if config.final_extractor == "ilp" else {}
    ext = warm if config.final_extractor == "greedy-dag" else extractors.extract(config.final_extractor, snap, costs, **options)
    if config.final_extractor == "ilp" and ext.dag_cost > warm.dag_cost:  # ilp.extract does this itself already
        ext = replace(warm, extractor="ilp", used_warm_start=True, notes=[*ext.notes, (
            f"the ILP's program (DAG cost {ext.dag_cost:.6g}) is dearer than its warm start; kept greedy-dag's")])
    times["extract"] = time.perf_counter() - t
    say(f"extracted with {ext.extractor}: estimated {ext.dag_cost:.1f} us"
        + (" (SCIP found nothing cheaper in time: greedy-dag's program kept)" if ext.used_warm_start else ""))

    t = time.perf_counter()
    new_graph = build_program(snap, ext.choice, graph)
    optimized = onnx_export.export_model(new_graph)
    onnx_io.check(optimized)
    times["export"] = time.perf_counter() - t

    t = time.perf_counter()
    check = verify(original, optimized, seed=config.seed, draws=config.verify_draws,
                   input_shapes=config.input_shapes)
    times["verify"] = time.perf_counter() - t
    if not check.passed:
        raise VerificationError(f"the optimized model does not match the original: {check.detail}; nothing was written")
    say(f"verified: max abs error {check.max_abs_error:.2e}")

    original_cost = graph_cost(graph, cost_model)
    optimized_cost = graph_cost(new_graph, cost_model)
    extracted_cost = optimized_cost
    measured = None
    returned, reason = "optimized", "not measured (measure=False): the optimized program is returned unmeasured"
    if not config.allow_slower and same_program(graph, new_graph):
        returned, reason = "original", ("the search found no program other than the original; "
                                        "the input model is returned unchanged")
    elif config.measure:
        t = time.perf_counter()
        protocol = Protocol(threads=config.measure_threads, budget_s=config.measure_budget, seed=config.seed)
        comparison = compare(original, optimized, protocol, input_shapes=config.input_shapes)
        decision = decide(comparison, allow_slower=config.allow_slower)
        times["measure"] = time.perf_counter() - t
        measured = {**comparison.report(), "decision": "ship" if decision.ship else "original",
                    "reason": decision.reason}
        returned, reason = ("optimized" if decision.ship else "original"), decision.reason
    fallback = reason if returned == "original" else None
    if fallback:
        say(fallback)
        optimized, new_graph, optimized_cost = original, graph, original_cost  # the user's model, untouched
    snap_size = eg.snapshot()
    report = {
        "verified": True,
        "max_abs_error": check.max_abs_error,
        "max_rel_error": check.max_rel_error,
        "seed": config.seed,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
        "times": times,
        "egraph": {"enodes": len(snap_size.nodes), "eclasses": snap_size.num_classes, "initial_enodes": initial,
                   "node_limit": config.node_limit},
        "extraction": {"extractor": ext.extractor, "dag_cost": ext.dag_cost, "optimal": ext.optimal, "gap": ext.gap,
                       "seconds": ext.seconds, "notes": ext.notes, "used_warm_start": ext.used_warm_start},
        "original_cost": original_cost,
        "optimized_cost": optimized_cost,
        "estimated_speedup": original_cost / optimized_cost if optimized_cost > 0 else None,
        "extracted_cost": extracted_cost,
        "measured": measured,
        "fallback": fallback,
        "returned": returned,
        "returned_reason": reason,
        "cost_model": cost_model.name,
        "operators": {"original": dict(graph.op_counts()), "optimized": dict(new_graph.op_counts())},
        **search,
    }
    return Result(original, optimized, new_graph, report)


def check_output_path(path: str, flag: str = "-o") -> None:
    """Fail early, before any work, if ``path`` (given with ``flag``) cannot be written: an empty name, a folder,
    a missing or read-only folder, a name too long. A probe file is created and removed beside the target."""
    example = "out.onnx" if flag == "-o" else "report.json"
    if not path:
        raise InputError(f"{flag} is empty; give a file name such as {example}")
    if os.path.isdir(path):
        raise InputError(f"{flag} {path} is a directory; give a file name such as {os.path.join(path, example)}")
    if path.endswith(os.sep):
        raise InputError(f"{flag} {path} ends with {os.sep} (a folder, which does not exist); give a file name "
                         f"such as {os.path.join(path, example)}, in a folder that exists")
    target = os.path.realpath(path)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise InputError(f"{flag} {path}: directory {parent} does not exist; create it or choose another {flag} path")
    name = os.path.basename(target)
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(name)) + len(".data") > name_max:
        raise InputError(f"{flag} {path}: the file name is {len(os.fsencode(name))} bytes, too long for this file "
                         f"system (at most {name_max - len('.data')}); choose a shorter {flag} name")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".eqsat-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot write in {parent} ({exc.strerror}); choose another {flag} path "
                         "or make the folder writable") from None


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


def report_bytes(report: dict[str, Any]) -> bytes:
    """The report as written to ``--report``: indented JSON, UTF-8."""
    return (json.dumps(report, indent=2, default=str) + "\n").encode()


def write_report(path: str, report: dict[str, Any]) -> None:
    write_atomic(path, report_bytes(report))
