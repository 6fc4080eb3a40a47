"""Element-wise operators: ``ewadd``, ``ewmul`` (equal-rank broadcasting) and the unary activations.

``ewsum`` is ``ewadd`` written as ONNX ``Sum``: the same values, a spelling onnxruntime does not fuse into the
operator after it (an ``Add`` before a LayerNormalization becomes its SkipLayerNormalization kernel, which is
slower than the pair on some CPUs: :data:`eqsat.onnx.fusions.SKIP_LAYER_NORM`). Only the rule ``addnorm_unfuse`` makes one, and only the measured cost
of each spelling decides which the program keeps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import ACT_RELU, ACT_SIGMOID, ACT_TANH, Ctor, Emitter, OpDef, Shape, activation, broadcast, volume
from .egglog_text import MAX_RANK, dim_vars, rule, shape_of
from .mapping import ImportContext, Mapper, V, floats, same_rank

if TYPE_CHECKING:
    import onnx


def _same_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    return tuple(shapes[0])


def _taso(args: tuple) -> tuple[tuple, tuple, int | None]:
    return (), tuple(args), None


def _first_dims(attrs: tuple, dims: list[list[str]]) -> list[str]:
    return dims[0]


def _onnx(op_type: str, base: str) -> Callable[[Emitter, tuple, list[str], Sequence[Shape]], str]:
    return lambda em, attrs, ins, shapes: em.emit(op_type, ins, base)


def _four_per_element(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    return 4.0 * volume(out)


def _unary(op: str, ctor: str, doc: str, onnx_type: str, act: int | None, torch_name: str | None,
           taso: bool, flops_per_element: int = 1) -> OpDef:
    def numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
        return args[0] if act is None else activation(args[0], act, modulus)

    def rules() -> list[str]:
        return [rule(f"shape_{ctor}", [f"(= e ({ctor} x))", "(= s (shape x))"], ["(set (shape e) s)"])]

    def torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
        assert torch_name is not None  # only set where torch_name is
        return getattr(torch, torch_name)

    extra: dict[str, Any] = {"flops": _four_per_element} if flops_per_element == 4 else {}
    return OpDef(op, doc, "()", _same_shape, (Ctor(ctor, "t"),), rules, numpy, _onnx(onnx_type, op),
                 torch if torch_name else None,
                 free=act is None, taso=_taso if taso else None, sym_shape=_first_dims if taso else None,
                 **extra)


def _binary(op: str, ctor: str, doc: str, onnx_type: str, fn: Callable[[Any, Any], Any]) -> OpDef:
    def shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
        return broadcast(shapes[0], shapes[1], op)

    def numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
        return fn(args[0], args[1])

    def rules() -> list[str]:
        out = []
        for r in range(1, MAX_RANK + 1):
            a, b = dim_vars("a", r), dim_vars("b", r)
            conds = [f"(= 0 (* (* (- {x} {y}) (- {x} 1)) (- {y} 1)))" for x, y in zip(a, b)]
            dims = [f"(max {x} {y})" for x, y in zip(a, b)]
            out.append(rule(f"shape_{ctor}{r}", [f"(= e ({ctor} x y))", f"(= {shape_of(a)} (shape x))",
                                                 f"(= {shape_of(b)} (shape y))", *conds],
                            [f"(set (shape e) {shape_of(dims)})"]))
        return out

    def torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
        return fn

    return OpDef(op, doc, "()", shape, (Ctor(ctor, "tt"),), rules, numpy, _onnx(onnx_type, op), torch,
                 taso=_taso, sym_shape=_first_dims)


EWADD = _binary("ewadd", "Ewadd", "a + b (equal rank, broadcasting)", "Add", lambda x, y: x + y)
EWSUM = replace(_binary("ewsum", "Ewsum", "a + b written as ONNX Sum (unfused by onnxruntime)", "Sum", lambda x, y: x + y),
                taso=None)
EWMUL = _binary("ewmul", "Ewmul", "a * b (equal rank, broadcasting)", "Mul", lambda x, y: x * y)
RELU = _unary("relu", "Relu", "max(x, 0)", "Relu", ACT_RELU, "relu", True)
TANH = _unary("tanh", "Tanh", "tanh(x)", "Tanh", ACT_TANH, "tanh", True, 4)
SIGMOID = _unary("sigmoid", "Sigmoid", "1 / (1 + exp(-x))", "Sigmoid", ACT_SIGMOID, "sigmoid", True, 4)
DROPOUT = _unary("dropout", "Dropout", "identity (dropout at inference)", "Identity", None, None, False)


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def binary(cx: ImportContext[V], op: str, a: V | None, b: V | None) -> V | None:
    """``ewadd`` or ``ewmul`` of two float32 operands of rank 1-4, the lower-ranked one broadcast to the other's."""
    args = floats([a, b])
    if args is None:
        return None
    a2, b2 = same_rank(cx, args[0], args[1])
    if not a2.shape or len(a2.shape) > 4:
        return None
    return cx.make(op, [a2, b2])


def _unary_import(op: str) -> Mapper:
    def mapper(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
        args = floats(ins, 1)
        return cx.make(op, args) if args is not None else None

    return mapper


def _binary_import(op: str) -> Mapper:
    def mapper(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
        return binary(cx, op, ins[0], ins[1])

    return mapper


IMPORTS: dict[str, Mapper] = {"Relu": _unary_import("relu"), "Tanh": _unary_import("tanh"),
                              "Sigmoid": _unary_import("sigmoid"), "Add": _binary_import("ewadd"),
                              "Mul": _binary_import("ewmul")}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
