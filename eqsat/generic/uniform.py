"""Patterns in values computed from the inputs' shapes alone, which a shape-generic program
(:mod:`eqsat.generic`) writes more cheaply than their run-time computation (the static program folds them):

- the same along their symbolic axes (a token-type embedding of all-zero ids, an all-true mask): one slice
  repeated, written as that slice, a constant, broadcast where it is used;
- the flat index of each element (``b * seq + s`` built from two Ranges: torch's advanced indexing of a mask),
  or each element's multi-index (a GatherND's indices, the dynamo exporter's spelling): a Gather of a flat
  value, or a GatherND of a value of that grid, at those indices is a Reshape.

Read off runs of the program at the representative sizes and, for each symbol, at the further sizes
:func:`eqsat.onnx.axes.fitting.further_sizes` names: a value whose shape is not its symbolic shape at some size, or
that breaks the pattern at any, does not have it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from eqsat.dims import Mono, product
from eqsat.onnx.axes.fitting import further_sizes
from eqsat.onnx.axes.interface import QUIET, zero_feeds
from eqsat.onnx.io import session

from .sizes import SizeWriter
from .tables import Prefix, Triangle, prefixes, triangle

LARGEST = 1 << 20
"""values of more elements (at the representative sizes) are not checked"""


def _grid(value: np.ndarray) -> tuple[int, ...] | None:
    """The grid whose multi-indices ``value``'s last axis runs over in row-major order, if it does."""
    if value.dtype.kind not in "iu" or value.ndim < 2 or value.size == 0 or value.shape[-1] > 8:
        return None
    rows = value.reshape(-1, value.shape[-1])
    if rows.min() < 0:
        return None
    grid = tuple(int(n) + 1 for n in rows.max(axis=0))
    if int(np.prod(grid)) != len(rows):
        return None
    return grid if np.array_equal(rows, np.indices(grid).reshape(len(grid), -1).T) else None


def _slice(value: np.ndarray, axes: list[int]) -> np.ndarray:
    return value[tuple(slice(0, 1) if k in axes else slice(None) for k in range(value.ndim))]


@dataclass
class Patterns:
    """What runs at several sizes showed of values computed from the shapes alone."""

    slices: dict[str, np.ndarray] = field(default_factory=dict)
    """value -> its slice (size 1 on its symbolic axes), where it is that slice repeated at every size"""
    iota: set[str] = field(default_factory=set)
    """integer values that are 0, 1, 2, ... in row-major order at every size (the flat index of each element)"""
    grids: dict[str, list[tuple[dict[str, int], tuple[int, ...]]]] = field(default_factory=dict)
    """integer values whose last axis holds multi-indices that run over a grid in row-major order at every size
    (a GatherND's indices of each element): (sizes, the grid's shape) per run"""
    triangles: dict[str, Triangle] = field(default_factory=dict)
    """values that are one value on and below a diagonal of their last two axes, another above it (a causal
    mask; :mod:`eqsat.generic.tables`)"""
    prefixes: dict[str, Prefix] = field(default_factory=dict)
    """values that are the first entries of a table along their symbolic axes (position ids, rotary tables)"""

    def merge(self, other: Patterns) -> None:
        """``other``'s findings added to these."""
        self.slices.update(other.slices)
        self.iota.update(other.iota)
        self.grids.update(other.grids)
        self.triangles.update(other.triangles)
        self.prefixes.update(other.prefixes)


def shape_patterns(model: onnx.ModelProto, shapes: Mapping[str, list[Mono]], values: Mapping[str, int]) -> Patterns:
    """The :class:`Patterns` of the values of ``shapes`` (name -> its symbolic shape) computed by ``model`` (whose
    outputs are ignored), read off runs at ``values`` and further sizes of each symbol."""
    names = list(shapes)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sizes = [dict(values)]
    for sym, value in values.items():
        steps, checks = further_sizes(value)
        sizes += [{**values, sym: size} for size in [*steps, *checks]]
    if len(values) > 1:  # every symbol changed at once: a value of two sizes (CLIP's ``Range(batch) * seq``) is
        # the first entries of its value at a larger batch only where the length is the one it was run at
        sizes.append({sym: further_sizes(value)[0][0] for sym, value in values.items()})
    out = Patterns()
    try:
        sess = session(probe)
    except Exception:  # noqa: BLE001 - a program onnxruntime cannot load: nothing learnt
        return out
    runs: list[tuple[dict[str, int], list[np.ndarray]]] = []
    for at in sizes:
        try:
            runs.append((at, sess.run(names, zero_feeds(model, at), QUIET)))
        except Exception:  # noqa: BLE001 - sizes it refuses
            if at == sizes[0]:
                return out
    if len(runs) < 3:
        return out
    rest: dict[str, list[tuple[dict[str, int], np.ndarray]]] = {}
    for k, name in enumerate(names):
        dims = shapes[name]
        axes = [j for j, m in enumerate(dims) if not m.is_const]
        got = [(at, np.asarray(r[k])) for at, r in runs]
        if any(list(v.shape) != [int(m.value(at)) for m in dims] or v.size > LARGEST for at, v in got):
            continue
        if all(v.dtype.kind in "iu" and np.array_equal(v.reshape(-1), np.arange(v.size)) for _, v in got):
            out.iota.add(name)
        grids = [(at, _grid(v)) for at, v in got]
        if all(g is not None for _, g in grids):
            out.grids[name] = [(at, g) for at, g in grids if g is not None]
        nan = got[0][1].dtype.kind in "fc"
        parts = [_slice(v, axes) for _, v in got]
        if all(np.array_equal(v, np.broadcast_to(p, v.shape), equal_nan=nan)
               and np.array_equal(p, parts[0], equal_nan=nan) for (_, v), p in zip(got, parts)):
            out.slices[name] = parts[0]
        elif name not in out.iota and name not in out.grids:
            tri = triangle(got, dims)
            if tri is not None:
                out.triangles[name] = tri
            else:
                rest[name] = got
    out.prefixes.update(prefixes(probe, rest, shapes, values))
    return out


def flat_gather(writer: SizeWriter, node: onnx.NodeProto) -> list[Mono] | None:
    """A Gather along axis 0 at the flat index of each element of its indices (:attr:`Patterns.iota`),
    from data whose first axis has exactly that many rows, written as the Reshape it is (its target returned;
    None: not rewritten)."""
    data, index = writer.shapes.get(node.input[0]), writer.shapes.get(node.input[1])
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if axis != 0 or not data or index is None or None in data or None in index:
        return None
    rows, sizes = [d for d in data if d is not None], [d for d in index if d is not None]
    if rows[0] != product(sizes):
        return None
    node.op_type = "Reshape"
    del node.attribute[:]
    node.input[1] = writer.vector(sizes + rows[1:])
    return sizes + rows[1:]


def grid_gather(writer: SizeWriter, node: onnx.NodeProto,
                grids: list[tuple[dict[str, int], tuple[int, ...]]]) -> list[Mono] | None:
    """A GatherND at each element's multi-index of a grid that is its data's leading axes, in row-major order
    (``grids``: :attr:`Patterns.grids`), written as the Reshape it is (its target returned; None: not
    rewritten)."""
    data, index = writer.shapes.get(node.input[0]), writer.shapes.get(node.input[1])
    if any(a.name == "batch_dims" and a.i for a in node.attribute) or not data or not index \
            or None in data or None in index:
        return None
    lead, sizes = [d for d in data if d is not None], [d for d in index if d is not None]
    depth = len(grids[0][1])
    if not sizes[-1].is_const or int(sizes[-1].coef) != depth or depth > len(lead) \
            or product(sizes[:-1]) != product(lead[:depth]) or any(
                list(grid) != [int(d.value(at)) for d in lead[:depth]]
                for at, grid in grids):
        return None
    node.op_type = "Reshape"
    del node.attribute[:]
    node.input[1] = writer.vector(sizes[:-1] + lead[depth:])
    return sizes[:-1] + lead[depth:]


__all__ = ["LARGEST", "Patterns", "flat_gather", "grid_gather", "shape_patterns"]
