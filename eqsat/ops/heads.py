"""``repeat_heads``: the keys or values of grouped-query attention, each head repeated in turn (transformers'
``repeat_kv``, which torch's exporters write as ``Reshape(Expand(Unsqueeze(x, 2)))``).

Operand ``x`` [B, H, S, D], attribute ``(r,)`` (r >= 2); the output is [B, H * r, S, D] with ``out[:, h * r + j] =
x[:, h]`` for j < r. Written as ONNX, the heads and one of the last two dimensions must be constants (they are in
every cache; the importer makes the operator only then); the batch and the sequence may be symbols. Its ONNX form is that of the exports, written so that it holds at every size:
``Reshape(Expand(Unsqueeze(x, [2]), [1, 1, r, 1, 1]), [0, H * r, -1, D])``. The importer reads the exports' chain
as this operator where the shapes show it (:func:`eqsat.onnx.forms.repeated_heads`), so that rules can see
through it: an attention kernel reads fewer key and value heads than query heads
(``attention_grouped``, rules/ours/kernels.py), and the repetition is then not computed at all.

>>> REPEAT_HEADS.shape((3,), [(1, 2, 128, 64)])
(1, 6, 128, 64)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import Ctor, Emitter, OpDef, Shape, dim_fp, fail
from .egglog_text import rule


def _fixed(d: int) -> bool:
    """Whether a dimension is a constant (a symbolic one's fingerprint differs from its size: ``eqsat.dims``)."""
    return dim_fp(d) == int(d)


def _shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    (r,), (x,) = attrs, shapes
    if len(x) != 4 or int(r) < 2:
        raise fail("repeat_heads", f"expects x [B, H, S, D] and r >= 2, got {tuple(x)} and r = {r}")
    return (x[0], x[1] * int(r), x[2], x[3])


def _rules() -> list[str]:
    return [rule("shape_RepeatHeads", ["(= e (RepeatHeads r x))", "(= (S4 b h s d) (shape x))", "(>= r 2)"],
                 ["(set (shape e) (S4 b (* h r) s d))"])]


def repeat(x: np.ndarray, r: int) -> np.ndarray:
    """Each head (axis 1) of ``x`` repeated ``r`` times in turn."""
    return np.repeat(x, int(r), axis=1)


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    return repeat(args[0], attrs[0])


def write(em: Emitter, x: str, shape: Shape, r: int) -> str:
    """``x`` of ``shape`` [B, H, S, D] (or keys transposed, [B, H, D, S]) with each head repeated ``r`` times, in
    ONNX operators of opset 13; B and one of the last two dimensions may be symbols."""
    u = em.emit("Unsqueeze", [x, em.const(np.array([2], dtype=np.int64), "axes")], "repeat")
    e = em.emit("Expand", [u, em.const(np.array([1, 1, int(r), 1, 1], dtype=np.int64), "shape")], "repeat")
    if not _fixed(shape[1]) or not (_fixed(shape[2]) or _fixed(shape[3])):
        raise fail("repeat_heads", f"cannot write the repetition of {tuple(shape)} for every size")
    last = (-1, int(shape[3])) if _fixed(shape[3]) else (int(shape[2]), -1)  # the one symbol (a sequence): -1
    target = np.array([0, int(shape[1]) * int(r), *last], dtype=np.int64)
    return em.emit("Reshape", [e, em.const(target, "shape")], "repeat")


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    return write(em, ins[0], shapes[0], attrs[0])


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    return lambda x: x.repeat_interleave(int(attrs[0]), dim=1)


REPEAT_HEADS = OpDef("repeat_heads", "x [B, H, S, D] -> [B, H * r, S, D], each head repeated r times in turn",
                     "(r,)", _shape, (Ctor("RepeatHeads", "it"),), _rules, _numpy, _onnx, _torch, copies=True)
