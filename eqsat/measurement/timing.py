"""Timing: the end-to-end latency of two ONNX programs, measured so that the comparison holds on a busy machine.

The protocol (:func:`compare`): both programs in one process, in onnxruntime sessions built with the
same :func:`session_options` (all graph optimizations, a fixed intra-op thread count, sequential
execution), several sessions per program used in turn; alternated warm-up calls; then rounds, each
timing every program in a seeded random order: a block of calls summarized by its median (under a gate one call,
where the rounds allow); the calls per block and the rounds adapt to a time budget. The speedup is the median over rounds of the
paired ratio original / optimized, with a percentile-bootstrap confidence interval (seeded) that
resamples the session pairs and the rounds within each (sessions of one program differ slightly).
A program ships (:func:`decide`) only if it is faster with confidence: the interval's lower bound > 1.

With a :class:`~eqsat.measurement.gate.Gate` in the protocol (the pipeline's measurement), the rounds are sequential instead:
the budget plans the rounds, the gate looks at them a few times (:func:`eqsat.measurement.gate.look_schedule`) and the run
stops at the first look where every candidate is resolved (faster, or surely not a gain); the interval is the
gate's (trimmed mean of the paired log ratios, cluster-robust t), whose false-ship rate is designed. At the first
look (the pilot) the rounds are planned again from the spread seen (:class:`eqsat.measurement.gate.Sequential`), so that a
2% gain resolves on a loaded machine too: the budget is extended up to ``Protocol.max_budget_s`` where the
spread asks for more rounds than ``budget_s`` affords (a quiet machine's does not), and a slow program's rounds up
to ``Protocol.floor_rounds`` within ``Protocol.floor_max_s``.

>>> lo = speedup_ci([2.0, 2.1, 1.9, 2.0, 2.2], [1.0, 1.05, 0.95, 1.0, 1.1])
>>> round(lo.speedup, 3), lo.ci_low > 1.5
(2.0, True)
"""

from __future__ import annotations

import functools
import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from eqsat import memory
from eqsat.onnx import footprint
from eqsat.onnx.io import is_large, weight_bytes
from eqsat.verification import feed_shapes
from eqsat.verification.feeds import index_bounds, random_inputs, served

from .clock import runtime_info, timing_session, wall_block_ms
from .gate import Gate, Sequential, settled
from .grouping import session_bytes

SESSIONS_WEIGHT_LIMIT = 2**30
"""bytes of weights that the timed sessions of all programs may hold together: each session keeps its own prepacked
copy of its MatMul weights, even where the weights themselves are shared (:mod:`eqsat.onnx.pool`)"""
SESSIONS_ARENA_LIMIT = 2**30
"""bytes of computed values that the timed sessions of all programs may hold together: each session's arena keeps the
peak of its run (:func:`eqsat.onnx.footprint.activation_bytes`, estimated at the timed input shapes: a mixture of
experts' gathered weights, 290 MB a session at 128 tokens, held by 13 sessions, took 4 GB)"""
MIN_SESSIONS = 3
EPOCHS = 5
"""with programs of few sessions each renewed (:func:`compare_many`'s ``renew``): the epochs planned over the budget's
rounds, and the most there are (an extended run's last epoch is longer), so that the builds are bounded"""
EPOCH_LABELS = 1 << 20
"""the session pairs' labels of one epoch lie below this (distinct from every other epoch's)"""
EXTENSION = 3.0
"""the gate's budget may grow to this many times ``Protocol.budget_s`` when the pilot's spread asks for it
(``Protocol.max_budget_s`` unset)"""


@dataclass(frozen=True)
class Protocol:
    """Knobs of one comparison. ``budget_s`` bounds the timed rounds (``min_rounds`` are always run)."""

    threads: int = 1
    budget_s: float = 10.0
    warmup: int = 5
    min_rounds: int = 10
    max_rounds: int = 30
    max_repeats: int = 1000
    block_s: float = 0.02
    """without a gate: the time one round spends on one program (fast programs run many calls per round, slow ones
    one). With a gate a round runs one call of each program (more only where the budget affords more rounds than
    ``Gate.max_rounds``): on a 2-core host the noise of a 3 ms program is correlated over tens of milliseconds, so
    that calls of two programs one after the other pair better than blocks of calls do (docs/costs.md,
    "Measurements: end to end")"""
    sessions: int = 20
    """sessions per program, used in turn by the rounds (fewer for programs slow to load or with large weights): each
    session's memory placement gives it an offset of about 1% that its rounds share, so the sessions, not the rounds,
    set the interval's width on a millisecond program (docs/benchmarks.md, "Issue 42, third pass")"""
    confidence: float = 0.95
    resamples: int = 4000
    seed: int = 0
    gate: Gate | None = None
    """the sequential shipping rule (eqsat.measurement.gate): rounds until resolved, up to the budget, and the gate's interval;
    None: a fixed number of rounds and the bootstrap interval at ``confidence``"""
    family: int | None = None
    """the candidates the gate's Bonferroni correction counts: all the measurement's, when it is split into groups
    timed one after another (:mod:`eqsat.measurement.grouping`); None: the candidates of this run"""
    memory_bytes: int | None = None
    """what the timed sessions may hold together (their prepacked weights, :func:`eqsat.measurement.grouping.session_bytes`):
    fewer sessions per program where more would not fit (at least one); None: only SESSIONS_WEIGHT_LIMIT bounds them"""
    max_budget_s: float | None = None
    """with a gate: the seconds of timed rounds at most when the pilot's spread asks for more rounds than
    ``budget_s`` affords (None: EXTENSION x ``budget_s``; ``budget_s``: never extended)"""
    floor_rounds: int = 0
    """with a gate: the rounds the pilot's plan may reach whatever ``max_budget_s`` affords, or as many of them as
    ``floor_max_s`` seconds of calls hold (a slow program's: ten seconds are 15 rounds of a 330 ms program, too few
    for the gate to resolve a 7% gain on a noisy host); those seconds are then the rounds' time limit; 0: none"""
    floor_max_s: float | None = None
    """the seconds of calls ``floor_rounds`` may take at most, and the rounds' time limit where the floor applies
    (None: EXTENSION x ``budget_s``)"""

    @property
    def extended_budget_s(self) -> float:
        """The seconds of timed rounds a gated comparison may extend to."""
        return EXTENSION * self.budget_s if self.max_budget_s is None else self.max_budget_s

    def __post_init__(self) -> None:
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence {self.confidence} must lie in [0.5, 1), e.g. 0.95")
        if not 2 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"rounds: need 2 <= min_rounds ({self.min_rounds}) <= max_rounds ({self.max_rounds})")
        if self.budget_s <= 0 or self.warmup < 1 or self.max_repeats < 1 or self.threads < 1 or self.sessions < 1:
            raise ValueError("budget_s must be positive and warmup, max_repeats, threads and sessions at least 1")
        if self.floor_rounds < 0 or (self.floor_max_s is not None and self.floor_max_s <= 0):
            raise ValueError(f"floor_rounds ({self.floor_rounds}) must be at least 0 and floor_max_s positive")
        if self.max_budget_s is not None and self.max_budget_s < self.budget_s:
            raise ValueError(f"max_budget_s ({self.max_budget_s}) must be at least budget_s ({self.budget_s})")


@dataclass(frozen=True)
class SpeedupEstimate:
    speedup: float
    ci_low: float
    ci_high: float


def speedup_ci(original_ms: Sequence[float], optimized_ms: Sequence[float], confidence: float = 0.95,
               resamples: int = 4000, seed: int = 0, clusters: Sequence[int] | None = None) -> SpeedupEstimate:
    """Median over rounds of the paired ratios original/optimized, and its percentile-bootstrap interval
    (seeded). ``clusters`` labels rounds that share something (the same pair of sessions): the bootstrap
    then resamples clusters, and rounds within each, so that what a cluster shares widens the interval."""
    a, b = np.asarray(original_ms, float), np.asarray(optimized_ms, float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"need two equally long series of at least 2 paired rounds, got {a.shape} and {b.shape}")
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("round times must be positive")
    log_ratio = np.log(a / b)
    labels = np.arange(a.size) if clusters is None else np.asarray(clusters)
    if labels.shape != a.shape:
        raise ValueError(f"clusters: need one label per round ({a.size}), got {labels.shape}")
    groups = [log_ratio[labels == k] for k in np.unique(labels)]
    sizes = np.array([len(g) for g in groups])
    table = np.full((len(groups), sizes.max()), np.nan)
    for i, g in enumerate(groups):
        table[i, :len(g)] = g
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(groups), (resamples, len(groups)))  # clusters drawn with replacement
    rows_size = sizes[rows][..., None]
    cols = (rng.random((*rows.shape, sizes.max())) * rows_size).astype(int)  # rounds within each, likewise
    draws = np.where(np.arange(sizes.max()) < rows_size, table[rows[..., None], cols], np.nan)
    boot = np.nanmedian(draws.reshape(resamples, -1), axis=1)
    alpha = 1 - confidence
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return SpeedupEstimate(float(np.exp(np.median(log_ratio))), float(np.exp(lo)), float(np.exp(hi)))


@dataclass
class Comparison:
    """Timings of the original (A) and the optimized (B) program, and the speedup A/B with its interval."""

    original_ms: float
    optimized_ms: float
    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    rounds: int
    repeats: int
    seconds: float
    runtime: dict[str, Any]
    round_original_ms: list[float] = field(repr=False, default_factory=list)
    round_optimized_ms: list[float] = field(repr=False, default_factory=list)
    looks: int = 1
    """the gate's looks at the rounds before it stopped (1 without a gate)"""
    planned: int = 0
    """the rounds the gate's plan asked for (the budget's, or the pilot's spread's up to the extended budget; 0
    without a gate): fewer ``rounds`` resolved earlier, or ran out of time"""

    @property
    def faster(self) -> bool:
        """Faster with confidence: the whole interval lies above 1."""
        return self.ci_low > 1.0

    @property
    def slower(self) -> bool:
        """Slower with confidence: the whole interval lies below 1."""
        return self.ci_high < 1.0

    def report(self) -> dict[str, Any]:
        return {"original_ms": self.original_ms, "optimized_ms": self.optimized_ms, "speedup": self.speedup,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "confidence": self.confidence,
                "rounds": self.rounds, "repeats_per_round": self.repeats, "seconds": self.seconds,
                "looks": self.looks, "runtime": self.runtime}


@dataclass(frozen=True)
class Decision:
    ship: bool
    reason: str


def decide(cmp: Comparison, allow_slower: bool = False) -> Decision:
    """Ship the optimized program only if it is faster with confidence (or ``allow_slower`` asks to keep it)."""
    ci = f"{cmp.speedup:.3f}x, {100 * cmp.confidence:g}% CI {cmp.ci_low:.3f}-{cmp.ci_high:.3f} over {cmp.rounds} rounds"
    if cmp.faster:
        return Decision(True, f"the optimized program is faster with confidence ({ci})")
    verdict = "slower" if cmp.slower else "not faster with confidence"
    if allow_slower:
        return Decision(True, f"the optimized program is {verdict} ({ci}); kept because --allow-slower was given")
    return Decision(False, f"the optimized program is {verdict} ({ci}); the original model is returned unchanged "
                           "(use --allow-slower to keep the optimized one)")


Calls = Callable[[], Any] | Sequence[Callable[[], Any]]
"""one program: a callable, or several interchangeable instances of it (sessions)"""
BlockClock = Callable[[Callable[[], Any], int], float]
"""(call, n) -> milliseconds per call over a block of ``n`` calls (the round's summary of one program)"""
Renew = Callable[[int | None], Sequence[Calls]]
"""(sessions) -> new instances of every program, at most ``sessions`` each (None: as many as the protocol builds)"""


def _instances(calls: Calls) -> list[Callable[[], Any]]:
    return [calls] if callable(calls) else list(calls)


def compare_calls(calls_a: Calls, calls_b: Calls, protocol: Protocol = Protocol(),
                  runtime: dict[str, Any] | None = None, clock: BlockClock = wall_block_ms) -> Comparison:
    """Time program A (the original) against program B with the protocol (see the module's docstring).

    Each side is a callable, or several interchangeable instances of it (sessions): round ``r`` uses
    instance ``r mod n``, so that what differs between two instances of one program (memory placement)
    shows up in the spread of the rounds, and so in the interval, instead of biasing one side."""
    return compare_many([calls_a, calls_b], protocol, runtime, clock)[0]


def compare_many(programs: Sequence[Calls], protocol: Protocol = Protocol(), runtime: dict[str, Any] | None = None,
                 clock: BlockClock = wall_block_ms, renew: Renew | None = None) -> list[Comparison]:
    """Time the original (``programs[0]``) against each other program in one interleaved run: every round
    times each program in a seeded random order (under a gate one call each, where the rounds allow; else a block
    of about ``block_s``), and each comparison pairs the original's time with the other program's in the same round. ``clock`` times a block (wall clock by default; CUDA events
    for the GPU runtimes). One :class:`Comparison` per program after the first, in order.

    ``renew`` (with a gate): new instances of every program, to replace the current ones every few rounds (the
    old ones dropped first), for programs of fewer sessions each than the gate's units need (what memory allows
    for large models, or beside many candidates): what
    differs between two sessions of one program (memory placement) is then drawn again each epoch, and the
    gate's standard error counts the session pairs of every epoch as its units (:data:`EPOCHS` epochs planned over
    the budget's rounds, the last one longer where the gate extends them; with few units, the interval is wide), where one session pair for the whole run would show its difference as a gain. A
    renewed epoch before the last is given no more sessions than its rounds use (the first epoch's are built
    before the rounds are planned). The caller keeps no reference to
    ``programs`` then, so that the dropped sessions are freed."""
    p = protocol
    if len(programs) < 2:
        raise ValueError(f"need the original and at least one other program, got {len(programs)}")
    inst = [_instances(c) for c in programs]
    programs = ()  # the instances are inst's alone (renew drops them)
    k = len(inst)
    start = time.perf_counter()
    rng = np.random.default_rng(p.seed)
    per_call = _warm_up(inst, p, rng, clock, start)
    pairs = p.budget_s / (k * per_call)  # how many rounds of one call per program the budget affords
    extended = p.extended_budget_s / (k * per_call)  # ... and the extended budget
    floor = _floor(p, k * per_call, extended)
    if floor:  # a slow program's gate may reach floor_rounds: its seconds the time limit, the rounds its cap
        p = replace(p, max_budget_s=max(p.floor_max_s or EXTENSION * p.budget_s, p.extended_budget_s))
    if p.gate is not None:  # one call of each program a round, unless the extended budget affords more than the gate's
        repeats = min(max(math.ceil(extended / p.gate.max_rounds), 1), p.max_repeats)
    else:
        repeats = min(max(math.ceil(p.block_s / per_call), 1), p.max_repeats, max(int(pairs // p.min_rounds), 1))
    series: list[list[float]] = [[] for _ in inst]

    planned = int(min(max(pairs // repeats, p.min_rounds), p.gate.max_rounds)) if p.gate is not None else 0
    every = max(1, math.ceil(planned / EPOCHS)) if renew is not None and p.gate is not None else 0

    labels: list[list[int]] = [[] for _ in inst]  # per round: the session pair it ran on, original against program j
    epoch = 0

    def run_round(r: int) -> None:
        nonlocal epoch
        if every and r and r % every == 0 and epoch < EPOCHS - 1:  # at most EPOCHS - 1 renewals, however extended
            epoch += 1  # an epoch before the last runs `every` rounds: no more sessions than they use
            _renew(inst, renew, clock, every if epoch < EPOCHS - 1 else None)
        for which in rng.permutation(k):
            series[which].append(clock(inst[which][r % len(inst[which])], repeats))
        for j in range(1, k):  # labelled now: a renewal may change how many sessions a program has
            labels[j].append(epoch * EPOCH_LABELS + (r % len(inst[0])) * len(inst[j]) + r % len(inst[j]))

    def pair(r: int, j: int) -> int:  # the session pair round r ran on, original against program j (in its epoch)
        return labels[j][r]

    t0 = time.perf_counter()
    if p.gate is not None:  # renewing: the epochs' pairs are the units however few (a wide interval, never a narrow one)
        gate = replace(p.gate, min_clusters=2, clustered=True) if every else p.gate
        seq = Sequential(gate, p.family or k - 1, int(max(pairs // repeats, p.min_rounds)),
                         int(max(extended // repeats, p.min_rounds, floor)))
        return _sequential(p, seq, run_round, series, pair, repeats, start, t0, runtime)
    rounds = int(min(max(pairs // repeats, p.min_rounds), p.max_rounds))
    for r in range(rounds):
        run_round(r)
        if r + 1 >= p.min_rounds and time.perf_counter() - t0 > p.budget_s:
            break
    seconds = time.perf_counter() - start
    ra = series[0]
    out = []
    for j in range(1, k):
        rb = series[j]
        clusters = [pair(r, j) for r in range(len(ra))]
        est = speedup_ci(ra, rb, p.confidence, p.resamples, p.seed, clusters=clusters)
        out.append(Comparison(statistics.median(ra), statistics.median(rb), est.speedup, est.ci_low, est.ci_high,
                              p.confidence, len(ra), repeats, seconds, runtime or {"name": "python-callables"},
                              ra, rb))
    return out


def _floor(p: Protocol, round_s: float, extended: float) -> int:
    """The rounds ``p.floor_rounds`` asks the gate's cap to reach (0: none beyond what the extended budget affords):
    at most as many as ``p.floor_max_s`` holds at ``round_s`` seconds a round, counted in rounds, not seconds, so
    that a renewal's builds and the division's rounding take none of them."""
    if p.gate is None or not p.floor_rounds:
        return 0
    held = math.floor((p.floor_max_s or EXTENSION * p.budget_s) / round_s + 1e-9)
    floor = min(p.floor_rounds, held)
    return floor if floor > int(extended) else 0


def _warm_up(inst: list[list[Callable[[], Any]]], p: Protocol, rng: np.random.Generator, clock: BlockClock,
             start: float) -> float:
    """The untimed calls before the rounds, alternated between the programs in a seeded order; returns the
    seconds of the slowest program's call. The first pass calls every instance once (its first call allocates);
    the passes after it (``p.warmup`` passes in all) call every instance again while the passes so far cost at
    most a fifth of the budget (the first at least one more), else, where the first pass alone cost more, the
    first instance of each program alone, once: what the per-call estimate needs (a 330 ms program of five sessions warmed twice each spent more seconds in
    warm-up than in its rounds)."""
    k = len(inst)
    first: list[list[float]] = [[] for _ in inst]
    for which in rng.permutation(k):  # (no loop variable left holding an instance that renew would drop)
        first[which].extend(clock(call, 1) / 1e3 for call in inst[which])
    cheap = time.perf_counter() - start <= 0.2 * p.budget_s
    warm: list[list[float]] = [[] for _ in inst]
    for _ in range(1, p.warmup):
        for which in rng.permutation(k):
            warm[which].extend(clock(call, 1) / 1e3 for call in (inst[which] if cheap else inst[which][:1]))
        if not cheap or time.perf_counter() - start > 0.2 * p.budget_s:  # (the second pass always runs)
            break
    return max(max(statistics.median(w or f) for w, f in zip(warm, first)), 1e-7)


def _renew(inst: list[list[Callable[[], Any]]], renew: Renew | None, clock: BlockClock, sessions: int | None) -> None:
    """Replace every program's instances by new ones from ``renew`` (the old freed first; at most ``sessions``
    each, None: as many as it builds), each called once untimed (its first call allocates)."""
    assert renew is not None
    inst.clear()
    gc.collect()
    memory.release()
    inst.extend(_instances(c) for c in renew(sessions))
    for side in inst:
        for call in side:
            clock(call, 1)


def _sequential(p: Protocol, seq: Sequential, run_round: Callable[[int], None], series: list[list[float]],
                pair: Callable[[int, int], int], repeats: int, start: float, t0: float,
                runtime: dict[str, Any] | None) -> list[Comparison]:
    """The gated rounds: run up to each look of the plan, assess, stop when the answer is settled
    (:func:`.gate.settled`). At the pilot the plan may grow to the rounds the extended budget still affords at the pace seen; the time limit is
    ``budget_s``, or the extended budget once the plan has grown. A limit reached before the plan's end makes the
    next look the last (the looks never exceed the gate's)."""
    r = 0
    verdicts = []
    limit = p.budget_s
    while (stop := seq.next_look) is not None:
        over = False
        while r < stop and not over:
            run_round(r)
            r += 1
            over = r >= p.min_rounds and time.perf_counter() - t0 > limit
        clusters = [[pair(i, j) for i in range(r)] for j in range(1, len(series))]
        spent = time.perf_counter() - t0
        affords = r + int(max(p.extended_budget_s - spent, 0.0) * r / max(spent, 1e-9))
        verdicts = seq.look(series[0], series[1:], clusters, cap=affords)
        if seq.planned > seq.base:
            limit = p.extended_budget_s
        if over or settled(verdicts):
            break
    seconds = time.perf_counter() - start
    confidence = seq.gate.confidence(seq.candidates)
    ra = series[0]
    return [Comparison(statistics.median(ra), statistics.median(rb), iv.speedup, iv.ci_low, iv.ci_high, confidence,
                       len(ra), repeats, seconds, runtime or {"name": "python-callables"}, ra, rb, seq.taken,
                       seq.planned)
            for rb, (iv, _) in zip(series[1:], verdicts)]


def session_count(models: Sequence[onnx.ModelProto], wanted: int, build_s: float, budget_s: float,
                  memory_bytes: int | None = None, shapes: Mapping[str, tuple[int, ...]] | None = None) -> int:
    """Sessions per program: ``wanted``; fewer where building them would take more than 30% of the budget,
    but at least 3 (what differs between sessions must show in the interval); fewer where the weights of all
    the programs' sessions together would pass SESSIONS_WEIGHT_LIMIT, the values their runs at the input ``shapes``
    keep (where given) SESSIONS_ARENA_LIMIT, or their own bytes
    (:func:`eqsat.measurement.grouping.session_bytes`) ``memory_bytes``; one for models too large for one protobuf message."""
    if any(is_large(m) for m in models):
        return 1
    held = max(weight_bytes(m) for m in models)  # a pooled model's references count as its weights
    by_memory = SESSIONS_WEIGHT_LIMIT // max(held * len(models), 1)
    if shapes is not None:
        by_memory = min(by_memory, SESSIONS_ARENA_LIMIT // max(sum(_arena(m, shapes) for m in models), 1))
    if memory_bytes is not None:
        by_memory = min(by_memory, memory_bytes // max(sum(session_bytes(m) for m in models), 1))
    by_time = max(MIN_SESSIONS, int(0.3 * budget_s / max(build_s, 1e-6)))
    return int(max(1, min(wanted, by_memory, by_time)))


def _arena(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> int:
    """The bytes of values a session of ``model`` keeps after a run at ``shapes`` (0 where it cannot be estimated)."""
    try:
        return footprint.activation_bytes(model, dict(shapes))
    except Exception:  # noqa: BLE001 -- an estimate only: inference that fails bounds nothing
        return 0


def timing_sessions(models: Sequence[onnx.ModelProto], protocol: Protocol,
                    providers: Sequence[str] = ("CPUExecutionProvider",),
                    shapes: Mapping[str, tuple[int, ...]] | None = None) -> list[list[ort.InferenceSession]]:
    """Sessions for each of ``models`` (:func:`session_count` of them each, at the input ``shapes`` where given),
    built in a seeded order so that no program is always first; raises ValueError if the programs take different
    inputs."""
    rng = np.random.default_rng(protocol.seed)
    sessions: list[list[ort.InferenceSession]] = [[] for _ in models]
    t = time.perf_counter()
    for which in rng.permutation(len(models)):  # build order: seeded, so that no side is always first
        sessions[which].append(timing_session(models[which], protocol.threads, providers))
    n = session_count(models, protocol.sessions, (time.perf_counter() - t) / max(len(models) / 2, 1),
                      protocol.budget_s, protocol.memory_bytes, shapes)
    for which in rng.permutation(np.repeat(np.arange(len(models)), n - 1)):
        sessions[which].append(timing_session(models[which], protocol.threads, providers))
    check_same_inputs([side[0] for side in sessions])
    return sessions


def check_same_inputs(sessions: Sequence[ort.InferenceSession]) -> None:
    """Raise ValueError unless the sessions' programs take the same inputs (names, types, ranks)."""
    signatures = [sorted((i.name, i.type, len(i.shape)) for i in s.get_inputs()) for s in sessions]
    for other in signatures[1:]:
        if other != signatures[0]:
            raise ValueError(f"the programs take different inputs (name, type, rank: {signatures[0]} vs {other}); "
                             "only programs with the same interface can be compared")


def timing_feeds(original: onnx.ModelProto, sessions: Sequence[ort.InferenceSession], seed: int,
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """The seeded random inputs both programs are timed on (the verification's: ``input_shapes`` fix dynamic
    dimensions, integer inputs range over the axis they index), with their masks as a server feeds them
    (:func:`eqsat.verification.feeds.served`: a padded batch, a row alone unpadded); ``sessions``: the original's and another's."""
    shapes = feed_shapes(sessions[0], sessions[-1], input_shapes)
    feeds = served(original, random_inputs(sessions[0], np.random.default_rng(seed), shapes, index_bounds(original)),
                   seed)
    assert feeds is not None
    return feeds


def compare(original: onnx.ModelProto, optimized: onnx.ModelProto, protocol: Protocol = Protocol(),
            input_shapes: Mapping[str, tuple[int, ...]] | None = None,
            feeds: dict[str, np.ndarray] | None = None) -> Comparison:
    """Time ``original`` against ``optimized`` end to end in onnxruntime on the same inputs: ``feeds``, or
    seeded random ones (:func:`timing_feeds`). The speedup is original / optimized. Other runtimes, and
    several candidates at once: :func:`eqsat.measurement.runtimes.compare_programs`."""
    sessions = timing_sessions([original, optimized], protocol)
    if feeds is None:
        feeds = timing_feeds(original, [sessions[0][0], sessions[1][0]], protocol.seed, input_shapes)
    runs = [[functools.partial(s.run, None, feeds) for s in side] for side in sessions]
    info = {**runtime_info(protocol.threads), "sessions_per_program": len(sessions[1])}
    return compare_calls(runs[0], runs[1], protocol, info)
