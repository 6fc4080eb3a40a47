"""A stop with a message before the machine runs out of memory. A model whose runs at the sizes it is tuned at
need more memory than the machine has (a mixture-of-experts decoder whose shape probes run it at several batch
sizes) would otherwise end with the system's out-of-memory killer: the process gone without a word, no report.
:func:`arm` starts a thread that reads the memory the machine (or the process's cgroup) has left every
:data:`EVERY_S` seconds; once less than :data:`LOW_SHARE` of it is left while this process holds at least
:data:`OWN_SHARE` of it (another program's memory is not this run's to answer for), it says so and ends the
process with :data:`EXIT_CODE`, nothing written. Once the results are being renamed into place (the run's last
step, :func:`eqsat.onnx.io.signals_held`), it stops watching: a stop then would leave them written while saying
they were not."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from eqsat.memory import Reading, read
from eqsat.onnx import io as onnx_io

EXIT_CODE = 4
EVERY_S = 0.1
LOW_SHARE = 0.08
"""the share of the machine's memory left below which the run stops (at least :data:`LOW_BYTES`)"""
LOW_BYTES = 512 << 20
"""the least memory left below which the run stops (an eighth of the memory where that is less)"""
OWN_SHARE = 0.4
"""the share of the machine's memory this process must hold for the stop to be its own"""
def too_low(r: Reading, low_share: float = LOW_SHARE, own_share: float = OWN_SHARE) -> bool:
    """Whether the run should stop: little memory left (``low_share`` of it, at least :data:`LOW_BYTES` but at most
    an eighth of a small machine's or cgroup's), most of it taken by this process."""
    low = max(low_share * r.total, min(LOW_BYTES, r.total / 8))
    return r.available < low and r.own >= own_share * r.total


def arm(low_share: float = LOW_SHARE, own_share: float = OWN_SHARE,
        every_s: float = EVERY_S) -> Callable[[], None]:
    """Watch the memory from a daemon thread; the function that stops watching. Nothing is watched where the
    memory cannot be read."""
    if read() is None:
        return lambda: None
    stop = threading.Event()
    threading.Thread(target=_watch, args=(stop, low_share, own_share, every_s), name="eqsat-memory",
                     daemon=True).start()
    return stop.set


def _watch(stop: threading.Event, low_share: float, own_share: float, every_s: float) -> None:
    while not stop.wait(every_s):
        if onnx_io.signals_held():  # the results are being put in place: the run is ending, and a stop now would
            while onnx_io.signals_held():  # leave them written while it says nothing was; it is let finish
                time.sleep(0.05)
            return
        r = read()
        if r is None or not too_low(r, low_share, own_share):
            continue
        if onnx_io.signals_held():  # (began since the check above)
            continue
        gib = 1 << 30
        try:
            print(f"eqsat: error: stopped before the machine ran out of memory: this run held "
                  f"{r.own / gib:.1f} GiB of {r.total / gib:.1f} GiB, {r.available / gib:.1f} GiB left; the "
                  "model's runs at the sizes it is tuned and checked at need more memory than this machine has: "
                  "tune it at smaller sizes (--input-shape NAME=DIMS, e.g. a shorter sequence) or run it on a "
                  "machine with more memory; no output was written or changed", file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_CODE)


__all__ = ["EXIT_CODE", "Reading", "arm", "read", "too_low"]
