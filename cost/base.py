"""The cost interface: microseconds of one operator given its attributes and operand shapes.

A program's cost is the sum over its distinct operators (DAG cost). Zero-cost operators follow TASO
(layout-only ops, leaves, merge, dropout); an operator computable from weights alone is precomputed
before inference and costs nothing, in the original program and the optimized one alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from eqsat.ops import FREE_OPS
from eqsat.snapshot import Snapshot

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpKey:
    """Everything an operator's cost depends on (hashable; the cache key)."""

    op: str
    attrs: tuple
    in_shapes: tuple[Shape, ...]
    out_shape: Shape
    dtype: str = "float32"

    def text(self) -> str:
        """The key as the cache stores it; an attribute of more than :data:`DIGESTED_BYTES` bytes (an opaque If's
        branches: a whole decoder, weights and all) by its digest. Computed once per key (kept on the key itself:
        its repr of a decoder-sized attribute took most of a merged decoder's search)."""
        text = self.__dict__.get("_text")
        if text is None:
            text = f"{self.op}|{_compact(self.attrs)!r}|{self.in_shapes!r}|{self.out_shape!r}|{self.dtype}"
            object.__setattr__(self, "_text", text)
        return text


DIGESTED_BYTES = 4096
"""attribute bytes longer than this are written into a cache key as their SHA-256 digest"""


def _compact(value: object) -> object:
    if isinstance(value, bytes) and len(value) > DIGESTED_BYTES:
        return f"sha256:{hashlib.sha256(value).hexdigest()}:{len(value)}"
    if isinstance(value, tuple):
        return tuple(_compact(v) for v in value)
    return value



class CostModel(Protocol):
    name: str

    def op_cost(self, key: OpKey) -> float:
        """Microseconds to run one operator (only called for operators that are not free)."""
        ...


def is_free(op: str, model: object = None) -> bool:
    """TASO's zero-cost operators (``free`` in :mod:`eqsat.ops`), or the cost model's own set (``free_ops``)."""
    return op in getattr(model, "free_ops", FREE_OPS)


def node_keys(snapshot: Snapshot, model: object = None) -> list[OpKey | None]:
    """The key every e-node of a :class:`~eqsat.snapshot.Snapshot` is priced by (None for free and all-weights
    nodes), at the element type the decoder gives it (:meth:`~eqsat.snapshot.Snapshot.dtypes`: a float16
    program's operators are keyed as float16, as :func:`graph_ops` keys the program decoded)."""
    out: list[OpKey | None] = []
    dtypes = snapshot.dtypes()
    for e in snapshot.nodes:
        if is_free(e.op, model) or snapshot.all_weights[e.eclass]:
            out.append(None)
            continue
        shapes = tuple(snapshot.shapes[c] or () for c in e.children)
        attrs = e.attrs
        dtype = dtypes[e.children[0]] if e.children else "float32"  # as the decoder types it (ir.make)
        if e.op == "opaque":
            proto = snapshot.opaque[e.attrs[0]]
            attrs = (proto.attrs[0], proto.attrs[1], proto.attrs[2], proto.attrs[3])
            dtype = proto.dtype
        out.append(OpKey(e.op, attrs, shapes, snapshot.shapes[e.eclass] or (), dtype))
    return out


def node_costs(snapshot: Snapshot, model: CostModel) -> list[float]:
    """Own cost of every e-node of an :class:`~eqsat.snapshot.Snapshot` (0 for free and all-weights nodes), priced
    by its :func:`node_keys` key."""
    memo: dict[OpKey, float] = {}
    out: list[float] = []
    for key in node_keys(snapshot, model):
        if key is None:
            out.append(0.0)
            continue
        if key not in memo:
            memo[key] = float(model.op_cost(key))
        out.append(memo[key])
    return out


def graph_ops(graph, model: object = None) -> list[tuple[object, OpKey | None]]:
    """(node, key) for every node of an IR graph; key None for free or weight-only nodes."""
    weight_only: set[int] = set()
    result: list[tuple[object, OpKey | None]] = []
    for n in graph.nodes():
        if n.op == "weight" or (n.op not in ("input", "opaque") and n.inputs
                                and all(id(i) in weight_only for i in n.inputs)):
            weight_only.add(id(n))
        if is_free(n.op, model) or id(n) in weight_only:
            result.append((n, None))
            continue
        attrs = n.attrs if n.op != "opaque" else n.attrs[:4]
        result.append((n, OpKey(n.op, attrs, tuple(i.shape for i in n.inputs), n.shape, n.dtype)))
    return result


def graph_cost(graph, model: CostModel) -> float:
    """Estimated runtime of an IR program: the sum of its distinct operators' costs (microseconds)."""
    return float(sum(model.op_cost(k) for _, k in graph_ops(graph, model) if k is not None))


def costs_by_op(graph, model: CostModel) -> dict[str, float]:
    """:func:`graph_cost` split by operator kind: IR op -> the summed cost of its priced nodes (microseconds);
    kinds whose every node is free or weight-only are left out."""
    out: dict[str, float] = {}
    for _, k in graph_ops(graph, model):
        if k is not None:
            out[k.op] = out.get(k.op, 0.0) + float(model.op_cost(k))
    return out


def volume(shape: Sequence[int]) -> int:
    v = 1
    for d in shape:
        v *= int(d)
    return v
