"""The shipping gate: a sequential test on paired, interleaved rounds that ships a program only when it is faster
with a designed false-ship rate, and keeps adding rounds while the answer is open and budget remains.

Each round times a block of the original and of every candidate (:mod:`eqsat.timing`); a round gives one paired
log ratio ``x = log(original / candidate)``. At a *look*, :func:`assess` turns the rounds so far into an interval
for the speedup: the 10%-trimmed mean of ``x`` (robust to a load spike that hits one side of a round), with the
standard error of Yuen's trimmed mean made cluster-robust over the session pairs the rounds ran on (sessions of
one program differ slightly, so the pairs are the independent units), and Student's t with the clusters' degrees
of freedom. With fewer than :attr:`Gate.min_clusters` pairs the rounds are the units.

The design (:class:`Gate`): the false-ship probability of a comparison family (the original against ``m``
candidates, looked at ``looks`` times) is at most ``alpha``: each one-sided test runs at
``alpha / (m * looks)`` (Bonferroni over candidates and looks, valid for any stopping rule because the looks sit
at round counts fixed by the budget, :func:`look_schedule`, never by the data). At a look a candidate is
*faster* when the interval's lower bound is above 1, *not faster* when its upper bound is below
:attr:`Gate.futility`, else *open*; the run stops at the first look where none is open, else at the last.

Sized for the 1% gate: on paired rounds whose log ratios have a standard deviation ``s``, a program truly ``g``
faster ships with probability ~ ``Phi(log(g) sqrt(n_eff) / s - t)``; :func:`rounds_for_power` gives the rounds
that reaches a power, so the budget can be set from the spread seen on a machine.

>>> round(t_quantile(0.975, 9), 3), round(t_quantile(0.995, 30), 3)
(2.262, 2.75)
>>> g = Gate()
>>> look_schedule(100, g)
[25, 50, 75, 100]
>>> round(g.one_sided(candidates=1), 5)
0.0025
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

TRIM = 0.1
"""the share of rounds trimmed from each end of the paired log ratios"""
TRIM_EFFICIENCY = 0.94
"""the trimmed mean's efficiency against the mean on normal rounds (what trimming costs in rounds)"""

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
    max_rounds: int = 600
    """rounds at most, however fast the programs"""
    clustered: bool = False
    """the clusters are the only units (programs renewed every few rounds: :func:`eqsat.timing.compare_many`): with
    fewer than :attr:`min_clusters` of them the interval is unbounded, never one over the rounds"""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha {self.alpha} must lie in (0, 0.5), e.g. 0.01")
        if self.looks < 1 or self.max_rounds < 2 or self.min_clusters < 2 or self.futility < 1:
            raise ValueError("looks must be at least 1, max_rounds and min_clusters at least 2, futility at least 1")

    def one_sided(self, candidates: int) -> float:
        """The error rate of each one-sided test at each look."""
        return self.alpha / (max(candidates, 1) * self.looks)

    def confidence(self, candidates: int) -> float:
        """The two-sided confidence of the interval reported at each look (its lower tail is :meth:`one_sided`)."""
        return family_confidence(1 - 2 * self.alpha, max(candidates, 1) * self.looks)


def look_schedule(planned_rounds: int, gate: Gate) -> list[int]:
    """The round counts at which to look: ``gate.looks`` evenly spread over ``planned_rounds`` (at least 2 each,
    increasing; fewer looks when there are too few rounds)."""
    n = max(2, planned_rounds)
    return sorted({max(2, math.ceil(n * (j + 1) / gate.looks)) for j in range(gate.looks)})


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


def trimmed_interval(log_ratios: Series, clusters: Sequence[int] | None, confidence: float,
                     min_clusters: int = Gate.min_clusters, clustered: bool = False) -> Interval:
    """The trimmed-mean speedup of paired log ratios and its two-sided interval at ``confidence`` (Yuen's
    standard error, cluster-robust over ``clusters`` when there are at least ``min_clusters`` of them; else over
    the rounds, or, ``clustered``, unbounded)."""
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
    elif clustered:
        return Interval(math.exp(center), 0.0, math.inf, int(groups.size))
    else:
        var = float((w ** 2).sum()) / (h * (h - 1))
        df, units = h - 1, n
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(var)
    return Interval(math.exp(center), math.exp(center - half), math.exp(center + half), units)


def state_of(interval: Interval, gate: Gate) -> State:
    """Faster (the interval lies above 1), not faster (it lies below the futility bound), or open."""
    if interval.ci_low > 1:
        return "faster"
    if interval.ci_high < gate.futility:
        return "not faster"
    return "open"


def assess(original_ms: Sequence[float], candidates_ms: Sequence[Sequence[float]],
           clusters: Sequence[Sequence[int]] | None, gate: Gate, family: int | None = None) -> list[tuple[Interval, State]]:
    """Each candidate's interval and state at a look over the paired rounds so far (``clusters``: per candidate,
    the session pair of each round, or None). ``family``: the candidates the Bonferroni correction counts (those
    timed in other runs too, when the measurement is split into groups: :mod:`eqsat.grouping`); None: these."""
    a = np.asarray(original_ms, float)
    confidence = gate.confidence(family or len(candidates_ms))
    out = []
    for j, b in enumerate(candidates_ms):
        x = np.log(a / np.asarray(b, float))
        iv = trimmed_interval(x, None if clusters is None else clusters[j], confidence, gate.min_clusters,
                              gate.clustered)
        out.append((iv, state_of(iv, gate)))
    return out


def replay(original_ms: Sequence[float], candidates_ms: Sequence[Sequence[float]], gate: Gate,
           clusters: Sequence[Sequence[int]] | None = None) -> tuple[int, list[tuple[Interval, State]]]:
    """The gate run on rounds already drawn (all of them the budget's plan): (the rounds used when it stopped,
    the verdicts there). What :func:`eqsat.timing.compare_many` does while timing, for series given in advance."""
    n = len(original_ms)
    verdicts: list[tuple[Interval, State]] = []
    for stop in look_schedule(n, gate):
        cut = None if clusters is None else [c[:stop] for c in clusters]
        verdicts = assess(original_ms[:stop], [b[:stop] for b in candidates_ms], cut, gate)
        if all(s != "open" for _, s in verdicts):
            return stop, verdicts
    return min(n, look_schedule(n, gate)[-1]), verdicts


def rounds_for_power(spread: float, gain: float, power: float, gate: Gate, candidates: int = 1,
                     units: int | None = None) -> int:
    """Rounds whose paired log ratios spread ``spread`` (standard deviation) resolve a program ``gain`` times
    faster (e.g. 1.02) with probability ``power`` at the last look (normal approximation, trimming's efficiency
    included; ``units``: the session pairs the standard error counts, whose few degrees of freedom cost rounds)."""
    one_sided = 1 - gate.one_sided(candidates)
    bound = NormalDist().inv_cdf(one_sided) if units is None else t_quantile(one_sided, max(units - 1, 1))
    z = bound + NormalDist().inv_cdf(power)
    return math.ceil((z * spread / math.log(gain)) ** 2 / TRIM_EFFICIENCY)


__all__ = ["TRIM", "TRIM_EFFICIENCY", "Gate", "Interval", "Series", "State", "assess", "family_confidence", "look_schedule", "replay",
           "rounds_for_power", "state_of", "t_cdf", "t_quantile", "trimmed_interval"]
