"""The shipping gate: a sequential test on paired, interleaved rounds that ships a program only when it is faster
with a designed false-ship rate, and keeps adding rounds while the answer is open and budget remains.

Each round times the original and every candidate (one call each, or a block: :mod:`eqsat.measurement.timing`); a round gives one paired
log ratio ``x = log(original / candidate)``. At a *look*, :func:`assess` turns the rounds so far into an interval
for the speedup: the 10%-trimmed mean of ``x`` (robust to a load spike that hits one side of a round), with the
standard error of Yuen's trimmed mean made cluster-robust over the session pairs the rounds ran on (sessions of
one program differ slightly, so the pairs are the independent units), and Student's t with the clusters' degrees
of freedom. With fewer than :attr:`Gate.min_clusters` pairs the rounds are the units.

The design (:class:`Gate`): the false-ship probability of a comparison family (the original against ``m``
candidates, looked at ``looks`` times) is at most ``alpha``: each one-sided test runs at
``alpha / (m * looks)`` (Bonferroni over candidates and looks: valid for any stopping rule, since at most
``looks`` looks are taken, each a test at its own level). At a look a candidate is *faster* when the interval's
lower bound is above 1, *not faster* when its upper bound is below :attr:`Gate.futility`, else *open*; the run
stops at the first look where none is open or where each open one lies below a faster one (:func:`settled`), else at
the last.

Rounds sized to the variance seen (:class:`Sequential`): the budget plans the rounds before any data, and their
first look is a *pilot*. If a candidate is still open there, the rounds are planned again from the pilot's
spread of the paired log ratios (:func:`spread`): :func:`rounds_for_power` gives the rounds that resolve a
program :attr:`Gate.gain` faster with probability :attr:`Gate.power`, at least the budget's, at most the cap the
caller affords (an extended budget); the remaining looks are then spread evenly over the new plan and never move
again. The plan is *blinded*: the spread is computed from each round's deviation from the centre, never from the
centre itself (a series shifted by a constant, i.e. any true speedup, gives the same plan). For normal rounds the
sample variance is independent of the sample mean, so the round counts at which the later tests are made carry
no information about their outcome: each is still a test at ``alpha / (m * looks)`` given its round count, and
Bonferroni over at most ``looks`` of them keeps the family at ``alpha`` (for heavy-tailed rounds the trimmed
mean keeps this approximately; the seeded simulations of ``tests/measurement/test_gate_plan.py`` check it). Planning from the
observed *difference* instead would let a lucky pilot buy more rounds and inflate the false-ship rate.

Sized for the 1% gate: on paired rounds whose log ratios have a standard deviation ``s``, a program truly ``g``
faster ships with probability ~ ``Phi(log(g) sqrt(n_eff) / s - t)``; :func:`rounds_for_power` gives the rounds
that reaches a power. With ``G`` session pairs as the units the bound ``t`` has ``G - 1`` degrees of freedom:
with the timing's 20 pairs, t(0.9975, 19) = 3.17 (10 pairs: 3.69) against the normal 2.81, and the noncentral t's
width, more rounds for the same power. The pairs stay the units all the same: a session's offset (memory placement) is
shared by all its rounds and no round count averages it away, so rounds as the units understate the interval
(on ``tests/measurement/test_gate.py``'s synthetic rounds with 0.3% session offsets, without spikes, the one-sided test at
0.25% false-ships 0.37-0.40% of 6,000 A/A draws with rounds as the units, 0.23% with the pairs).

>>> round(t_quantile(0.975, 9), 3), round(t_quantile(0.995, 30), 3)
(2.262, 2.75)
>>> g = Gate()
>>> look_schedule(100, g)
[25, 50, 75, 100]
>>> look_schedule(300, g, pilot=25)
[25, 117, 209, 300]
>>> round(g.one_sided(candidates=1), 5)
0.0025
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import numpy as np

TRIM = 0.1
"""the share of rounds trimmed from each end of the paired log ratios"""
TRIM_EFFICIENCY = 0.94
"""the trimmed mean's efficiency against the mean on normal rounds (what trimming costs in rounds)"""
PLAN_CONFIDENCE = 0.8
"""the rounds after the pilot are planned from this upper confidence bound of its spread (:func:`spread_bound`)"""

State = Literal["faster", "not faster", "open"]
Series = Sequence[float] | np.ndarray
"""one value per round"""


def family_confidence(confidence: float, comparisons: int) -> float:
    """The confidence of each of ``comparisons`` intervals so that all hold together with ``confidence``.

    >>> family_confidence(0.95, 4)
    0.9875
    """
    return 1 - (1 - confidence) / max(comparisons, 1)


@dataclass(frozen=True)
class Gate:
    """The sequential shipping rule (see the module's docstring)."""

    alpha: float = 0.01
    """the designed false-ship rate of one run: how often a program no faster than the original ships, at most"""
    looks: int = 4
    """interim analyses over the budget's rounds; ``alpha`` is spread evenly over them"""
    futility: float = 1.005
    """stop looking at a candidate whose whole interval lies below this speedup (it cannot be a gain worth having)"""
    min_clusters: int = 5
    """session pairs needed to use them as the units of the standard error (else the rounds are)"""
    max_rounds: int = 12000
    """rounds at most, however fast the programs (a round runs one call of each program where the extended budget
    affords at most this many; faster programs run blocks of calls instead, :func:`eqsat.measurement.timing.compare_many`)"""
    clustered: bool = False
    """the clusters are the only units (programs renewed every few rounds: :func:`eqsat.measurement.timing.compare_many`): with
    fewer than :attr:`min_clusters` of them the interval is unbounded, never one over the rounds"""
    gain: float = 1.02
    """the true speedup the rounds are planned to resolve (:class:`Sequential`)"""
    power: float = 0.90
    """the probability that a program :attr:`gain` times faster ships, by the plan's last look"""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha {self.alpha} must lie in (0, 0.5), e.g. 0.01")
        if self.gain <= 1 or not 0.5 <= self.power < 1:
            raise ValueError(f"gain {self.gain} must be above 1 and power {self.power} in [0.5, 1), e.g. 1.02, 0.9")
        if self.looks < 1 or self.max_rounds < 2 or self.min_clusters < 2 or self.futility < 1:
            raise ValueError("looks must be at least 1, max_rounds and min_clusters at least 2, futility at least 1")

    def one_sided(self, candidates: int) -> float:
        """The error rate of each one-sided test at each look."""
        return self.alpha / (max(candidates, 1) * self.looks)

    def confidence(self, candidates: int) -> float:
        """The two-sided confidence of the interval reported at each look (its lower tail is :meth:`one_sided`)."""
        return family_confidence(1 - 2 * self.alpha, max(candidates, 1) * self.looks)


def look_schedule(planned_rounds: int, gate: Gate, pilot: int | None = None) -> list[int]:
    """The round counts at which to look: ``gate.looks`` evenly spread over ``planned_rounds`` (at least 2 each,
    increasing; fewer looks when there are too few rounds). With a ``pilot`` (the first look, already taken), the
    other ``gate.looks - 1`` are evenly spread over the rounds after it."""
    n = max(2, planned_rounds)
    if pilot is None:
        return sorted({max(2, math.ceil(n * (j + 1) / gate.looks)) for j in range(gate.looks)})
    if pilot >= n or gate.looks < 2:
        return [pilot]
    rest = gate.looks - 1
    return [pilot, *sorted({pilot + max(1, math.ceil((n - pilot) * (j + 1) / rest)) for j in range(rest)})]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0 < p < 1 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, max(1.0, NormalDist().inv_cdf(p))
    while t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class Interval:
    """A speedup (original / candidate) and its interval at one look."""

    speedup: float
    ci_low: float
    ci_high: float
    units: int
    """the independent units the standard error counted (session pairs, or rounds)"""


@dataclass(frozen=True)
class _Trimmed:
    center: float
    """the trimmed mean of the log ratios"""
    var: float
    """its variance (Yuen's)"""
    df: int
    units: int


def _trimmed(log_ratios: Series, clusters: Sequence[int] | None, min_clusters: int) -> _Trimmed:
    """The trimmed mean of paired log ratios and Yuen's variance of it, cluster-robust over ``clusters`` when
    there are at least ``min_clusters`` of them (else over the rounds)."""
    x = np.asarray(log_ratios, float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"need at least 2 paired rounds, got {x.shape}")
    n = x.size
    k = int(TRIM * n)
    order = np.sort(x)
    center = float(order[k:n - k].mean())
    winsorized = np.clip(x, order[k], order[n - 1 - k])
    w = winsorized - winsorized.mean()
    h = n - 2 * k  # the rounds the trimmed mean keeps
    labels = np.zeros(n, int) if clusters is None else np.asarray(clusters)
    if labels.shape != x.shape:
        raise ValueError(f"clusters: need one label per round ({n}), got {labels.shape}")
    groups = np.unique(labels)
    if groups.size >= min_clusters:
        sums = np.array([w[labels == g].sum() for g in groups])
        var = groups.size / (groups.size - 1) * float((sums ** 2).sum()) / (h * h)
        df, units = groups.size - 1, int(groups.size)
    else:
        var = float((w ** 2).sum()) / (h * (h - 1))
        df, units = h - 1, n
    return _Trimmed(center, var, df, units)


def trimmed_interval(log_ratios: Series, clusters: Sequence[int] | None, confidence: float,
                     min_clusters: int = Gate.min_clusters, clustered: bool = False) -> Interval:
    """The trimmed-mean speedup of paired log ratios and its two-sided interval at ``confidence`` (Yuen's
    standard error, cluster-robust over ``clusters`` when there are at least ``min_clusters`` of them; else over
    the rounds, or, ``clustered``, unbounded)."""
    t = _trimmed(log_ratios, clusters, min_clusters)
    groups = 1 if clusters is None else int(np.unique(np.asarray(clusters)).size)
    if clustered and groups < min_clusters:  # too few clusters, and the rounds are not units here
        return Interval(math.exp(t.center), 0.0, math.inf, groups)
    half = t_quantile(1 - (1 - confidence) / 2, t.df) * math.sqrt(t.var)
    return Interval(math.exp(t.center), math.exp(t.center - half), math.exp(t.center + half), t.units)


def spread(log_ratios: Series) -> float:
    """The spread of paired log ratios as the gate's test sees it: the standard deviation of normal rounds that
    would give the trimmed mean the standard error it has here (Yuen's, over the rounds), so a load spike counts
    as much as it costs the test, not as its square. Blinded (:class:`Sequential`): computed from the rounds'
    deviations from their centre, it is the same for the series shifted by any constant.

    >>> x = np.random.default_rng(0).normal(0.5, 0.03, 2000)
    >>> round(spread(x), 2), math.isclose(spread(x), spread(x - 0.5))
    (0.03, True)
    """
    x = np.asarray(log_ratios, float)
    return math.sqrt(_trimmed(x, None, 2).var * x.size * TRIM_EFFICIENCY)


def state_of(interval: Interval, gate: Gate) -> State:
    """Faster (the interval lies above 1), not faster (it lies below the futility bound), or open."""
    if interval.ci_low > 1:
        return "faster"
    if interval.ci_high < gate.futility:
        return "not faster"
    return "open"


def settled(verdicts: Sequence[tuple[Interval, State]]) -> bool:
    """Whether more rounds cannot change the answer: no candidate is open, or one is faster with confidence and
    every open one's whole interval lies below that one's lower bound (it could at most become faster than the
    original, never than it; a decode step's candidate of the original's own speed beside two 1.2x faster ones
    held its measurement to the extended budget).

    >>> fast, same = Interval(1.2, 1.15, 1.25, 20), Interval(1.0, 0.99, 1.01, 20)
    >>> settled([(fast, "faster"), (same, "open")]), settled([(same, "open"), (fast, "faster")])
    (True, True)
    >>> settled([(Interval(1.03, 1.01, 1.05, 20), "faster"), (Interval(1.01, 0.99, 1.03, 20), "open")])
    False
    >>> settled([(same, "open")]), settled([(same, "not faster"), (fast, "faster")])
    (False, True)
    """
    opened = [iv for iv, s in verdicts if s == "open"]
    low = max((iv.ci_low for iv, s in verdicts if s == "faster"), default=-math.inf)
    return all(iv.ci_high < low for iv in opened)


def assess(original_ms: Series, candidates_ms: Sequence[Series],
           clusters: Sequence[Sequence[int]] | None, gate: Gate, family: int | None = None) -> list[tuple[Interval, State]]:
    """Each candidate's interval and state at a look over the paired rounds so far (``clusters``: per candidate,
    the session pair of each round, or None). ``family``: the candidates the Bonferroni correction counts (those
    timed in other runs too, when the measurement is split into groups: :mod:`eqsat.measurement.grouping`); None: these."""
    a = np.asarray(original_ms, float)
    confidence = gate.confidence(family or len(candidates_ms))
    out = []
    for j, b in enumerate(candidates_ms):
        x = np.log(a / np.asarray(b, float))
        iv = trimmed_interval(x, None if clusters is None else clusters[j], confidence, gate.min_clusters,
                              gate.clustered)
        out.append((iv, state_of(iv, gate)))
    return out


@dataclass
class Sequential:
    """One sequential comparison's plan (see the module's docstring): the looks, planned from the budget's rounds
    (``base``), then once, at the pilot (the first look), from the spread seen, up to ``cap`` rounds. Used by
    :func:`eqsat.measurement.timing.compare_many` while timing and by :func:`replay` on series given in advance."""

    gate: Gate
    candidates: int
    base: int
    """the rounds the budget plans before any data"""
    cap: int
    """the rounds at most (the extended budget's)"""
    looks: list[int] = field(default_factory=list)
    """the round counts of the looks: the budget's until the pilot, then the plan's"""
    taken: int = 0
    """the looks taken so far"""
    spread: float | None = None
    """the pilot's spread (:func:`spread`, the largest over the candidates); None before it"""
    wanted: int | None = None
    """the rounds :func:`rounds_for_power` asked for at the pilot, before the floor and the cap"""

    def __post_init__(self) -> None:
        self.base = max(2, min(self.base, self.gate.max_rounds))
        self.cap = max(self.base, min(self.cap, self.gate.max_rounds))
        self.looks = self.looks or look_schedule(self.base, self.gate)

    @property
    def planned(self) -> int:
        """The rounds of the plan's last look."""
        return self.looks[-1]

    @property
    def next_look(self) -> int | None:
        """The round count of the next look, None when the plan's looks are all taken."""
        return self.looks[self.taken] if self.taken < len(self.looks) else None

    def look(self, original_ms: Series, candidates_ms: Sequence[Series], clusters: Sequence[Sequence[int]] | None,
             cap: int | None = None) -> list[tuple[Interval, State]]:
        """Each candidate's interval and state over the rounds so far (:func:`assess`); at the pilot, with a
        candidate still open, the rounds are planned again from the spread (never above ``cap``, where the
        caller affords fewer rounds than :attr:`cap` by now, nor below the budget's)."""
        verdicts = assess(original_ms, candidates_ms, clusters, self.gate, self.candidates)
        self.taken += 1
        if self.taken == 1 and len(self.looks) > 1 and any(s == "open" for _, s in verdicts):
            self.plan(original_ms, candidates_ms, clusters, self.cap if cap is None else min(cap, self.cap))
        return verdicts

    def plan(self, original_ms: Series, candidates_ms: Sequence[Series], clusters: Sequence[Sequence[int]] | None,
             cap: int) -> None:
        """The rounds and looks after the pilot, from the pilot's blinded spread."""
        a = np.asarray(original_ms, float)
        xs = [np.log(a / np.asarray(b, float)) for b in candidates_ms]
        self.spread = max(spread(x) for x in xs)
        bound = spread_bound(self.spread, len(xs[0]))
        groups = None if clusters is None else min(len(set(c)) for c in clusters)
        units = groups if groups is not None and groups >= self.gate.min_clusters else None
        self.wanted = rounds_for_power(bound, self.gate.gain, self.gate.power, self.gate, self.candidates,
                                       units)
        planned = min(max(self.wanted, self.base), max(cap, self.base))
        if planned != self.base:
            self.looks = look_schedule(planned, self.gate, pilot=self.looks[0])


def replay(original_ms: Sequence[float], candidates_ms: Sequence[Sequence[float]], gate: Gate,
           clusters: Sequence[Sequence[int]] | None = None, base: int | None = None) -> tuple[int, list[tuple[Interval, State]]]:
    """The gate run on rounds already drawn: (the rounds used when it stopped, the verdicts there). What
    :func:`eqsat.measurement.timing.compare_many` does while timing, for series given in advance. ``base``: the rounds the
    budget plans (the pilot is its first look), planned again from the spread up to all the rounds given; None:
    all of them, no planning. :func:`replay_plan` returns the plan too."""
    used, verdicts, _ = replay_plan(original_ms, candidates_ms, gate, clusters, base)
    return used, verdicts


def replay_plan(original_ms: Sequence[float], candidates_ms: Sequence[Sequence[float]], gate: Gate,
                clusters: Sequence[Sequence[int]] | None = None,
                base: int | None = None) -> tuple[int, list[tuple[Interval, State]], Sequential]:
    """:func:`replay`, and the :class:`Sequential` plan it followed."""
    n = len(original_ms)
    seq = Sequential(gate, len(candidates_ms), n if base is None else base, n)
    verdicts: list[tuple[Interval, State]] = []
    used = 0
    while (stop := seq.next_look) is not None and stop <= n:
        cut = None if clusters is None else [c[:stop] for c in clusters]
        verdicts = seq.look(original_ms[:stop], [b[:stop] for b in candidates_ms], cut)
        used = stop
        if settled(verdicts):
            break
    return used, verdicts, seq


def rounds_for_power(spread: float, gain: float, power: float, gate: Gate, candidates: int = 1,
                     units: int | None = None) -> int:
    """Rounds whose paired log ratios spread ``spread`` (standard deviation) resolve a program ``gain`` times
    faster (e.g. 1.02) with probability ``power`` at the last look (normal approximation, trimming's efficiency
    included; ``units``: the session pairs the standard error counts, whose few degrees of freedom cost rounds:
    the t bound, and the noncentral t's wider spread, ``sqrt(1 + t^2 / (2 df))``)."""
    one_sided = 1 - gate.one_sided(candidates)
    z_power = NormalDist().inv_cdf(power)
    if units is None:
        z = NormalDist().inv_cdf(one_sided) + z_power
    else:
        df = max(units - 1, 1)
        bound = t_quantile(one_sided, df)
        z = bound + z_power * math.sqrt(1 + bound * bound / (2 * df))
    return math.ceil((z * spread / math.log(gain)) ** 2 / TRIM_EFFICIENCY)


def spread_bound(spread: float, rounds: int, confidence: float = PLAN_CONFIDENCE) -> float:
    """An upper ``confidence`` bound of the true spread, from the ``spread`` of ``rounds`` rounds (chi-square with
    ``rounds - 1`` degrees of freedom, Wilson-Hilferty): planning from the estimate itself would fall short of
    the power whenever a short pilot happens to underestimate it.

    >>> round(spread_bound(0.05, 50) / 0.05, 3)
    1.099
    """
    k = max(rounds - 1, 1)
    z = NormalDist().inv_cdf(1 - confidence)
    chi2 = k * max(1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k)), 1e-3) ** 3
    return spread * math.sqrt(k / chi2)


__all__ = ["PLAN_CONFIDENCE", "TRIM", "TRIM_EFFICIENCY", "Gate", "Interval", "Sequential", "Series", "State", "assess",
           "family_confidence", "look_schedule", "replay", "replay_plan", "rounds_for_power", "settled", "spread",
           "spread_bound", "state_of", "t_cdf", "t_quantile", "trimmed_interval"]
