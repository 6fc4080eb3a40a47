"""Output checks of the command line (:func:`check_output_path` and beyond), run before any work,
and the translation of a write that still fails after the work into exit 2 with its cause
(:doc:`docs/robustness.md`)."""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any, TextIO

from eqsat.errors import InputError
from eqsat.onnx import io as onnx_io
from eqsat.onnx.external import data_file

FS_IOC_GETFLAGS = 0x80086601
"""Linux ioctl reading a file's attribute flags (lsattr)"""
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20
STAGE_OVERHEAD = len("/.eqsat-" + "9" * 7 + "-" + "x" * 8 + "/model/")
"""what the staged write (eqsat.onnx.io.write_together) adds to a target's folder in its longest path"""


def check_output_path(path: str, flag: str = "-o") -> None:
    """Fail early, before any work, if ``path`` (given with ``flag``) cannot be written: an empty name, a folder,
    a missing or read-only folder, a name too long. A probe file is created and removed beside the target."""
    example = "out.onnx" if flag == "-o" else "report.json"
    if not path:
        raise InputError(f"{flag} is empty; give a file name such as {example}")
    if os.path.isdir(path):
        raise InputError(f"{flag} {path} is a directory; give a file name such as {os.path.join(path, example)}")
    if path.endswith(os.sep):
        raise InputError(f"{flag} {path} ends with {os.sep} (a folder, which does not exist); give a file name "
                         f"such as {os.path.join(path, example)}, in a folder that exists")
    target = os.path.realpath(path)
    companions = [(path, target)] + ([(path + ".data", target + ".data")] if flag == "-o" else [])
    for given, real in companions:
        kind = onnx_io.not_regular(real)
        if kind is not None:
            raise InputError(f"{flag} {given} exists and is {kind}, not a regular file; eqsat never replaces it: "
                             f"choose a file name such as {example}")
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise InputError(f"{flag} {path}: directory {parent} does not exist; create it or choose another {flag} path")
    name = os.path.basename(target)
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(name)) + len(".data") > name_max:
        raise InputError(f"{flag} {path}: the file name is {len(os.fsencode(name))} bytes, too long for this file "
                         f"system (at most {name_max - len('.data')}); choose a shorter {flag} name")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".eqsat-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{flag} {path}: cannot write in {parent} ({exc.strerror}); choose another {flag} path "
                         "or make the folder writable") from None


def _flags(path: str) -> int:
    """The file attribute flags of ``path`` (0 where it does not exist or the file system has none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return 0
    try:
        buf = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf)
        return int(buf[0])
    except OSError:
        return 0
    finally:
        os.close(fd)


def check_not_a_stream(path: str, flag: str) -> None:
    """Refuse, before any work, a target that names a process's open file (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/PID/fd/N``) that is not a regular file: eqsat writes by renaming a staged file into place, which
    a pipe or terminal cannot take."""
    real = os.path.realpath(path)
    named = os.path.abspath(path)
    if not (real.startswith("/proc/") or named.startswith(("/dev/fd/", "/dev/std", "/proc/"))):
        return
    if os.path.isfile(real):  # standard output redirected to a file: that file is the target
        return
    raise InputError(f"{flag} {path} is a stream (a pipe or a terminal), not a file: eqsat writes {flag} by "
                     "renaming a finished file into place, so that a failure never leaves half a file; give a file "
                     f"path (e.g. {flag} out.onnx, then read that file)")


def check_replaceable(path: str, flag: str) -> None:
    """Refuse, before any work, an ``flag`` target that could be staged but never renamed into place: an existing
    immutable or append-only file (chattr +i / +a; also ``-o``'s external data file), or a path whose staging
    path would pass the system's PATH_MAX."""
    target = os.path.realpath(path)
    for given, real in [(path, target)] + ([(data_file(path), data_file(target))] if flag == "-o" else []):
        flags = _flags(real)
        if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL):
            kind = "immutable" if flags & FS_IMMUTABLE_FL else "append-only"
            raise InputError(f"{flag} {given} is {kind} (chattr +{kind[0]}; lsattr shows it): eqsat cannot replace "
                             f"it; remove the attribute (chattr -{kind[0]}) or choose another {flag} path")
    parent = os.path.dirname(target)
    try:
        path_max = os.pathconf(parent, "PC_PATH_MAX")
    except (OSError, ValueError):
        path_max = 4096
    longest = len(os.fsencode(data_file(target))) + STAGE_OVERHEAD
    if longest >= path_max:
        raise InputError(f"{flag} {path}: the path is {len(os.fsencode(target))} bytes; eqsat stages the file beside "
                         f"it in a path of {longest} bytes, over this system's limit of {path_max}: choose a "
                         f"shorter {flag} path")


@contextlib.contextmanager
def late_write_errors(output: str, report: str | None) -> Iterator[None]:
    """Turn an OSError of the final write (disk full, a target made read-only meanwhile) into exit 2 naming
    the cause; the staged write (eqsat.onnx.io.write_together) has left every target as it was."""
    try:
        yield
    except OSError as exc:
        cause = exc.strerror or str(exc) or type(exc).__name__
        if exc.errno == errno.ENOSPC:
            cause += " (the disk is full)"
        where = f" ({exc.filename})" if exc.filename else ""
        named = f"-o {output}" + (f" and --report {report}" if report is not None else "")
        raise InputError(f"writing {named} failed after the work: {cause}{where}; nothing was changed: free space "
                         "or fix the target, and run again") from None


class TolerantStream:
    """A text stream (stderr) whose write and flush failures (a full device, ``2>/dev/full``; a closed terminal)
    are dropped: progress and messages are not worth a run. Everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.dropped = 0

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):  # ValueError: the stream was closed
            self.dropped += 1
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            self.dropped += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def tolerant_stderr() -> Iterator[None]:
    """``sys.stderr`` as a :class:`TolerantStream` for the duration (the previous one back afterwards)."""
    previous = sys.stderr
    sys.stderr = TolerantStream(previous)
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        finally:
            sys.stderr = previous


__all__ = ["FS_APPEND_FL", "FS_IMMUTABLE_FL", "TolerantStream", "check_not_a_stream", "check_output_path", "check_replaceable", "late_write_errors",
           "tolerant_stderr"]
