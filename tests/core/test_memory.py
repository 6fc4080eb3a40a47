"""Memory accounting: the per-phase peak resident memory of eqsat.memory and the report's
``memory_mb``, checked against the kernel's own figures (``getrusage``) and a known allocation."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import onnx_builders as ob
import pytest

from eqsat import memory
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.app.report import PhaseTimer

MB = 2**20


def physical_mb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MB


STATM = "/proc/self/statm"
needs_statm = pytest.mark.skipif(not os.path.exists(STATM), reason="no /proc/self/statm (not Linux)")


def rss_mb() -> float:
    """The resident memory now, in MiB, read by the test itself: the resident pages of ``/proc/self/statm`` (eqsat
    reads ``VmRSS`` of ``/proc/self/status``; the kernel fills both from the same counters)."""
    with open(STATM, encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


@needs_statm
@pytest.mark.timing
def test_a_known_allocation_shows_in_the_phase_peak_and_not_in_the_next():
    timer = PhaseTimer()
    with timer("allocate"):
        block = np.ones(200 * MB // 8)  # 200 MiB, touched
        held = rss_mb()
        time.sleep(0.05)  # held past the sampling period: where an earlier test left the kernel's peak higher, the
        del block  # phase's peak is sampled, not the high-water mark
    with timer("idle"):
        time.sleep(0.05)  # sampled a few times
    assert timer.memory_mb["allocate"] >= held - 0.5 and held >= 200
    assert timer.memory_mb["allocate"] <= physical_mb()
    assert timer.memory_mb["idle"] < timer.memory_mb["allocate"] - 150  # the freed 200 MiB are not idle's


PHASES = """
import json, resource, time
import numpy as np
from eqsat.app.report import PhaseTimer
MB = 2**20
timer = PhaseTimer()
with timer("big"):
    block = np.ones(400 * MB // 8); del block  # 400 MiB touched, freed: the run's peak
with timer("small"):
    block = np.ones(100 * MB // 8); time.sleep(0.3); del block  # 100 MiB held 0.3 s, below the peak
with timer("after"):
    time.sleep(0.05)
print(json.dumps(timer.memory_mb))
"""


TIMED = """
import json, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
out = child.stdout.read()
_, status, usage = os.wait4(child.pid, 0)  # the child's own rusage, as time -v reads it
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "maxrss_kb": usage.ru_maxrss, "out": out}))
"""
"""a small parent, as ``/usr/bin/time`` is: a child's ``ru_maxrss`` starts from its parent's high-water mark at the
fork (Linux keeps the mark of the memory a child execs from), so a child of this test's large process would read
this process's peak, not its own"""


@pytest.mark.timing
def test_phase_peaks_agree_with_the_kernels_peak_of_the_whole_process():
    """The phases' memory figures and the process's peak as its parent sees it (``getrusage`` of the children:
    what ``/usr/bin/time -v`` reports) agree; resetting the kernel's high-water mark per phase made the
    parent see only the peak since the last phase began."""
    block = np.ones(700 * MB // 8)  # this process's peak above the child's: it must not show in the child's figure
    del block
    timed = subprocess.run([sys.executable, "-c", TIMED, PHASES], capture_output=True, text=True, timeout=300)
    assert timed.returncode == 0, timed.stderr
    got = json.loads(timed.stdout)
    assert got["rc"] == 0, timed.stderr
    phases = json.loads(got["out"])
    oracle = got["maxrss_kb"] / 1024
    assert abs(phases["big"] - oracle) <= 2, (phases, oracle)  # the run's peak, exactly
    assert 390 <= phases["big"] - phases["after"] <= 440, (phases, oracle)
    assert 95 <= phases["small"] - phases["after"] <= 140, (phases, oracle)  # sampled below the peak
    assert phases["small"] < phases["big"] - 250, (phases, oracle)


def test_the_report_gives_every_timed_phase_its_peak():
    result = optimize(ob.attention(), OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1,
                                                        final_extractor="greedy-dag"))
    report = result.report
    assert set(report.memory_mb) == set(report.times)
    assert all(0 < mb <= physical_mb() for mb in report.memory_mb.values())
    # the kernel's peak of the process (getrusage reads the same high-water mark) covers every phase's
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 >= max(report.memory_mb.values()) - 0.5
    assert report.to_json()["memory_mb"] == report.memory_mb


@needs_statm
def test_release_gives_the_freed_heap_back():
    """Many small blocks (the C heap, not mmap) freed stay resident until released; the phase timer releases them
    as each phase starts, so that a phase does not carry what an earlier one freed."""
    blocks = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]  # about 200 MiB of small heap blocks
    pin = bytes(1000) + b"x"  # above them in the heap: free() alone cannot shrink the heap past it
    held = rss_mb()
    del blocks
    freed = rss_mb()
    if memory.release():
        assert freed > held - 50  # freed, yet resident
        assert rss_mb() < freed - 100
    else:  # no malloc_trim (not glibc): nothing to check but that the call is harmless
        assert rss_mb() > 0
    assert pin
