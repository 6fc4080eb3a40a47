"""``matmul``: 2-D, or batched 3-D or 4-D matrix product with a fused activation (attrs ``(act,)``).

Batched operands have equal rank and equal leading dimensions (``[b, m, k] x [b, k, n]``, ``[b, h, m, k] x
[b, h, k, n]``: no broadcasting over them). Rank 4 is attention's ``[batch, heads, ...]`` product, which the rule
``attention_split`` (``rules/ours/attention.py``) writes as its parts; the importer spells an N-D MatMul as a 2-D
or 3-D one between reshapes.

>>> MATMUL.shape((0,), [(2, 3, 4, 5), (2, 3, 5, 6)])
(2, 3, 4, 6)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import Ctor, Emitter, OpDef, Shape, act_flops, activation, emit_activation, fail, torch_activation, volume
from .egglog_text import dim_vars, rule, shape_of

RANKS = (2, 3, 4)
"""operand ranks the operator takes"""


def _shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    a, b = shapes
    if len(a) != len(b) or len(a) not in RANKS:
        raise fail("matmul", f"operands must both be 2-D, 3-D or 4-D, got {a} and {b}")
    if a[-1] != b[-2]:
        raise fail("matmul", f"inner dimensions differ: {a} x {b}")
    if a[:-2] != b[:-2]:
        raise fail("matmul", f"batch dimensions differ: {a} x {b}")
    return tuple(a[:-1]) + (b[-1],)


def _rules() -> list[str]:
    """Per rank (``shape_Matmul2`` .. ``shape_Matmul4``): equal leading dimensions, equal inner ones."""
    out = []
    for r in RANKS:
        lead = dim_vars("b", r - 2)
        out.append(rule(f"shape_Matmul{r}", ["(= e (Matmul act x y))", f"(= {shape_of(lead + ['m', 'k'])} (shape x))",
                                             f"(= {shape_of(lead + ['k', 'n'])} (shape y))"],
                        [f"(set (shape e) {shape_of(lead + ['m', 'n'])})"]))
    return out


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


MATMUL = OpDef("matmul", "2-D or batched 3-D/4-D matmul, fused activation", "(act,)", _shape,
               (Ctor("Matmul", "itt"),), _rules, _numpy, _onnx, _torch, _flops, taso=_taso, sym_shape=_sym)
