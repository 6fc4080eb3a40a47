"""Composite operators: the activations, the dense layer and the softmax that models export as chains of small
ONNX operators (recognized on import by the matchers in ``PATTERNS`` below, which :mod:`eqsat.onnx.patterns`
runs), each one node of the IR; the normalizations are in :mod:`eqsat.ops.norm`. The float-attribute encoding
and the small helpers here serve both.

* ``gelu`` (x), attrs ``(approx,)``: 0 the exact form ``0.5 x (1 + erf(x / sqrt 2))``, 1 the tanh
  approximation ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``.
* ``softmax`` (x), attrs ``(axis,)``: ``exp(x) / sum(exp(x))`` along a non-negative axis (egglog: ranks 1-4).
* ``silu`` (x): ``x * sigmoid(x)``.
* ``linear`` (x, W, b): ``x[..., k] @ W[k, n] + b[n]`` (egglog: x of rank 1-4); affine, so defined over a
  prime field too. Written as Gemm for a 2-D x, else MatMul then Add. The importer makes one of a MatMul by a
  constant weight and its constant bias Add, and of a Gemm that is exactly one (no transA, alpha = beta = 1,
  constant B and a [n] or [1, n] bias); the rule ``linear_split`` relates it to its matmul and bias parts.
* ``scale`` (x), attrs ``(bits,)``: ``x * c`` for a positive finite float32 ``c``. Not one of a model's chains
  but a part of one: a rule cannot create a constant tensor, so the rule ``attention_split`` writes
  attention's score scale as this attribute. Written as a Mul by a scalar constant, which onnxruntime fuses
  into the MatMul before it (FusedMatMul: :data:`eqsat.onnx.fusions.MATMUL_SCALE`), as in attention's own
  decomposition.

Every x has rank 1 or more (a rank-0 x stays as the importer found it).

egglog attributes are i64, so a float attribute (the epsilon of a norm, the factor of ``scale`` and of
``attention``) is held exactly as the bit pattern of its float32 value (:func:`float_bits`, :func:`float_value`):
``float_bits(1e-5) == 925353388``; it must encode a positive finite float.
None but ``linear`` is defined over a prime field (NotEvaluable in that mode; ``scale`` could be, its factor being
a dyadic fraction, but it only ever stands before a softmax, which cannot).

The ONNX emitters write the form onnxruntime fuses best at the model's opset (``em.opset``): the standard
operator where the opset has it (Gelu from 20, Softmax always), else the decomposition torch exports and
onnxruntime's fusions match: erf-GELU with scalar constants (fused into Gelu), SiLU as ``x * Sigmoid(x)`` (fused
into QuickGelu), tanh-GELU in GPT-2's form (not fused on CPU); these fusions: :mod:`eqsat.onnx.fusions`.

>>> float_value(float_bits(1e-6)) == float(np.float32(1e-6))
True
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from .base import Ctor, Emitter, NotEvaluable, OpDef, Shape, fail, volume
from .egglog_text import MAX_RANK, dim_vars, rule, shape_of
from .mapping import ImportContext, Mapper, V, floats, onnx_attrs, resolve_axis
from .matching import Found, Matcher, View, binary_matmul

GELU_ERF, GELU_TANH = 0, 1
FLOAT_INF_BITS = 0x7F800000
"""float32 +inf's bit pattern: the bits of a positive finite float (a float attribute's) lie in (0, this)"""
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def float_bits(value: float) -> int:
    """The i64 attribute of a float (an epsilon, a scale): the bit pattern of its float32 value."""
    return int(struct.unpack("<I", struct.pack("<f", float(value)))[0])


def float_value(bits: int) -> float:
    """The float an attribute encodes (a float32 value, as a Python float)."""
    return float(struct.unpack("<f", struct.pack("<I", int(bits)))[0])


def no_field(op: str, modulus: int | None) -> None:
    if modulus is not None:
        raise NotEvaluable(f"{op} is not defined over a prime field")


def check_float_attr(op: str, bits: int, what: str = "eps") -> None:
    """Raise ``op``'s ShapeError unless ``bits`` encodes a positive finite float (its ``what`` attribute)."""
    if not 0 < bits < FLOAT_INF_BITS:
        raise fail(op, f"{what} attribute {bits} is not the float32 bit pattern of a positive finite {what}")


def float_attr_conds(var: str) -> list[str]:
    """The egglog conditions that the attribute variable ``var`` encodes a positive finite float."""
    return [f"(> {var} 0)", f"(< {var} {FLOAT_INF_BITS})"]


def _same_rule(ctor: str, attr_conds: list[str], with_attr: bool) -> Callable[[], list[str]]:
    """The output's shape is the operand's, of rank 1 or more (``S1`` .. ``S4``, ``SN``)."""
    pattern = f"({ctor} a x)" if with_attr else f"({ctor} x)"

    def rules() -> list[str]:
        shapes = [shape_of(dim_vars("d", r)) for r in range(1, MAX_RANK + 1)] + ["(SN dims)"]
        return [rule(f"shape_{ctor}{k + 1}", [f"(= e {pattern})", f"(= {s} (shape x))", *attr_conds],
                     [f"(set (shape e) {s})"]) for k, s in enumerate(shapes)]
    return rules


def _same_shape(op: str, shapes: Sequence[Shape]) -> Shape:
    if not shapes[0]:
        raise fail(op, "expects an operand of rank 1 or more")
    return tuple(shapes[0])


def per_element(k: float) -> Callable[[tuple, Sequence[Shape], Shape], float]:
    return lambda attrs, ins, out: k * volume(out)


def scalar_const(em: Emitter, value: float, base: str) -> str:
    return em.const(np.array(value, dtype=np.float32), base)


def opset_of(em: Emitter) -> int:
    return int(em.opset)


# -- gelu --------------------------------------------------------------------------------------------
def _gelu_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    if attrs[0] not in (GELU_ERF, GELU_TANH):
        raise fail("gelu", f"approx must be 0 (erf) or 1 (tanh), got {attrs[0]}")
    return _same_shape("gelu", shapes)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("gelu", modulus)
    x = np.asarray(args[0], dtype=np.float64)
    if attrs[0] == GELU_TANH:
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    (x,) = ins
    if opset_of(em) >= 20:
        return em.emit("Gelu", [x], "gelu", approximate="tanh" if attrs[0] == GELU_TANH else "none")
    if attrs[0] == GELU_TANH:  # GPT-2: (0.5 x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        half = em.emit("Mul", [x, scalar_const(em, 0.5, "half")], "gelu")
        cube = em.emit("Pow", [x, scalar_const(em, 3.0, "three")], "gelu")
        inner = em.emit("Add", [x, em.emit("Mul", [cube, scalar_const(em, 0.044715, "c")], "gelu")], "gelu")
        t = em.emit("Tanh", [em.emit("Mul", [inner, scalar_const(em, _SQRT_2_OVER_PI, "c")], "gelu")], "gelu")
        return em.emit("Mul", [half, em.emit("Add", [t, scalar_const(em, 1.0, "one")], "gelu")], "gelu")
    e = em.emit("Erf", [em.emit("Div", [x, scalar_const(em, math.sqrt(2.0), "sqrt2")], "gelu")], "gelu")
    y = em.emit("Mul", [x, em.emit("Add", [e, scalar_const(em, 1.0, "one")], "gelu")], "gelu")
    return em.emit("Mul", [y, scalar_const(em, 0.5, "half")], "gelu")


def _gelu_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    approximate = "tanh" if attrs[0] == GELU_TANH else "none"
    return lambda x: torch.nn.functional.gelu(x, approximate=approximate)


GELU = OpDef("gelu", "GELU: 0.5 x (1 + erf(x / sqrt 2)), or its tanh approximation", "(approx,)", _gelu_shape,
             (Ctor("Gelu", "it"),), _same_rule("Gelu", ["(>= a 0)", "(<= a 1)"], True), _gelu_numpy, _gelu_onnx,
             _gelu_torch, per_element(8.0))


# -- silu --------------------------------------------------------------------------------------------
def _silu_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("silu", modulus)
    x = np.asarray(args[0], dtype=np.float64)
    return x / (1.0 + np.exp(-x))


def _silu_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    return em.emit("Mul", [ins[0], em.emit("Sigmoid", ins, "silu")], "silu")


SILU = OpDef("silu", "x * sigmoid(x)", "()", lambda attrs, shapes: _same_shape("silu", shapes), (Ctor("Silu", "t"),),
             _same_rule("Silu", [], False), _silu_numpy, _silu_onnx,
             lambda torch, attrs, shapes: torch.nn.functional.silu, per_element(5.0))


# -- softmax -----------------------------------------------------------------------------------------
def _softmax_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    (axis,), (x,) = attrs, shapes
    if not 1 <= len(x) <= MAX_RANK or not 0 <= axis < len(x):
        raise fail("softmax", f"axis {axis} of a rank-{len(x)} operand (ranks 1-{MAX_RANK}, axis non-negative)")
    return tuple(x)


def _softmax_rules() -> list[str]:
    out = []
    for r in range(1, MAX_RANK + 1):
        d = shape_of(dim_vars("d", r))
        out.append(rule(f"shape_Softmax{r}", ["(= e (Softmax ax x))", f"(= {d} (shape x))", "(>= ax 0)",
                                              f"(< ax {r})"], [f"(set (shape e) {d})"]))
    return out


def _softmax_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("softmax", modulus)
    x = np.asarray(args[0], dtype=np.float64)
    z = np.exp(x - x.max(axis=attrs[0], keepdims=True))
    return z / z.sum(axis=attrs[0], keepdims=True)


SOFTMAX = OpDef("softmax", "exp(x) / sum(exp(x)) along an axis (egglog: ranks 1-4)", "(axis,)", _softmax_shape,
                (Ctor("Softmax", "it"),), _softmax_rules, _softmax_numpy,
                lambda em, attrs, ins, shapes: em.emit("Softmax", ins, "softmax", axis=attrs[0]),
                lambda torch, attrs, shapes: lambda x: torch.softmax(x, dim=attrs[0]), per_element(5.0))


# -- linear ------------------------------------------------------------------------------------------
def _linear_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    x, w, b = (tuple(s) for s in shapes)
    if not 1 <= len(x) <= MAX_RANK or len(w) != 2 or x[-1] != w[0] or b != (w[1],):
        raise fail("linear", f"expects x [..., k] (rank 1-{MAX_RANK}), W [k, n], b [n], got {x}, {w}, {b}")
    return x[:-1] + (w[1],)


def _linear_rules() -> list[str]:
    out = []
    for r in range(1, MAX_RANK + 1):
        d = dim_vars("d", r)
        out.append(rule(f"shape_Linear{r}", ["(= e (Linear x w b))", f"(= {shape_of(d)} (shape x))",
                                             f"(= (S2 {d[-1]} n) (shape w))", "(= (S1 n) (shape b))"],
                        [f"(set (shape e) {shape_of(d[:-1] + ['n'])})"]))
    return out


def _linear_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    if len(shapes[0]) == 2:
        return em.emit("Gemm", ins, "linear")
    return em.emit("Add", [em.emit("MatMul", ins[:2], "linear"), ins[2]], "linear")


def _linear_flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    return (2.0 * ins[0][-1] + 1.0) * volume(out)


LINEAR = OpDef("linear", "x[..., k] @ W[k, n] + b[n] (egglog: x of rank 1-4)", "()", _linear_shape,
               (Ctor("Linear", "ttt"),), _linear_rules, lambda attrs, args, modulus: np.matmul(args[0], args[1]) + args[2],
               _linear_onnx, lambda torch, attrs, shapes: lambda x, w, b: torch.matmul(x, w) + b, _linear_flops,
               sym_shape=lambda attrs, dims: dims[0][:-1] + [dims[1][-1]])


# -- scale -------------------------------------------------------------------------------------------
def _scale_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    check_float_attr("scale", attrs[0], "scale")
    return _same_shape("scale", shapes)


def _scale_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("scale", modulus)
    return np.asarray(args[0], dtype=np.float64) * float_value(attrs[0])


def _scale_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    return em.emit("Mul", [ins[0], scalar_const(em, float_value(attrs[0]), "scale")], "scale")


SCALE = OpDef("scale", "x * c, c a positive finite float32 (attention's score scale)", "(bits,)", _scale_shape,
                            (Ctor("Scale", "it"),), _same_rule("Scale", float_attr_conds("a"), True), _scale_numpy, _scale_onnx,
              lambda torch, attrs, shapes: lambda x: x * float_value(attrs[0]))


# -- composites in ONNX graphs (:mod:`eqsat.ops.matching`) -------------------------------------------------------------
Poly = dict[int, float]
"""a polynomial in one value: power -> coefficient"""

_POLY_OPS = ("Mul", "Add", "Sub", "Div", "Pow", "Neg")
_POLY_NODES = 12
"""the most nodes an activation's argument may take (GPT-2's tanh argument takes 5, BLOOM's 5)"""
_POLY_DEGREE = 5
_COEF_RTOL = 1e-5
"""how closely a written coefficient must match (BLOOM writes sqrt(2/pi) as 0.79788456: 1e-9 off)"""


def _poly_mul(a: Poly, b: Poly) -> Poly | None:
    out: Poly = {}
    for i, ca in a.items():
        for j, cb in b.items():
            out[i + j] = out.get(i + j, 0.0) + ca * cb
    return out if max(out, default=0) <= _POLY_DEGREE else None


def _poly_add(a: Poly, b: Poly, sign: float = 1.0) -> Poly:
    out = dict(a)
    for j, cb in b.items():
        out[j] = out.get(j, 0.0) + sign * cb
    return out


def polynomial(v: View, name: str, x: str, nodes: list[onnx.NodeProto]) -> Poly | None:
    """``name`` as a polynomial in ``x`` when it is computed from ``x`` and scalar constants alone, by Mul, Add,
    Sub, Neg, Div by a constant and Pow by a small whole constant, in any association and factoring
    (``c * x * (1 + d * x * x)`` as well as ``c * (x + d * x^3)``); the nodes join ``nodes`` (once each). None
    where anything else takes part or the degree passes ``_POLY_DEGREE``."""
    if name == x:
        return {1: 1.0}
    c = v.scalar(name)
    if c is not None:
        return {0: c}
    n = v.made_by(name, *_POLY_OPS)
    if n is None or sum(1 for m in nodes if m is not n) >= _POLY_NODES or len(n.input) != (1 if n.op_type == "Neg" else 2):
        return None
    if all(m is not n for m in nodes):
        nodes.append(n)
    if n.op_type == "Pow":
        e = v.scalar(n.input[1])
        base = polynomial(v, n.input[0], x, nodes)
        if base is None or e is None or e != int(e) or not 0 <= e <= _POLY_DEGREE:
            return None
        out: Poly | None = {0: 1.0}
        for _ in range(int(e)):
            out = _poly_mul(out, base) if out is not None else None
        return out
    args = [polynomial(v, i, x, nodes) for i in n.input]
    if any(a is None for a in args):
        return None
    if n.op_type == "Neg":
        return {k: -c for k, c in args[0].items()}  # type: ignore[union-attr]
    a, b = args[0], args[-1]
    assert a is not None and b is not None
    if n.op_type == "Div":
        d = b.get(0, 0.0) if set(b) <= {0} else 0.0
        return {k: c / d for k, c in a.items()} if d != 0.0 else None
    if n.op_type == "Mul":
        return _poly_mul(a, b)
    return _poly_add(a, b, -1.0 if n.op_type == "Sub" else 1.0)


def poly_equals(p: Poly, want: Poly) -> bool:
    """Each coefficient of ``want`` matched within ``_COEF_RTOL``, every other one zero."""
    scale = max(abs(c) for c in want.values())
    return all(math.isclose(p.get(k, 0.0), want.get(k, 0.0), rel_tol=_COEF_RTOL, abs_tol=_COEF_RTOL * scale * 1e-3)
               for k in set(p) | set(want))


def _half_x_times(v: View, start: str) -> tuple[list[onnx.NodeProto], str, str] | None:
    """``start * x * 0.5`` in any association, x not known yet: the Mul nodes, x and the product's name. x is the
    one operand that is not 0.5; the caller checks it against the activation's argument."""
    nodes: list[onnx.NodeProto] = []
    x: str | None = None
    half = False
    cur = start
    while x is None or not half:
        m = v.sole_reader(cur, "Mul")
        other = v.other(m, cur) if m is not None else None
        if m is None or other is None:
            return None
        nodes.append(m)
        inner = v.made_by(other, "Mul") if x is None and not half else None
        inner_half = next((i for i in inner.input if v.is_scalar(i, 0.5)), None) if inner is not None else None
        if inner is not None and inner_half is not None and v.sole_reader(other, "Mul") is m \
                and v.other(inner, inner_half) is not None:
            nodes.append(inner)
            x, half = v.other(inner, inner_half), True
        elif v.is_scalar(other, 0.5) and not half:
            half = True
        elif x is None and v.scalar(other) is None:
            x = other
        else:
            return None
        cur = m.output[0]
    return nodes, x, cur


def _gelu_of(v: View, act: onnx.NodeProto, want: Poly, approx: int) -> Found | None:
    """``0.5 * x * (1 + act(p(x)))`` with the argument ``p`` equal to the polynomial ``want``, however written:
    GELU from its activation node (Erf or Tanh). Spellings are recognized here rather than by rules in the
    e-graph because they are defined by their constants' values, which the e-graph's weights do not carry."""
    one = v.sole_reader(act.output[0], "Add")
    if one is None or not v.is_scalar(v.other(one, act.output[0]) or "", 1.0):
        return None
    tail = _half_x_times(v, one.output[0])
    if tail is None:
        return None
    head: list[onnx.NodeProto] = []
    p = polynomial(v, act.input[0], tail[1], head)
    if p is None or not head or not poly_equals(p, want):
        return None
    return "gelu", (approx,), (tail[1],), head + [act, one] + tail[0], tail[2]


def _gelu_erf(v: View, erf: onnx.NodeProto) -> Found | None:
    """Erf GELU: the argument is x / sqrt(2) (a Div by sqrt 2, a Mul by sqrt 0.5, ...)."""
    return _gelu_of(v, erf, {1: math.sqrt(0.5)}, GELU_ERF)


def _gelu_tanh(v: View, tanh: onnx.NodeProto) -> Found | None:
    """Tanh GELU: the argument is sqrt(2/pi) (x + 0.044715 x^3), as GPT-2 writes it (a Pow), or factored as BLOOM
    writes it (``0.79788456 * x * (1 + 0.044715 * x * x)``), or any other way."""
    return _gelu_of(v, tanh, {1: _SQRT_2_OVER_PI, 3: _SQRT_2_OVER_PI * 0.044715}, GELU_TANH)


def _gelu_node(v: View, node: onnx.NodeProto) -> Found | None:
    approx = v.attr(node, "approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    code = {"none": GELU_ERF, "tanh": GELU_TANH}.get(str(approx))
    return None if code is None else ("gelu", (code,), (node.input[0],), [node], node.output[0])


def _silu(v: View, sig: onnx.NodeProto) -> Found | None:
    x = sig.input[0]
    m = v.sole_reader(sig.output[0], "Mul")
    if m is None or v.other(m, sig.output[0]) != x:
        return None
    return "silu", (), (x,), [sig, m], m.output[0]


def _linear(v: View, mm: onnx.NodeProto) -> Found | None:
    """``MatMul(x, W) + b`` (either order) with a constant 2-D ``W`` [k, n] and a constant ``b`` [n]."""
    if not binary_matmul(mm):
        return None
    w = v.consts.get(mm.input[1])
    add = v.sole_reader(mm.output[0], "Add")
    if w is None or add is None or mm.input[0] in v.consts:
        return None
    bias = v.other(add, mm.output[0])
    b = v.consts.get(bias) if bias else None
    if bias is None or b is None or w.ndim != 2 or b.shape != (w.shape[1],):
        return None
    return "linear", (), (mm.input[0], mm.input[1], bias), [mm, add], add.output[0]


def _softmax(v: View, node: onnx.NodeProto) -> Found | None:
    return "softmax", (v.softmax_axis(node),), (node.input[0],), [node], node.output[0]


PATTERNS: dict[str, Matcher | tuple[Matcher, ...]] = {"Erf": _gelu_erf, "Tanh": _gelu_tanh, "Gelu": _gelu_node,
                                                     "Sigmoid": _silu, "Softmax": _softmax, "MatMul": _linear}
"""op type of the node a matcher starts from -> the matcher (:mod:`eqsat.ops.matching`)"""


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def _import_softmax(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    """A Softmax a composite match gave back (an attention the operator refused): still one softmax node. (The
    composites themselves are found by :mod:`eqsat.onnx.patterns`.)"""
    args = floats(ins)
    if args is None:
        return None
    (x,) = args
    axis = resolve_axis(int(onnx_attrs(node).get("axis", -1)), len(x.shape))
    if not 1 <= len(x.shape) <= 4 or axis is None:
        return None
    return cx.make("softmax", [x], (axis,))


IMPORTS: dict[str, Mapper] = {"Softmax": _import_softmax}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
