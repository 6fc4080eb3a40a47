"""Normalizations over the last axis, each one node of the IR (recognized on import by the matchers in
``PATTERNS`` below, which :mod:`eqsat.onnx.patterns` runs):

* ``layernorm`` (x, gamma, beta), attrs ``(eps_bits,)``: ``(x - mean) / sqrt(var + eps) * gamma + beta``
  (biased variance).
* ``addnorm`` (a, b, gamma, beta), attrs ``(eps_bits,)``: ``layernorm(a + b, gamma, beta)`` with a and b of
  one shape or broadcast (equal rank: a position table ``[1, seq, hidden]`` added to a batch), the residual add and the LayerNormalization after it as the runtime runs them: written as Add +
  LayerNormalization, which onnxruntime fuses into SkipLayerNormalization (so its measured cost is that
  kernel's; where, :data:`eqsat.onnx.fusions.SKIP_LAYER_NORM`). The rule ``addnorm_unfuse`` relates it to ``layernorm(ewsum(a, b))``, the spelling that stays two
  kernels; ``addnorm_fuse`` recognizes it in the e-graph.
* ``rmsnorm`` (x, gamma), attrs ``(eps_bits,)``: ``x / sqrt(mean(x^2) + eps) * gamma``.

The epsilon is a float attribute (:func:`eqsat.ops.composite.float_bits`). None is defined over a prime field.
The ONNX emitters write LayerNormalization from opset 17 (before it, torch's decomposition, which onnxruntime
fuses), RMSNorm as ``gamma * (x / Sqrt(..))`` (fused into SimplifiedLayerNormalization; LLaMA's Reciprocal
form is not, and is written for a 1-D x: :data:`eqsat.onnx.fusions.SIMPLIFIED_LAYER_NORM`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from .base import Ctor, Emitter, OpDef, Shape, broadcast, fail
from .composite import (
    check_float_attr,
    float_attr_conds,
    float_bits,
    float_value,
    no_field,
    opset_of,
    per_element,
    scalar_const,
)
from .egglog_text import MAX_RANK, dim_vars, rule, shape_of
from .matching import Found, Matcher, View


# -- layernorm, rmsnorm ------------------------------------------------------------------------------
def _norm_shape(op: str, n_params: int) -> Callable[[tuple, Sequence[Shape]], Shape]:
    def shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
        check_float_attr(op, attrs[0])
        x = tuple(shapes[0])
        if not 1 <= len(x) <= MAX_RANK or any(tuple(p) != (x[-1],) for p in shapes[1:]) or len(shapes) != 1 + n_params:
            raise fail(op, f"expects x of rank 1-{MAX_RANK} and {n_params} parameters of shape [x.shape[-1]], "
                           f"got {tuple(shapes)}")
        return x
    return shape


def _norm_rules(ctor: str, params: list[str]) -> Callable[[], list[str]]:
    def rules() -> list[str]:
        out = []
        for r in range(1, MAX_RANK + 1):
            d = dim_vars("d", r)
            out.append(rule(f"shape_{ctor}{r}", [f"(= e ({ctor} eps x {' '.join(params)}))", f"(= {shape_of(d)} (shape x))",
                                                 *[f"(= (S1 {d[-1]}) (shape {p}))" for p in params], *float_attr_conds("eps")],
                            [f"(set (shape e) {shape_of(d)})"]))
        return out
    return rules


def _layernorm_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("layernorm", modulus)
    x, gamma, beta = (np.asarray(a, dtype=np.float64) for a in args)
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + float_value(attrs[0])) * gamma + beta


def _reduce_mean(em: Emitter, x: str) -> str:
    """ReduceMean over the last axis, keeping it (axes an attribute before opset 18, an input from 18)."""
    if opset_of(em) >= 18:
        return em.emit("ReduceMean", [x, em.const(np.array([-1], dtype=np.int64), "axes")], "mean", keepdims=1)
    return em.emit("ReduceMean", [x], "mean", axes=[-1], keepdims=1)


def _layernorm_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    eps = float_value(attrs[0])
    if opset_of(em) >= 17:
        return em.emit("LayerNormalization", ins, "layernorm", axis=-1, epsilon=eps)
    x, gamma, beta = ins  # torch's opset < 17 decomposition
    d = em.emit("Sub", [x, _reduce_mean(em, x)], "layernorm")
    var = _reduce_mean(em, em.emit("Pow", [d, scalar_const(em, 2.0, "two")], "layernorm"))
    std = em.emit("Sqrt", [em.emit("Add", [var, scalar_const(em, eps, "eps")], "layernorm")], "layernorm")
    y = em.emit("Mul", [em.emit("Div", [d, std], "layernorm"), gamma], "layernorm")
    return em.emit("Add", [y, beta], "layernorm")


def _layernorm_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    eps = float_value(attrs[0])
    return lambda x, g, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps)


LAYERNORM = OpDef("layernorm", "(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (egglog: ranks 1-4)",
                  "(eps_bits,)", _norm_shape("layernorm", 2), (Ctor("LayerNorm", "ittt"),),
                  _norm_rules("LayerNorm", ["g", "b"]), _layernorm_numpy, _layernorm_onnx, _layernorm_torch,
                  per_element(8.0))


def _addnorm_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    if len(shapes) != 4:
        raise fail("addnorm", f"expects a and b, then gamma and beta, got {tuple(shapes)}")
    total = broadcast(tuple(shapes[0]), tuple(shapes[1]), "addnorm")
    return _norm_shape("addnorm", 2)(attrs, [total, *shapes[2:]])


def _addnorm_rules() -> list[str]:
    """a and b broadcast as ``ewadd``'s operands (equal rank; each dimension equal, or 1 on one side: a position
    table ``[1, seq, hidden]`` added to a batch), the norm over the sum's last dimension."""
    out = []
    for r in range(1, MAX_RANK + 1):
        a, b = dim_vars("a", r), dim_vars("b", r)
        conds = [f"(= 0 (* (* (- {x} {y}) (- {x} 1)) (- {y} 1)))" for x, y in zip(a, b)]
        dims = [f"(max {x} {y})" for x, y in zip(a, b)]
        out.append(rule(f"shape_AddNorm{r}", ["(= e (AddNorm eps a b g bb))", f"(= {shape_of(a)} (shape a))",
                                              f"(= {shape_of(b)} (shape b))", *conds, f"(= n {dims[-1]})",
                                              "(= (S1 n) (shape g))", "(= (S1 n) (shape bb))",
                                              *float_attr_conds("eps")],
                        [f"(set (shape e) {shape_of(dims)})"]))
    return out


def _addnorm_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("addnorm", modulus)
    a, b = (np.asarray(x, dtype=np.float64) for x in args[:2])
    return _layernorm_numpy(attrs, [a + b, *args[2:]], modulus)


def _addnorm_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    total = em.emit("Add", ins[:2], "addnorm")
    return _layernorm_onnx(em, attrs, [total, *ins[2:]], [broadcast(tuple(shapes[0]), tuple(shapes[1])), *shapes[2:]])


def _addnorm_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    eps = float_value(attrs[0])
    return lambda a, b, g, bb: torch.nn.functional.layer_norm(a + b, (g.shape[-1],), g, bb, eps)


ADDNORM = OpDef("addnorm", "layernorm(a + b, gamma, beta), a and b broadcast (equal rank; egglog: ranks 1-4)", "(eps_bits,)",
                _addnorm_shape, (Ctor("AddNorm", "itttt"),), _addnorm_rules, _addnorm_numpy, _addnorm_onnx,
                _addnorm_torch, per_element(9.0))


def _rmsnorm_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    no_field("rmsnorm", modulus)
    x, gamma = (np.asarray(a, dtype=np.float64) for a in args)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + float_value(attrs[0])) * gamma


def _rmsnorm_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    """gamma * (x / Sqrt(ReduceMean(Pow(x, 2)) + eps)): onnxruntime (1.32, CPU) fuses this form into
    SimplifiedLayerNormalization, not LLaMA's ``x * Reciprocal(Sqrt(..))``. A 1-D x takes LLaMA's form: on it
    that fusion writes an invalid graph (the session refuses the model)."""
    x, gamma = ins
    ms = _reduce_mean(em, em.emit("Pow", [x, scalar_const(em, 2.0, "two")], "rmsnorm"))
    std = em.emit("Sqrt", [em.emit("Add", [ms, scalar_const(em, float_value(attrs[0]), "eps")], "rmsnorm")], "rmsnorm")
    if len(shapes[0]) == 1:
        y = em.emit("Mul", [x, em.emit("Reciprocal", [std], "rmsnorm")], "rmsnorm")
    else:
        y = em.emit("Div", [x, std], "rmsnorm")
    return em.emit("Mul", [gamma, y], "rmsnorm")


def _rmsnorm_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    eps = float_value(attrs[0])
    return lambda x, g: torch.nn.functional.rms_norm(x, (x.shape[-1],), g, eps)


RMSNORM = OpDef("rmsnorm", "x / sqrt(mean(x^2) + eps) * gamma over the last axis (egglog: ranks 1-4)",
                "(eps_bits,)", _norm_shape("rmsnorm", 1), (Ctor("RmsNorm", "itt"),), _norm_rules("RmsNorm", ["g"]),
                _rmsnorm_numpy, _rmsnorm_onnx, _rmsnorm_torch, per_element(5.0))


# -- the norms in ONNX graphs (:mod:`eqsat.ops.matching`) ---------------------------------------------------
def _eps_sqrt(v: View, mean: onnx.NodeProto) -> tuple[list[onnx.NodeProto], float, str] | None:
    """``Sqrt(mean + eps)``: its nodes, eps and the Sqrt's output."""
    add = v.sole_reader(mean.output[0], "Add")
    eps = v.scalar(v.other(add, mean.output[0]) or "") if add is not None else None
    sqrt = v.sole_reader(add.output[0], "Sqrt") if add is not None else None
    if add is None or eps is None or sqrt is None or not eps > 0:
        return None
    return [add, sqrt], eps, sqrt.output[0]


def _rmsnorm(v: View, power: onnx.NodeProto) -> Found | None:
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
    return "rmsnorm", (float_bits(eps),), (x, gamma), nodes + [scale], scale.output[0]


def _layernorm_node(v: View, node: onnx.NodeProto) -> Found | None:
    if v.attr(node, "axis", -1) != -1 or len(node.input) < 3 or not node.input[2]:
        return None
    eps = float(v.attr(node, "epsilon", 1e-5))  # type: ignore[arg-type]
    return "layernorm", (float_bits(eps),), tuple(node.input[:3]), [node], node.output[0]


def _addnorm_node(v: View, node: onnx.NodeProto) -> Found | None:
    """An Add read by this LayerNormalization alone (the residual add of a post-LN transformer): what
    onnxruntime runs as one SkipLayerNormalization kernel (else :func:`_layernorm_node`, tried next)."""
    alone = _layernorm_node(v, node)
    add = v.made_by(node.input[0], "Add")
    if alone is None or add is None or len(add.input) != 2 or v.sole_reader(add.output[0]) is not node:
        return None
    return "addnorm", alone[1], (*add.input, *alone[2][1:]), [add, node], node.output[0]


def _layernorm_decomposed(v: View, sub: onnx.NodeProto) -> Found | None:
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
    return "layernorm", (float_bits(found[1]),), (x, gamma, beta), nodes, shift.output[0]


PATTERNS: dict[str, Matcher | tuple[Matcher, ...]] = {"Pow": _rmsnorm, "LayerNormalization": (_addnorm_node, _layernorm_node),
                                                     "Sub": _layernorm_decomposed}
"""op type of the node a matcher starts from -> the matchers, tried in order (:mod:`eqsat.ops.matching`)"""

__all__ = ["ADDNORM", "LAYERNORM", "PATTERNS", "RMSNORM"]
