"""Two more patterns of the values computed from the inputs' shapes alone (beside :mod:`eqsat.generic.uniform`'s),
which a shape-generic program writes in one or two nodes where the user's program computes them in many (a
decoder's causal mask and rotary tables: the static program folds them into constants):

- a **triangle**: a value whose last two axes are one symbol (``seq x seq``), one slice repeated along its other
  symbolic axes, that holds one value on and below a diagonal and another above it (a causal mask, additive or
  boolean), written ``Trilu(ConstantOfShape(size))``;
- a **prefix table**: a value that is, along each of its other symbolic axes (each one symbol), the first
  ``size`` entries of its value at a larger size (position ids, a rotary embedding's cos and sin, a position
  embedding's rows), written as a ``Slice`` of that larger value, a constant. The table covers the sizes up to
  :data:`TABLE_SIZE` (or the largest the user's program accepts, where it accepts fewer: a position embedding of
  so many rows); beyond it the written program fails as the user's does, or, where the user's program computes the
  value at any size, computes it as the user's does (an ``If``: :mod:`eqsat.generic`). Two axes may be one symbol (``seq x seq``: T5's relative position bias, the top-left block of
  its value at a larger size); the table, of at most :data:`TABLE_ELEMENTS` entries, then covers fewer sizes
  (512 for 4 heads) and is taken only where it covers the sizes a generic result is verified at
  (:data:`eqsat.onnx.axes.interface.OTHER_PROBES`).

Both are read off the runs :func:`eqsat.generic.uniform.shape_patterns` makes (the representative sizes and further
sizes of each symbol), and a prefix table off one more run at the table's size: a value that breaks the pattern
at any size does not have it.

>>> m = np.where(np.triu(np.ones((4, 4), bool), 1), -9.0, 0.0).reshape(1, 1, 4, 4)
>>> s = Mono.symbol("s")
>>> t = triangle([({"s": 4}, m), ({"s": 1}, m[..., :1, :1])], [Mono.const(1), Mono.const(1), s, s])
>>> (t.k, float(t.below), float(t.above))
(0, 0.0, -9.0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.dims import Mono
from eqsat.onnx.axes.dataflow import prune
from eqsat.onnx.axes.interface import OTHER_PROBES, QUIET, shapes_at, zero_feeds
from eqsat.onnx.footprint import activation_bytes
from eqsat.onnx.io import session

from .sizes import SizeWriter

TABLE_SIZE = 4096
"""the size (of each symbol a prefix table is sliced along) its table is computed at, at most"""

TABLE_ELEMENTS = 1 << 20
"""a prefix table holds at most this many elements (a smaller size is taken where it would hold more)"""

TABLE_BYTES = 256 << 20
"""the most memory the run that computes a prefix table may be estimated to take (:func:`eqsat.onnx.footprint.
activation_bytes`): a smaller size is taken where it would take more, and the program computes the value beyond it
as the user's does (a CLIP text model's rows of pooled tokens, ``Range(batch) * seq``, read the encoder's output
shape: a table of 4096 rows ran the encoder at a batch of 4096, and again at each size a search for the largest it
ran at tried)"""

Run = tuple[dict[str, int], np.ndarray]
"""the sizes a value was computed at and its value there"""


@dataclass(frozen=True)
class Triangle:
    """A value of ``below`` on and below the ``k``-th diagonal of its last two axes (``j - i <= k``), ``above``
    above it, of ``shape`` (size 1 on its other symbolic axes, along which it is repeated)."""

    shape: list[Mono]
    k: int
    below: np.ndarray
    above: np.ndarray


@dataclass(frozen=True)
class Prefix:
    """A value that is ``table`` (size 1 on the value's repeated symbolic axes) cut to ``ends`` along ``axes``."""

    table: np.ndarray
    axes: list[int]
    ends: list[Mono]
    beyond: bool = False
    """the table stops at its own bound (:data:`TABLE_SIZE`, :data:`TABLE_ELEMENTS`), not at the user's program's:
    the program accepts longer sizes, at which the written program computes the value as the user's does
    (:mod:`eqsat.generic` writes an ``If``)"""


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def repeated_axes(runs: Sequence[Run], dims: Sequence[Mono]) -> list[int]:
    """The symbolic axes along which every run's value is one slice repeated."""
    out = []
    for a, d in enumerate(dims):
        if not d.is_const and all(_equal(v, np.broadcast_to(v.take([0], axis=a), v.shape)) for _, v in runs
                                  if v.shape[a] > 0):
            out.append(a)
    return out


def _cut(value: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    return value[tuple(slice(0, 1) if k in axes else slice(None) for k in range(value.ndim))]


def triangle(runs: Sequence[Run], dims: Sequence[Mono]) -> Triangle | None:
    """The :class:`Triangle` the runs' values (of symbolic shape ``dims``) are, if they are one."""
    if len(dims) < 2 or dims[-1] != dims[-2] or dims[-1].is_const:
        return None
    lead = [a for a, d in enumerate(dims[:-2]) if not d.is_const]
    if any(d.is_const and d.coef != 1 for d in dims[:-2]) or not set(lead) <= set(repeated_axes(runs, dims)):
        return None
    mats = [_cut(v, lead).reshape(v.shape[-2:]) for _, v in runs]
    big = max(mats, key=len)
    n = len(big)
    if n < 3:
        return None
    below, above = big[n - 1, 0], big[0, n - 1]
    if _equal(np.asarray(below), np.asarray(above)):
        return None
    first = [j for j in range(n) if _equal(np.asarray(big[0, j]), np.asarray(above))]
    k = first[0] - 1
    for m in mats:
        want = np.where(np.triu(np.ones(m.shape, bool), k + 1), above, below).astype(m.dtype)
        if not _equal(m, want):
            return None
    shape = [Mono.const(1) if a in lead else d for a, d in enumerate(dims)]
    return Triangle(shape, k, np.asarray(below), np.asarray(above))


def prefixes(model: onnx.ModelProto, runs: Mapping[str, Sequence[Run]], shapes: Mapping[str, Sequence[Mono]],
             values: Mapping[str, int]) -> dict[str, Prefix]:
    """The :class:`Prefix` tables among the values of ``runs`` (name -> its runs; ``shapes``: its symbolic
    shape) computed by ``model``: each value's table is its run at :data:`TABLE_SIZE` (or the largest size up to
    it that ``model`` accepts) of each symbol it is sliced along."""
    out: dict[str, Prefix] = {}
    for name, got in runs.items():
        dims = list(shapes[name])
        repeated = repeated_axes(got, dims)
        axes = [a for a, d in enumerate(dims) if not d.is_const and a not in repeated]
        syms = [d.powers[0][0] for a, d in enumerate(dims) if a in axes
                and d.coef == 1 and len(d.powers) == 1 and d.powers[0][1] == 1]
        if not axes or len(syms) != len(axes):
            continue
        other = int(np.prod([1 if a in repeated else int(d.value(values)) for a, d in enumerate(dims)
                             if a not in axes]))
        cap = max(1, int((TABLE_ELEMENTS // max(other, 1)) ** (1 / len(axes))))
        if len(set(syms)) != len(syms) and cap < max(OTHER_PROBES):
            continue  # a block table (seq x seq) too small for the sizes a generic result is verified at
        found = _largest(model, name, list(dict.fromkeys(syms)), values, min(TABLE_SIZE, cap))
        if found is None:
            continue
        table, beyond, asked = found
        table = _cut(table, repeated)
        # the user's program computes it beyond the table only where the value grew to the size asked for (a
        # Slice of the user's own buffer, BERT's position ids, stops at the buffer: the table is the user's bound)
        beyond = beyond and all(table.shape[a] >= asked for a in axes)
        if table.ndim == len(dims) and all(table.shape[a] >= v.shape[a] for _, v in got for a in axes) and all(
                _equal(_cut(v, repeated), table[tuple(slice(0, v.shape[a]) if a in axes else slice(None)
                                                      for a in range(v.ndim))]) for _, v in got):
            out[name] = Prefix(table, axes, [dims[a] for a in axes], beyond)
    return out


def _largest(model: onnx.ModelProto, name: str, syms: Sequence[str], values: Mapping[str, int],
             size: int) -> tuple[np.ndarray, bool, int] | None:
    """``name``'s value with each of ``syms`` at ``size`` (or the largest size below it whose run is affordable:
    :func:`_affordable`), or at the largest size below that ``model`` runs at (None: none at or above the
    representative sizes); True where it runs at the size asked (it may run beyond), and that size."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend([onnx.ValueInfoProto(name=name)])
    try:
        sess = session(prune(probe))
    except Exception:  # noqa: BLE001 - a program onnxruntime cannot load: no table
        return None

    def at(n: int) -> np.ndarray | None:
        try:
            return np.asarray(sess.run([name], zero_feeds(probe, {**values, **{s: n for s in syms}}), QUIET)[0])
        except Exception:  # noqa: BLE001 - sizes it refuses
            return None

    low = max(int(values[s]) for s in syms)
    size = max(low, _affordable(probe, syms, values, low, size))
    got = at(size)
    if got is not None:
        return got, True, size
    best = at(low)
    if best is None:
        return None
    high = size  # refused at high, accepted at low
    while high - low > 1:
        mid = (low + high) // 2
        value = at(mid)
        if value is None:
            high = mid
        else:
            low, best = mid, value
    return best, False, size


def _affordable(probe: onnx.ModelProto, syms: Sequence[str], values: Mapping[str, int], low: int, size: int) -> int:
    """The largest size up to ``size`` (of each of ``syms``) at which a run of ``probe`` is estimated to take at
    most :data:`TABLE_BYTES`; ``low`` where none above it is. Where it is below ``size``, the table stops at a
    size of its own, not the user's program's: the written program computes the value beyond it."""
    def fits(n: int) -> bool:
        return activation_bytes(probe, shapes_at(probe, {**values, **{s: n for s in syms}})) <= TABLE_BYTES

    if fits(size):
        return size
    high = size
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def pattern_key(pattern: Triangle | Prefix) -> str:
    """A key equal for two patterns of the same values (two uses of one rotary cache, of one mask)."""
    if isinstance(pattern, Triangle):
        return f"triangle:{[d.key() for d in pattern.shape]}:{pattern.k}:{pattern.below.tobytes().hex()}:" \
               f"{pattern.above.tobytes().hex()}:{pattern.below.dtype}"
    digest = hashlib.sha256(np.ascontiguousarray(pattern.table).tobytes()).hexdigest()
    return f"prefix:{pattern.table.dtype}:{pattern.table.shape}:{digest}:{pattern.axes}:{[d.key() for d in pattern.ends]}"


def same_prefix(a: Prefix, b: Prefix) -> bool:
    """Whether two prefix tables stand for one value: of one type, cut along the same axes to the same sizes, and
    equal where both are computed (one may be longer: its run cost less to make, :func:`_affordable`)."""
    if a.table.dtype != b.table.dtype or a.axes != b.axes or a.ends != b.ends or a.table.ndim != b.table.ndim \
            or any(x != y for k, (x, y) in enumerate(zip(a.table.shape, b.table.shape)) if k not in a.axes):
        return False
    common = tuple(slice(0, min(x, y)) for x, y in zip(a.table.shape, b.table.shape))
    return bool(np.array_equal(a.table[common], b.table[common], equal_nan=a.table.dtype.kind in "fc"))


def write_triangle(writer: SizeWriter, tri: Triangle, elem: int) -> str | None:
    """The value of ``tri`` (of element type ``elem``) as ``Trilu(ConstantOfShape(shape))``: its name, or None
    where neither of its two values is zero (Trilu fills with zeros)."""
    zero = np.zeros((), tri.below.dtype)
    if _equal(tri.below, zero):
        fill, upper, k = tri.above, 1, tri.k + 1
    elif _equal(tri.above, zero):
        fill, upper, k = tri.below, 0, tri.k
    else:
        return None
    full = writer.fresh("triangle")
    writer.nodes.append(helper.make_node("ConstantOfShape", [writer.vector(tri.shape)], [full], name=full,
                                         value=numpy_helper.from_array(fill.reshape(1).astype(tri.below.dtype))))
    out = writer.fresh("triangle")
    writer.nodes.append(helper.make_node("Trilu", [full, writer.const(np.array(k, np.int64), "diagonal")], [out],
                                         name=out, upper=upper))
    for name in (full, out):
        writer.types[name] = elem
        writer.shapes[name] = list[Mono | None](tri.shape)
    return out


def write_prefix(writer: SizeWriter, prefix: Prefix, elem: int) -> str:
    """The value of ``prefix`` (of element type ``elem``) as a ``Slice`` of its table: its name."""
    table = writer.const(prefix.table, "table")
    starts = writer.const(np.zeros(len(prefix.axes), np.int64), "starts")
    axes = writer.const(np.array(prefix.axes, np.int64), "axes")
    out = writer.fresh("prefix")
    writer.nodes.append(helper.make_node("Slice", [table, starts, writer.vector(prefix.ends), axes], [out], name=out))
    shape: list[Mono | None] = [Mono.const(n) for n in prefix.table.shape]
    for a, d in zip(prefix.axes, prefix.ends):
        shape[a] = d
    writer.types[out] = elem
    writer.shapes[out] = shape
    return out


__all__ = ["TABLE_BYTES", "TABLE_ELEMENTS", "TABLE_SIZE", "Prefix", "Triangle", "pattern_key", "prefixes", "repeated_axes", "same_prefix",
           "triangle", "write_prefix", "write_triangle"]
