"""Memory accounting (issue 28): the per-phase peak resident memory of eqsat.memory and the report's
``memory_mb``, checked against the kernel's own figures (``getrusage``) and a known allocation."""

from __future__ import annotations

import os
import resource

import numpy as np
import onnx_builders as ob

from eqsat import memory
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.app.report import PhaseTimer

MB = 2**20


def physical_mb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MB


def test_a_known_allocation_shows_in_the_phase_peak_and_not_in_the_next():
    timer = PhaseTimer()
    with timer("allocate"):
        block = np.ones(200 * MB // 8)  # 200 MiB, touched
        held = memory.current_rss_mb()
        del block
    with timer("idle"):
        sum(range(1000))
    assert timer.memory_mb["allocate"] >= held - 0.5 and held >= 200
    assert timer.memory_mb["allocate"] <= physical_mb()
    if timer.resettable:  # the peak was reset as "idle" started: the freed 200 MiB are not in it
        assert timer.memory_mb["idle"] < timer.memory_mb["allocate"] - 150


def test_the_report_gives_every_timed_phase_its_peak():
    result = optimize(ob.attention(), OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1,
                                                        final_extractor="greedy-dag"))
    report = result.report
    assert set(report.memory_mb) == set(report.times)
    assert all(0 < mb <= physical_mb() for mb in report.memory_mb.values())
    # the kernel's peak since the last reset (getrusage reads the same high-water mark) covers the last phase's
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 >= list(report.memory_mb.values())[-1] - 0.5
    assert report.to_json()["memory_mb"] == report.memory_mb


def test_release_gives_the_freed_heap_back():
    """Many small blocks (the C heap, not mmap) freed stay resident until released; the phase timer releases them
    as each phase starts, so that a phase does not carry what an earlier one freed."""
    blocks = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]  # about 200 MiB of small heap blocks
    pin = bytes(1000) + b"x"  # above them in the heap: free() alone cannot shrink the heap past it
    held = memory.current_rss_mb()
    del blocks
    freed = memory.current_rss_mb()
    if memory.release():
        assert freed > held - 50  # freed, yet resident
        assert memory.current_rss_mb() < freed - 100
    else:  # no malloc_trim (not glibc): nothing to check but that the call is harmless
        assert memory.current_rss_mb() > 0
    assert pin
