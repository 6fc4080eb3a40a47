"""The optimize-model pipeline, one function per phase: import -> encode -> search -> extract -> export ->
verify -> measure -> decide (the candidates' export and checks: :mod:`.candidates`; their order and the decision:
:mod:`eqsat.measurement.decision`). :func:`optimize` runs them as a :class:`Run`'s four steps (imported -> searched
-> checked -> result), under one :class:`PhaseTimer`, and returns the typed :class:`Report` in its :class:`Result`.

>>> from eqsat.app.pipeline import OptimizeConfig
>>> OptimizeConfig().final_extractor
'ilp'
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from eqsat import extract as extractors
from eqsat import memory
from eqsat.blocks import DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, DEFAULT_MIN_WEIGHTS, Blocks, Rest, find_blocks
from eqsat.cost import CostModel, costs_by_op, graph_cost, make, node_costs
from eqsat.cost.measure import timing_until
from eqsat.decode import build_program
from eqsat.egglog.egraph import EGraph
from eqsat.errors import InputError, first_line
from eqsat.extract import Extraction
from eqsat.generic import import_generic
from eqsat.ir import Graph
from eqsat.mcts import DEFAULT_NODE_LIMIT, NODE_LIMIT_FACTOR, SearchConfig, SearchReport, run_scheduler
from eqsat.measurement import experts, moe, runtimes
from eqsat.measurement.decision import SPLIT_CANDIDATES, Measurement, Returned, measure
from eqsat.measurement.decision import returned as decide
from eqsat.measurement.decision import timed as to_time
from eqsat.measurement.runtimes import Program
from eqsat.measurement.torch_run import check_runnable
from eqsat.onnx import export_model, footprint, load_model
from eqsat.onnx.experts import as_gathers
from eqsat.onnx.metadata import with_metadata
from eqsat.rules.rule import Rule
from eqsat.snapshot import Snapshot
from eqsat.verification.feeds import served

from .api_guard import api_arguments
from .blockwise import blocks_entry, blocks_seconds, rest_share
from .branch_programs import optimized_branches
from .candidates import build_candidates, export_phase, verifier_of, verify_phase, written_input
from .config import OptimizeConfig, after_import, ilp_seconds, search_seconds
from .floored import floored_phase
from .report import (
    Candidate,
    EGraphSize,
    ExtractionReport,
    PhaseTimer,
    Report,
    VerificationReport,
)
from .result import Result
from .scope import RunScope
from .selection import (
    Built,
    Extracted,
    candidates_phase,
    with_imported,
)
from .shaping import Shaping

Progress = Callable[[str], None]

SAID_BEFORE_IMPORT = 500
"""ONNX nodes from which a line is printed as a generic import's rewrite begins, once the checks that refuse a model
before any work have passed: a model that large is run at further sizes for a minute or more while it is imported
(PE-Audio printed nothing for 67 s, ZoeDepth for 50 s); a small one's import takes seconds and says what it found
as it ends"""


# -- the phases ----------------------------------------------------------------------------------------------

def shaped_import_phase(model: onnx.ModelProto | Graph | str,
                        config: OptimizeConfig) -> tuple[onnx.ModelProto, Graph, Shaping]:
    """(the original ONNX model, its IR graph, the run's :class:`~eqsat.app.shaping.Shaping` of the original's
    dynamic dimensions) from a model, a path or a graph; the graph at the shapes ``config.input_shapes`` and
    ``config.static_shapes`` give (a dynamic dimension neither fixes: its representative size,
    :mod:`eqsat.app.shaping`)."""
    original, graph, shaping, _ = rewritten_import_phase(model, config)
    return original, graph, shaping


def rewritten_import_phase(model: onnx.ModelProto | Graph | str, config: OptimizeConfig,
                           say: Progress | None = None, branches: bool = False
                           ) -> tuple[onnx.ModelProto, Graph, Shaping, list[str]]:
    """:func:`shaped_import_phase`'s, and what the import wrote in another form first (where onnxruntime on the CPU
    runs the program: routed expert products written dense where timed faster, :mod:`eqsat.measurement.experts`;
    with ``branches`` (a run's import), If branches optimized as models of their own,
    :mod:`eqsat.app.branch_programs`, their runs' progress to ``say``; the IR imported from that form, ``original``
    the user's model)."""
    if isinstance(model, Graph):
        return export_model(model), model, Shaping.of(None, config), []
    original = model if isinstance(model, onnx.ModelProto) else load_model(model)
    shaping = Shaping.of(original, config)
    footprint.watch(original, shaping.shapes)  # the runs at further sizes from here on: those that would not fit left out
    shaping.probe(config)  # the sizes given: before the import and the search, not after them at the verification
    source, notes = original, list[str]()
    if runtimes.resolve(config.runtime) == "ort-cpu" and not config.cost.startswith("analytic"):
        routed = source = as_gathers(original, shaping.shapes)  # dynamo's GatherND of a stack: a Gather
        if not config.search.portable:  # onnxruntime's MoE kernel is no standard operator
            source, notes = moe.kernel_where_faster(routed, shaping.shapes, config.measure_threads, config.seed)
        source, more = experts.dense_where_faster(source, shaping.shapes, config.measure_threads, config.seed)
        notes += more
        source = original if source is routed else source  # the Gathers alone: the user's model as it was

    def begins(prepared: onnx.ModelProto) -> None:
        if say is not None and len(prepared.graph.node) >= SAID_BEFORE_IMPORT:
            say(f"importing {len(prepared.graph.node)} ONNX nodes (the shape computations read at further sizes)")

    def imported(form: onnx.ModelProto) -> Graph:
        try:
            return import_generic(form, shaping.shapes, generic=shaping.generic,
                                source=model if isinstance(model, str) else None, begins=begins)
        except InputError as exc:
            raise shaping.explain(exc) from exc

    graph = imported(source)  # first: a model the import refuses is refused before its branches are searched
    if branches:
        branched, more = optimized_branches(source, config, optimize, say or (lambda _msg: None))
        notes += more
        try:  # the model of the branches' programs, imported; where it does not import, left out
            if branched is not source:
                source, graph, shaping.branch_programs = branched, imported(branched), True
        except InputError as exc:
            notes.append(f"the If branches' programs left out: their model does not import ({first_line(exc)})")
    shaping.written_from = source if source is not original else None
    return original, graph, shaping, notes


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


# -- the pipeline --------------------------------------------------------------------------------------------

def optimize(model: onnx.ModelProto | Graph | str | bytes, config: OptimizeConfig | None = None,
             progress: Progress | None = None, *, extra_rules: Sequence[Rule] = ()) -> Result:
    """Optimize ``model`` (an ONNX model, a path, a serialized model's bytes, or an IR graph) and check the result
    against it.

    ``extra_rules`` join the configured rule set (tests inject rules this way). Raises InputError for an
    unusable config before any work, VerificationError when the optimized model does not match. The run's own
    state (its weight pool, symbol table, runs' memory limit and what the import's rewrite learnt of the model) is
    one :class:`~eqsat.app.scope.RunScope`, current while it runs."""
    model, config = api_arguments(model, config)  # InputErrors for arguments of the wrong kind; validated
    with RunScope.entered(own_symbols=not isinstance(model, Graph)) as scope:
        return _optimize(model, config, progress or (lambda _msg: None), extra_rules, scope)


@dataclass
class Imported:
    """The run's input as the search sees it: the original model (its weights the pool's where read here), its IR,
    the shaping of its dynamic dimensions, the repeated blocks found and the graph searched (one copy, or all)."""

    original: onnx.ModelProto
    graph: Graph
    shaping: Shaping
    blocks: Blocks | None
    searched: Graph
    rewritten: list[str] = field(default_factory=list)
    """what the import wrote in another form first (:func:`rewritten_import_phase`)"""


@dataclass
class Searched:
    """What the search and the extraction gave: the grown e-graph, its snapshot, the first extraction and the
    candidates extracted (in :func:`candidates_phase`'s order), the program of the operators outside the blocks."""

    cost_model: CostModel
    egraph: EGraph
    search_config: SearchConfig
    initial: int
    search: SearchReport
    snap: Snapshot
    ext: Extraction
    extracted: list[Extracted]
    rest: Graph | None
    rest_entry: dict[str, object] | None


@dataclass
class Checked:
    """The candidates exported and verified (the first one's verification reported), and the inputs drawn for the
    measurement."""

    verification: VerificationReport
    built: list[Built]
    feeds: dict[str, np.ndarray] | None
    left_out: str = ""
    """why the first candidate was left out (it failed an edge draw only: :func:`verify_phase`); "" where it passed"""


class Run:
    """One optimization: its configuration (updated by the import: the sizes tuned at, the share of the time
    limit a run with repeated blocks keeps), its progress, its phase timer and the run's weight pool (its
    :class:`~eqsat.app.scope.RunScope`'s), whose memory
    it gives back when the run ends (:meth:`released`). :func:`optimize` calls its steps in order:
    :meth:`imported` -> :meth:`searched` -> :meth:`checked` -> :meth:`result`."""

    def __init__(self, config: OptimizeConfig, say: Progress, scope: RunScope, extra_rules: Sequence[Rule] = ()):
        self.config, self.say, self.extra_rules, self.timer = config, say, extra_rules, PhaseTimer()
        self.weights = scope.weights
        self.whole_limit = config.search.time_limit
        """--time-limit, for the whole model, less the import (:func:`after_import`): what the search leaves, the
        gate may use"""

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """The run's memory given back at its end: the heap the measurement's sessions freed, and the weight
        pool's pages (the models returned refer to the pool where they were slimmed; their data back only when
        asked, :class:`Result`)."""
        yield
        memory.release()
        if self.weights is not None:
            self.weights.drop_pages()

    def imported(self, model: onnx.ModelProto | Graph | str) -> Imported:
        """Import (the weights of a model read here the pool's from then on) and the repeated blocks."""
        say, timer = self.say, self.timer
        with timer("import"):
            original, graph, shaping, rewritten = rewritten_import_phase(model, self.config, say, branches=True)
        self.whole_limit = after_import(self.config.search.time_limit, timer.total("import"))
        self.config = replace(self.config.updated(time_limit=self.whole_limit),
                              input_shapes={**shaping.shapes, **self.config.input_shapes})
        if not isinstance(model, onnx.ModelProto) and self.weights is not None:  # read here: no one else holds it
            self.weights.drop_pages()  # the import read them: not kept while slim compares the model's bytes with them
            original = self.weights.slim(original)
            if shaping.original is not None:
                shaping.original = original
            if shaping.written_from is not None:
                shaping.written_from = self.weights.slim(shaping.written_from)
        for line in rewritten:
            say(f"import: {line}")
        say(f"imported: {sum(graph.op_counts().values())} operators")
        if shaping.values:
            sizes = ", ".join(f"{k}={v}" for k, v in shaping.values.items())
            say(f"dynamic dimensions at {sizes}: " + ("the written model is specialized to them (--static-shape)"
                                                      if shaping.static else "tuned there; the written model keeps them"))
        for line in filter(None, (shaping.resized_text(), shaping.ties_text())):
            say(line)
        blocks = None
        if self.config.blocks:
            with timer("blocks"):
                blocks = find_blocks(graph, DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, DEFAULT_MIN_WEIGHTS)
            say(f"repeated blocks: {blocks.copies} copies of {blocks.nodes_per_block} operators, one searched; "
                f"the {blocks.rest.operators} operators outside them searched on their own" if blocks is not None
                else "repeated blocks: none found; the whole model is searched")
            if blocks is not None:  # the time limit meant for the whole model, in proportion to what is searched
                self.config = self.config.updated(time_limit=blocks_seconds(blocks, self.config.search.time_limit))
        runtime_name = runtimes.resolve(self.config.runtime)
        if self.config.measure and runtime_name in runtimes.TORCH_RUNTIMES:
            check_runnable(graph, runtime_name)  # before the search: an opaque operator cannot run there
        return Imported(original, graph, shaping, blocks, blocks.representative if blocks is not None else graph,
                        rewritten)

    def searched(self, imp: Imported) -> Searched:
        """Encode, search (the operators outside the blocks first, with their share of the time), extract the
        candidates; ``--time-limit`` less the import (:meth:`imported`) bounds the rest's search, this search and the
        extraction together."""
        config, say, timer, blocks = self.config, self.say, self.timer, imp.blocks
        with timer("encode"):
            # --cost auto: the operators timed in the end-to-end runtime (eqsat.cost.resolve_auto)
            cost_model = make(config.cost, runtime=runtimes.resolve(config.runtime), threads=config.measure_threads)
            egraph, search_config = encode_phase(imp.searched, config, blocks.copies if blocks is not None else 1,
                                                 blocks.external_ranges() if blocks is not None else None)
        initial = egraph.size().enodes
        rest, rest_entry = None, None
        if blocks is not None and blocks.rest.operators:
            share = rest_share(blocks)
            with timer("rest"):
                rest, rest_entry = rest_phase(blocks.rest, config.updated(time_limit=share * config.search.time_limit),
                                              blocks.copies, cost_model, lambda m: say(f"outside the blocks: {m}"),
                                              self.extra_rules)
            search_config = replace(search_config, time_limit=(1 - share) * search_config.time_limit)
        with timer("search"):
            search = search_phase(egraph, config, search_config, cost_model, say, self.extra_rules)
        with timer("extract"):
            snap, ext = extract_phase(egraph, config, cost_model, timer.total("rest", "search"))
            extracted = candidates_phase(snap, ext, config, cost_model, timer.total("rest", "search", "extract"),
                                         search.states)
        estimated = getattr(cost_model, "estimated", 0)
        if estimated:
            say(f"{estimated} operators estimated, not timed: --time-limit passed before their turn (the costs "
                f"timed so far scale their estimates; a longer limit times them, once, into the cache)")
        say(f"extracted with {ext.extractor}: estimated {ext.dag_cost:.1f} us"
            + (" (SCIP found nothing cheaper in time: greedy-dag's program kept)" if ext.used_warm_start else ""))
        return Searched(cost_model, egraph, search_config, initial, search, snap, ext, extracted, rest, rest_entry)

    def checked(self, imp: Imported, found: Searched) -> Checked:
        """Export the first candidate and verify it (it must match), then the others (:func:`build_candidates`)."""
        config, timer = self.config, self.timer
        with timer("export"):
            first = export_phase(found.snap, found.ext, imp.searched, found.cost_model, imp.shaping, imp.blocks,
                                 found.rest)
        self.say("the extracted program written; checking it against the original"
                 + (", then the other candidates" if config.candidates > 1 and config.measure else ""))
        # the verifier's sessions and the original's outputs at each size let go even where a check raises
        with timer("verify"), contextlib.closing(verifier_of(imp.original, config)) as verifier, \
                contextlib.closing(imp.shaping):
            verification, edge_failure = verify_phase(imp.original, first[1], config, verifier)
            extracted = found.extracted
            if config.candidates > 1 and config.measure:
                extracted = with_imported(extracted, written_input(imp.graph, imp.shaping), imp.original, config,
                                          found.cost_model)
            built = build_candidates(found.snap, extracted, imp.graph, imp.original, config, found.cost_model,
                                     first, imp.shaping, imp.blocks, found.rest, verifier, self.say)
            feeds = served(imp.original, verifier.first_inputs(), config.seed)  # the measurement's: as timing_feeds
            built = floored_phase(built, verification.verified and not edge_failure, imp.original, feeds, config,
                                  verifier, self.say)
        if edge_failure:
            self.say(f"the extracted program left out: {edge_failure}")
        else:
            self.say(f"verified: max abs error {verification.max_abs_error:.2e}"
                     + (f" (within onnxruntime's own spread on the original, {verification.spread:.2e}: its run "
                        "without graph optimizations differs as much)" if verification.spread else "")
                     + (f"; {len(built)} distinct candidates" if len(built) > 1 else ""))
        head = built[0]
        head.entry.max_abs_error = verification.max_abs_error
        head.entry.verified = verification.verified and (head.shapes is None or head.shapes.passed)
        if edge_failure:
            head.entry.note = f"not measured: {edge_failure}"
        return Checked(verification, built, feeds, edge_failure)

    def result(self, imp: Imported, found: Searched, checked: Checked) -> Result:
        """Measure the verified candidates against the original, decide which program ships, and report."""
        config, built = self.config, checked.built
        first = built[0]
        timed = [built[k] for k in to_time([bool(b.entry.verified) for b in built], [b.same_as_original for b in built],
                                           config.allow_slower)]
        failed = [b.shapes.detail for b in built if b.shapes is not None and not b.shapes.passed]
        measured = None
        if config.measure and timed:
            with self.timer("measure"):
                spare = self.whole_limit - self.timer.total("rest", "search", "extract")
                measured, comparisons = measure(imp.original, [Program(b.model, b.program) for b in timed], config,
                                                graph=imp.graph, names=[b.entry.name for b in timed],
                                                feeds=checked.feeds, spare_s=spare, say=self.say,
                                                also=imp.shaping.also)
            _record(timed, comparisons)
            for k in comparisons.screened:
                timed[k].entry.note = ("screened out: timed in a short screening run beside the other candidates, "
                                       "one session each, "
                                       "without the gate (its figures); the fastest there was gated alone")
            for b in timed[len(comparisons.comparisons):]:
                b.entry.note = (f"not measured: the memory budget times the original and few candidates at a time, "
                                f"and only the first {SPLIT_CANDIDATES} are (--memory-budget MiB to time more "
                                f"together)")
        returned = decide(not timed, measured, config, failed[0] if failed and not timed else "",
                          checked.left_out if not timed else "", branches=imp.shaping.branch_programs)
        if returned.fallback:
            self.say(returned.fallback)
        shipped = next((b for b in built if b.entry.name == returned.candidate), first)
        shipped.entry.shipped = returned.program == "optimized"
        report = self._report(imp, found, checked, returned, measured, shipped)
        if returned.program == "original":
            return Result(imp.original, imp.original, imp.graph, report, self.weights)  # the user's model, untouched
        return Result(imp.original, with_metadata(shipped.model, imp.original), shipped.program, report, self.weights)

    def _report(self, imp: Imported, found: Searched, checked: Checked, returned: Returned,
                measured: Measurement | None, shipped: Built) -> Report:
        graph, cost_model, optimized = imp.graph, found.cost_model, returned.program == "optimized"
        size = found.egraph.snapshot()
        verification = checked.verification  # the extracted program's; where it was left out, the returned one's
        if checked.left_out:
            verification = shipped.check if optimized and shipped.check is not None else \
                replace(verification, verified=True, max_abs_error=0.0, max_rel_error=0.0)
        return Report(
            config=replace(self.config, search=found.search_config), cost_model=cost_model.name, search=found.search,
            egraph=EGraphSize(len(size.nodes), size.num_classes, found.initial, found.search_config.limit),
            extraction=ExtractionReport.of(found.ext), verification=verification,
            candidates=[Candidate("original", graph_cost(graph, cost_model), dict(graph.op_counts()), "original",
                                  costs=costs_by_op(graph, cost_model), shipped=not optimized,
                                  measured_ms=measured.original_ms if measured else None),
                        *(b.entry for b in checked.built)],
            returned=returned, measured=measured, times=self.timer.seconds,
            interface=imp.shaping.report(*((shipped.model, shipped.shapes, shipped.notes) if optimized
                                           else (None, None))),
            memory_mb=self.timer.memory_mb, blocks=blocks_entry(self.config, imp.blocks, found.rest_entry),
            costs_estimated=getattr(cost_model, "estimated", 0), rewritten=list(imp.rewritten))


def _optimize(model: onnx.ModelProto | Graph | str, config: OptimizeConfig, say: Progress,
              extra_rules: Sequence[Rule], scope: RunScope) -> Result:
    run = Run(config, say, scope, extra_rules)
    with run.released():
        imported = run.imported(model)
        found = run.searched(imported)
        return run.result(imported, found, run.checked(imported, found))


def _record(timed: Sequence[Built], all_: runtimes.Measured) -> None:
    """Each measured candidate's latency, speedup and interval (and the runtime's side timings) in its entry."""
    for k, (b, cmp) in enumerate(zip(timed, all_.comparisons)):
        e = b.entry
        e.measured_ms, e.speedup, e.ci_low, e.ci_high = cmp.optimized_ms, cmp.speedup, cmp.ci_low, cmp.ci_high
        e.beside = {key: values[k + 1] for key, values in all_.beside.items()}


__all__ = ["OptimizeConfig", "Result", "encode_phase", "extract_phase", "optimize", "rest_phase", "rewritten_import_phase",
           "search_phase", "shaped_import_phase"]
