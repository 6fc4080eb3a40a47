"""The optimize-model pipeline, one function per phase: import -> encode -> search -> extract -> export ->
verify -> measure -> decide. :func:`optimize` runs them in turn under one :class:`PhaseTimer` and returns the
typed :class:`Report`.

>>> from eqsat.app.pipeline import OptimizeConfig
>>> OptimizeConfig().final_extractor
'ilp'
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import onnx

from eqsat import extract as extractors
from eqsat import onnx_export, onnx_import, onnx_io
from eqsat.cost import CostModel, graph_cost, make, node_costs
from eqsat.decode import build_program
from eqsat.egraph import EGraph
from eqsat.errors import InputError, VerificationError
from eqsat.extract import Extraction
from eqsat.ir import Graph, Node
from eqsat.mcts import NODE_LIMIT_FACTOR, SearchConfig, SearchReport, run_scheduler
from eqsat.rules.rule import Rule
from eqsat.snapshot import Snapshot
from eqsat.timing import Protocol, compare, decide
from eqsat.verify import verify

from .config import OptimizeConfig, ilp_seconds
from .report import (
    Candidate,
    EGraphSize,
    ExtractionReport,
    Measurement,
    PhaseTimer,
    Report,
    Returned,
    VerificationReport,
)

Progress = Callable[[str], None]


@dataclass
class Result:
    """What an optimization produced: the input and returned models, the returned program, the typed report."""

    original: onnx.ModelProto
    optimized: onnx.ModelProto
    graph: Graph
    report: Report


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


# -- the phases ----------------------------------------------------------------------------------------------

def import_phase(model: onnx.ModelProto | Graph | str, config: OptimizeConfig) -> tuple[onnx.ModelProto, Graph]:
    """(the original ONNX model, its IR graph) from a model, a path or a graph."""
    if isinstance(model, Graph):
        return onnx_export.export_model(model), model
    original = model if isinstance(model, onnx.ModelProto) else onnx_import.load_model(model)
    return original, onnx_import.import_model(original, config.input_shapes)


def encode_phase(graph: Graph, config: OptimizeConfig) -> tuple[EGraph, SearchConfig]:
    """The e-graph of ``graph`` and the search config with its node limit resolved against it."""
    egraph = EGraph.from_graph(graph)
    initial = egraph.size().enodes
    limit = config.search.node_limit
    if limit is not None and limit < initial:
        raise InputError(f"--node-limit {limit} is below the initial e-graph's {initial} e-nodes; "
                         f"give at least {initial}, or leave it out for {NODE_LIMIT_FACTOR} x that")
    return egraph, config.search.resolved(initial)


def search_phase(egraph: EGraph, config: OptimizeConfig, search: SearchConfig, cost_model: CostModel,
                 say: Progress, extra_rules: Sequence[Rule] = ()) -> SearchReport:
    """Grow ``egraph`` with the configured scheduler (``extra_rules`` join the rule set)."""
    return run_scheduler(config.scheduler, egraph, search, cost_model, say, extra_rules)


def extract_phase(egraph: EGraph, config: OptimizeConfig, cost_model: CostModel,
                  elapsed: float) -> tuple[Snapshot, Extraction]:
    """The final extractor's program of the grown e-graph; the ILP gets what ``--time-limit`` left after
    ``elapsed`` seconds and greedy-dag's program as its warm start, never returning a dearer one."""
    snap = egraph.snapshot().restrict()
    costs = node_costs(snap, cost_model)
    warm = extractors.extract("greedy-dag", snap, costs)
    if config.final_extractor == "greedy-dag":
        return snap, warm
    options = {"time_limit": ilp_seconds(config, elapsed), "warm_start": warm} if config.final_extractor == "ilp" \
        else {}
    ext = extractors.extract(config.final_extractor, snap, costs, **options)
    if config.final_extractor == "ilp" and ext.dag_cost > warm.dag_cost:  # ilp.extract does this itself already
        ext = replace(warm, extractor="ilp", used_warm_start=True, notes=[*ext.notes, (
            f"the ILP's program (DAG cost {ext.dag_cost:.6g}) is dearer than its warm start; kept greedy-dag's")])
    return snap, ext


def export_phase(snap: Snapshot, ext: Extraction, graph: Graph, cost_model: CostModel) -> tuple[Graph, onnx.ModelProto]:
    """The extracted program as IR and as a checked ONNX model. Its recomputed cost must equal the
    extractor's DAG cost (one costing, two paths: a disagreement is a bug)."""
    program = build_program(snap, ext.choice, graph)
    recomputed = graph_cost(program, cost_model)
    assert math.isclose(recomputed, ext.dag_cost, rel_tol=1e-9, abs_tol=1e-9), \
        f"the decoded program costs {recomputed!r}, the extractor said {ext.dag_cost!r}"
    optimized = onnx_export.export_model(program)
    onnx_io.check(optimized)
    return program, optimized


def verify_phase(original: onnx.ModelProto, optimized: onnx.ModelProto, config: OptimizeConfig) -> VerificationReport:
    """Check ``optimized`` against ``original`` on seeded random inputs; raise VerificationError on a mismatch."""
    check = verify(original, optimized, seed=config.seed, draws=config.verify_draws, input_shapes=config.input_shapes)
    if not check.passed:
        raise VerificationError(f"the optimized model does not match the original: {check.detail}; nothing was written")
    return VerificationReport.of(check, config.seed)


def measure_phase(original: onnx.ModelProto, optimized: onnx.ModelProto, config: OptimizeConfig) -> Measurement:
    """Time both programs end to end (eqsat.timing) and decide whether the optimized one ships."""
    protocol = Protocol(threads=config.measure_threads, budget_s=config.measure_budget, seed=config.seed)
    comparison = compare(original, optimized, protocol, input_shapes=config.input_shapes)
    return Measurement.of(comparison, decide(comparison, allow_slower=config.allow_slower))


def decide_phase(unchanged: bool, measured: Measurement | None, config: OptimizeConfig) -> Returned:
    """Which program to return: the original when the search found no other one (unless --allow-slower) or
    when it did not measure faster with confidence; else the optimized one."""
    if unchanged and not config.allow_slower:
        return Returned("original", "the search found no program other than the original; "
                                    "the input model is returned unchanged")
    if measured is None:
        return Returned("optimized", "not measured (measure=False): the optimized program is returned unmeasured")
    return Returned("optimized" if measured.decision == "ship" else "original", measured.reason)


# -- the pipeline --------------------------------------------------------------------------------------------

def optimize(model: onnx.ModelProto | Graph | str, config: OptimizeConfig | None = None,
             progress: Progress | None = None, *, extra_rules: Sequence[Rule] = ()) -> Result:
    """Optimize ``model`` (an ONNX model, a path, or an IR graph) and check the result against it.

    ``extra_rules`` join the configured rule set (tests inject rules this way). Raises InputError for an
    unusable config before any work, VerificationError when the optimized model does not match."""
    config = config or OptimizeConfig()
    config.validate()
    say = progress or (lambda _msg: None)
    timer = PhaseTimer()
    with timer("import"):
        original, graph = import_phase(model, config)
    say(f"imported: {sum(graph.op_counts().values())} operators")
    with timer("encode"):
        cost_model = make(config.cost)
        egraph, search_config = encode_phase(graph, config)
    initial = egraph.size().enodes
    with timer("search"):
        search = search_phase(egraph, config, search_config, cost_model, say, extra_rules)
    with timer("extract"):
        snap, ext = extract_phase(egraph, config, cost_model, timer.total("search"))
    say(f"extracted with {ext.extractor}: estimated {ext.dag_cost:.1f} us"
        + (" (SCIP found nothing cheaper in time: greedy-dag's program kept)" if ext.used_warm_start else ""))
    with timer("export"):
        program, optimized = export_phase(snap, ext, graph, cost_model)
    with timer("verify"):
        verification = verify_phase(original, optimized, config)
    say(f"verified: max abs error {verification.max_abs_error:.2e}")
    unchanged = same_program(graph, program)
    measured = None
    if config.measure and not (unchanged and not config.allow_slower):
        with timer("measure"):
            measured = measure_phase(original, optimized, config)
    returned = decide_phase(unchanged, measured, config)
    if returned.fallback:
        say(returned.fallback)
    size = egraph.snapshot()
    report = Report(
        config=replace(config, search=search_config), cost_model=cost_model.name, search=search,
        egraph=EGraphSize(len(size.nodes), size.num_classes, initial, search_config.limit),
        extraction=ExtractionReport.of(ext), verification=verification,
        candidates=[Candidate("original", graph_cost(graph, cost_model), dict(graph.op_counts())),
                    Candidate("extracted", ext.dag_cost, dict(program.op_counts()))],
        returned=returned, measured=measured, times=timer.seconds)
    if returned.program == "original":
        return Result(original, original, graph, report)  # the user's model, untouched
    return Result(original, optimized, program, report)


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


def report_bytes(report: Report) -> bytes:
    """The report as written to ``--report``: indented JSON (no NaN or Infinity), UTF-8."""
    return (report.dumps() + "\n").encode()


def write_report(path: str, report: Report) -> None:
    """Write the report's JSON to ``path`` atomically."""
    write_atomic(path, report_bytes(report))


__all__ = ["OptimizeConfig", "Result", "check_output_path", "decide_phase", "encode_phase", "export_phase",
           "extract_phase", "ilp_seconds", "import_phase", "measure_phase", "optimize", "report_bytes",
           "same_program", "search_phase", "verify_phase", "write_atomic", "write_report"]
