"""A hard stop after an interrupt the run cannot take in time. Python runs a signal's handler between statements,
so a SIGTERM or Ctrl-C that arrives inside one long native call (onnx's shape inference, an onnxruntime session,
the ILP solver) waits until that call returns, minutes at worst, and ``timeout N eqsat ...`` does not bound the
run. The C-level handler writes the signal's number to a wakeup file descriptor at once; :func:`arm` starts a
thread that reads it, gives the run :data:`GRACE` seconds to stop as usual (exit 130, nothing written), and then
ends the process with exit 130 itself. While the results are being renamed into place (the signals held back by
:mod:`eqsat.onnx.io`), it waits for the write to finish first. A run stopped so leaves its staging folders, which
the next run removes (:mod:`eqsat.onnx.staging`, :mod:`eqsat.onnx.pool`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from eqsat.onnx import io as onnx_io

GRACE = 10.0
"""seconds a run has to stop on its own after an interrupt before the watchdog ends it"""
EXIT_CODE = 130
STOPS = (signal.SIGINT, signal.SIGTERM)


def arm(grace: float | None = None) -> Callable[[], None]:
    """Watch for SIGINT and SIGTERM (from the main thread, where their handlers are set); the function that stops
    watching. Nothing is watched where a wakeup descriptor is already set (another library's)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:
        os.close(read)
        os.close(write)
        return lambda: None
    if previous != -1:  # someone else's: give it back
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
        return lambda: None
    wait = GRACE if grace is None else grace
    threading.Thread(target=_watch, args=(read, wait), name="eqsat-watchdog", daemon=True).start()

    def disarm() -> None:
        signal.set_wakeup_fd(-1)
        os.close(write)  # the thread reads end of file and stops

    return disarm


def _watch(read: int, grace: float) -> None:
    try:
        while True:
            data = os.read(read, 64)
            if not data:
                return
            if any(b in STOPS for b in data):
                break
        time.sleep(grace)
        while onnx_io.signals_held():
            time.sleep(0.1)
        try:
            print(f"eqsat: interrupted; stopped after {grace:g} s inside a long computation; no output was "
                  "written or changed", file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_CODE)
    finally:
        os.close(read)


__all__ = ["EXIT_CODE", "GRACE", "arm"]
