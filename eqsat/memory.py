"""Resident memory of this process, per phase, without touching the kernel's record of the run's peak.

The kernel keeps one high-water mark of a process's resident memory (``VmHWM`` in ``/proc/self/status``); it is
what ``getrusage`` and ``/usr/bin/time -v`` report as the maximum resident set size. It can be reset
(``/proc/self/clear_refs``), and an earlier version did so as each phase started: the phase's own peak was then
exact, but the run's peak before the last reset was lost, for the process itself and for whoever waits for it
(``time -v`` then reported the peak since the last reset: a 1B LLaMA's verify read 16 GB, ``time -v`` 8.2 GB).
So the mark is never reset here. A phase's peak (:func:`watch`) is read two ways:

- where the high-water mark rose during the phase, the phase reached the run's peak so far: its peak is the mark,
  exactly;
- otherwise the phase stayed below an earlier peak: its peak is the largest resident size a thread sampled every
  :data:`SAMPLE_EVERY_S` seconds while it ran (a spike shorter than that may be missed; never over the truth).

Where ``/proc`` is missing (not Linux) the figures fall back to ``resource.getrusage``'s lifetime peak.

>>> with watch() as idle:
...     pass
>>> with watch() as phase:
...     block = bytearray(64 * 2**20)
>>> phase.mb >= idle.mb + 60 > 60
True
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass

STATUS = "/proc/self/status"
SAMPLE_EVERY_S = 0.005
"""how often :func:`watch` samples the resident size of a phase that stays below the run's peak so far"""


def proc_kb(*fields: str, path: str = STATUS) -> tuple[int, ...] | None:
    """The ``fields`` lines of a /proc file of ``NAME: value kB`` lines (/proc/self/status, /proc/meminfo) in kB, or
    None without /proc or any of them."""
    found: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in fields:
                    found[key] = int(line.split()[1])
    except OSError:
        return None
    return tuple(found[k] for k in fields) if len(found) == len(fields) else None


def _lifetime_peak_kb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # kB on Linux


def _peak_kb() -> int:
    got = proc_kb("VmHWM")
    return got[0] if got is not None else _lifetime_peak_kb()


def _rss_kb() -> int:
    got = proc_kb("VmRSS")
    return got[0] if got is not None else _lifetime_peak_kb()


@dataclass
class Peak:
    """The peak resident memory of a stretch of the run (:func:`watch`), known once it ends."""

    kb: int = 0
    exact: bool = False
    """whether the stretch reached the run's peak so far (its figure is then the kernel's mark, exactly), rather
    than sampled"""

    @property
    def mb(self) -> float:
        return self.kb / 1024.0


@contextlib.contextmanager
def watch(every_s: float = SAMPLE_EVERY_S) -> Iterator[Peak]:
    """The peak resident memory while the block runs (see the module's docstring), filled in on exit; the kernel's
    high-water mark is left as it is."""
    peak = Peak()
    before = _peak_kb()
    highest = [_rss_kb()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            kb = _rss_kb()
            if kb > highest[0]:
                highest[0] = kb
    thread = threading.Thread(target=sample, name="eqsat-memory-watch", daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
        after, now = _peak_kb(), _rss_kb()
        peak.exact = after > before
        peak.kb = after if peak.exact else max(highest[0], now)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release() -> bool:
    """Give the free memory of the C heap back to the system (glibc's ``malloc_trim``): what a large transient
    (a model serialized for the checker, a session built and dropped) left behind in the heap otherwise stays
    resident, and counts in every later phase. False where the C library has no such call."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


CGROUP = "/sys/fs/cgroup"
"""where the process's cgroup (v2) says its memory limit (:func:`read`)"""


@dataclass(frozen=True)
class Reading:
    total: int
    """bytes the process may use in all: the machine's memory, or its cgroup's limit where that is lower"""
    available: int
    """bytes of it still free to take"""
    own: int
    """bytes this process holds (its resident set)"""


def _cgroup() -> tuple[int, int] | None:
    """(limit, used) of the process's cgroup (v2) where it sets a limit; used without the file cache the kernel
    reclaims before it kills (``inactive_file``)."""
    try:
        with open(os.path.join(CGROUP, "memory.max")) as f:
            limit = f.read().strip()
        with open(os.path.join(CGROUP, "memory.current")) as f:
            used = int(f.read().strip())
        with open(os.path.join(CGROUP, "memory.stat")) as f:
            cache = next((int(line.split()[1]) for line in f if line.startswith("inactive_file ")), 0)
    except (OSError, ValueError):
        return None
    return None if limit == "max" else (int(limit), used - cache)


def read() -> Reading | None:
    """The memory now (None where /proc cannot be read: not Linux)."""
    machine, status = proc_kb("MemTotal", "MemAvailable", path="/proc/meminfo"), proc_kb("VmRSS")
    if machine is None or status is None:
        return None
    total, available, own = machine[0] * 1024, machine[1] * 1024, status[0] * 1024
    group = _cgroup()
    if group is not None and group[0] < total:
        total, available = group[0], min(available, group[0] - group[1])
    return Reading(total, available, own)


__all__ = ["CGROUP", "SAMPLE_EVERY_S", "Peak", "Reading", "proc_kb", "read", "release", "watch"]
