"""Composite operators in ONNX graphs: the decompositions torch exports (TorchScript and dynamo exporters,
opsets 13-20) of GELU, LayerNorm, Softmax, SiLU, RMSNorm, attention and MatMul with a bias, found so that the
importer makes each one IR node (:mod:`eqsat.ops.composite`, :mod:`eqsat.ops.attention`) instead of a chain of
opaque and element-wise nodes.

Recognized forms (``*`` and ``+`` in either operand order, a product in any association; ``c`` scalar
constants, from initializers or Constant nodes):

* ``gelu`` erf: ``Erf(x / sqrt 2)`` (or ``x * (1/sqrt 2)``) ``+ 1``, times ``x`` and ``0.5``; a ``Gelu`` node.
* ``gelu`` tanh: ``Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))) + 1``, times ``x`` and ``0.5``.
* ``layernorm``: a ``LayerNormalization`` node over the last axis with a bias; before opset 17,
  ``d = x - ReduceMean(x)``; ``d / Sqrt(ReduceMean(Pow(d, 2)) + eps) * gamma + beta``.
* ``softmax``: a ``Softmax`` node (before opset 13, which flattens at its axis, one over the last axis only).
* ``silu``: ``x * Sigmoid(x)``.
* ``rmsnorm``: ``x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps))`` (or ``1 / Sqrt(..)``, or ``x / Sqrt(..)``),
  optional ``Cast``s to float, times ``gamma``.
* ``attention``: ``MatMul(q, kt)``, times a scalar (``Mul``, or ``Div`` by it; or ``q`` and ``kt`` each times one,
  as torch's SDPA export writes it; or none), plus an optional mask (``Add``), ``Softmax`` over the last axis
  (``-1``, or its positive index as some exporters and older opsets write it), optional ``Cast`` s to float,
  ``MatMul`` by ``v``.
* ``linear``: ``MatMul(x, W) + b`` with constant ``W`` [k, n] and ``b`` [n] (the importer makes a ``Gemm`` one too).

The graph carries no shapes the matchers could rely on, so a Softmax axis that only the operand's rank can tell
to be the last (a positive index; any axis before opset 13) is recorded in :attr:`Match.last_axis` and checked
by :meth:`Match.ir_attrs` once the importer knows the shapes.

Reductions must be over the last axis (``axes = [-1]``, kept). A match is valid only when no value inside
it (every output of its nodes but the last) is used outside it: by another node, a subgraph, or as a graph
output. Each node belongs to at most one match.

>>> from onnx import helper, TensorProto
>>> g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
...                       "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
>>> [(m.op, m.inputs, m.output) for m in find_composites(g)]
[('silu', ('x',), 'y')]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ops.composite import GELU_ERF, GELU_TANH, eps_bits
from ..ops.mapping import resolve_axis
from .subgraphs import implicit_inputs

_RTOL = 1e-6
"""relative tolerance of a recognized scalar constant (they are float32 values of the exact ones)"""
_FLOAT = onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class Match:
    """One composite found in a graph."""

    op: str
    """the IR operator (:mod:`eqsat.ops.composite`, :mod:`eqsat.ops.attention`)"""
    attrs: tuple
    """its attributes; a softmax axis may still be negative (:meth:`ir_attrs` normalizes it)"""
    inputs: tuple[str, ...]
    """the operands' value names, in the operator's order (x, then gamma, beta; q, kt, v, then a mask)"""
    output: str
    """the value the composite computes"""
    nodes: tuple[onnx.NodeProto, ...]
    """the covered nodes, in graph order (Constant nodes not included: they may be shared)"""
    last_axis: int | None = None
    """the axis of a Softmax inside the match that must be the last axis of the first operand (attention's: the
    scores have q's rank; a Softmax before opset 13, which flattens at its axis), or None"""

    def ir_attrs(self, shapes: Sequence[tuple[int, ...]]) -> tuple | None:
        """The IR attributes given the operands' shapes; None when the match does not hold at these ranks (a
        Softmax axis out of range, or not the last where it must be): the importer then takes its nodes one by one."""
        rank = len(shapes[0])
        if self.last_axis is not None and resolve_axis(self.last_axis, rank) != rank - 1:
            return None
        if self.op == "softmax":
            axis = resolve_axis(self.attrs[0], rank)
            return None if axis is None else (axis,)
        return self.attrs


class _View:
    """Who produces and who reads each value of a graph, and the scalar constants."""

    def __init__(self, graph: onnx.GraphProto, consts: Mapping[str, np.ndarray], opset: int):
        self.opset = opset
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
            for name in dict.fromkeys([i for i in node.input if i] + implicit_inputs(node)):
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
        """No value inside the match is read outside it or is a graph output."""
        inside = {id(n) for n in nodes}
        if not all(n.output and n.output[0] for n in nodes):  # the importer keys covered nodes by it
            return False
        for n in nodes:
            for o in n.output:
                if o and o != output and (o in self.outputs or any(id(r) not in inside for r in self.readers.get(o, []))):
                    return False
        return True


# -- matchers: each starts at an anchor node and returns (op, attrs, inputs, nodes, output) or None ------
Found = tuple[str, tuple, tuple[str, ...], list[onnx.NodeProto], str]


def _times_x_half(v: _View, start: str, x: str) -> tuple[list[onnx.NodeProto], str] | None:
    """``start * x * 0.5`` in any association: the Mul nodes and the product's name."""
    nodes: list[onnx.NodeProto] = []
    found_x = found_half = False
    cur = start
    while not (found_x and found_half):
        m = v.sole_reader(cur, "Mul")
        other = v.other(m, cur) if m is not None else None
        if m is None or other is None:
            return None
        nodes.append(m)
        inner = v.made_by(other, "Mul") if other != x and not (found_x or found_half) else None
        if inner is not None and v.sole_reader(other, "Mul") is m and sorted(
                [inner.input[0] == x, inner.input[1] == x]) == [False, True] and v.is_scalar(v.other(inner, x) or "", 0.5):
            nodes.append(inner)
            found_x = found_half = True
        elif other == x and not found_x:
            found_x = True
        elif v.is_scalar(other, 0.5) and not found_half:
            found_half = True
        else:
            return None
        cur = m.output[0]
    return nodes, cur


def _plus_one(v: _View, name: str) -> onnx.NodeProto | None:
    a = v.sole_reader(name, "Add")
    return a if a is not None and v.is_scalar(v.other(a, name) or "", 1.0) else None


def _gelu_tail(v: _View, head: list[onnx.NodeProto], act: onnx.NodeProto, x: str, approx: int) -> Found | None:
    one = _plus_one(v, act.output[0])
    prod = _times_x_half(v, one.output[0], x) if one is not None else None
    if one is None or prod is None:
        return None
    return "gelu", (approx,), (x,), head + [act, one] + prod[0], prod[1]


def _gelu_erf(v: _View, erf: onnx.NodeProto) -> Found | None:
    scale = v.made_by(erf.input[0], "Div", "Mul")
    if scale is None:
        return None
    if scale.op_type == "Div":
        x, ok = scale.input[0], v.is_scalar(scale.input[1], math.sqrt(2.0))
    else:
        c = next((i for i in scale.input if v.is_scalar(i, math.sqrt(0.5))), None)
        x, ok = (v.other(scale, c) or "", True) if c is not None else ("", False)
    return _gelu_tail(v, [scale], erf, x, GELU_ERF) if ok and x else None


def _scaled_by(v: _View, name: str, op_type: str, value: float) -> tuple[onnx.NodeProto, str] | None:
    """``name = op(other, c)`` (either order) with scalar ``c == value``: the node and ``other``."""
    n = v.made_by(name, op_type)
    if n is None:
        return None
    for c in n.input:
        if v.is_scalar(c, value):
            other = v.other(n, c)
            return (n, other) if other else None
    return None


def _gelu_tanh(v: _View, tanh: onnx.NodeProto) -> Found | None:
    outer = _scaled_by(v, tanh.input[0], "Mul", math.sqrt(2.0 / math.pi))
    add = v.made_by(outer[1], "Add") if outer is not None else None
    if outer is None or add is None:
        return None
    for k in (0, 1):
        cubic = _scaled_by(v, add.input[k], "Mul", 0.044715)
        x = add.input[1 - k]
        power = v.made_by(cubic[1], "Pow") if cubic is not None else None
        if cubic is not None and power is not None and power.input[0] == x and v.is_scalar(power.input[1], 3.0):
            return _gelu_tail(v, [power, cubic[0], add, outer[0]], tanh, x, GELU_TANH)
    return None


def _gelu_node(v: _View, node: onnx.NodeProto) -> Found | None:
    approx = v.attr(node, "approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    code = {"none": GELU_ERF, "tanh": GELU_TANH}.get(str(approx))
    return None if code is None else ("gelu", (code,), (node.input[0],), [node], node.output[0])


def _silu(v: _View, sig: onnx.NodeProto) -> Found | None:
    x = sig.input[0]
    m = v.sole_reader(sig.output[0], "Mul")
    if m is None or v.other(m, sig.output[0]) != x:
        return None
    return "silu", (), (x,), [sig, m], m.output[0]


def _eps_sqrt(v: _View, mean: onnx.NodeProto) -> tuple[list[onnx.NodeProto], float, str] | None:
    """``Sqrt(mean + eps)``: its nodes, eps and the Sqrt's output."""
    add = v.sole_reader(mean.output[0], "Add")
    eps = v.scalar(v.other(add, mean.output[0]) or "") if add is not None else None
    sqrt = v.sole_reader(add.output[0], "Sqrt") if add is not None else None
    if add is None or eps is None or sqrt is None or not eps > 0:
        return None
    return [add, sqrt], eps, sqrt.output[0]


def _rmsnorm(v: _View, power: onnx.NodeProto) -> Found | None:
    x = power.input[0]
    mean = v.sole_reader(power.output[0], "ReduceMean")
    if not v.is_scalar(power.input[1], 2.0) or mean is None or not v.last_axis_mean(mean):
        return None
    found = _eps_sqrt(v, mean)
    if found is None:
        return None
    nodes, eps, std = [power, mean, *found[0]], found[1], found[2]
    inv = v.sole_reader(std, "Reciprocal", "Div")
    if inv is None:
        return None
    y = inv
    if not (inv.op_type == "Div" and list(inv.input) == [x, std]):  # not x / std: x * (1 / std)
        if inv.op_type == "Div" and not (inv.input[1] == std and v.is_scalar(inv.input[0], 1.0)):
            return None
        prod = v.sole_reader(inv.output[0], "Mul")
        if prod is None or v.other(prod, inv.output[0]) != x:
            return None
        nodes.append(inv)
        y = prod
    nodes.append(y)
    out = y.output[0]
    out = v.through_float_casts(out, nodes)
    scale = v.sole_reader(out, "Mul")
    gamma = v.other(scale, out) if scale is not None else None
    if scale is None or not gamma:
        return None
    g = v.consts.get(gamma)
    if g is not None and g.ndim != 1:
        return None
    return "rmsnorm", (eps_bits(eps),), (x, gamma), nodes + [scale], scale.output[0]


def _layernorm_node(v: _View, node: onnx.NodeProto) -> Found | None:
    if v.attr(node, "axis", -1) != -1 or len(node.input) < 3 or not node.input[2]:
        return None
    eps = float(v.attr(node, "epsilon", 1e-5))  # type: ignore[arg-type]
    return "layernorm", (eps_bits(eps),), tuple(node.input[:3]), [node], node.output[0]


def _layernorm_decomposed(v: _View, sub: onnx.NodeProto) -> Found | None:
    """torch's opset < 17 form: d = x - mean(x); d / sqrt(mean(d^2) + eps) * gamma + beta."""
    x, d = sub.input[0], sub.output[0]
    mean_x = v.made_by(sub.input[1], "ReduceMean")
    if mean_x is None or mean_x.input[0] != x or not v.last_axis_mean(mean_x) or v.sole_reader(mean_x.output[0]) is None:
        return None
    readers = v.readers.get(d, [])
    power = next((r for r in readers if r.op_type == "Pow"), None)
    div = next((r for r in readers if r.op_type == "Div" and list(r.input[:1]) == [d]), None)
    if len(readers) != 2 or power is None or div is None or not v.is_scalar(power.input[1], 2.0):
        return None
    var = v.sole_reader(power.output[0], "ReduceMean")
    found = _eps_sqrt(v, var) if var is not None and v.last_axis_mean(var) else None
    if var is None or found is None or list(div.input) != [d, found[2]]:
        return None
    scale = v.sole_reader(div.output[0], "Mul")
    gamma = v.other(scale, div.output[0]) if scale is not None else None
    shift = v.sole_reader(scale.output[0], "Add") if scale is not None else None
    beta = v.other(shift, scale.output[0]) if shift is not None and scale is not None else None
    if scale is None or shift is None or not gamma or not beta:
        return None
    nodes = [mean_x, sub, power, var, *found[0], div, scale, shift]
    return "layernorm", (eps_bits(found[1]),), (x, gamma, beta), nodes, shift.output[0]


def _scale_factor(v: _View, name: str) -> tuple[onnx.NodeProto, str, float] | None:
    """``name = other * c`` (either order) or ``other / c`` with a positive finite scalar ``c``: the node,
    ``other`` and the factor (``c`` or ``1 / c``)."""
    n = v.made_by(name, "Mul", "Div")
    if n is None or len(n.input) != 2:
        return None
    for k in ((1,) if n.op_type == "Div" else (0, 1)):
        c, other = v.scalar(n.input[k]), n.input[1 - k]
        if c is not None and math.isfinite(c) and c > 0 and other and other != n.input[k]:
            return n, other, 1.0 / c if n.op_type == "Div" else c
    return None


def _attention(v: _View, mm: onnx.NodeProto) -> Found | None:
    """``MatMul(q, kt) [* c | / c] [+ mask] -> Softmax(-1) [-> Cast(float)...] -> MatMul(., v)``; a scale may
    also sit on q and kt (torch's ``scaled_dot_product_attention`` export: ``q * sqrt(c)``, ``kt * sqrt(c)``). A
    Softmax axis other than -1 is the last one at a single rank: a negative one never at the ranks the operator
    takes (3 and 4), a non-negative one is checked with the shapes (:attr:`Match.last_axis`)."""
    nodes, scale = [mm], 1.0
    operands = list(mm.input[:2])
    for k, name in enumerate(operands):  # scalar factors on q or kt, read by this MatMul alone
        found = _scale_factor(v, name)
        if found is not None and v.sole_reader(name) is mm and operands[0] != operands[1]:
            nodes.insert(0, found[0])
            operands[k], scale = found[1], scale * found[2]
    q, kt = operands
    cur = mm.output[0]
    post = v.sole_reader(cur, "Mul", "Div")
    found = _scale_factor(v, post.output[0]) if post is not None else None
    if post is not None and found is not None and found[1] == cur:
        nodes.append(post)
        cur, scale = post.output[0], scale * found[2]
    mask = None
    add = v.sole_reader(cur, "Add")
    if add is not None:
        mask = v.other(add, cur)
        if not mask:
            return None
        nodes.append(add)
        cur = add.output[0]
    soft = v.sole_reader(cur, "Softmax")
    if soft is None or v.softmax_axis(soft) < -1:
        return None
    nodes.append(soft)
    cur = soft.output[0]
    cur = v.through_float_casts(cur, nodes)
    pv = v.sole_reader(cur, "MatMul")
    if pv is None or pv.input[0] != cur or pv.input[1] == cur or not math.isfinite(scale) or not scale > 0:
        return None
    inputs = (q, kt, pv.input[1]) + ((mask,) if mask is not None else ())
    return "attention", (eps_bits(scale),), inputs, nodes + [pv], pv.output[0]


def _linear(v: _View, mm: onnx.NodeProto) -> Found | None:
    """``MatMul(x, W) + b`` (either order) with a constant 2-D ``W`` [k, n] and a constant ``b`` [n]."""
    w = v.consts.get(mm.input[1])
    add = v.sole_reader(mm.output[0], "Add")
    if w is None or add is None or mm.input[0] in v.consts:
        return None
    bias = v.other(add, mm.output[0])
    b = v.consts.get(bias) if bias else None
    if bias is None or b is None or w.ndim != 2 or b.shape != (w.shape[1],):
        return None
    return "linear", (), (mm.input[0], mm.input[1], bias), [mm, add], add.output[0]


def _matmul(v: _View, mm: onnx.NodeProto) -> Found | None:
    if len(mm.input) != 2 or not all(mm.input) or not mm.output or not mm.output[0]:
        return None
    return _attention(v, mm) or _linear(v, mm)


def _softmax(v: _View, node: onnx.NodeProto) -> Found | None:
    return "softmax", (v.softmax_axis(node),), (node.input[0],), [node], node.output[0]


_ANCHORS: dict[str, Callable[[_View, onnx.NodeProto], Found | None]] = {
    "Erf": _gelu_erf, "Tanh": _gelu_tanh, "Gelu": _gelu_node, "Sigmoid": _silu, "Pow": _rmsnorm,
    "LayerNormalization": _layernorm_node, "Sub": _layernorm_decomposed, "Softmax": _softmax, "MatMul": _matmul,
}
"""op type of the node a matcher starts from -> the matcher"""


def find_composites(graph: onnx.GraphProto, consts: Mapping[str, np.ndarray] | None = None,
                    opset: int = 13) -> list[Match]:
    """The composites in ``graph`` (its top level), in graph order of their anchors; ``consts`` are the values
    known besides the Constant nodes (the importer's initializers); ``opset`` is the model's (ai.onnx): it decides
    what a Softmax computes."""
    v = _View(graph, consts or {}, opset)
    claimed: set[int] = set()
    matches = []
    for node in v.nodes:
        fn = _ANCHORS.get(node.op_type)
        if fn is None or node.domain not in ("", "ai.onnx") or id(node) in claimed:
            continue
        found = fn(v, node)
        if found is None:
            continue
        op, attrs, inputs, nodes, output = found
        if any(id(n) in claimed for n in nodes) or not all(inputs) or not v.valid(nodes, output):
            continue
        claimed.update(id(n) for n in nodes)
        ordered = tuple(sorted(nodes, key=lambda n: v.order[id(n)]))
        soft = next((n for n in nodes if n.op_type == "Softmax"), None)
        axis = v.softmax_axis(soft) if soft is not None else -1  # -1 is the last axis at every rank
        last = axis if axis != -1 and (op == "attention" or opset < 13) else None
        matches.append(Match(op, attrs, tuple(inputs), output, ordered, last))
    return matches


__all__ = ["Match", "find_composites"]
