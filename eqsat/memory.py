"""Resident memory of this process, per phase: the peak (``VmHWM``) and the current size (``VmRSS``) read from
``/proc/self/status``, and the peak reset between phases (``/proc/self/clear_refs``, Linux 4.0 and later) so that
each phase's figure is its own peak, not the run's so far.

Where ``/proc`` is missing (not Linux) the figures fall back to ``resource.getrusage``'s lifetime peak, which
never resets; :func:`reset_peak` says which one a caller gets.

>>> now = current_rss_mb()
>>> peak_rss_mb() >= now > 0
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"


def _status_kb(field: str) -> int | None:
    """The ``field`` line of /proc/self/status in kB, or None without /proc."""
    try:
        with open(STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _lifetime_peak_kb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # kB on Linux


def peak_rss_mb() -> float:
    """The peak resident memory in MiB since the last :func:`reset_peak` (the process's lifetime without one)."""
    kb = _status_kb("VmHWM")
    return (kb if kb is not None else _lifetime_peak_kb()) / 1024.0


def current_rss_mb() -> float:
    """The resident memory in MiB now."""
    kb = _status_kb("VmRSS")
    return (kb if kb is not None else _lifetime_peak_kb()) / 1024.0


def reset_peak() -> bool:
    """Reset the peak to the current size; False where the kernel does not allow it (the peak then keeps
    growing over the run, and a phase's figure is the run's peak so far)."""
    try:
        fd = os.open(CLEAR_REFS, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, b"5")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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


__all__ = ["current_rss_mb", "peak_rss_mb", "release", "reset_peak"]
