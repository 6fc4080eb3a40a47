"""One copy of the weights for every onnxruntime session of a run (issue 28: memory).

onnxruntime copies a model's initializers into each session it builds, so that a run holding the original and a few
candidates in sessions (verification, measurement) holds the weights many times over. A :class:`WeightPool` keeps
one copy instead: each large initializer (at least :data:`MIN_BYTES`) is written once to the pool's staged
external-data file (``weights.bin``, page-aligned) and memory-mapped from it; a session of any model (the original
or a candidate) is built from that model with its pooled initializers replaced by references into the file, and the
mapped arrays handed to onnxruntime as shared initializers (``SessionOptions.add_initializer``: the session reads
them in place, no copy). Initializers are matched by name, type, shape and content (a candidate's unchanged weight
keeps its name), so the original and every candidate share what they have in common.

What a session still holds of its own: the prepacked copies of its MatMul weights (onnxruntime's MLAS layout, one per
session), which measurement keeps, since they are part of the latency the user gets; verification sessions leave
them out (``prepacking=False`` in :func:`eqsat.onnx.io.session`), which changes no result.

The pool of a run is made current with :func:`pooled` (``eqsat.optimize`` does so); :func:`current` returns it, or
None outside one (sessions then copy the weights, as onnxruntime does by default).

>>> import numpy as np
>>> from onnx import helper, numpy_helper
>>> w = numpy_helper.from_array(np.arange(2**15, dtype=np.float32).reshape(128, 256), "w")
>>> with pooled() as pool:
...     entry = pool.entry(w)
...     again = pool.entry(w)
...     (entry is again, entry.array.shape, float(entry.array[1, 0]))
(True, (128, 256), 256.0)
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import mmap
import os
import re
import shutil
import tempfile
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from .staging import remove_stale

MIN_BYTES = 64 * 1024
"""initializers smaller than this stay in the model (not worth a reference)"""
ALIGN = 64 * 1024
"""the offset alignment of each tensor in the file (onnxruntime maps external data at allocation granularity)"""
PREFIX = "eqsat-weights-"
"""the name prefix of a pool's folder (in $TMPDIR), before its process's PID: one left by a killed run is removed by
the next pool made there once no process has that PID"""
STALE = re.compile(r"^eqsat-weights-(\d+)-")
FILE = "eqsat-pool.bin"
"""the pool's file: a candidate's reference into it names it so (:meth:`WeightPool.slim`)"""
DROP_EVERY_S = 0.02
"""how often :meth:`WeightPool.dropping` drops the mapped pages"""
CHUNK = 1 << 22
PLAIN = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8,
                   TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64,
                   TensorProto.UINT64, TensorProto.BOOL})
"""the types pooled: those whose raw bytes are their numpy array's (no 4-bit packing, no bfloat16 or float8)"""

_CURRENT: contextvars.ContextVar[WeightPool | None] = contextvars.ContextVar("eqsat_weight_pool", default=None)


@dataclass
class Entry:
    """One pooled tensor: where it lies in the file, the array mapped from it, and its onnxruntime value."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    offset: int
    length: int
    array: np.ndarray
    values: dict[tuple[int, ...], ort.OrtValue] = field(default_factory=dict)
    mapping: mmap.mmap | None = field(default=None, repr=False)
    """the file's pages the array is (:meth:`WeightPool.drop_pages`)"""

    def value(self, dims: tuple[int, ...]) -> ort.OrtValue:
        """The entry's array as an onnxruntime value of shape ``dims`` (its own, or a reshape: the same bytes)."""
        if dims not in self.values:
            self.values[dims] = ort.OrtValue.ortvalue_from_numpy(self.array.reshape(dims))
        return self.values[dims]

    def drop(self) -> int:
        """Let the kernel take back the array's mapped pages (:meth:`WeightPool.drop_pages`); the bytes dropped."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None or self.mapping is None:
            return 0
        self.mapping.madvise(advice)
        return self.length

    def reference(self, name: str) -> TensorProto:
        """A TensorProto named ``name`` whose data is this entry's bytes in the pool's file."""
        t = TensorProto()
        t.name, t.data_type = name, self.data_type
        t.dims.extend(self.dims)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", FILE), ("offset", str(self.offset)), ("length", str(self.length))):
            e = t.external_data.add()
            e.key, e.value = key, value
        return t


def copy_fields(src: Any, dst: Any, skip: set[str]) -> None:
    """Every field ``src`` sets, but those in ``skip``, set alike in ``dst`` (a message of the same type)."""
    for f, value in src.ListFields():
        if f.name in skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(dst, f.name).extend(value)
        elif hasattr(value, "ListFields"):  # a message
            getattr(dst, f.name).CopyFrom(value)
        else:
            setattr(dst, f.name, value)


def _same(a: np.ndarray, b: bytes | memoryview) -> bool:
    """Whether the bytes of ``a`` equal ``b``, compared in chunks (no temporary as large as the tensor)."""
    x = a.reshape(-1).view(np.uint8)
    y = np.frombuffer(b, np.uint8)
    return x.size == y.size and all(np.array_equal(x[i:i + CHUNK], y[i:i + CHUNK]) for i in range(0, x.size, CHUNK))


class WeightPool:
    """The weights of a run, each stored once in a staged file and memory-mapped (see the module's docstring)."""

    def __init__(self, folder: str | None = None):
        remove_stale(folder or tempfile.gettempdir(), STALE)  # those of runs killed before their cleanup
        self.folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=folder)
        self.path = os.path.join(self.folder, FILE)
        self.size = 0
        self.entries: dict[tuple[str, int, tuple[int, ...]], list[Entry]] = {}
        self.at: dict[tuple[int, int], Entry] = {}
        """(offset, length) -> the entry there: what a reference into the file points to"""
        self.addresses: dict[int, Entry] = {}
        """the address of each entry's mapped array -> the entry: an array of the pool, seen again (the IR's)"""
        self.folded: dict[tuple[int, tuple[int, ...], int], list[Entry]] = {}
        """(type, shape, checksum) -> the folded values added (:meth:`put`)"""
        self.sessions = 0
        """sessions built on the pool"""
        open(self.path, "wb").close()

    @property
    def held(self) -> int:
        """The bytes of weights the pool holds (each once)."""
        return sum(e.length for e in self.at.values())

    def entry(self, t: TensorProto) -> Entry | None:
        """The pooled copy of initializer ``t`` (added on first sight), or None for a small one or one whose data
        is not raw bytes in the model."""
        if t.data_location == TensorProto.EXTERNAL:
            return self._referenced(t)
        if not t.HasField("raw_data") or t.data_type not in PLAIN:
            return None
        raw = t.raw_data
        if len(raw) < MIN_BYTES:
            return None
        key = (t.name, t.data_type, tuple(t.dims))
        for e in self.entries.get(key, []):
            if _same(e.array, raw):
                return e
        e = self._add(key, raw)
        self.entries.setdefault(key, []).append(e)
        self.at[e.offset, e.length] = e
        self.addresses[e.array.ctypes.data] = e
        return e

    def put(self, array: np.ndarray) -> np.ndarray:
        """``array`` (a value the exporter folded from weights: a concatenated, transposed or merged weight) as the
        pool's mapped array of the same bytes, added where new, its pages dropped; ``array`` itself where it is
        small, of a type not pooled, or one of the pool's arrays already (a view of a weight). An exported model
        then refers to it (:meth:`reference_to`) instead of holding a copy, and the caller need not keep ``array``:
        a candidate's new weights are held once, in the pool's file, not in the heap and again in its model.
        Values are matched by content (a checksum, then the bytes), so every candidate that folds the same
        weight shares one copy."""
        if not isinstance(array, np.ndarray) or array.nbytes < MIN_BYTES:
            return array
        try:
            data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        except (KeyError, TypeError, ValueError):
            return array
        contiguous = np.ascontiguousarray(array)
        if data_type not in PLAIN or self.reference_to(contiguous, "") is not None:
            return array
        raw = contiguous.data.cast("B")
        key = (data_type, tuple(array.shape), zlib.crc32(raw))
        for e in self.folded.get(key, []):
            if _same(e.array, raw):
                return e.array
        e = self._add(("", data_type, tuple(array.shape)), raw)
        self.folded.setdefault(key, []).append(e)
        self.at[e.offset, e.length] = e
        self.addresses[e.array.ctypes.data] = e
        e.drop()  # written: read again only by a session that needs it
        return e.array

    def reference_to(self, array: np.ndarray, name: str) -> TensorProto | None:
        """A reference named ``name`` to ``array`` where it is one of the pool's arrays, whole (the IR's weights are:
        the exporter then writes no copy of them), else None."""
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            return None
        e = self.addresses.get(array.ctypes.data)
        if e is None or array.nbytes != e.length or array.dtype != e.array.dtype:
            return None
        t = e.reference(name)
        del t.dims[:]
        t.dims.extend(array.shape)
        return t

    def _add(self, key: tuple[str, int, tuple[int, ...]], raw: bytes | memoryview) -> Entry:
        name, data_type, dims = key
        offset = -(-self.size // ALIGN) * ALIGN
        with open(self.path, "r+b") as f:
            f.seek(offset)
            f.write(raw)
        self.size = offset + len(raw)
        dtype = helper.tensor_dtype_to_np_dtype(data_type)
        with open(self.path, "rb") as f:
            mapping = mmap.mmap(f.fileno(), len(raw), offset=offset, access=mmap.ACCESS_READ)
        array = np.frombuffer(mapping, dtype=dtype).reshape(dims)  # read-only, as the mapping
        return Entry(name, data_type, dims, offset, len(raw), array, mapping=mapping)

    def drop_pages(self) -> int:
        """Let the kernel take back the mapped pages of the weights (``madvise(MADV_DONTNEED)``; the file's pages
        stay in the page cache): those read again (by a session's kernels that did not prepack them) come back on
        their next read, with the same bytes. Timed sessions read their MatMul weights once, to prepack them, so
        dropping the pages once they are built keeps the weights out of the run's resident memory. Returns the
        bytes dropped (0 where the platform has no madvise)."""
        return sum(e.drop() for e in list(self.at.values()))  # a copy taken at once: another thread may add entries

    def _referenced(self, t: TensorProto) -> Entry | None:
        """The entry a reference into the pool's file points to (:meth:`slim`), or None for other external data."""
        info = {e.key: e.value for e in t.external_data}
        if info.get("location") != FILE:
            return None
        e = self.at.get((int(info.get("offset", -1)), int(info.get("length", -1))))
        same = e is not None and e.data_type == t.data_type and math.prod(t.dims) == math.prod(e.dims)
        return e if same else None  # the same bytes, maybe under another shape (a reshaped weight)

    def slim(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """A copy of ``model`` whose large initializers are references into the pool (added to it if new): a model
        kept for later sessions then holds no copy of the weights, once ``model`` itself is dropped (protobuf frees
        a message's data only with the whole message, so the copy is new, not ``model`` changed). Sessions of it
        need this pool (:func:`current`); :meth:`restore` gives it its data back."""
        g = model.graph
        slim = onnx.ModelProto()
        copy_fields(model, slim, skip={"graph"})
        sg = slim.graph
        copy_fields(g, sg, skip={"initializer"})
        for t in g.initializer:
            e = None if t.data_location == TensorProto.EXTERNAL else self.entry(t)  # (DEFAULT once loaded)
            if e is None:
                sg.initializer.append(t)
                continue
            e.drop()  # read to compare or written: not needed resident for a reference
            ref = sg.initializer.add()
            copy_fields(t, ref, skip={"raw_data", "external_data"})
            ref.data_location = TensorProto.EXTERNAL
            ref.external_data.extend(e.reference(t.name).external_data)
        return slim

    def data(self, t: TensorProto) -> np.ndarray | None:
        """The array a reference into the pool refers to, under the reference's shape (the bytes :meth:`restore`
        would give ``t``); None for any other tensor. The writers read it a tensor at a time
        (:func:`eqsat.onnx.io.save` with ``weights``): a model is written without being restored."""
        if t.data_location != TensorProto.EXTERNAL:
            return None
        e = self._referenced(t)
        return e.array.reshape(tuple(t.dims)) if e is not None else None

    def done(self, t: TensorProto) -> None:
        """``t``'s data written (:meth:`data`): its mapped pages dropped, not kept resident."""
        e = self._referenced(t) if t.data_location == TensorProto.EXTERNAL else None
        if e is not None:
            e.drop()

    def restore(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """``model`` (changed in place, and returned) with every reference into the pool replaced by the data:
        a self-contained model again, to write or return (a model without references is left as it is)."""
        for t in model.graph.initializer:
            if t.data_location == TensorProto.EXTERNAL:
                e = self._referenced(t)
                if e is not None:
                    t.ClearField("external_data")
                    t.ClearField("data_location")
                    t.raw_data = e.array.tobytes()  # the same bytes whatever the reference's shape
        return model

    def stage(self, model: onnx.ModelProto) -> tuple[str, dict[str, ort.OrtValue]]:
        """``model`` written into the pool's folder with its large initializers as references into the pool's file
        (the path of that small file, to build a session from and remove once built), and the shared values: those
        of the initializers that only weights' inputs read (:func:`weights_only`); the others onnxruntime reads from
        the file as any external data."""
        slim = self.slim(model)
        safe = weights_only(slim.graph)
        shared = {t.name: e.value(tuple(t.dims)) for t in slim.graph.initializer
                  if t.name in safe and (e := self._referenced(t)) is not None}
        fd, path = tempfile.mkstemp(suffix=".onnx", prefix="model-", dir=self.folder)
        with os.fdopen(fd, "wb") as f:
            f.write(slim.SerializeToString())
        return path, shared

    def refers(self, model: onnx.ModelProto) -> bool:
        """Whether ``model`` holds references into the pool (:meth:`slim`)."""
        return any(t.data_location == TensorProto.EXTERNAL and self._referenced(t) is not None
                   for t in model.graph.initializer)

    @contextlib.contextmanager
    def as_path(self, model: onnx.ModelProto) -> Iterator[str]:
        """``model`` written as it is into the pool's folder, where its references resolve (for onnx's checker)."""
        fd, path = tempfile.mkstemp(suffix=".onnx", prefix="check-", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(model.SerializeToString())
            yield path
        finally:
            os.unlink(path)

    def session(self, model: onnx.ModelProto, opts: ort.SessionOptions,
                providers: list[str]) -> ort.InferenceSession:
        """A session of ``model`` reading its large initializers from the pool (``opts`` gains them)."""
        path, shared = self.stage(model)
        try:
            for name, value in shared.items():
                opts.add_initializer(name, value)
            sess = ort.InferenceSession(path, opts, providers=providers)
        finally:
            os.unlink(path)
        self.sessions += 1
        return sess

    @contextlib.contextmanager
    def dropping(self, every_s: float = DROP_EVERY_S) -> Iterator[None]:
        """The mapped pages dropped every ``every_s`` seconds while the block runs (a thread; onnxruntime builds a
        session without holding the GIL): a session prepacking its MatMul weights reads each once, so the pages
        read so far need not stay while it reads the next. For building timed sessions, not for running them."""
        stop = threading.Event()

        def drop() -> None:
            while not stop.wait(every_s):
                self.drop_pages()
        thread = threading.Thread(target=drop, name="eqsat-drop-pages", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.drop_pages()

    def close(self) -> None:
        """Remove the pool's folder (sessions built on it must be gone: they read the mapped arrays)."""
        self.entries.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


WEIGHT_INPUTS: dict[tuple[str, str], frozenset[int]] = {
    ("", "MatMul"): frozenset({1}), ("", "Gemm"): frozenset({1}), ("", "Conv"): frozenset({1}),
    ("", "ConvTranspose"): frozenset({1}), ("", "Gather"): frozenset({0}), ("", "LSTM"): frozenset({1, 2}),
    ("", "GRU"): frozenset({1, 2}), ("", "RNN"): frozenset({1, 2}), ("com.microsoft", "FusedMatMul"): frozenset({1}),
    ("com.microsoft", "MatMulNBits"): frozenset({1}), ("com.microsoft", "FusedConv"): frozenset({1}),
}
"""(domain, operator) -> the inputs that are its weights: an initializer only these read is handed to onnxruntime as
a shared value (``SessionOptions.add_initializer``). Any other is not: onnxruntime's graph optimizers may rewrite an
initializer in place under its name (the transpose optimizer transposes a constant that a Transpose is pushed
through: YOLOS's detection position table, a ``Concat`` input after a ``Transpose``), and the session then runs
with the shared value unchanged: a shape error where the table is not square, wrong values where it is."""


def weights_only(graph: onnx.GraphProto) -> set[str]:
    """The initializers of ``graph`` that only :data:`WEIGHT_INPUTS` read (none read by a subgraph, none an output)."""
    reads: dict[str, bool] = {}

    def sub_reads(g: onnx.GraphProto) -> None:
        for node in g.node:
            for name in node.input:
                reads[name] = False
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    sub_reads(sub)

    for node in graph.node:
        weights = WEIGHT_INPUTS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type), frozenset())
        for k, name in enumerate(node.input):
            reads[name] = reads.get(name, True) and k in weights
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                sub_reads(sub)
    for out in graph.output:
        reads[out.name] = False
    return {t.name for t in graph.initializer if reads.get(t.name, False)}


def array_of(t: TensorProto) -> np.ndarray:
    """``t``'s values, read from the current pool where ``t`` refers into it (an exported candidate's large
    folded weights do), else from ``t`` itself."""
    shared = current()
    data = shared.data(t) if shared is not None else None
    return np.asarray(data) if data is not None else numpy_helper.to_array(t)


def current() -> WeightPool | None:
    """The pool made current by :func:`pooled`, or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def pooled(folder: str | None = None) -> Iterator[WeightPool]:
    """A :class:`WeightPool` current for the block (sessions built meanwhile share its weights); an enclosing
    pool is reused. The pool's folder is removed on exit."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    pool = WeightPool(folder)
    token = _CURRENT.set(pool)
    try:
        yield pool
    finally:
        _CURRENT.reset(token)
        pool.close()


__all__ = ["ALIGN", "MIN_BYTES", "PREFIX", "Entry", "WeightPool", "array_of", "copy_fields", "current", "pooled"]
