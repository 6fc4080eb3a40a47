"""Reading a model (:doc:`docs/robustness.md`): only a regular file (or ``-``, standard input, or a serialized
model's bytes) is read, and only one of at most :data:`MAX_MODEL_BYTES` (protobuf cannot parse a larger message),
checked before any byte is read; its external data files are read from beside it, each named when missing."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

import onnx
from onnx import external_data_helper

from ..errors import InputError
from .io import not_regular

MAX_MODEL_BYTES = 2**31 - 1
"""the largest ONNX file read: protobuf cannot parse a message of 2 GiB or more (larger models keep their
weights in external data files)"""

def gib(n: int) -> str:
    """``n`` bytes in the largest binary unit under which it is at least 1 (MiB at the least)."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n / 2**20:,.1f} MiB"


def check_model_file(path: str) -> None:
    """Refuse, before reading anything, a model path that is not a regular file (a device such as /dev/zero, a
    FIFO, a socket, a folder) or a file larger than :data:`MAX_MODEL_BYTES`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; give the path of an .onnx model") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a directory; give the path of an .onnx model")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: is {not_regular(path) or 'not a regular file'}; eqsat reads a model only from a "
                         "regular file (or from standard input, given as -)")
    if st.st_size > MAX_MODEL_BYTES:
        raise InputError(f"{path}: {gib(st.st_size)}, larger than an ONNX file can be (2 GiB, protobuf's limit); "
                         "save the weights as external data (onnx.save_model(..., save_as_external_data=True))")


def read_stream(stream: BinaryIO, label: str = "standard input") -> onnx.ModelProto:
    """A model read from ``stream`` (standard input), at most :data:`MAX_MODEL_BYTES` of it."""
    data = stream.read(MAX_MODEL_BYTES + 1)
    if len(data) > MAX_MODEL_BYTES:
        raise InputError(f"{label}: more than 2 GiB, larger than an ONNX file can be (protobuf's limit)")
    return model_from_bytes(data, label)


def model_from_bytes(data: bytes, label: str = "the model bytes") -> onnx.ModelProto:
    """A serialized model (no external data: its files could not be found), checked as a file would be."""
    try:
        model = onnx.ModelProto.FromString(data)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InputError(f"{label}: not a readable ONNX model ({type(exc).__name__}); is it truncated or of "
                         "another format?") from None
    if not model.graph.node and not model.graph.output:
        raise InputError(f"{label}: not an ONNX model (no graph found); is it of another format?")
    if any(onnx.external_data_helper.uses_external_data(t)
           for t in onnx.external_data_helper._get_all_tensors(model)):
        raise InputError(f"{label}: the model keeps weights in external data files, which cannot be found from "
                         "bytes; give the model's path")
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise InputError(f"{label}: invalid ONNX model: {checker_reason(exc)}") from None
    return model


def checker_reason(exc: BaseException) -> str:
    """onnx.checker's message on one line, whole (it breaks lines inside a sentence: "... of node: \\nname: ...")."""
    return " ".join(str(exc).split()) or type(exc).__name__


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and sanity-check an ONNX file; raises InputError with a message naming the problem."""
    p = os.fspath(path)
    check_model_file(p)  # a regular file of at most 2 GiB, before any read
    try:
        model = onnx.load(p, load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InputError(f"{p}: not a readable ONNX model ({type(exc).__name__}); is the file truncated or of another format?") from exc
    if not model.graph.node and not model.graph.output:
        raise InputError(f"{p}: not an ONNX model (no graph found); is the file of another format?")
    _load_external_data(model, p)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise InputError(f"{p}: invalid ONNX model: {checker_reason(exc)}") from exc
    return model


def _load_external_data(model: onnx.ModelProto, path: str) -> None:
    """Read the weights a model keeps in external files, naming any file that is missing."""
    base = os.path.dirname(os.path.abspath(path))
    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    for t in tensors:
        location = {e.key: e.value for e in t.external_data}.get("location", "")
        full = os.path.normpath(os.path.join(base, location))
        inside = not os.path.isabs(location) and os.path.commonpath([base, full]) == base
        if inside and not os.path.isfile(full):
            raise InputError(f"{path}: the external data file {location!r} (weights of tensor {t.name!r}) is missing; "
                             f"put it in {base}, beside the model")
    if tensors:
        try:
            external_data_helper.load_external_data_for_model(model, base)
        except Exception as exc:
            raise InputError(f"{path}: cannot read its external data: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc


__all__ = ["MAX_MODEL_BYTES", "check_model_file", "checker_reason", "gib", "load_model", "model_from_bytes",
           "read_stream"]
