"""External data: the weights a model keeps in a file beside it (``OUT.onnx.data``), written a tensor at a time,
and a model's weights set aside (stubs keeping their name, shape and type) for onnx's tools that serialize the
whole model (its version converter, its checker) on a model too large for one protobuf message (2 GiB)."""

from __future__ import annotations

import functools
import math
import os
import tempfile
from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, shape_inference

DATA_SUFFIX = ".data"
"""the external data file of ``OUT.onnx`` is ``OUT.onnx.data``, beside it"""
EXTERNAL_THRESHOLD = 1024
"""tensors of at least this many bytes go to the external data file (smaller ones stay in the model)"""
ALIGN_THRESHOLD = 2**20
ALIGNMENT = 2**16
"""tensors of at least ALIGN_THRESHOLD bytes start at a multiple of ALIGNMENT in the data file (as onnx writes
them), so that onnxruntime can map them from the file"""



class Weights(Protocol):
    """Where the data of a model's references lie (the run's weight pool, :class:`eqsat.onnx.pool.WeightPool`):
    a model that refers to them is written with their bytes, read from there a tensor at a time, as if it held
    them (:meth:`~eqsat.onnx.pool.WeightPool.restore`) but without a copy of them."""

    def data(self, t: TensorProto) -> np.ndarray | None:
        """The array ``t`` refers to, or None where ``t`` holds its data or refers elsewhere."""

    def done(self, t: TensorProto) -> None:
        """``t``'s data written: its pages need not stay resident."""


def data_file(path: str) -> str:
    """The external data file a model written to ``path`` keeps its weights in: ``path`` + :data:`DATA_SUFFIX`."""
    return path + DATA_SUFFIX


def tensor_bytes(t: onnx.TensorProto) -> int | None:
    """How many bytes tensor ``t``'s data takes (its dims and element type, sub-byte types packed); None for a
    type of no fixed size (strings)."""
    count = math.prod(t.dims)
    if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    if t.data_type in _SUB_BYTE:
        return (count * _SUB_BYTE[t.data_type] + 7) // 8
    try:
        return count * int(np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize)
    except Exception:  # noqa: BLE001 - a type numpy does not name
        return None


_SUB_BYTE = {getattr(onnx.TensorProto, name): bits for name, bits in
             (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
             if hasattr(onnx.TensorProto, name)}
"""element types of less than a byte: their bits (packed in raw data)"""


def tensor_size(t: onnx.TensorProto) -> int:
    """The bytes of tensor ``t``'s data: from its shape, or its serialized size for a type of no fixed size."""
    n = tensor_bytes(t)
    return t.ByteSize() if n is None or t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL \
        else n


def goes_out(t: onnx.TensorProto, weights: Weights | None = None) -> bool:
    """Whether tensor ``t`` goes to the external data file (its bytes are raw data of the threshold or more, or a
    reference into ``weights``: written with the bytes it refers to)."""
    if weights is not None and t.data_location == TensorProto.EXTERNAL:
        data = weights.data(t)
        return data is not None and data.nbytes >= EXTERNAL_THRESHOLD
    return t.HasField("raw_data") and tensor_size(t) >= EXTERNAL_THRESHOLD


def data_size(t: onnx.TensorProto, weights: Weights | None = None) -> int:
    """:func:`tensor_size`, where a reference into ``weights`` counts as the bytes it refers to."""
    data = weights.data(t) if weights is not None and t.data_location == TensorProto.EXTERNAL else None
    return data.nbytes if data is not None else tensor_size(t)


def save_external(model: onnx.ModelProto, path: str, weights: Weights | None = None) -> None:
    """Write ``model`` to ``path`` with its weights (initializers, subgraphs' too, as onnx.save_model's external
    data) in :func:`data_file` (``path`` + ``.data``, named relative to the model's folder), one tensor at a time:
    the model is neither copied whole nor serialized whole, so that a model over 2 GiB takes no second copy of its
    weights. No data file is written when no tensor is that large. A reference into ``weights`` is written with
    the bytes it refers to, read from there."""
    location = os.path.basename(data_file(path))
    skeleton, aside = set_weights_aside(model, weights)
    with open(data_file(path), "wb") as data:

        def put(t: onnx.TensorProto, raw: bytes | memoryview) -> None:
            offset = data.tell()
            if len(raw) >= ALIGN_THRESHOLD and offset % ALIGNMENT:
                data.write(b"\0" * (ALIGNMENT - offset % ALIGNMENT))
                offset = data.tell()
            data.write(raw)
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            del t.external_data[:]
            for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
                t.external_data.add(key=key, value=value)

        for stub, weight in aside:
            pooled = weights.data(weight) if weights is not None else None
            if pooled is None:
                put(stub, weight.raw_data)
                continue
            assert weights is not None  # (pooled: read from it)
            put(stub, np.ascontiguousarray(pooled).data.cast("B"))
            weights.done(weight)
        for t in onnx.external_data_helper._get_initializer_tensors(skeleton):  # subgraphs' (If, Loop) weights
            if goes_out(t):
                put(t, t.raw_data)
        written = data.tell()
    if not written:
        os.unlink(data_file(path))
    onnx.save_model(skeleton, path)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


GRAPH_TAG = bytes([7 << 3 | 2])
"""ModelProto.graph (field 7, length-delimited)"""
INITIALIZER_TAG = bytes([5 << 3 | 2])
"""GraphProto.initializer (field 5, length-delimited)"""


RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
RAW_TAG = bytes([RAW_DATA << 3 | 2])
REFERENCE_FIELDS = frozenset({"external_data", "data_location"})


def _pieces(t: onnx.TensorProto, data: np.ndarray) -> list[bytes | memoryview]:
    """The bytes of ``t`` serialized with ``data`` as its raw data and without its reference (what
    :meth:`eqsat.onnx.pool.WeightPool.restore` makes of it), in pieces: the fields before ``raw_data``, the raw data
    (``data``'s own buffer, no copy), the fields after it."""
    head, tail = onnx.TensorProto(), onnx.TensorProto()
    for field, _value in t.ListFields():
        if field.name in REFERENCE_FIELDS or field.name == "raw_data":
            continue
        _copy_field(t, head if field.number < RAW_DATA else tail, field.name)
    raw = np.ascontiguousarray(data).data.cast("B")
    return [head.SerializeToString(), RAW_TAG + _varint(raw.nbytes), raw, tail.SerializeToString()]


def save_streamed(model: onnx.ModelProto, path: str, weights: Weights | None = None) -> None:
    """Write ``model`` to ``path`` as one message (its weights inside), the bytes ``model.SerializeToString()``
    gives, without serializing it whole: its fields in number order, the graph's too, each initializer serialized
    on its own (a model of a few hundred MB of weights then takes no second copy of them while it is written: its
    largest tensor's, at most). A reference into ``weights`` is written as the tensor with the bytes it refers to
    (the bytes of the model :meth:`~eqsat.onnx.pool.WeightPool.restore` gives), read from there: no copy at all."""
    g = model.graph
    with open(path, "wb") as f:
        for field, _value in model.ListFields():  # in field number order, as protobuf serializes them
            if field.name != "graph":
                part = onnx.ModelProto()
                _copy_field(model, part, field.name)
                f.write(part.SerializeToString())
                continue
            pieces: list[bytes | None] = []  # each graph field's bytes, None for the initializers (written one by one)
            for inner, _ in g.ListFields():
                one = onnx.GraphProto()
                if inner.name != "initializer":
                    _copy_field(g, one, inner.name)
                pieces.append(one.SerializeToString() if inner.name != "initializer" else None)
            def parts(t: onnx.TensorProto) -> list[bytes | memoryview] | None:
                data = weights.data(t) if weights is not None and t.data_location == TensorProto.EXTERNAL else None
                return _pieces(t, data) if data is not None else None

            # each on its own: the graph's ByteSize would encode it whole
            sizes = [sum(len(memoryview(b).cast("B")) for b in p) if (p := parts(t)) is not None else t.ByteSize()
                     for t in g.initializer]
            total = sum(len(INITIALIZER_TAG) + len(_varint(n)) + n for n in sizes)
            f.write(GRAPH_TAG + _varint(sum(len(p) for p in pieces if p is not None) + total))
            for piece in pieces:
                if piece is not None:
                    f.write(piece)
                    continue
                for t, n in zip(g.initializer, sizes):
                    f.write(INITIALIZER_TAG + _varint(n))
                    restored = parts(t)
                    if restored is None:
                        f.write(t.SerializeToString())
                        continue
                    for b in restored:
                        f.write(b)
                    assert weights is not None  # (restored: read from it)
                    weights.done(t)


ASIDE = "eqsat-weights-set-aside"
"""the location a weight set aside names (:func:`set_weights_aside`): no file"""


def set_weights_aside(model: onnx.ModelProto, weights: Weights | None = None) -> tuple[
        onnx.ModelProto, list[tuple[onnx.TensorProto, onnx.TensorProto]]]:
    """A copy of ``model`` whose main graph's weights (the initializers that go to external data) are stubs (their
    name, shape and type, marked external at :data:`ASIDE`, no bytes), and each (stub, weight) pair: a model of any
    size that onnx's tools serializing the model (its version converter) can take, or that is written a tensor at
    a time. :func:`put_weights_back` restores them. ``model`` is left as it was; its weights are not copied.
    A reference into ``weights`` is set aside too (:func:`save_external` writes the bytes it refers to)."""
    skeleton = _without_initializers(model)
    aside = []
    for t in model.graph.initializer:
        if goes_out(t, weights):
            stub = skeleton.graph.initializer.add()
            for name in ("name", "dims", "data_type", "doc_string", "metadata_props"):
                _copy_field(t, stub, name)
            stub.data_location = TensorProto.EXTERNAL
            stub.external_data.add(key="location", value=ASIDE)
            aside.append((stub, t))
        else:
            skeleton.graph.initializer.add().CopyFrom(t)
    return skeleton, aside


def put_weights_back(model: onnx.ModelProto, aside: list[tuple[onnx.TensorProto, onnx.TensorProto]]) -> None:
    """Replace, in ``model`` (:func:`set_weights_aside`'s copy, or a model made from it), each main-graph stub by
    its weight (copied), found by name."""
    weights = {stub.name: weight for stub, weight in aside}
    for t in model.graph.initializer:
        if t.name in weights and any(e.key == "location" and e.value == ASIDE for e in t.external_data):
            t.CopyFrom(weights[t.name])


def _without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its main graph's initializers (every other field copied)."""
    out = onnx.ModelProto()
    for field, _value in model.ListFields():
        if field.name != "graph":
            _copy_field(model, out, field.name)
    for field, _value in model.graph.ListFields():
        if field.name != "initializer":
            _copy_field(model.graph, out.graph, field.name)
    return out


def _copy_field(src, dst, name: str) -> None:
    """Copy the field ``name`` of protobuf message ``src`` into ``dst`` (repeated, message or scalar)."""
    value = getattr(src, name)
    field = src.DESCRIPTOR.fields_by_name[name]
    if field.is_repeated:
        getattr(dst, name).extend(value)
    elif not src.HasField(name):  # onnx's messages are proto2: a field not set stays so
        return
    elif field.message_type is not None:
        getattr(dst, name).CopyFrom(value)
    else:
        setattr(dst, name, value)


def infer_shapes_aside(model: onnx.ModelProto, **kwargs: bool) -> onnx.ModelProto:
    """onnx's shape inference (``kwargs``: its flags) on ``model`` with its weights set aside
    (:func:`set_weights_aside`): the types and shapes it gives need the weights' shapes only (the stubs keep them;
    small integer initializers, the values a Reshape target is read from, stay whole), and the inference copies
    its input and output through serialized messages three times over: a model's weights would be held that often
    (a BERT-base import peaked at 2.6 GB doing so)."""
    skeleton, _ = set_weights_aside(model)
    return shape_inference.infer_shapes(skeleton, **kwargs)


RUNTIME_DOMAIN = "ai.onnx.eqsat.runtime"
"""the domain :func:`for_checker` moves onnxruntime's own operators of the ONNX domain to, for onnx's checker"""


@functools.cache
def runtime_operators() -> frozenset[str]:
    """The operators onnxruntime's CPU provider registers in the ONNX domain that ONNX itself has no schema for
    (``SimplifiedLayerNormalization``, as onnxruntime-genai's model builder writes it: a model onnxruntime runs)."""
    from onnxruntime.capi import _pybind_state

    return frozenset(d.op_name for d in _pybind_state.get_all_opkernel_def()
                     if d.domain in ("", "ai.onnx") and d.provider == "CPUExecutionProvider"
                     and not onnx.defs.has(d.op_name))


def runtime_nodes(model: onnx.ModelProto) -> bool:
    """Whether ``model``'s main graph holds a node of :func:`runtime_operators` in the ONNX domain."""
    ops = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
    return bool(ops and ops & runtime_operators())


def for_checker(skeleton: onnx.ModelProto) -> onnx.ModelProto:
    """``skeleton`` as onnx's checker takes it: where it holds onnxruntime's own operators of the ONNX domain
    (:func:`runtime_nodes`), a copy with those nodes in :data:`RUNTIME_DOMAIN`, a domain the checker has no schemas
    of and so checks the rest around (onnxruntime is what runs and verifies every model eqsat reads and writes);
    else ``skeleton`` itself. Its weights are copied: give it a skeleton (:func:`set_weights_aside`)."""
    if not runtime_nodes(skeleton):
        return skeleton
    out = onnx.ModelProto()
    out.CopyFrom(skeleton)
    ops = runtime_operators()
    for node in out.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in ops:
            node.domain = RUNTIME_DOMAIN
    out.opset_import.add(domain=RUNTIME_DOMAIN, version=1)
    return out


def check_aside(skeleton: onnx.ModelProto, full_check: bool = True) -> None:
    """onnx.checker on a model whose weights are set aside (:func:`set_weights_aside`), from a file beside an empty
    one at the stubs' location: the checker asks only that an external data file exists, and shape inference
    reads the weights' shapes and types, which the stubs keep. A weight still kept in a file of its own (a model
    read without its external data, whose files were checked first) is checked as a stub too; onnxruntime's own
    operators of the ONNX domain are checked around (:func:`for_checker`)."""
    given, skeleton = skeleton, for_checker(skeleton)  # a copy where it moves nodes, else the caller's model
    elsewhere = [k for k, t in enumerate(skeleton.graph.initializer) if t.data_location == TensorProto.EXTERNAL
                 and all(e.value != ASIDE for e in t.external_data if e.key == "location")]
    if elsewhere:
        if skeleton is given:  # the caller's: changed in a copy only
            skeleton = onnx.ModelProto()
            skeleton.CopyFrom(given)
        for k in elsewhere:
            t = skeleton.graph.initializer[k]
            del t.external_data[:]
            t.external_data.add(key="location", value=ASIDE)
    with tempfile.TemporaryDirectory(prefix="eqsat-") as tmp:
        open(os.path.join(tmp, ASIDE), "wb").close()
        path = os.path.join(tmp, "model.onnx")
        onnx.save_model(skeleton, path)
        onnx.checker.check_model(path, full_check=full_check)


__all__ = ["ALIGNMENT", "ALIGN_THRESHOLD", "ASIDE", "DATA_SUFFIX", "EXTERNAL_THRESHOLD", "RUNTIME_DOMAIN", "check_aside", "data_file", "for_checker", "runtime_nodes", "runtime_operators",
           "goes_out", "infer_shapes_aside", "put_weights_back", "save_external", "save_streamed", "set_weights_aside", "tensor_bytes", "tensor_size"]
