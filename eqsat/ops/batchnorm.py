"""Inference batch norm and the two operators that fold it into a conv (attrs ``(eps_pico,)``: eps = eps_pico *
1e-12).

* ``batchnorm`` (x, scale, bias, mean, var): (x - mean) / sqrt(var + eps) * scale + bias, per channel.
* ``bn_scale`` (scale, var): scale / sqrt(var + eps).
* ``bn_shift`` (bias, mean, scale, var): bias - mean * scale / sqrt(var + eps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Ctor, Emitter, NotEvaluable, OpDef, Shape, fail, volume
from .egglog_text import rule
from .mapping import ImportContext, Mapper, V, floats, onnx_attrs

if TYPE_CHECKING:
    import onnx

EPS_UNIT = 1e-12


def _bn_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    x = shapes[0]
    if len(x) != 4 or any(tuple(s) != (x[1],) for s in shapes[1:]):
        raise fail("batchnorm", f"expects a 4-D input and four [C] parameters, got {tuple(shapes)}")
    return tuple(x)


def _bn_rules() -> list[str]:
    return [rule("shape_BatchNorm", ["(= e (BatchNorm eps x s b m v))", "(= (S4 n c h w) (shape x))",
                                     "(= (S1 c) (shape s))", "(= (S1 c) (shape b))", "(= (S1 c) (shape m))",
                                     "(= (S1 c) (shape v))"], ["(set (shape e) (S4 n c h w))"])]


def _no_field(op: str, modulus: int | None) -> None:
    if modulus is not None:
        raise NotEvaluable(f"{op} is not defined over a prime field")


def _bn_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    _no_field("batchnorm", modulus)
    x, scale, bias, mean, var = args
    c = (1, -1, 1, 1)
    return (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + attrs[0] * EPS_UNIT) * scale.reshape(c) + bias.reshape(c)


def _bn_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    eps = attrs[0] * EPS_UNIT  # timed on random operands: a positive variance
    return lambda x, s, b, m, v: torch.nn.functional.batch_norm(x, m, v.abs() + 1, s, b, False, 0.0, eps)


def _bn_flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    return 2.0 * volume(out)


BATCHNORM = OpDef("batchnorm", "inference batch norm of a 4-D input with [C] scale, bias, mean, var", "(eps_pico,)",
                  _bn_shape, (Ctor("BatchNorm", "ittttt"),), _bn_rules, _bn_numpy,
                  lambda em, attrs, ins, shapes: em.emit("BatchNormalization", ins, "bn", epsilon=attrs[0] * EPS_UNIT),
                  _bn_torch, _bn_flops)


def _param_shape(op: str) -> Callable[[tuple, Sequence[Shape]], Shape]:
    def shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
        first = shapes[0]
        if len(first) != 1 or any(tuple(x) != tuple(first) for x in shapes):
            raise fail(op, f"expects [C] parameters, got {tuple(shapes)}")
        return tuple(first)
    return shape


def _param_rule(ctor: str, params: str) -> Callable[[], list[str]]:
    def rules() -> list[str]:
        return [rule(f"shape_{ctor}", [f"(= e ({ctor} eps {params}))", *[f"(= (S1 c) (shape {p}))" for p in params.split()]],
                     ["(set (shape e) (S1 c))"])]
    return rules


def _emit_scale(em: Emitter, eps: float, scale: str, var: str) -> str:
    eps_name = em.const(np.array(eps, dtype=np.float32), "eps")
    return em.emit("Div", [scale, em.emit("Sqrt", [em.emit("Add", [var, eps_name], "bn")], "bn")], "bn_scale")


def _scale_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    _no_field("batch-norm folding", modulus)
    scale, var = args
    return scale / np.sqrt(var + attrs[0] * EPS_UNIT)


def _shift_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    _no_field("batch-norm folding", modulus)
    bias, mean, scale, var = args
    return bias - mean * scale / np.sqrt(var + attrs[0] * EPS_UNIT)


def _shift_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    k = _emit_scale(em, attrs[0] * EPS_UNIT, ins[2], ins[3])
    return em.emit("Sub", [ins[0], em.emit("Mul", [ins[1], k], "bn")], "bn_shift")


BN_SCALE = OpDef("bn_scale", "scale / sqrt(var + eps) (folding batch norm)", "(eps_pico,)", _param_shape("bn_scale"),
                 (Ctor("BnScale", "itt"),), _param_rule("BnScale", "s v"), _scale_numpy,
                 lambda em, attrs, ins, shapes: _emit_scale(em, attrs[0] * EPS_UNIT, ins[0], ins[1]))
BN_SHIFT = OpDef("bn_shift", "bias - mean * scale / sqrt(var + eps) (folding batch norm)", "(eps_pico,)",
                 _param_shape("bn_shift"), (Ctor("BnShift", "itttt"),), _param_rule("BnShift", "b m s v"),
                 _shift_numpy, _shift_onnx)


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def eps_code(eps: float) -> int:
    """The ``eps_pico`` attribute of an epsilon: a whole number of :data:`EPS_UNIT`.

    >>> eps_code(1e-5), eps_code(1e-3) * EPS_UNIT
    (10000000, 0.001)
    """
    return int(round(eps * (1 / EPS_UNIT)))  # 1 / EPS_UNIT is exactly 1e12


def _import_batchnorm(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    if len(node.output) > 1 and any(node.output[1:]):
        return None  # the training outputs (running mean and variance)
    args = floats(ins)
    if args is None or len(args[0].shape) != 4:
        return None
    eps = float(onnx_attrs(node).get("epsilon", 1e-5))
    return cx.make("batchnorm", args, (eps_code(eps),))


IMPORTS: dict[str, Mapper] = {"BatchNormalization": _import_batchnorm}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
