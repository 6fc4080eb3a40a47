"""``attention_nz``: attention whose softmax rows that are NaN are zeros, ``where(isnan(p), 0, p) @ v`` with ``p =
softmax(q @ kt * scale [+ mask])``: what torch's export of ``scaled_dot_product_attention`` writes (``Softmax ->
IsNaN -> Where(., 0, .) -> MatMul``; every decoder transformers exports today), so that a query row masked with
-inf throughout attends to nothing (a left-padded position under a causal mask). Operands and attributes are
``attention``'s (:mod:`eqsat.ops.attention`). A softmax row is NaN where its scores are all -inf, or hold a NaN or
+inf (a NaN or infinite q or k, a NaN mask): such a row is zeros, and the output row ``0 @ v`` (NaN in a column
where v holds a NaN or an infinity, else 0).

``sdpa_nz``: the same as one runtime kernel, opset 23's ``Attention`` (kt and v may have fewer heads than q, as
``sdpa``), which writes zeros for a query row masked throughout (its masked scores -inf, or float32's lowest: there
the decomposition averages v) but NaN for a row of NaN scores. Written ``Attention(q, Transpose(kt), v, mask)``, then,
only where the result holds a NaN (an ``If`` on the sum of its elements, a few microseconds where nothing is NaN),
each NaN element replaced by its column's ``sum(0 * v)``: a row of NaN scores comes out NaN throughout and becomes
the decomposition's ``0 @ v``; a NaN in another row comes from v's column, whose replacement is NaN too. So the
kernel agrees with the decomposition on every input (-inf, NaN and infinities included:
tests/rules/test_nan_zeroed_attention.py, onnxruntime on the decomposition the oracle) where the mask's finite
entries lie far above float32's lowest (:data:`eqsat.ops.bounds.MASK_FLOOR`: torch's export of a boolean mask,
``Where(keep, 0, -inf)``; the e-graph's ``AboveLowest`` mark, :func:`eqsat.ops.bounds.above_lowest_masks`). Only
the rules ``attention_nz_kernel`` (on an unmasked attention or one masked so) and ``attention_grouped`` make one
(rules/ours/kernels.py); only a measured cost prefers it (the analytic cost counts it as the decomposition plus the
transposition of kt).

>>> from eqsat.ops.composite import float_bits
>>> ATTENTION_NZ.shape((float_bits(0.125),), [(1, 4, 16, 8), (1, 4, 8, 16), (1, 4, 16, 8), (1, 1, 16, 16)])
(1, 4, 16, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import heads
from .attention import (
    _bytes,
    _flops,
    _grouped_shape,
    _repeated,
    _rules,
    _scores,
    _sdpa_bytes,
    _shape,
    group_size,
    kernel_operands,
    probabilities,
    ungrouped,
)
from .base import Ctor, Emitter, OpDef, Shape, emit_newer, newer_allowed
from .composite import float_value


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        p, v = probabilities(attrs, args, modulus)
        return np.matmul(np.where(np.isnan(p), 0.0, p), v)


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    s = em.emit("MatMul", ins[:2], "attention")
    s = em.emit("Mul", [s, em.const(np.array(float_value(attrs[0]), dtype=np.float32), "scale")], "attention")
    if len(ins) == 4:
        s = em.emit("Add", [s, ins[3]], "attention")
    p = em.emit("Softmax", [s], "attention", axis=-1)
    zero = em.const(np.array(0, dtype=np.float32), "zero")
    p = em.emit("Where", [em.emit("IsNaN", [p], "attention"), zero, p], "attention")
    return em.emit("MatMul", [p, ins[2]], "attention")


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    scale = float_value(attrs[0])

    def fn(q: Any, kt: Any, v: Any, mask: Any = None) -> Any:
        s = torch.matmul(q, kt) * scale
        p = torch.softmax(s if mask is None else s + mask, dim=-1)
        return torch.matmul(torch.where(torch.isnan(p), torch.zeros_like(p), p), v)
    return fn


def _nz_flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    """``attention``'s, and the NaN test and the choice per score."""
    return _flops(attrs, ins, out) + 2.0 * _scores(ins)


def _nz_bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """``attention``'s, and the probabilities read and written once more (the choice)."""
    return _bytes(ins, out, itemsize) + 2.0 * itemsize * _scores(ins)


def _sdpa_nz_bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """The decomposition's, and kt read and written once more (its transposition): no analytic preference."""
    return _nz_bytes(ins, out, itemsize) + _sdpa_bytes(ins, out, itemsize) - _bytes(ins, out, itemsize)


ATTENTION_NZ = OpDef("attention_nz", "where(isnan(p), 0, p) @ v, p = softmax(q @ kt * scale [+ mask]) (ranks 3-4)",
                     "(scale_bits,)", _shape, (Ctor("AttentionNz", "ittt"), Ctor("AttentionNzMasked", "itttt")),
                     lambda: _rules("AttentionNz", "AttentionNzMasked"), _numpy, _onnx, _torch, _nz_flops, _nz_bytes)


def _sdpa_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    """The decomposition's values over kt's and v's heads repeated (the kernel's where the mask is ``AboveLowest``)."""
    return _numpy(attrs, ungrouped(args, group_size([np.shape(a) for a in args]), heads.repeat), modulus)


class _Branch:
    """An :class:`~eqsat.ops.base.Emitter` that writes the nodes of an ``If`` branch: its constants as Constant
    nodes inside it, its names made from the ``If``'s output (unique in the model as that is)."""

    def __init__(self, em: Emitter, stem: str) -> None:
        self.opset, self.upgrade, self.stem = em.opset, em.upgrade, stem
        self.nodes: list[onnx.NodeProto] = []

    def _name(self, base: str) -> str:
        return f"{self.stem}_{base}_{len(self.nodes)}"

    def emit(self, op_type: str, inputs: list[str], base: str, **attrs: Any) -> str:
        out = self._name(base)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def const(self, array: np.ndarray, base: str) -> str:
        out = self._name(base)
        self.nodes.append(helper.make_node("Constant", [], [out], name=out,
                                           value=onnx.numpy_helper.from_array(array, out)))
        return out


def _zeroed_nan(em: Emitter, y: str, v: str, shapes: Sequence[Shape]) -> str:
    """``y`` with each NaN element replaced by its column's ``sum(0 * v)`` (v's heads repeated as q reads them),
    computed only where ``y`` holds a NaN."""
    stem = y  # the branches' names made from it: unique in the model as it is
    fix = _Branch(em, stem + "_fix")
    z = fix.emit("ReduceSum", [fix.emit("Mul", [v, fix.const(np.array(0, dtype=np.float32), "zero")], "zero_v"),
                               fix.const(np.array([-2], dtype=np.int64), "axis")], "column", keepdims=1)
    r = group_size(shapes)
    if r > 1:
        z = heads.write(fix, z, (*shapes[2][:2], 1, shapes[2][3]), r)
    fixed = fix.emit("Where", [fix.emit("IsNaN", [stem], "nan"), z, stem], "fixed")
    keep = _Branch(em, stem + "_keep")
    kept = keep.emit("Identity", [stem], "kept")
    branches = {name: helper.make_graph(b.nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])
                for name, b, out in (("then", fix, fixed), ("else", keep, kept))}
    total = em.emit("ReduceSum", [stem], "sdpa_nz", keepdims=0)
    return em.emit("If", [em.emit("IsNaN", [total], "sdpa_nz")], "sdpa_nz", then_branch=branches["then"],
                   else_branch=branches["else"])


def _sdpa_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    if not newer_allowed(em):
        return _onnx(em, attrs, _repeated(em, list(ins), shapes), shapes)
    heads_attrs = {"q_num_heads": 1, "kv_num_heads": 1} if len(shapes[0]) == 3 else {}
    y = emit_newer(em, "Attention", kernel_operands(em, ins, shapes, lambda _, mask: mask), "sdpa",
                   scale=float_value(attrs[0]), **heads_attrs)
    return _zeroed_nan(em, y, ins[2], shapes)


def _sdpa_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    fn, r = _torch(torch, attrs, shapes), group_size(shapes)
    return lambda *args: fn(*ungrouped(list(args), r, lambda x, k: x.repeat_interleave(k, dim=1)))


SDPA_NZ = OpDef("sdpa_nz", "attention_nz as one runtime kernel (ONNX Attention, opset 23, its NaN rows zeroed; kt "
                "and v may have fewer heads)", "(scale_bits,)", _grouped_shape,
                (Ctor("SdpaNz", "ittt"), Ctor("SdpaNzMasked", "itttt")),
                lambda: _rules("SdpaNz", "SdpaNzMasked", grouped=True), _sdpa_numpy, _sdpa_onnx, _sdpa_torch,
                _nz_flops, _sdpa_nz_bytes, kernel="Attention (opset 23)")
