"""The one owner of the candidate order, the measurement policy and the ship decision: the order of a run's
candidates (:data:`ORDER`, :func:`in_order`: the pipeline makes them, :func:`eqsat.app.selection.candidates_phase`,
and puts them in this order), the candidates timed together (all of them, or the first :data:`SPLIT_CANDIDATES`
where the memory budget splits the run into groups; or, for programs too slow to time every candidate under the
gate, all of them screened and the fastest gated alone), the budget and its extension, which measured candidate
ships (:func:`choose`: the first faster with confidence in that order, unless a later one is faster than it with
confidence) and which program the run returns (:func:`returned`).

>>> in_order(["greedy-tree", "step-2", "kernels", "imported", "extracted+floored", "step-1", "ilp-analytic-a100"])
['extracted+floored', 'imported', 'kernels', 'ilp-analytic-a100', 'step-2', 'step-1', 'greedy-tree']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np
import onnx

from eqsat.ir import Graph
from eqsat.onnx.io import weight_bytes

from . import runtimes
from .gate import Gate, trimmed_interval
from .grouping import MIB, auto_budget, plan, session_bytes
from .runtimes import Program, Runtime
from .timing import EXTENSION, Comparison, Decision, decide
from .timing import Protocol as TimingProtocol


class Settings(Protocol):
    """What the measurement reads of a run's configuration (:class:`eqsat.app.config.OptimizeConfig` has it)."""

    @property
    def runtime(self) -> str: ...
    @property
    def measure_threads(self) -> int: ...
    @property
    def measure_budget(self) -> float: ...
    @property
    def memory_budget(self) -> int | None: ...
    @property
    def seed(self) -> int: ...
    @property
    def allow_slower(self) -> bool: ...
    @property
    def input_shapes(self) -> dict[str, tuple[int, ...]]: ...


SPLIT_CANDIDATES = 2
"""candidates timed where the memory budget splits the measurement into groups (each group times the original again:
BERT-base's four candidates took four 13-14 s runs)"""
SCREEN_ROUNDS = 60
"""where ``--measure-budget`` affords the original and every candidate fewer rounds (of one call each) than this, the
candidates are screened first and the gate times only the fastest (:func:`_screened`)"""
SCREEN_SHARE = 0.3
"""the screening run's share of ``--measure-budget`` (the gate's budget is what is left, at least half)"""
SCREEN_MIN_ROUNDS = 3
"""rounds the screening run takes at least"""
SCREEN_SESSIONS = 1
"""sessions per program in the screening run: its few rounds only pick the candidate the gate then times on
sessions of its own, and each session of a slow program costs a build and an untimed first call (five sessions
of six 330 ms programs, warmed, took 20 s of a 23 s screening)"""
GATE_FLOOR_ROUNDS = 40
"""the rounds a gated comparison may always extend to (where the pilot's spread asks for them), up to EXTENSION x
``--measure-budget`` of rounds, whatever the search left of ``--time-limit``: ten seconds are 15 rounds of a 330 ms
program (Whisper at 3000 frames), too few for the gate to resolve a 7% gain on a noisy host; a program of 80 ms
or less affords 40 rounds within the budget anyway"""
ORDER: tuple[tuple[str, str], ...] = (
    ("extracted", "the final extractor's program of the grown e-graph: the search's optimum under the cost model"),
    ("imported", "the input as eqsat writes it, no rule applied, where its operators differ from the input's: the "
                 "simplifications the peers' simplifiers also make"),
    ("greedy-dag", "greedy-dag's program of the grown e-graph (where the final extractor is another)"),
    ("softmax", "greedy-dag's avoiding the runtime's attention kernel, where its masked scores can be floored "
                "(onnxruntime's CPU)"),
    ("kernels", "greedy-dag's favouring the runtime's kernels, where the e-graph holds one"),
    ("ilp-", "the ILP's under the other cost model (``ilp-analytic-a100``, ...): cheap, not the optimum"),
    ("step-", "the main extractor's programs of the states the search stood in before its last one, cheapest first "
              "(MCTS and random: ``step-N``; TENSAT: ``iteration-N``; MCTS's ``prelude`` and ``finish``: of the same "
              "rank, :data:`PATH_LABELS`)"),
    ("greedy-tree", "greedy-tree's program of the grown e-graph"),
)
"""the kinds of a run's candidates, in the order they are measured and preferred (:func:`choose` ships the first
faster with confidence): a candidate's kind is its name up to a ``+`` (``extracted+floored``, its masked scores
floored, takes its own program's place) or, for the kinds that end in ``-``, the name's first part. The order puts
first what the search chose and what the input already is, so that they are in the first group a memory budget
times (:data:`SPLIT_CANDIDATES`); a new candidate source is a new kind here"""
PATH_LABELS = ("step-", "iteration-", "start", "prelude", "finish")
"""the names of the search path's states (``mcts``' labels, spaces as ``-``): all of the kind ``step-``"""


def _is(base: str, kind: str) -> bool:
    return base == kind or kind.endswith("-") and base.startswith(kind)


def rank(name: str) -> int:
    """The place of candidate ``name``'s kind in :data:`ORDER` (ValueError for a name of no kind: a candidate source
    not placed in the order)."""
    base = name.split("+", 1)[0]
    kinds = [kind for kind, _ in ORDER]
    if any(_is(base, label) for label in PATH_LABELS):
        return kinds.index("step-")
    for k, kind in enumerate(kinds):
        if _is(base, kind):
            return k
    raise ValueError(f"candidate {name!r} is of no kind of ORDER: place its source in the candidate order")


def in_order(items: Sequence[Any], name: Callable[[Any], str] = str) -> list[Any]:
    """``items`` (candidates, or their names) in :data:`ORDER`, those of one kind in the order given (a search
    path's states cheapest first)."""
    return sorted(items, key=lambda item: rank(name(item)))


@dataclass
class Measurement:
    """The end-to-end comparison (eqsat.measurement.timing.Comparison's fields, milliseconds) and the decision taken on it."""

    original_ms: float
    optimized_ms: float
    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    rounds: int
    repeats_per_round: int
    seconds: float
    runtime: dict[str, Any]
    decision: Literal["ship", "original"]
    reason: str
    candidate: str = "extracted"
    """the candidate this comparison measured (the one shipped, else the fastest measured)"""
    beside: dict[str, float] = field(default_factory=dict)
    """timings the runtime reports beside the comparison (torch-cuda: ``eager_original_ms``, ``eager_optimized_ms``)"""
    looks: int = 1
    """the shipping gate's looks at the rounds before it stopped (eqsat.measurement.gate)"""
    at_sizes: list[dict[str, Any]] = field(default_factory=list)
    """``--also-at``: the candidate timed against the original at each further size (``size``, ``shapes``,
    ``original_ms``, ``optimized_ms``, ``speedup``, ``ci_low``, ``ci_high``, ``rounds``)"""

    @classmethod
    def of(cls, cmp: Comparison, decision: Decision, candidate: str = "extracted",
           beside: dict[str, float] | None = None) -> Measurement:
        return cls(cmp.original_ms, cmp.optimized_ms, cmp.speedup, cmp.ci_low, cmp.ci_high, cmp.confidence,
                   cmp.rounds, cmp.repeats, cmp.seconds, dict(cmp.runtime), "ship" if decision.ship else "original",
                   decision.reason, candidate, dict(beside or {}), cmp.looks)


@dataclass
class Returned:
    """Which program the run returned, and why."""

    program: Literal["optimized", "original"]
    reason: str
    candidate: str = "extracted"
    """the candidate returned when ``program`` is ``optimized``"""

    @property
    def fallback(self) -> str | None:
        """The reason, when the input model was returned unchanged."""
        return self.reason if self.program == "original" else None


def memory_budget(original: onnx.ModelProto, config: Settings) -> int | None:
    """The bytes the timed sessions may hold together: ``--memory-budget`` MiB, else the automatic budget for
    ``original``'s weights (:func:`eqsat.measurement.grouping.auto_budget`)."""
    return auto_budget(weight_bytes(original)) if config.memory_budget is None else config.memory_budget * MIB


def measure(original: onnx.ModelProto, optimized: onnx.ModelProto | Sequence[Program], config: Settings,
            runtime: Runtime | None = None, graph: Graph | None = None, names: Sequence[str] | None = None,
            feeds: dict[str, np.ndarray] | None = None, spare_s: float = 0.0, say: Callable[[str], None] | None = None,
            also: Sequence[tuple[str, dict[str, tuple[int, ...]]]] = ()) -> tuple[Measurement, runtimes.Measured]:
    """Time the original and each candidate end to end in ``runtime`` (``--runtime`` if None) in one interleaved
    run (eqsat.measurement.runtimes) under the sequential gate (eqsat.measurement.gate: rounds until every candidate is resolved or the
    budget is spent; a false ship at most 1% of the time), and decide which one ships (:func:`choose`). ``optimized`` is one
    ONNX model or several :class:`Program` candidates; ``graph`` is the original's IR (the torch runtimes run it).
    ``feeds``: the inputs timed on (:meth:`~eqsat.verification.Verifier.first_inputs`: those timing_feeds would draw
    again); None: drawn. ``spare_s``: what the search and extraction left of ``--time-limit``: where the gate's
    pilot asks for more rounds than ``--measure-budget`` affords (a loaded machine), the rounds may use it, up to
    EXTENSION x the budget, so a run never takes longer than ``--time-limit`` plus ``--measure-budget`` of
    timed rounds; except that a slow program's gate may always extend to :data:`GATE_FLOOR_ROUNDS` rounds, up
    to EXTENSION x the budget (a 330 ms program's 10 s are 15 rounds). Where the budget affords the original and every candidate fewer than :data:`SCREEN_ROUNDS`
    rounds (slow programs), the candidates are screened first (:func:`_screened`) and only the fastest is gated.
    Else, where the memory budget cannot hold one session of every program (the measurement then runs in
    groups, each re-timing the original), only the first :data:`SPLIT_CANDIDATES` candidates are timed (the
    comparisons are theirs). ``say``: told as each timed run starts. ``also``: further sizes ((label, input
    shapes): ``--also-at``) the candidate to ship is timed at too (:func:`measure_sizes`). Returns the measurement
    of the candidate reported (the shipped one, else the fastest) and every comparison."""
    runtime = runtime or runtimes.make(config.runtime, config.measure_threads)
    candidates = [Program(optimized)] if isinstance(optimized, onnx.ModelProto) else list(optimized)
    names = list(names or ["extracted", *(f"candidate-{k}" for k in range(1, len(candidates)))])
    measured, comparisons = _measured(original, candidates, names, config, runtime, graph, feeds, spare_s, say)
    if also and measured.candidate in names:
        shipping = candidates[names.index(measured.candidate)].model
        measured = measure_sizes(measured, original, shipping, config, also, runtime, say)
    return measured, comparisons


def _measured(original: onnx.ModelProto, candidates: list[Program], names: list[str], config: Settings,
              runtime: Runtime, graph: Graph | None, feeds: dict[str, np.ndarray] | None, spare_s: float,
              say: Callable[[str], None] | None) -> tuple[Measurement, runtimes.Measured]:
    """:func:`measure` at the representative shapes."""
    gate = Gate()
    budget = memory_budget(original, config)
    extension = min(max(spare_s, 0.0), (EXTENSION - 1) * config.measure_budget)
    protocol = TimingProtocol(threads=config.measure_threads, budget_s=config.measure_budget, seed=config.seed, gate=gate,
                              memory_bytes=budget, max_budget_s=config.measure_budget + extension,
                              floor_rounds=GATE_FLOOR_ROUNDS, floor_max_s=EXTENSION * config.measure_budget)
    if feeds is None:
        feeds = runtimes.feeds_for(Program(original), candidates[-1], config.seed, config.input_shapes)
    if len(candidates) > 1:
        per_call = max(runtimes.call_ms(Program(original, graph), runtime, feeds, protocol) / 1e3, 1e-9)
        if config.measure_budget / ((1 + len(candidates)) * per_call) < SCREEN_ROUNDS:
            return _screened(original, graph, candidates, names, runtime, protocol, feeds, per_call, config, say)
    if budget is not None and len(candidates) > SPLIT_CANDIDATES \
            and len(plan([session_bytes(p.model) for p in [Program(original), *candidates]], budget).groups) > 1:
        if say is not None:
            say(f"the memory budget ({budget // MIB} MiB) holds the original and few candidates at a time: timing "
                f"the first {SPLIT_CANDIDATES} of the {len(candidates)} candidates (each group re-times the original)")
        candidates, names = candidates[:SPLIT_CANDIDATES], names[:SPLIT_CANDIDATES]
    measured = runtimes.compare_programs(Program(original, graph), candidates, runtime, protocol,
                                         input_shapes=config.input_shapes, feeds=feeds, say=say)
    share = 2 / (1 + len(candidates))  # of the budget and of its extension, as a group of two would have
    duel_protocol = replace(protocol, budget_s=protocol.budget_s * share, max_budget_s=protocol.extended_budget_s * share,
                            floor_max_s=None if protocol.floor_max_s is None else protocol.floor_max_s * share,
                            family=None)

    def duel(first: int, second: int) -> Comparison:  # candidates of two groups, timed against each other
        if say is not None:
            say(f"both faster, timed in different groups: {names[first]} against {names[second]} in a run of their own")
        return runtimes.duel(candidates[first], candidates[second], runtime, duel_protocol, feeds)
    best, decision = choose(measured.comparisons, names, config.allow_slower, gate, measured.group_of(), duel)
    return Measurement.of(measured.comparisons[best], decision, names[best], _beside(measured, best)), measured


def _screened(original: onnx.ModelProto, graph: Graph | None, candidates: Sequence[Program], names: Sequence[str],
              runtime: Runtime, protocol: TimingProtocol, feeds: dict[str, np.ndarray], per_call: float,
              config: Settings, say: Callable[[str], None] | None) -> tuple[Measurement, runtimes.Measured]:
    """The candidates of slow programs screened, then the fastest gated alone: a short run without the gate
    (:data:`SCREEN_SHARE` of the budget, a few rounds of one call of every program) picks the candidate of the
    highest median speedup, and the gate then times the original against that one on new rounds and sessions.
    The screening's rounds only choose which hypothesis the gate tests, so the gate's false-ship rate holds with one
    candidate in its family; its rounds cost two calls instead of ``1 + len(candidates)``, and its fewer programs
    leave the memory budget room for more sessions each (a 224-pixel Swin: 23 rounds of five 86 ms programs on one
    session each, +-25%, before). The screened-out candidates' comparisons are the screening's."""
    afford = config.measure_budget / ((1 + len(candidates)) * per_call)
    if say is not None:
        say(f"screening {len(candidates)} candidates first: one call of each program takes {1e3 * per_call:.0f} ms, "
            f"about {afford:.0f} rounds of all of them in the budget; the fastest is then timed alone under the gate")
    start = time.perf_counter()
    screen = runtimes.compare_programs(
        Program(original, graph), candidates, runtime,
        replace(protocol, gate=None, budget_s=SCREEN_SHARE * config.measure_budget, max_budget_s=None,
                min_rounds=SCREEN_MIN_ROUNDS, max_rounds=max(SCREEN_MIN_ROUNDS, protocol.max_rounds), family=None,
                sessions=SCREEN_SESSIONS),
        feeds=feeds, say=say)
    pick = max(range(len(candidates)), key=lambda k: screen.comparisons[k].speedup)  # the first of equals
    spent = time.perf_counter() - start
    budget_s = max(protocol.budget_s - spent, protocol.budget_s / 2)
    floor_max_s = max((protocol.floor_max_s or EXTENSION * config.measure_budget) - spent, budget_s)
    gated = runtimes.compare_programs(
        Program(original, graph), [candidates[pick]], runtime,
        replace(protocol, budget_s=budget_s, max_budget_s=max(protocol.extended_budget_s - spent, budget_s),
                floor_max_s=floor_max_s),
        feeds=feeds, say=say)
    cmp = gated.comparisons[0]
    _, decision = choose([cmp], [names[pick]], config.allow_slower, protocol.gate)
    others = ", ".join(f"{n} {c.speedup:.3f}x" for k, (n, c) in enumerate(zip(names, screen.comparisons)) if k != pick)
    rounds = screen.comparisons[0].rounds
    decision = Decision(decision.ship, f"{names[pick]}: {decision.reason}; chosen by a screening run of {rounds} "
                                       f"rounds of every candidate ({names[pick]} {screen.comparisons[pick].speedup:.3f}x"
                                       f", {others})")
    comparisons = [cmp if k == pick else c for k, c in enumerate(screen.comparisons)]
    measured = runtimes.Measured(comparisons, screen.beside, screen.groups, feeds,
                                 [k for k in range(len(candidates)) if k != pick])
    return Measurement.of(cmp, decision, names[pick], _beside(screen, pick)), measured


def _beside(measured: runtimes.Measured, candidate: int) -> dict[str, float]:
    """The runtime's side timings of the original and of ``candidate`` (0-based), keyed for the report."""
    return {f"{k}_{side}_ms": v[i] for k, v in measured.beside.items()
            for side, i in (("original", 0), ("optimized", candidate + 1))}


def measure_sizes(measured: Measurement, original: onnx.ModelProto, candidate: onnx.ModelProto, config: Settings,
                  sizes: Sequence[tuple[str, dict[str, tuple[int, ...]]]], runtime: Runtime | None = None,
                  say: Callable[[str], None] | None = None) -> Measurement:
    """``measured`` (the candidate to ship, measured at the representative shapes) with the candidate timed against
    the original at each of ``sizes`` ((label, input shapes): ``--also-at``), each a run of its own under the gate with
    ``--measure-budget``: the figure at each in ``at_sizes``; where it is slower with confidence at any of them, the
    original is returned instead (``--allow-slower`` keeps it), and the reason names the size either way."""
    if measured.decision != "ship" or not sizes:
        return measured
    runtime = runtime or runtimes.make(config.runtime, config.measure_threads)
    budget = memory_budget(original, config)
    protocol = TimingProtocol(threads=config.measure_threads, budget_s=config.measure_budget, seed=config.seed,
                              gate=Gate(), memory_bytes=budget, max_budget_s=config.measure_budget)
    rows, slower = [], []
    for label, shapes in sizes:
        if say is not None:
            say(f"timing at {label} as well (--also-at)")
        cmp = runtimes.compare_programs(Program(original), [Program(candidate)], runtime, protocol,
                                        input_shapes=shapes).comparisons[0]
        rows.append({"size": label, "shapes": {k: list(v) for k, v in shapes.items()}, "original_ms": cmp.original_ms,
                     "optimized_ms": cmp.optimized_ms, "speedup": cmp.speedup, "ci_low": cmp.ci_low,
                     "ci_high": cmp.ci_high, "rounds": cmp.rounds})
        if cmp.slower:
            slower.append(label)
    figures = "; ".join(f"at {r['size']} {r['speedup']:.3f}x (CI {r['ci_low']:.3f}-{r['ci_high']:.3f})" for r in rows)
    if slower and not config.allow_slower:
        return replace(measured, decision="original", at_sizes=rows,
                       reason=f"{measured.reason}; but slower with confidence at {', '.join(slower)} ({figures}): "
                              "the original model is returned unchanged (use --allow-slower to keep the optimized one)")
    return replace(measured, at_sizes=rows, reason=f"{measured.reason}; {figures}"
                   + (" (slower there, kept because --allow-slower was given)" if slower else ""))


def timed(verified: Sequence[bool], same_as_original: Sequence[bool], allow_slower: bool) -> list[int]:
    """The candidates the measurement times (their indices, in order, of candidates in :data:`ORDER`): each verified
    one that is not the original's own program; where none is, with ``--allow-slower``, the first where verified
    (the run then returns it unmeasured against a faster one)."""
    chosen = [k for k, (ok, same) in enumerate(zip(verified, same_as_original)) if ok and not same]
    return chosen or ([0] if allow_slower and verified and verified[0] else [])


def returned(unchanged: bool, measured: Measurement | None, config: Settings,
             not_generic: str = "", unverified: str = "", branches: bool = False) -> Returned:
    """Which program to return: the original when no candidate can be written for every size of the dynamic
    dimensions (``not_generic``: why), when none matches the original on every input checked (``unverified``:
    why), when the search found no other one (unless --allow-slower) or when no candidate measured faster with
    confidence; else the shipped candidate. ``branches``: the candidates' If branches are programs each measured
    faster with confidence on their own (:func:`vouched`)."""
    decided = _returned(unchanged, measured, config, not_generic, unverified)
    return vouched(decided, measured) if branches else decided


def vouched(returned: Returned, measured: Measurement | None) -> Returned:
    """The decision on a model whose If branches are programs each measured faster with confidence on its own (and
    verified against its branch; :mod:`eqsat.app.branch_programs`): the whole model's measurement runs one side of
    each If only (a decode step's 3-4 ms call, where the gate's interval is +-6% on a loaded 2-core machine), so it
    need not resolve a gain the branches' runs did. The program ships unless it is slower with confidence there
    too; ``returned`` otherwise."""
    if returned.program != "original" or measured is None or not measured.candidate or measured.ci_high < 1.0 \
            or any(at["ci_high"] < 1.0 for at in measured.at_sizes):  # slower with confidence somewhere
        return returned
    return Returned("optimized", f"each If branch's program was measured faster with confidence on its own; the "
                                 f"whole model, timed on one side of each If, is not slower with confidence "
                                 f"({measured.speedup:.3f}x, CI {measured.ci_low:.3f}-{measured.ci_high:.3f})",
                    measured.candidate)


def _returned(unchanged: bool, measured: Measurement | None, config: Settings, not_generic: str,
              unverified: str) -> Returned:
    """:func:`returned` before the branches' vouching."""
    if unchanged and unverified:
        return Returned("original", f"no program the search found matches the original on every input checked "
                                    f"({unverified}); the input model is returned unchanged")
    if unchanged and not_generic:
        return Returned("original", f"no program could be written for every size of the dynamic dimensions "
                                    f"({not_generic}); the input model is returned unchanged")
    if unchanged and not config.allow_slower:
        return Returned("original", "the search found no program other than the original; "
                                    "the input model is returned unchanged")
    if measured is None:
        return Returned("optimized", "not measured (measure=False): the optimized program is returned unmeasured")
    return Returned("optimized" if measured.decision == "ship" else "original", measured.reason, measured.candidate)


def choose(comparisons: Sequence[Comparison], names: Sequence[str], allow_slower: bool,
           gate: Gate | None = None, groups: Sequence[int] | None = None,
           duel: Callable[[int, int], Comparison] | None = None) -> tuple[int, Decision]:
    """(index of the candidate to report, the decision): among those faster with confidence, the fastest (median
    speedup); with ``gate`` and the rounds at hand, the first in order instead, unless a later one is faster than
    it with confidence over the same paired rounds (so that candidates equally fast ship the same one run to run).
    With none faster, the fastest measured is reported and the original returned (or, with ``allow_slower``, that
    fastest one kept).

    A measurement split into memory-bounded groups (:mod:`eqsat.measurement.grouping`; ``groups``: each candidate's group)
    applies the same rule: each candidate faster with confidence was so against the original in its group's
    paired rounds (the gate's correction counting every group's candidates); a later one replaces the one chosen
    so far if it is faster than it with confidence, over their shared rounds where they were timed together, else
    over the rounds of ``duel(chosen, later)``, a paired run of the two alone (its speedup: chosen / later), whose
    interval at the same confidence must lie above the gate's futility bound: a duel times one session of each
    (what the budget holds), so that what differs between two sessions of one program (memory placement, a few
    tenths of a percent) is not taken for a gain. Without ``duel``, candidates of different groups are not
    compared (the first stays)."""
    if not comparisons:
        raise ValueError("no candidate was measured")
    faster = [k for k, c in enumerate(comparisons) if c.faster]
    if faster and gate is not None and all(len(comparisons[k].round_optimized_ms) >= 2 for k in faster):
        best = faster[0]
        confidence = gate.confidence(len(faster))
        for k in faster[1:]:
            if groups is not None and groups[k] != groups[best]:
                if duel is not None and _faster_in_duel(duel(best, k), confidence, gate.futility):
                    best = k
                continue
            x = np.log(np.divide(comparisons[best].round_optimized_ms, comparisons[k].round_optimized_ms))
            if trimmed_interval(x, None, confidence).ci_low > 1:
                best = k
    else:
        best = max(faster or range(len(comparisons)), key=lambda k: comparisons[k].speedup)
    decision = decide(comparisons[best], allow_slower=allow_slower)
    if len(comparisons) > 1:
        others = ", ".join(f"{n} {c.speedup:.3f}x" for k, (n, c) in enumerate(zip(names, comparisons)) if k != best)
        decision = Decision(decision.ship, f"{names[best]}: {decision.reason}; other candidates: {others}")
    return best, decision


def _faster_in_duel(cmp: Comparison, confidence: float, margin: float) -> bool:
    """Whether the second program of a duel is faster than the first by more than ``margin`` with ``confidence``
    (over its paired rounds)."""
    x = np.log(np.divide(cmp.round_original_ms, cmp.round_optimized_ms))
    return len(x) >= 2 and trimmed_interval(x, None, confidence).ci_low > margin


__all__ = ["ORDER", "PATH_LABELS", "SCREEN_ROUNDS", "SCREEN_SHARE", "SPLIT_CANDIDATES", "Measurement", "Returned", "Settings", "choose",
           "in_order", "measure", "measure_sizes", "rank", "returned", "timed", "vouched"]
