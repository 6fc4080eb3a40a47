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
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import onnx

from eqsat import extract as extractors
from eqsat import memory
from eqsat.blocks import DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, DEFAULT_MIN_WEIGHTS, Blocks, Rest, find_blocks
from eqsat.cost import CostModel, costs_by_op, graph_cost, make, node_costs
from eqsat.cost.measure import timing_until
from eqsat.decode import build_program
from eqsat.egglog.egraph import EGraph
from eqsat.errors import InputError, VerificationError, first_line
from eqsat.extract import Extraction
from eqsat.inputs import EDGES, NONFINITE_EDGES
from eqsat.ir import Graph, Node
from eqsat.mcts import DEFAULT_NODE_LIMIT, NODE_LIMIT_FACTOR, SearchConfig, SearchReport, run_scheduler
from eqsat.measurement import runtimes
from eqsat.measurement.decision import SPLIT_CANDIDATES, measure
from eqsat.measurement.decision import returned as decide
from eqsat.measurement.runtimes import Program
from eqsat.measurement.torch_run import check_runnable
from eqsat.onnx import export_model, import_model, load_model, pool
from eqsat.onnx import io as onnx_io
from eqsat.onnx.metadata import with_metadata
from eqsat.rules.rule import Rule
from eqsat.snapshot import Snapshot
from eqsat.verify import ShapesCheck, Verifier

from .api_guard import api_arguments
from .blockwise import blocks_entry, blocks_seconds, rest_share
from .config import OptimizeConfig, ilp_seconds, search_seconds
from .report import (
    Candidate,
    EGraphSize,
    ExtractionReport,
    PhaseTimer,
    Report,
    VerificationReport,
)
from .selection import Extracted, candidates_phase
from .shaping import Shaping

Progress = Callable[[str], None]



class Result:
    """What an optimization produced: the input and returned models, the returned program, the typed report.

    ``original`` and ``optimized`` are self-contained ModelProtos. Where the run kept them as references into its
    weight pool (a model read from a path; every candidate), each gets its data back on first access only, so that
    a caller that writes the result (:meth:`write`, the CLI) never holds a copy of the weights in protobuf: the
    writer reads them from the pool a tensor at a time."""

    def __init__(self, original: onnx.ModelProto, optimized: onnx.ModelProto, graph: Graph, report: Report,
                 weights: pool.WeightPool | None = None):
        self._original, self._optimized = original, optimized
        self.graph, self.report = graph, report
        self.weights = weights
        """the run's weight pool where the models may refer to it (its file removed: the mapped arrays stay)"""

    def _restored(self, model: onnx.ModelProto) -> onnx.ModelProto:
        if self.weights is not None and self.weights.refers(model):
            self.weights.restore(model)
        return model

    @property
    def original(self) -> onnx.ModelProto:
        """The input model, self-contained (its data restored from the run's pool on first access)."""
        return self._restored(self._original)

    @original.setter
    def original(self, model: onnx.ModelProto) -> None:
        self._original = model

    @property
    def optimized(self) -> onnx.ModelProto:
        """The returned model (the original where no candidate shipped), self-contained (restored on first access)."""
        return self._restored(self._optimized)

    @optimized.setter
    def optimized(self, model: onnx.ModelProto) -> None:
        self._optimized = model

    def writes_data_file(self, external: bool = False) -> bool:
        """Whether :meth:`write` (``external`` asked or not) writes the weights to a data file beside the model."""
        return onnx_io.writes_data_file(self._optimized, external, self.weights)

    def write(self, path: str, others: dict[str, bytes] | None = None, external: bool = False) -> None:
        """Write the returned model to ``path`` (with ``others``, all or none: :func:`eqsat.onnx.io.write_together`),
        its weights read from the run's pool a tensor at a time where it refers to them: the same bytes as
        writing :attr:`optimized`, without restoring it."""
        onnx_io.write_together(self._optimized, path, others or {}, external, self.weights)

    def __getstate__(self) -> dict[str, object]:
        """A pickle or deep copy takes the models with their data (restored), not the pool: its mapped arrays and
        onnxruntime values do not cross a process, and its file is gone once the run ends."""
        return {"original": self.original, "optimized": self.optimized, "graph": self.graph, "report": self.report}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["original"], state["optimized"], state["graph"], state["report"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Result(graph={self.graph.name!r}, returned={self.report.returned.program!r})"


UNFUSED = frozenset({"ewsum"})
"""element-wise operators that compute each element from the operands' elements at its place and that onnxruntime
fuses with no neighbour (``ewsum`` is ONNX Sum, written so that it is not fused): on operands of its own shape, one is
the same kernel on the same data whether its operands were reshaped first or its result after. (Add, Mul, Gelu are
not: whether a Reshape stands between one and its producer or consumer decides onnxruntime's fusions.)"""
ROWWISE = frozenset({"layernorm", "rmsnorm"})
"""operators that compute each row (the last axis) from the operand's row at its place and parameters along the
last axis: the same kernel whether the rows are gathered in [1, 128, 768] or in [128, 768], where their operand is
an :data:`UNFUSED` one's result (a norm after an Add is fused with it, a reshape between them prevents that)"""


def same_program(a: Graph, b: Graph) -> bool:
    """Whether ``b`` computes with exactly the operators of ``a``: the same DAG up to node identity
    (compared by structure, bottom-up), with as many operators and the same outputs, reshapes aside: a value is
    data in a shape, a reshape gives its input's data another shape (a chain of them is one reshape, one back to
    the data's own shape none), an :data:`UNFUSED` element-wise operator on operands of one shape computes the
    same data whatever shape they were reshaped to first (their data compared as vectors), and so does a
    :data:`ROWWISE` one on its operand's rows. So two programs that differ only there run the same kernels on the
    same data in onnxruntime (measuring both would time one program twice); where a reshape's place can decide a
    fusion (an Add after a MatMul, a norm after an Add), the programs stay distinct."""
    if a.output_names != b.output_names:
        return False
    ids: dict[tuple, int] = {}
    data: dict[int, tuple[int, tuple]] = {}  # node -> (id of its data in the data's own shape, that shape)
    memo: dict[int, int] = {}  # node -> id of its value (its data in its shape)
    producer: dict[int, Node] = {}  # node -> the node that computed its data (through reshapes)

    def intern(key: tuple) -> int:
        return ids.setdefault(key, len(ids))

    def in_shape(node: Node, data_id: int, own: tuple) -> int:
        shape = tuple(node.shape)
        return data_id if shape == own else intern(("reshape", shape, node.dtype, data_id))

    def flat_id(node: Node, flat: tuple) -> int:
        data_id, own = data[id(node)]
        return data_id if own == flat else intern(("reshape", flat, node.dtype, data_id))

    def canon(g: Graph) -> tuple[tuple[int, ...], int]:
        computed = 0
        for n in g.nodes():  # topological: children first
            shape = tuple(n.shape)
            producer[id(n)] = producer[id(n.inputs[0])] if n.op == "reshape" else n
            if n.op == "reshape":
                data[id(n)] = data[id(n.inputs[0])]
            elif n.op in UNFUSED and n.inputs and all(tuple(i.shape) == shape for i in n.inputs) \
                    and all(isinstance(d, int) for d in shape):
                computed += 1  # on its operands' data as vectors: wherever their reshapes stood
                flat = (math.prod(shape),)
                operands = tuple(flat_id(i, flat) for i in n.inputs)
                data[id(n)] = (intern((n.op, n.attrs, flat, n.dtype, operands)), flat)
            elif n.op in ROWWISE and len(shape) > 1 and all(isinstance(d, int) for d in shape) \
                    and tuple(n.inputs[0].shape) == shape and producer[id(n.inputs[0])].op in UNFUSED \
                    and all(tuple(i.shape) == shape[-1:] for i in n.inputs[1:]):
                computed += 1  # on its operands' data as rows: wherever their reshapes stood
                rows = (math.prod(shape) // max(shape[-1], 1), shape[-1])
                operands = (flat_id(n.inputs[0], rows), *(memo[id(i)] for i in n.inputs[1:]))
                data[id(n)] = (intern((n.op, n.attrs, rows, n.dtype, operands)), rows)
            else:
                if n.op not in ("input", "weight"):
                    computed += 1
                base = (n.op, n.attrs, shape, n.dtype)
                key = (*base, n.name) if n.op in ("input", "weight") else (*base, tuple(memo[id(c)] for c in n.inputs))
                data[id(n)] = (intern(key), shape)
            memo[id(n)] = in_shape(n, *data[id(n)])
        return tuple(memo[id(o)] for o in g.outputs), computed

    return canon(a) == canon(b)


def same_operators(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Whether ONNX models ``a`` and ``b`` run the same operators, as many of each (Constant and Identity
    nodes aside: the runtime drops them). A program equal to the imported graph is no other program, but its
    model can still differ from the original where the import simplified it (constants folded, ``x + 0``
    dropped): then it is measured like any candidate."""
    def counts(m: onnx.ModelProto) -> Counter[tuple[str, str]]:
        return Counter((n.domain, n.op_type) for n in m.graph.node if n.op_type not in ("Constant", "Identity"))
    return counts(a) == counts(b)


# -- the phases ----------------------------------------------------------------------------------------------

def import_phase(model: onnx.ModelProto | Graph | str, config: OptimizeConfig) -> tuple[onnx.ModelProto, Graph]:
    """(the original ONNX model, its IR graph) from a model, a path or a graph; the graph at the shapes
    ``config.input_shapes`` and ``config.static_shapes`` give (a dynamic dimension neither fixes: its
    representative size, :mod:`eqsat.app.shaping`)."""
    original, graph, _ = shaped_import_phase(model, config)
    return original, graph


def shaped_import_phase(model: onnx.ModelProto | Graph | str,
                        config: OptimizeConfig) -> tuple[onnx.ModelProto, Graph, Shaping]:
    """:func:`import_phase` with the run's :class:`~eqsat.app.shaping.Shaping` of the original's dynamic
    dimensions."""
    if isinstance(model, Graph):
        return export_model(model), model, Shaping.of(None, config)
    original = model if isinstance(model, onnx.ModelProto) else load_model(model)
    shaping = Shaping.of(original, config)
    shaping.probe(config)  # the sizes given: before the import and the search, not after them at the verification
    try:
        return original, import_model(original, shaping.shapes, generic=shaping.generic,
                                      source=model if isinstance(model, str) else None), shaping
    except InputError as exc:
        raise shaping.explain(exc) from exc


def encode_phase(graph: Graph, config: OptimizeConfig, copies: int = 1,
                 known: Mapping[str, tuple[float, float]] | None = None) -> tuple[EGraph, SearchConfig]:
    """The e-graph of ``graph`` and the search config with its node limit resolved against it. ``graph``
    standing for ``copies`` repeated blocks (by default; not with ``--no-blocks``), the default limit's floor is
    shared among them: max(2000 / copies, 4 x the initial e-nodes), so that one copy grows as far as it would in
    the whole model. ``known``: the value intervals of inputs that stand for values computed elsewhere (a
    repeated block's external inputs, :meth:`~eqsat.blocks.Blocks.external_ranges`)."""
    egraph = EGraph.from_graph(graph, finite_masks=config.assume_finite_masks, known=known)
    initial = egraph.size().enodes
    limit = config.search.node_limit
    if limit is not None and limit < initial:
        raise InputError(f"--node-limit {limit} is below the initial e-graph's {initial} e-nodes; "
                         f"give at least {initial}, or leave it out for {NODE_LIMIT_FACTOR} x that")
    search = config.search
    if limit is None and copies > 1:
        search = replace(search, node_limit=max(math.ceil(DEFAULT_NODE_LIMIT / copies), NODE_LIMIT_FACTOR * initial))
    return egraph, replace(search.resolved(initial), time_limit=search_seconds(config))


def search_phase(egraph: EGraph, config: OptimizeConfig, search: SearchConfig, cost_model: CostModel,
                 say: Progress, extra_rules: Sequence[Rule] = ()) -> SearchReport:
    """Grow ``egraph`` with the configured scheduler (``extra_rules`` join the rule set); with measured
    selection, the report keeps the programs of the cheapest states along the path as candidates."""
    keep = config.candidates - 1 if config.measure and config.candidates > 1 else 0
    with timing_until(cost_model, time.perf_counter() + search.time_limit):  # no operator timed past it
        return run_scheduler(config.scheduler, egraph, search, cost_model, say, extra_rules, keep_states=keep)


def rest_phase(rest: Rest, config: OptimizeConfig, copies: int, cost_model: CostModel, say: Progress,
               extra_rules: Sequence[Rule] = ()) -> tuple[Graph, dict[str, object]]:
    """The operators outside the repeated blocks (:attr:`Blocks.rest`: the embeddings, a mask computed once,
    the head) searched and extracted as a program of their own, under ``config``'s time limit (the caller gives
    it its share) and the node limit's floor shared as a copy's is (:func:`encode_phase`): its final
    extractor's program, and what the report says of it."""
    start = time.perf_counter()
    config = replace(config, candidates=1)
    egraph, search_config = encode_phase(rest.program, config, copies)
    initial = egraph.size().enodes
    search = search_phase(egraph, config, search_config, cost_model, say, extra_rules)
    snap, ext = extract_phase(egraph, config, cost_model, time.perf_counter() - start)
    program = build_program(snap, ext.choice, rest.program)
    before, after = graph_cost(rest.program, cost_model), graph_cost(program, cost_model)
    assert math.isclose(after, ext.dag_cost, rel_tol=1e-9, abs_tol=1e-9), \
        f"the decoded rest costs {after!r}, the extractor said {ext.dag_cost!r}"
    if after >= before:  # nothing cheaper outside the blocks: keep it as imported (its ONNX nodes written back)
        program = rest.program
    return program, {"operators": rest.operators, "initial_enodes": initial, "enodes": egraph.size().enodes,
                     "node_limit": search_config.limit, "steps": len(search.steps),
                     "estimated_us": [round(before, 3), round(min(before, after), 3)],
                     "seconds": round(time.perf_counter() - start, 3)}


def extract_phase(egraph: EGraph, config: OptimizeConfig, cost_model: CostModel,
                  elapsed: float) -> tuple[Snapshot, Extraction]:
    """The final extractor's program of the grown e-graph. What it takes (the registry's capabilities) it gets: a
    time limit of what ``--time-limit`` left after ``elapsed`` seconds, and greedy-dag's program as its warm start
    (it then never returns a dearer one)."""
    snap = egraph.snapshot().restrict()
    with timing_until(cost_model, time.perf_counter() + max(0.0, config.search.time_limit - elapsed)):
        costs = node_costs(snap, cost_model)
    final = extractors.info(config.final_extractor)
    warm = extractors.extract(extractors.WARM_START, snap, costs) if final.takes_warm_start else None
    return snap, final.fn(snap, costs, final.options(time_limit=ilp_seconds(config, elapsed), warm_start=warm))


def export_phase(snap: Snapshot, ext: Extraction, graph: Graph, cost_model: CostModel,
                 shaping: Shaping | None = None, blocks: Blocks | None = None,
                 rest: Graph | None = None) -> tuple[Graph, onnx.ModelProto]:
    """The extracted program as IR and as a checked ONNX model (written shape-generic with the original's
    interface where ``shaping`` says so). Its recomputed cost must equal the extractor's DAG cost (one costing,
    two paths: a disagreement is a bug). Where a weight pool is current, the model refers to its weights
    (:meth:`eqsat.onnx.pool.WeightPool.slim`). With ``blocks`` (``graph`` is then their representative), the program
    is replayed on every copy (:meth:`Blocks.replay`) first, with ``rest`` (:func:`rest_phase`) outside them."""
    program = build_program(snap, ext.choice, graph)
    recomputed = graph_cost(program, cost_model)
    assert math.isclose(recomputed, ext.dag_cost, rel_tol=1e-9, abs_tol=1e-9), \
        f"the decoded program costs {recomputed!r}, the extractor said {ext.dag_cost!r}"
    if blocks is not None:
        program = blocks.replay(program, rest)
    optimized = export_model(program)
    if shaping is not None:
        optimized = shaping.write(optimized)
    if (weights := pool.current()) is not None:
        optimized = weights.slim(optimized)  # its weights are the pool's from here on: no copy kept per candidate
    onnx_io.check(optimized)
    return program, optimized


def verify_phase(original: onnx.ModelProto, optimized: onnx.ModelProto, config: OptimizeConfig,
                 verifier: Verifier | None = None) -> VerificationReport:
    """Check ``optimized`` against ``original`` on seeded random inputs; raise VerificationError on a mismatch.
    ``verifier``: the run's (:class:`~eqsat.verify.Verifier` of ``original``: its outputs computed once)."""
    verifier = verifier or verifier_of(original, config)
    check = verifier.check(optimized)
    if not check.passed:
        raise VerificationError(f"the optimized model does not match the original: {check.detail}; nothing was written")
    return VerificationReport.of(check, config.seed)


def verifier_of(original: onnx.ModelProto, config: OptimizeConfig) -> Verifier:
    """The verification of candidates against ``original`` at the run's seed, draws and input shapes, and its edge
    draws (no -inf or NaN ones under ``--assume-finite-masks``: the user vouched that no input makes a mask so)."""
    edges = [e for e in EDGES if not (config.assume_finite_masks and e in NONFINITE_EDGES)]
    return Verifier(original, seed=config.seed, draws=config.verify_draws, input_shapes=config.input_shapes,
                    edges=edges)


@dataclass
class Built:
    """A candidate exported and checked: its program, ONNX model, report entry and whether it may be measured."""

    program: Graph
    model: onnx.ModelProto
    entry: Candidate
    same_as_original: bool
    shapes: ShapesCheck | None = None
    """the check at the further shapes of a shape-generic run"""
    notes: list[str] = field(default_factory=list)
    """what its shape-generic write could not make generic (:attr:`Shaping.last_notes`)"""


def build_candidates(snap: Snapshot, extracted: Sequence[Extracted], graph: Graph, original: onnx.ModelProto,
                     config: OptimizeConfig, cost_model: CostModel,
                     first: tuple[Graph, onnx.ModelProto] | None = None,
                     shaping: Shaping | None = None, blocks: Blocks | None = None,
                     rest: Graph | None = None, verifier: Verifier | None = None,
                     say: Callable[[str], None] = lambda _msg: None) -> list[Built]:
    """Export and verify the extracted candidates, keeping the first and then each program not seen before
    (:func:`same_program`), up to ``--candidates``. ``first``: the first candidate already exported and verified
    (:func:`export_phase`, :func:`verify_phase`); another that fails verification is kept in the report,
    unmeasured, with the failure. With a shape-generic ``shaping``, each candidate is also checked at the
    further shapes (:func:`shapes_phase`): one that fails there is not measured either. With ``blocks``, the
    candidates are programs of their representative, replayed on every copy (with ``rest`` outside them).
    ``verifier``: the run's (:func:`verify_phase`). A further candidate whose export fails (a bug: the first's
    does not) is left out with a line to ``say``, so that one program's writer cannot stop the run."""
    template = blocks.representative if blocks is not None else graph
    verifier = verifier or verifier_of(original, config)
    built: list[Built] = []
    for k, c in enumerate(extracted):
        if len(built) >= config.candidates:
            break
        if k == 0 and first is not None:
            program, model = first
        else:
            try:
                program, model = export_phase(c.snapshot or snap, c.extraction, template, c.cost_model, shaping,
                                              blocks, rest)
            except Exception as e:  # noqa: BLE001 - a further candidate only: the run goes on without it
                if k == 0 or isinstance(e, MemoryError):
                    raise
                say(f"candidate {c.name} left out: its export failed ({type(e).__name__}: {first_line(e, 200)}); "
                    "this is a bug, please report it")
                continue
        if built and (same_program(graph, program) or any(same_program(b.program, program) for b in built)):
            continue
        entry = Candidate(c.name, graph_cost(program, cost_model), dict(program.op_counts()), c.source,
                          costs=costs_by_op(program, cost_model))
        if built or first is None:
            check = verifier.check(model)
            entry.verified, entry.max_abs_error = check.passed, check.max_abs_error
            entry.note = "" if check.passed else f"not measured: {check.detail}"
            if (weights := pool.current()) is not None:  # the pages its check read: the next reads its own
                weights.drop_pages()
            memory.release()  # its export's and session's transients: not kept while the next is exported
        b = Built(program, model, entry, same_program(graph, program) and same_operators(original, model))
        if shaping is not None and not (k == 0 and first is not None):
            b.notes = list(shaping.last_notes)
        if shaping is not None and (entry.verified or (k == 0 and first is not None)):
            shapes_phase(b, shaping, config)
        built.append(b)
    return built


def shapes_phase(b: Built, shaping: Shaping, config: OptimizeConfig) -> ShapesCheck:
    """Check a candidate at the further shapes of a shape-generic run (the interface at each); one that fails is
    marked unverified, with the failure (it is not written)."""
    check = shaping.check(b.model, config.seed)
    b.shapes = check
    if not check.passed:
        b.entry.verified = False
        b.entry.note = f"not measured: not shape-generic: {check.detail}"
    return check


# -- the pipeline --------------------------------------------------------------------------------------------

def optimize(model: onnx.ModelProto | Graph | str | bytes, config: OptimizeConfig | None = None,
             progress: Progress | None = None, *, extra_rules: Sequence[Rule] = ()) -> Result:
    """Optimize ``model`` (an ONNX model, a path, a serialized model's bytes, or an IR graph) and check the result
    against it.

    ``extra_rules`` join the configured rule set (tests inject rules this way). Raises InputError for an
    unusable config before any work, VerificationError when the optimized model does not match. Every
    onnxruntime session of the run reads the weights from one pool (:mod:`eqsat.onnx.pool`)."""
    model, config = api_arguments(model, config)  # InputErrors for arguments of the wrong kind; validated
    with pool.pooled():
        return _optimize(model, config, progress or (lambda _msg: None), extra_rules)


def _optimize(model: onnx.ModelProto | Graph | str, config: OptimizeConfig, say: Progress,
              extra_rules: Sequence[Rule]) -> Result:
    timer = PhaseTimer()
    with timer("import"):
        original, graph, shaping = shaped_import_phase(model, config)
    config = replace(config, input_shapes={**shaping.shapes, **config.input_shapes})  # verified, measured there
    weights = pool.current()
    owned = not isinstance(model, onnx.ModelProto)  # read here: no one else holds it
    if owned and weights is not None:  # its weights are the pool's from here on (the IR's are its mapped arrays); its data back where asked (Result)
        weights.drop_pages()  # the import read them: not kept while slim compares the model's bytes with them
        original = weights.slim(original)
        if shaping.original is not None:
            shaping.original = original
    say(f"imported: {sum(graph.op_counts().values())} operators")
    if shaping.values:
        sizes = ", ".join(f"{k}={v}" for k, v in shaping.values.items())
        say(f"dynamic dimensions at {sizes}: " + ("the written model is specialized to them (--static-shape)"
                                                  if shaping.static else "tuned there; the written model keeps them"))
    blocks, searched, rest, rest_entry = None, graph, None, None
    whole_limit = config.search.time_limit  # --time-limit, for the whole model: what the search leaves, the gate may use
    if config.blocks:
        with timer("blocks"):
            blocks = find_blocks(graph, DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, DEFAULT_MIN_WEIGHTS)
            searched = blocks.representative if blocks is not None else graph
        say(f"repeated blocks: {blocks.copies} copies of {blocks.nodes_per_block} operators, one searched; "
            f"the {blocks.rest.operators} operators outside them searched on their own" if blocks is not None
            else "repeated blocks: none found; the whole model is searched")
        if blocks is not None:  # the time limit meant for the whole model, in proportion to what is searched
            config = config.updated(time_limit=blocks_seconds(blocks, config.search.time_limit))
    runtime_name = runtimes.resolve(config.runtime)
    if config.measure and runtime_name in runtimes.TORCH_RUNTIMES:
        check_runnable(graph, runtime_name)  # before the search: an opaque operator cannot run there
    with timer("encode"):
        # --cost auto: the operators timed in the end-to-end runtime (eqsat.cost.resolve_auto)
        cost_model = make(config.cost, runtime=runtime_name, threads=config.measure_threads)
        egraph, search_config = encode_phase(searched, config, blocks.copies if blocks is not None else 1,
                                             blocks.external_ranges() if blocks is not None else None)
    initial = egraph.size().enodes
    if blocks is not None and blocks.rest.operators:
        share = rest_share(blocks)
        with timer("rest"):
            rest, rest_entry = rest_phase(blocks.rest, config.updated(time_limit=share * config.search.time_limit),
                                          blocks.copies, cost_model, lambda m: say(f"outside the blocks: {m}"),
                                          extra_rules)
        search_config = replace(search_config, time_limit=(1 - share) * search_config.time_limit)
    with timer("search"):
        search = search_phase(egraph, config, search_config, cost_model, say, extra_rules)
    with timer("extract"):
        # --time-limit bounds the rest's search, this search and the extraction together
        snap, ext = extract_phase(egraph, config, cost_model, timer.total("rest", "search"))
        extracted = candidates_phase(snap, ext, config, cost_model, timer.total("rest", "search", "extract"),
                                     search.states)
    estimated = getattr(cost_model, "estimated", 0)
    if estimated:
        say(f"{estimated} operators estimated, not timed: --time-limit passed before their turn (the costs "
            f"timed so far scale their estimates; a longer limit times them, once, into the cache)")
    say(f"extracted with {ext.extractor}: estimated {ext.dag_cost:.1f} us"
        + (" (SCIP found nothing cheaper in time: greedy-dag's program kept)" if ext.used_warm_start else ""))
    with timer("export"):
        program, optimized = export_phase(snap, ext, searched, cost_model, shaping, blocks, rest)
        first_notes = list(shaping.last_notes) if shaping is not None else []
    with timer("verify"):
        verifier = verifier_of(original, config)
        verification = verify_phase(original, optimized, config, verifier)
        built = build_candidates(snap, extracted, graph, original, config, cost_model, (program, optimized), shaping,
                                 blocks, rest, verifier, say)
        feeds = verifier.first_inputs()  # the measurement's inputs, drawn already
        verifier.close()
    say(f"verified: max abs error {verification.max_abs_error:.2e}"
        + (f"; {len(built)} distinct candidates" if len(built) > 1 else ""))
    first = built[0]
    first.notes = first_notes
    first.entry.max_abs_error = verification.max_abs_error
    first.entry.verified = verification.verified and (first.shapes is None or first.shapes.passed)
    timed = [b for b in built if b.entry.verified and not b.same_as_original]
    if not timed and config.allow_slower and first.entry.verified:
        timed = [first]
    unchanged = not timed
    failed = [b.shapes.detail for b in built if b.shapes is not None and not b.shapes.passed]
    measured = None
    if config.measure and timed:
        with timer("measure"):
            measured, comparisons = measure(original, [Program(b.model, b.program) for b in timed], config,
                                                  graph=graph, names=[b.entry.name for b in timed], feeds=feeds,
                                                  spare_s=whole_limit - timer.total("rest", "search", "extract"),
                                                  say=say)
        _record(timed, comparisons)
        for b in timed[len(comparisons.comparisons):]:
            b.entry.note = (f"not measured: the memory budget times the original and few candidates at a time, and "
                            f"only the first {SPLIT_CANDIDATES} are (--memory-budget MiB to time more together)")
    returned = decide(unchanged, measured, config, failed[0] if failed and not timed else "")
    if returned.fallback:
        say(returned.fallback)
    shipped = next((b for b in built if b.entry.name == returned.candidate), first)
    shipped.entry.shipped = returned.program == "optimized"
    size = egraph.snapshot()
    report = Report(
        config=replace(config, search=search_config), cost_model=cost_model.name, search=search,
        egraph=EGraphSize(len(size.nodes), size.num_classes, initial, search_config.limit),
        extraction=ExtractionReport.of(ext), verification=verification,
        candidates=[Candidate("original", graph_cost(graph, cost_model), dict(graph.op_counts()), "original",
                              costs=costs_by_op(graph, cost_model),
                              shipped=returned.program == "original",
                              measured_ms=measured.original_ms if measured else None),
                    *(b.entry for b in built)],
        returned=returned, measured=measured, times=timer.seconds,
        interface=shaping.report(*((shipped.model, shipped.shapes, shipped.notes) if returned.program == "optimized"
                                   else (None, None))),
        memory_mb=timer.memory_mb, blocks=blocks_entry(config, blocks, rest_entry), costs_estimated=estimated)
    memory.release()  # the measurement's sessions are gone: their freed memory is not kept for the models returned
    if weights is not None:
        weights.drop_pages()
    # the models returned refer to the pool where they were slimmed (the original where read here, every candidate):
    # their data back only when asked (Result.original, Result.optimized), written from the pool otherwise
    if returned.program == "original":
        return Result(original, original, graph, report, weights)  # the user's model, untouched where given
    return Result(original, with_metadata(shipped.model, original), shipped.program, report, weights)


def _record(timed: Sequence[Built], all_: runtimes.Measured) -> None:
    """Each measured candidate's latency, speedup and interval (and the runtime's side timings) in its entry."""
    for k, (b, cmp) in enumerate(zip(timed, all_.comparisons)):
        e = b.entry
        e.measured_ms, e.speedup, e.ci_low, e.ci_high = cmp.optimized_ms, cmp.speedup, cmp.ci_low, cmp.ci_high
        e.beside = {key: values[k + 1] for key, values in all_.beside.items()}


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
    companions = [(path, target)] + ([(path + ".data", target + ".data")] if flag == "-o" else [])
    for given, real in companions:
        kind = onnx_io.not_regular(real)
        if kind is not None:
            raise InputError(f"{flag} {given} exists and is {kind}, not a regular file; eqsat never replaces it: "
                             f"choose a file name such as {example}")
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


def report_bytes(report: Report) -> bytes:
    """The report as written to ``--report``: indented JSON (no NaN or Infinity), UTF-8."""
    return (report.dumps() + "\n").encode()


__all__ = ["Built", "OptimizeConfig", "Result", "build_candidates", "candidates_phase", "check_output_path",
           "encode_phase", "export_phase", "rest_phase",
           "extract_phase", "ilp_seconds", "import_phase", "optimize", "report_bytes",
           "ROWWISE", "UNFUSED", "same_program", "search_phase", "shapes_phase", "shaped_import_phase", "verifier_of", "verify_phase"]
