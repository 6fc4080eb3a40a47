"""``matmul``: 2-D or batched 3-D matrix product with a fused activation (attrs ``(act,)``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import Ctor, Emitter, OpDef, Shape, act_flops, activation, emit_activation, fail, torch_activation, volume
from .egglog_text import rule


def _shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    a, b = shapes
    if len(a) != len(b) or len(a) not in (2, 3):
        raise fail("matmul", f"operands must both be 2-D or both 3-D, got {a} and {b}")
    if a[-1] != b[-2]:
        raise fail("matmul", f"inner dimensions differ: {a} x {b}")
    if len(a) == 3 and a[0] != b[0]:
        raise fail("matmul", f"batch dimensions differ: {a} x {b}")
    return tuple(a[:-1]) + (b[-1],)


def _rules() -> list[str]:
    return [rule("shape_Matmul2", ["(= e (Matmul act x y))", "(= (S2 m k) (shape x))", "(= (S2 k n) (shape y))"],
                 ["(set (shape e) (S2 m n))"]),
            rule("shape_Matmul3", ["(= e (Matmul act x y))", "(= (S3 b m k) (shape x))", "(= (S3 b k n) (shape y))"],
                 ["(set (shape e) (S3 b m n))"])]


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    return activation(np.matmul(args[0], args[1]), attrs[0], modulus)


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    return emit_activation(em, em.emit("MatMul", ins, "matmul"), attrs[0])


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    return lambda x, y: torch_activation(torch, torch.matmul(x, y), attrs[0])


def _flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    return 2.0 * volume(out) * ins[0][-1] + (act_flops(attrs[0], out) if attrs else 0.0)


def _taso(args: tuple) -> tuple[tuple, tuple, int | None]:
    return (args[0],), (args[1], args[2]), None


def _sym(attrs: tuple, dims: list[list[str]]) -> list[str]:
    return dims[0][:-1] + [dims[1][-1]]


MATMUL = OpDef("matmul", "2-D or batched 3-D matmul, fused activation", "(act,)", _shape,
               (Ctor("Matmul", "itt"),), _rules, _numpy, _onnx, _torch, _flops, taso=_taso, sym_shape=_sym)
