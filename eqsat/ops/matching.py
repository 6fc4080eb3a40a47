"""Composite operators in ONNX graphs, the matchers' side: what the family modules' ``PATTERNS`` share.

A family module whose operators ONNX models spell as several nodes (:mod:`eqsat.ops.composite`,
:mod:`eqsat.ops.attention`) lists in its ``PATTERNS`` (op type of the node a match starts from -> :data:`Matcher`)
matchers that, from such an anchor node, find one of them in a :class:`View` of the graph. :data:`eqsat.ops.PATTERNS`
joins them (an anchor's matchers are tried in the order of the family modules there), and
:func:`eqsat.onnx.patterns.find_composites` runs them over a graph (validity, claiming, the
:class:`~eqsat.onnx.patterns.Match` records).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

_RTOL = 1e-6
"""relative tolerance of a recognized scalar constant (they are float32 values of the exact ones)"""
_FLOAT = onnx.TensorProto.FLOAT


class View:
    """Who produces and who reads each value of a graph (``implicit`` gives a node's implicit inputs, the values
    its subgraphs read), and the scalar constants."""

    def __init__(self, graph: onnx.GraphProto, consts: Mapping[str, np.ndarray], opset: int,
                 implicit: Callable[[onnx.NodeProto], list[str]], kept: Collection[str] = ()):
        self.opset = opset
        self.kept = frozenset(kept)
        """values of ``Shape`` nodes the program keeps (their values meet the data at every size): such a Shape reads
        its operand even where its value is known at one size"""
        self.nodes = list(graph.node)  # one Python object per node, kept: ids below stay valid
        self.order = {id(n): k for k, n in enumerate(self.nodes)}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        self.consts = dict(consts)
        self.outputs = {o.name for o in graph.output}
        for node in self.nodes:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute:
                attr = node.attribute[0]
                if attr.type == onnx.AttributeProto.TENSOR:
                    self.consts[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name in ("value_float", "value_int"):
                    self.consts[node.output[0]] = np.array(helper.get_attribute_value(attr))
            elif node.op_type == "Identity" and node.domain in ("", "ai.onnx") and node.input and node.output \
                    and node.input[0] in self.consts:
                self.consts[node.output[0]] = self.consts[node.input[0]]  # torch's deduplicated initializers
            for o in node.output:
                if o:
                    self.producer[o] = node
            for name in dict.fromkeys([i for i in node.input if i] + implicit(node)):
                self.readers.setdefault(name, []).append(node)

    def scalar(self, name: str) -> float | None:
        v = self.consts.get(name)  # rank 0 or [1]: broadcasting it keeps the other operand's shape (rank >= 1)
        if v is None or v.size != 1 or v.ndim > 1 or v.dtype.kind not in "fiu":
            return None
        return float(v.reshape(()))

    def is_scalar(self, name: str, value: float) -> bool:
        s = self.scalar(name)
        return s is not None and math.isclose(s, value, rel_tol=_RTOL)

    def made_by(self, name: str, *op_types: str) -> onnx.NodeProto | None:
        n = self.producer.get(name)
        return n if n is not None and n.op_type in op_types and n.domain in ("", "ai.onnx") else None

    def sole_reader(self, name: str, *op_types: str) -> onnx.NodeProto | None:
        """The one node reading ``name`` (None if several read it, it is a graph output, or of another type)."""
        rs = self.readers.get(name, [])
        if len(rs) != 1 or name in self.outputs or rs[0].domain not in ("", "ai.onnx") \
                or op_types and rs[0].op_type not in op_types:
            return None
        return rs[0]

    @staticmethod
    def other(node: onnx.NodeProto, name: str) -> str | None:
        """The other operand of a binary node one of whose operands is ``name``."""
        a, b = (list(node.input) + ["", ""])[:2]
        return b if a == name and b != name else a if b == name and a != name else None

    def through_float_casts(self, name: str, nodes: list[onnx.NodeProto]) -> str:
        """``name`` past the Casts to float that alone read it one after another (identities on the float32 values
        the importer requires), which join ``nodes``."""
        cast = self.sole_reader(name, "Cast")
        while cast is not None and self.attr(cast, "to") == _FLOAT:
            nodes.append(cast)
            name = cast.output[0]
            cast = self.sole_reader(name, "Cast")
        return name

    def attr(self, node: onnx.NodeProto, name: str, default: object = None) -> object:
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def softmax_axis(self, node: onnx.NodeProto) -> int:
        """A Softmax node's axis as written (default -1 from opset 13, 1 before)."""
        return int(self.attr(node, "axis", -1 if self.opset >= 13 else 1))  # type: ignore[call-overload]

    def last_axis_mean(self, node: onnx.NodeProto | None) -> bool:
        """A ReduceMean over the last axis, keeping it (axes an attribute, or an input from opset 18)."""
        if node is None or node.op_type != "ReduceMean" or self.attr(node, "keepdims", 1) != 1:
            return False
        axes = self.attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            a = self.consts.get(node.input[1])
            axes = None if a is None else [int(v) for v in a.reshape(-1)]
        return axes is not None and list(axes) == [-1]  # type: ignore[call-overload]

    def valid(self, nodes: list[onnx.NodeProto], output: str) -> bool:
        """No value inside the match is read outside it or is a graph output (a ``Shape`` whose value is known, as
        a static import folds it, reads no value)."""
        inside = {id(n) for n in nodes}
        if not all(n.output and n.output[0] for n in nodes):  # the importer keys covered nodes by it
            return False
        for n in nodes:
            for o in n.output:
                if o and o != output and (o in self.outputs or any(id(r) not in inside and not self._known_shape(r)
                                                                   for r in self.readers.get(o, []))):
                    return False
        return True

    def _known_shape(self, node: onnx.NodeProto) -> bool:
        return node.op_type == "Shape" and node.domain in ("", "ai.onnx") and bool(node.output) \
            and node.output[0] in self.consts and node.output[0] not in self.kept


Found = tuple[str, tuple, tuple[str, ...], list[onnx.NodeProto], str]
"""what a matcher finds: (IR op, its attributes, the operands' value names, the covered nodes, the output's name)"""

Matcher = Callable[[View, onnx.NodeProto], "Found | None"]
"""(view, anchor node) -> what it found there, or None"""


def binary_matmul(mm: onnx.NodeProto) -> bool:
    """A MatMul with both operands and its output named (the anchor the MatMul matchers start from)."""
    return len(mm.input) == 2 and all(mm.input) and bool(mm.output) and bool(mm.output[0])


def const_ints(v: View, name: str) -> list[int] | None:
    """The values of ``name``, a constant of an integer type, flattened (None where it is no such constant)."""
    a = v.consts.get(name)
    return None if a is None or a.dtype.kind not in "iu" else [int(x) for x in a.reshape(-1)]


def slice_of(v: View, name: str) -> tuple[str, int, int, int, int] | None:
    """``name = Slice(x, [start], [end], [axis][, [step]])`` of one axis, its bounds constants (the step 1 where it
    is not given): (x, start, end, step, axis) as written."""
    n = v.made_by(name, "Slice")
    if n is None or len(n.input) < 4 or not n.input[0]:
        return None
    starts, ends, axes = (const_ints(v, i) for i in n.input[1:4])
    steps = const_ints(v, n.input[4]) if len(n.input) > 4 and n.input[4] else [1]
    if starts is None or ends is None or axes is None or steps is None \
            or not len(starts) == len(ends) == len(axes) == len(steps) == 1:
        return None
    return n.input[0], starts[0], ends[0], steps[0], axes[0]


def sum_of_products(v: View, add: onnx.NodeProto) -> Iterator[tuple[onnx.NodeProto, onnx.NodeProto, str, str, str, str]]:
    """Every reading of ``add`` as ``Add(Mul(x, cos), Mul(turned, sin))``, the form of the rotary embeddings'
    decompositions: (the first Mul, the second, x, cos, turned, sin) for each operand order of the Add and of either
    Mul; none where the Add's two operands are one value or not both two-operand Muls."""
    if len(add.input) != 2 or add.input[0] == add.input[1]:
        return
    for a, b in (add.input, list(reversed(add.input))):
        mul1, mul2 = v.made_by(a, "Mul"), v.made_by(b, "Mul")
        if mul1 is None or mul2 is None or len(mul1.input) != 2 or len(mul2.input) != 2:
            continue
        for x, cos in (mul1.input, list(reversed(mul1.input))):
            for turned, sin in (mul2.input, list(reversed(mul2.input))):
                yield mul1, mul2, x, cos, turned, sin
