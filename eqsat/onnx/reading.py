"""Reading a model (:doc:`docs/robustness.md`): only a regular file (or ``-``, standard input, or a serialized
model's bytes) is read, and only one of at most :data:`MAX_MODEL_BYTES` (protobuf cannot parse a larger message),
checked before any byte is read; its external data files are read from beside it, each named when missing."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

import onnx
from onnx import external_data_helper, helper

from ..errors import InputError
from .external import check_aside, runtime_nodes, set_weights_aside, tensor_bytes
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
        check_loaded(model)
    except Exception as exc:
        raise InputError(f"{label}: invalid ONNX model: {checker_reason(exc)}") from None
    return model


def check_loaded(model: onnx.ModelProto) -> None:
    """onnx.checker on a model in memory without serializing it whole (which would hold a second copy of its
    weights): on its skeleton, the large weights set aside (:func:`eqsat.onnx.external.check_aside`), each of
    those checked here as the checker would (its raw data at least as long as its shape and type need)."""
    skeleton, aside = set_weights_aside(model)
    for _stub, t in aside:
        need = tensor_bytes(t)
        if need is not None and len(t.raw_data) < need:
            raise ValueError(f"TensorProto (tensor name: {t.name}) raw_data size ({len(t.raw_data)} bytes) is too "
                             f"small for the declared shape and type ({need} bytes required).")
    check_aside(skeleton, full_check=False)  # as onnx.checker.check_model by default


def checker_reason(exc: BaseException) -> str:
    """onnx.checker's message on one line, whole (it breaks lines inside a sentence: "... of node: \\nname: ...")."""
    return " ".join(str(exc).split()) or type(exc).__name__


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and sanity-check an ONNX file and the external data files it names (each checked before any of its
    bytes is read: :func:`check_external_data`); raises InputError with a message naming the problem. A model
    whose weights are over 2 GiB (external data) is checked from its file, never serialized whole."""
    p = os.fspath(path)
    check_model_file(p)  # a regular file of at most 2 GiB, before any read
    try:
        model = onnx.load(p, load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InputError(f"{p}: not a readable ONNX model ({type(exc).__name__}); is the file truncated or of another format?") from exc
    if not model.graph.node and not model.graph.output:
        raise InputError(f"{p}: not an ONNX model (no graph found); is the file of another format?")
    tensors = check_external_data(model, p)
    try:
        if tensors and not runtime_nodes(model):
            onnx.checker.check_model(p)  # from the file: the weights are not loaded yet, the message stays small
        else:  # from the file it would load the weights a second time, beside those just read
            check_loaded(model)
    except Exception as exc:
        raise InputError(f"{p}: invalid ONNX model: {checker_reason(exc)}") from exc
    base = os.path.dirname(os.path.abspath(p))
    for t in tensors:
        try:
            external_data_helper.load_external_data_for_tensor(t, base)
        except Exception as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"{p}: cannot read the external data file {_location(t)!r} (weights of tensor "
                             f"{t.name!r}): {reason}") from exc
        t.ClearField("data_location")  # as if the weights had been inside the model
        del t.external_data[:]
    return model


def _location(t: onnx.TensorProto) -> str:
    return {e.key: e.value for e in t.external_data}.get("location", "")


def external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The tensors of ``model`` (initializers and attribute tensors, in subgraphs too) whose bytes are in external
    data files."""
    return [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]


def check_external_data(model: onnx.ModelProto, path: str) -> list[onnx.TensorProto]:
    """Check, before reading any of their bytes, the external data files of the model read from ``path``: each
    location is a relative path inside the model's folder, names a regular file (not a link, a folder or a
    device) that exists, and holds each tensor's bytes whole (offset and length within the file, a length
    equal to the tensor's size). Raises InputError naming the file and the tensor; returns the external tensors."""
    base = os.path.dirname(os.path.abspath(path))
    sizes: dict[str, int] = {}
    tensors = external_tensors(model)
    for t in tensors:
        location = _location(t)

        def refuse(problem: str, fix: str, location: str = location, t: onnx.TensorProto = t) -> InputError:
            return InputError(f"{path}: the external data file {location!r} (weights of tensor {t.name!r}) "
                              f"{problem}; {fix}")

        if location not in sizes:
            sizes[location] = _data_file_size(location, base, refuse)
        size = sizes[location]
        fields = {e.key: e.value for e in t.external_data}
        try:
            offset = int(fields.get("offset") or 0)
            length = int(fields["length"]) if fields.get("length") else None
        except ValueError:
            raise refuse(f"has an offset or length that is not a number ({fields.get('offset')!r}, "
                         f"{fields.get('length')!r})", "re-save the model") from None
        need = tensor_bytes(t)
        kind = helper.tensor_dtype_to_string(t.data_type).removeprefix("TensorProto.").lower()
        shown = f"{'x'.join(map(str, t.dims)) or 'a scalar'} of {kind}"
        if offset < 0 or (length is not None and length < 0):
            raise refuse(f"has a negative offset or length ({offset}, {length})", "re-save the model")
        if length is not None and need is not None and length != need:
            raise refuse(f"declares {length:,} bytes for it, but the tensor ({shown}) takes {need:,}: a wrong "
                         "length", "re-save the model with its weights (onnx.save_model(..., "
                         "save_as_external_data=True))")
        want = length if length is not None else need
        if want is not None and offset + want > size:
            raise refuse(f"is truncated: it holds {size:,} bytes, the tensor ({shown}) needs bytes {offset:,} to "
                         f"{offset + want:,}", "copy the whole file again beside the model")
        if length is None and need is not None and size - offset != need:
            raise refuse(f"holds {size - offset:,} bytes from offset {offset:,} and names no length, but the "
                         f"tensor ({shown}) takes {need:,}: a wrong length", "re-save the model")
    return tensors


def _data_file_size(location: str, base: str, refuse) -> int:
    """The size of the external data file at ``location`` (relative to ``base``); ``refuse(problem, fix)`` makes
    the error where it is not a regular file inside ``base``."""
    if not location:
        raise refuse("is not named (an empty location)", "re-save the model with its weights")
    if os.path.isabs(location):
        raise refuse("is an absolute path", "external data must be a path relative to the model's folder: "
                     "re-save the model with its weights beside it")
    full = os.path.normpath(os.path.join(base, location))
    if os.path.commonpath([base, full]) != base or os.path.commonpath([base, os.path.realpath(full)]) != \
            os.path.realpath(base):
        raise refuse(f"is outside the model's folder {base}", "external data must be beside the model (or in a "
                     "folder under it): move it there and re-save the model")
    if os.path.islink(full):
        raise refuse("is a symbolic link", "onnx reads external data only from regular files: put the file itself "
                     "beside the model")
    if not os.path.lexists(full):
        raise refuse("is missing", f"put it in {os.path.dirname(full)}, beside the model")
    kind = not_regular(full)
    if kind is not None:
        raise refuse(f"is {kind}, not a regular file", "put the data file itself beside the model")
    try:
        return os.stat(full).st_size
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror})", "check its permissions") from None


__all__ = ["MAX_MODEL_BYTES", "check_external_data", "check_loaded", "check_model_file", "checker_reason", "external_tensors", "gib",
           "load_model", "model_from_bytes", "read_stream"]
