"""``matmul``: 2-D, or batched 3-D or 4-D matrix product with a fused activation (attrs ``(act,)``).

Batched operands have equal rank and equal leading dimensions (``[b, m, k] x [b, k, n]``, ``[b, h, m, k] x
[b, h, k, n]``: no broadcasting over them). Rank 4 is attention's ``[batch, heads, ...]`` product, which the rule
``attention_split`` (``rules/ours/attention.py``) writes as its parts; the importer spells an N-D MatMul as a 2-D
or 3-D one between reshapes. A 3-D or 4-D first operand by a 2-D second one (``[..., m, k] x [k, n]``, ONNX
MatMul by a weight, which onnxruntime runs as one kernel) is the N-D spelling that the rule ``matmul_flatten``
(``rules/ours/flatten.py``) puts beside the importer's.

>>> MATMUL.shape((0,), [(2, 3, 4, 5), (2, 3, 5, 6)])
(2, 3, 4, 6)
>>> MATMUL.shape((0,), [(1, 16, 32), (32, 8)])
(1, 16, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Ctor, Emitter, OpDef, Shape, act_flops, activation, emit_activation, fail, torch_activation, volume
from .egglog_text import dim_vars, rule, shape_of
from .elementwise import binary
from .mapping import ImportContext, Mapper, V, floats, onnx_attrs

if TYPE_CHECKING:
    import onnx

RANKS = (2, 3, 4)
"""operand ranks the operator takes"""


def _shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    a, b = shapes
    if len(a) in RANKS and len(b) == 2:  # [..., m, k] x [k, n]: ONNX MatMul by a weight, leading dimensions kept
        if a[-1] != b[0]:
            raise fail("matmul", f"inner dimensions differ: {a} x {b}")
        return tuple(a[:-1]) + (b[-1],)
    if len(a) != len(b) or len(a) not in RANKS:
        raise fail("matmul", f"operands must both be 2-D, 3-D or 4-D (or the second 2-D), got {a} and {b}")
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
        if r > 2:  # an N-D x by a 2-D y
            out.append(rule(f"shape_MatmulN{r}", ["(= e (Matmul act x y))", f"(= {shape_of(lead + ['m', 'k'])} (shape x))",
                                                  "(= (S2 k n) (shape y))"],
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


MATMUL = OpDef("matmul", "2-D or batched 3-D/4-D matmul (or N-D by 2-D), fused activation", "(act,)", _shape,
               (Ctor("Matmul", "itt"),), _rules, _numpy, _onnx, _torch, _flops, taso=_taso, sym_shape=_sym)


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def _import_matmul(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    """A 2-D ``matmul``: [..., M, K] x [K, N] with the leading dimensions flattened, or a batched one of equal
    leading dimensions flattened to one; reshapes around it restore the ONNX shapes."""
    args = floats(ins)
    if args is None:
        return None
    a, b = args
    sa, sb = tuple(a.shape), tuple(b.shape)
    if len(sa) < 2 or len(sb) < 2:
        return None
    if len(sb) == 2:  # [..., M, K] x [K, N]: flatten the leading dimensions
        lead = sa[:-1]
        a2 = cx.reshape(a, (int(np.prod(lead)), sa[-1]))
        out = cx.make("matmul", [a2, b], (0,))
        return cx.reshape(out, lead + (sb[-1],))
    if len(sa) == len(sb) and sa[:-2] == sb[:-2]:
        batch = int(np.prod(sa[:-2]))
        out = cx.make("matmul", [cx.reshape(a, (batch,) + sa[-2:]), cx.reshape(b, (batch,) + sb[-2:])], (0,))
        return cx.reshape(out, sa[:-1] + (sb[-1],))
    return None


def _import_gemm(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    """``linear(A, B, C)`` where the Gemm is exactly one (:func:`_gemm_linear`), else ``matmul`` (of ``A`` and
    ``B`` transposed as the Gemm says), times ``alpha``, plus ``beta * C``. A transposed constant ``B`` is a new
    weight; the origin record keeps the original, so an unchanged Gemm is written back as it was."""
    args = floats(ins, 2)
    c = ins[2] if len(ins) > 2 else None
    at = onnx_attrs(node)
    if args is None or len(args[0].shape) != 2 or len(args[1].shape) != 2:
        return None
    a, b = args
    if at.get("transB", 0):
        b = cx.weight(cx.data(b).T, b.name) if b.op == "weight" else cx.make("transpose", [b], (1, 0))
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    linear = _gemm_linear(cx, a, b, c) if not at.get("transA", 0) and alpha == beta == 1.0 else None
    if linear is not None:
        return linear
    if at.get("transA", 0):
        a = cx.make("transpose", [a], (1, 0))
    out = cx.make("matmul", [a, b], (0,))
    if alpha != 1.0:
        out = cx.make("ewmul", [out, cx.weight(np.full((1, 1), alpha, np.float32), "alpha")])
    if c is None:
        return out
    if beta != 1.0:
        if c.op != "weight":
            return None
        c = cx.weight(cx.data(c) * np.float32(beta), c.name)
    return binary(cx, "ewadd", out, c)


def _gemm_linear(cx: ImportContext[V], a: V, b: V, c: V | None) -> V | None:
    """``linear(a, b, c)`` for ``Gemm(a, b, c)`` (no transA, alpha and beta 1, ``b`` already [k, n]) when ``b`` and
    ``c`` are constants and ``c`` is a bias over the columns ([n], or [1, n] as a new weight of shape [n]); else
    None. Without ``c`` the Gemm stays a ``matmul``: a zero bias would be an Add no one wrote once the program
    changes it (its ``linear`` is written as a Gemm with that bias)."""
    n = b.shape[1]
    if b.op != "weight" or c is None or c.op != "weight" or c.dtype != "float32" or c.shape not in ((n,), (1, n)):
        return None
    return cx.make("linear", [a, b, cx.reshape(c, (n,))])


IMPORTS: dict[str, Mapper] = {"MatMul": _import_matmul, "Gemm": _import_gemm}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
