"""Programs of known latency and synthetic paired rounds for the timing protocol and the shipping gate
(tests/measurement/test_runtimes.py, tests/measurement/test_gate.py, tests/measurement/test_gate_plan.py): a
callable that spins for a given time, and seeded block medians of two programs whose true latency ratio is known
(the oracle)."""

from __future__ import annotations

import time

import numpy as np

SESSIONS = 10
"""session pairs of the synthetic rounds: round r runs on session r mod SESSIONS of each program"""


def busy(ms: float):
    """A callable that spins for ``ms`` milliseconds: a program of known latency."""
    def call() -> None:
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass
    return call


def paired_rounds(rng: np.random.Generator, ratio: float, n: int, noise: float = 0.03, session: float = 0.003,
                  spikes: float = 0.05) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block medians of the original (a) and a candidate (b) whose true latency ratio is ``ratio``: a drifting
    machine load shared by the round, a per-session offset (round r runs on session r mod 10 of each program),
    independent lognormal noise, and rare load spikes hitting one side of a round. Returns a, b, the session pairs."""
    load = np.exp(np.cumsum(rng.normal(0, 0.05, n)))
    pairs = np.arange(n) % SESSIONS
    sides = []
    for scale in (ratio, 1.0):
        offset = np.exp(rng.normal(0, session, SESSIONS))[pairs]
        spike = np.where(rng.random(n) < spikes, np.exp(np.abs(rng.normal(0, 0.3, n))), 1.0)
        sides.append(scale * load * offset * spike * np.exp(rng.normal(0, noise, n)))
    return sides[0], sides[1], pairs


class VirtualTime:
    """The timing protocol's clock of seconds (``eqsat.measurement.timing.time``) for a synthetic block clock:
    it advances only by what the block clock says the timed calls took, so that the rounds a budget holds, its
    deadlines and the pace an extension is planned from do not depend on how fast or loaded the host is.
    :meth:`install` puts it in place of the module's ``time`` and returns the block clock wrapped to advance it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def install(self, monkeypatch, clock):
        from eqsat.measurement import timing
        monkeypatch.setattr(timing, "time", self)

        def timed(call, repeats: int) -> float:
            ms = clock(call, repeats)
            self.now += ms * repeats / 1e3
            return ms
        return timed
