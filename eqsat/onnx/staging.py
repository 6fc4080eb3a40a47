"""The ``.eqsat-PID-*`` folders a write stages its files in, beside the targets (eqsat.onnx.io.write_together).
Each is removed when the write ends; one left by a process killed meanwhile (SIGKILL, a power cut) is removed by
the next write into that folder once no process has its PID. The same for any folder named with its process's PID
(:func:`remove_stale`'s ``pattern``)."""

from __future__ import annotations

import os
import re
import shutil

PREFIX = ".eqsat-"
_STAGE = re.compile(r"^\.eqsat-(\d+)-")


def prefix() -> str:
    """The name prefix of this process's staging folders."""
    return f"{PREFIX}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        return True
    return True


def remove_stale(folder: str, pattern: re.Pattern[str] = _STAGE) -> list[str]:
    """Remove the staging folders in ``folder`` whose process is gone; returns their names. ``pattern``: the names
    of such folders, the PID its first group (default: ``.eqsat-PID-*``; the weight pools' ``eqsat-weights-PID-*``
    too, :mod:`eqsat.onnx.pool`)."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.match(entry.name)
        if match and entry.is_dir(follow_symlinks=False) and int(match.group(1)) != os.getpid() \
                and not _alive(int(match.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


__all__ = ["PREFIX", "prefix", "remove_stale"]
