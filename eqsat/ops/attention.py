"""``attention``: scaled-dot-product attention, ``softmax(Q @ K^T * scale [+ mask]) @ V``, one IR node.

Operands ``(q, kt, v)`` or ``(q, kt, v, mask)``, attrs ``(scale_bits,)``:

* ``q`` [..., S, D], ``kt`` [..., D, Sk] (the keys already transposed, as torch's exports hold them:
  ``MatMul(Q, Transpose(K))``), ``v`` [..., Sk, Dv], all of rank 3 or 4 with equal leading (batch, head)
  dimensions; the output is [..., S, Dv];
* ``mask`` (optional) has q's rank, each dimension 1 or the scores' ([..., S, Sk]); it is added to the scaled
  scores (an additive mask: 0 where kept, a large negative value where masked);
* ``scale`` is a positive finite float, held exactly as the bit pattern of its float32 value
  (:func:`eqsat.ops.composite.float_bits`).

The softmax is over the last axis. Not defined over a prime field (NotEvaluable in that mode). The ONNX form is
the decomposition torch's exporters write and onnxruntime's CPU session runs (it fuses the MatMul and the scale
into one FusedMatMul: :data:`eqsat.onnx.fusions.MATMUL_SCALE`): ``MatMul(q, kt) -> Mul(scale) [-> Add(mask)] -> Softmax(-1) -> MatMul(v)``; the torch
function is ``torch.nn.functional.scaled_dot_product_attention``.

``sdpa``: the same operands and attributes as ``attention`` (except that at rank 4 ``kt`` and ``v`` may have fewer
heads than ``q``, a divisor of its: grouped-query attention, query head ``i`` reading key/value head ``i // (Hq /
Hkv)``, as if each key/value head were repeated in turn: :func:`ungrouped`), written as one runtime kernel: opset 23's
``Attention`` (``Attention(q, Transpose(kt), v[, mask], scale)``; a rank-3 operand as one head,
``q_num_heads = kv_num_heads = 1``; a mask whose last two dimensions are not the scores' is expanded to them,
since onnxruntime's CPU kernel wants the mask's query dimension whole, a rank-3 one gets a heads axis, and its
values are raised to one ulp above float32's lowest, the value for which the kernel writes a fully masked row
as zeros where the decomposition averages v: so the two agree on every mask without -inf; its numpy semantics
compute that too, so that the rule verifier's -inf rows tell the two apart: a query row masked with -inf throughout
is NaN in ``attention``, finite in ``sdpa``, and ``attention_kernel`` fires only on masks proven finite).
Where the model's opset is older than 23 the writer upgrades the model (:mod:`eqsat.onnx.kernels`); where it
may not (``Emitter.upgrade`` False) the kernel is written as ``attention``'s decomposition (the grouped heads
repeated first). Only the rules ``attention_kernel`` and ``attention_grouped`` (its grouped form, from one over
``repeat_heads``) make one (rules/ours/kernels.py), and only a measured cost prefers it: the analytic
cost counts it as the decomposition plus the transposition of kt, so it never does.

``sdpa_causal``: ``attention`` under a causal mask, operands ``(q, kt, v)`` with as many keys as queries (query i
sees keys 0..i), written as opset 23's ``Attention`` with ``is_causal`` (no mask read or computed; where the
model may not be upgraded, the decomposition with the mask computed from the scores' shape); grouped like
``sdpa``. Only the rules ``attention_causal`` (from an ``attention`` whose mask the encoder marked ``Causal``:
:func:`causal_masks`) and ``attention_grouped`` make one.

>>> from eqsat.ops.composite import float_bits
>>> ATTENTION.shape((float_bits(0.125),), [(1, 4, 16, 8), (1, 4, 8, 16), (1, 4, 16, 8), (1, 1, 1, 16)])
(1, 4, 16, 8)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from . import heads
from .base import Ctor, Emitter, NotEvaluable, OpDef, Shape, dim_fp, emit_newer, fail, newer_allowed, volume
from .composite import check_float_attr, float_attr_conds, float_bits, float_value
from .egglog_text import dim_vars, rule, shape_of
from .matching import Found, Matcher, View, binary_matmul
from .opaque import attribute

RANKS = (3, 4)
"""operand ranks the operator takes ([B, S, D] and [B, H, S, D])"""

MATCHED = frozenset({"attention", "attention_nz"})
"""the operators the matcher makes (:func:`_attention`; their operands alike: q, kt, v and masks)"""


def _shape(attrs: tuple, shapes: Sequence[Shape], grouped: bool = False) -> Shape:
    """``grouped``: at rank 4, kt and v may have fewer heads (axis 1) than q, a divisor of q's (a runtime kernel's
    grouped-query attention: :func:`ungrouped`)."""
    (bits,) = attrs
    check_float_attr("attention", bits, "scale")
    if len(shapes) not in (3, 4):
        raise fail("attention", f"expects (q, kt, v) or (q, kt, v, mask), got {len(shapes)} operands")
    q, kt, v = (tuple(s) for s in shapes[:3])
    if grouped and len(q) == 4 == len(kt) == len(v) and kt[1] == v[1] and int(kt[1]) > 0 and int(q[1]) % int(kt[1]) == 0:
        kt, v = (x[:1] + (q[1],) + x[2:] for x in (kt, v))
    if len(q) not in RANKS or not len(q) == len(kt) == len(v) or q[:-2] != kt[:-2] or q[:-2] != v[:-2] \
            or q[-1] != kt[-2] or kt[-1] != v[-2]:
        raise fail("attention", f"expects q [..., S, D], kt [..., D, Sk], v [..., Sk, Dv] of rank 3 or 4 with equal "
                                f"leading dimensions, got {q}, {kt}, {v}")
    if len(shapes) == 4:
        scores, mask = q[:-1] + (kt[-1],), tuple(shapes[3])
        if len(mask) != len(scores) or any(m not in (1, s) for m, s in zip(mask, scores)):
            raise fail("attention", f"mask {mask} does not broadcast to the scores {scores} (same rank, each "
                                    "dimension 1 or the scores')")
    return q[:-1] + (v[-1],)


def _rules(plain: str = "Attention", masked: str = "AttentionMasked", grouped: bool = False) -> list[str]:
    """Per rank, without and with a mask (each mask dimension 1 or the scores'), for the constructors ``plain``
    and ``masked``; ``grouped``: at rank 4 kt and v have ``h`` heads, a divisor of q's."""
    out = []
    for r in RANKS:
        lead = dim_vars("b", r - 2)
        kv = lead[:1] + ["h"] if grouped and r == 4 else lead
        base = [f"(= {shape_of(lead + ['m', 'd'])} (shape q))", f"(= {shape_of(kv + ['d', 'n'])} (shape kt))",
                f"(= {shape_of(kv + ['n', 'dv'])} (shape v))", *float_attr_conds("s"),
                *(["(> h 0)", "(= 0 (% b1 h))"] if kv != lead else [])]
        result = [f"(set (shape e) {shape_of(lead + ['m', 'dv'])})"]
        out.append(rule(f"shape_{plain}{r}", [f"(= e ({plain} s q kt v))", *base], result))
        mask = dim_vars("c", r)
        conds = [f"(= 0 (* (- {c} {t}) (- {c} 1)))" for c, t in zip(mask, lead + ["m", "n"])]
        out.append(rule(f"shape_{masked}{r}", [f"(= e ({masked} s q kt v mk))", *base,
                                                      f"(= {shape_of(mask)} (shape mk))", *conds], result))
    return out


def probabilities(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The softmax of the scaled, masked scores, and v (float64): the two factors of the last product."""
    if modulus is not None:
        raise NotEvaluable("attention is not defined over a prime field")
    q, kt, v = (np.asarray(a, dtype=np.float64) for a in args[:3])
    s = np.matmul(q, kt) * float_value(attrs[0])
    if len(args) == 4:
        s = s + np.asarray(args[3], dtype=np.float64)
    z = np.exp(s - s.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True), v


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    return np.matmul(*probabilities(attrs, args, modulus))


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    s = em.emit("MatMul", ins[:2], "attention")
    s = em.emit("Mul", [s, em.const(np.array(float_value(attrs[0]), dtype=np.float32), "scale")], "attention")
    if len(ins) == 4:
        s = em.emit("Add", [s, ins[3]], "attention")
    return em.emit("MatMul", [em.emit("Softmax", [s], "attention", axis=-1), ins[2]], "attention")


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    scale = float_value(attrs[0])
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fn(q: Any, kt: Any, v: Any, mask: Any = None) -> Any:
        return sdpa(q, kt.transpose(-1, -2), v, attn_mask=mask, scale=scale)
    return fn


def _scores(ins: Sequence[Shape]) -> int:
    return volume(ins[0][:-1]) * ins[1][-1]


def _flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    """Both products, and per score the scale, the mask, and the softmax's exp, sum and division."""
    return 2.0 * _scores(ins) * (ins[0][-1] + ins[2][-1]) + (5.0 + (len(ins) == 4)) * _scores(ins)


def _bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """Operands read and the output written once, the scores written and read back twice (scaled and masked,
    then normalized): a decomposed attention materializes them."""
    return float(itemsize * (sum(volume(s) for s in ins) + volume(out) + 4 * _scores(ins)))


ATTENTION = OpDef("attention", "softmax(q @ kt * scale [+ mask]) @ v over the last axis (ranks 3-4)", "(scale_bits,)",
                  _shape, (Ctor("Attention", "ittt"), Ctor("AttentionMasked", "itttt")), _rules, _numpy, _onnx, _torch,
                  _flops, _bytes)


def ungrouped(args: list[Any], r: int, repeat: Callable[[Any, int], Any]) -> list[Any]:
    """The operands (q, kt, v[, mask]) of a grouped-query attention with kt's and v's heads each repeated ``r``
    times in turn by ``repeat`` (numpy, torch or ONNX), as the decomposition reads them (``r`` 1: as they are)."""
    return args if r == 1 else [args[0], repeat(args[1], r), repeat(args[2], r), *args[3:]]


def group_size(shapes: Sequence[Sequence[int]]) -> int:
    """How many query heads read each key/value head (1 where kt has as many heads as q, or the rank is 3)."""
    return int(shapes[0][1]) // int(shapes[1][1]) if len(shapes[0]) == 4 else 1


def _repeated(em: Emitter, ins: list[str], shapes: Sequence[Shape]) -> list[str]:
    """The operands with kt's and v's heads repeated in ONNX where they are grouped (the decomposition's)."""
    r = group_size(shapes)
    return ins if r == 1 else [ins[0], *(heads.write(em, ins[k], shapes[k], r) for k in (1, 2)), *ins[3:]]


def _sdpa_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    if not newer_allowed(em):
        return _onnx(em, attrs, _repeated(em, list(ins), shapes), shapes)  # (shapes unread there)
    rank = len(shapes[0])
    heads = {"q_num_heads": 1, "kv_num_heads": 1} if rank == 3 else {}
    return emit_newer(em, "Attention", kernel_operands(em, ins, shapes, _floored), "sdpa",
                      scale=float_value(attrs[0]), **heads)


def _floored(em: Emitter, mask: str) -> str:
    """onnxruntime's kernel writes zeros for a query row whose mask is the float's lowest value throughout,
    where the decomposition averages v uniformly (transformers' padding masks hold that value): one ulp above
    it, every mask without -inf gives the decomposition's values."""
    return em.emit("Max", [mask, em.const(np.array(KERNEL_FLOOR, dtype=np.float32), "floor")], "sdpa")


def kernel_operands(em: Emitter, ins: list[str], shapes: Sequence[Shape],
                    floor: Callable[[Emitter, str], str]) -> list[str]:
    """The kernel's operands (q, k, v[, mask]) for an attention's (q, kt, v[, mask]): the keys transposed back,
    the mask expanded to the scores' last two dimensions (onnxruntime's CPU kernel wants its query dimension
    whole), of rank 4 (a rank-3 one gets a heads axis) and raised by ``floor``."""
    rank = len(shapes[0])
    k = em.emit("Transpose", [ins[1]], "sdpa", perm=[*range(rank - 2), rank - 1, rank - 2])
    operands = [ins[0], k, ins[2]]
    if len(ins) == 4:
        mask, mask_shape = ins[3], tuple(shapes[3])
        scores = (shapes[0][-2], shapes[1][-1])
        if mask_shape[-2:] != scores:
            mask_shape = mask_shape[:-2] + scores
            mask = em.emit("Expand", [mask, em.const(np.array(mask_shape, dtype=np.int64), "shape")], "sdpa")
        if rank == 3:  # (B, S, Sk) -> (B, 1, S, Sk): the kernel broadcasts the mask over (B, heads, S, Sk)
            mask = em.emit("Reshape", [mask, em.const(np.array((mask_shape[0], 1, *scores), dtype=np.int64),
                                                      "shape")], "sdpa")
        operands.append(floor(em, mask))
    return operands


KERNEL_FLOOR = float(np.nextafter(np.finfo(np.float32).min, np.float32(0)))
"""the least mask value the kernel is given (:func:`_sdpa_onnx`): one ulp above float32's lowest"""


def _sdpa_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    """What the written kernel computes: the decomposition's values with the mask raised to :data:`KERNEL_FLOOR`
    (a query row masked with -inf throughout gives finite values where the decomposition gives NaN; NaN stays)."""
    if len(args) == 4:
        args = [*args[:3], np.maximum(np.asarray(args[3], dtype=np.float64), KERNEL_FLOOR)]
    return _numpy(attrs, ungrouped(args, group_size([np.shape(a) for a in args]), heads.repeat), modulus)


def _sdpa_bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """The decomposition's, and kt read and written once more (its transposition): no analytic preference."""
    return _bytes(ins, out, itemsize) + 2.0 * itemsize * volume(ins[1])


def _grouped_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    return _shape(attrs, shapes, grouped=True)


def _grouped_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    fn, r = _torch(torch, attrs, shapes), group_size(shapes)
    return lambda *args: fn(*ungrouped(list(args), r, lambda x, k: x.repeat_interleave(k, dim=1)))


SDPA = OpDef("sdpa", "attention as one runtime kernel (ONNX Attention, opset 23; kt and v may have fewer heads)",
             "(scale_bits,)", _grouped_shape, (Ctor("Sdpa", "ittt"), Ctor("SdpaMasked", "itttt")),
             lambda: _rules("Sdpa", "SdpaMasked", grouped=True), _sdpa_numpy, _sdpa_onnx, _grouped_torch, _flops,
             _sdpa_bytes, kernel="Attention (opset 23)")


CAUSAL_FLOOR = -1e30
"""a mask entry at or below this (float32's lowest, transformers' choice, or -inf) masks its score whatever the
score's size: the softmax gives it exactly 0, as a causal kernel does"""


def is_causal_mask(value: Any) -> bool:
    """Whether ``value`` is an additive causal mask: floating point, rank 2 or more, its last two dimensions equal
    (n x n), and every n x n matrix along its other dimensions 0 on and below the diagonal and
    :data:`CAUSAL_FLOOR` or below above it (query i sees keys 0..i)."""
    a = np.asarray(value)
    if a.dtype.kind != "f" or a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.size == 0:
        return False
    above = np.triu(np.ones(a.shape[-2:], dtype=bool), 1)
    return bool(np.all(a[..., ~above] == 0) and np.all(a[..., above] <= CAUSAL_FLOOR))


def _is_causal_trilu(node: Any, weights: Mapping[str, Any]) -> bool:
    """``Trilu(ConstantOfShape(shape, value), k=1, upper=1)`` (upper 1 by default) of a value at or below
    :data:`CAUSAL_FLOOR`, its last two dimensions one size (one symbol, or one constant): a shape-generic import's
    causal mask (:mod:`eqsat.generic.tables`), causal at every size."""
    if not (node.op == "opaque" and node.attrs[:2] == ("Trilu", "") and len(node.inputs) == 2
            and node.attrs[5] == (0, 1) and attribute(node, "upper") in (None, 1) and len(node.shape) >= 2
            and dim_fp(node.shape[-2]) == dim_fp(node.shape[-1])
            and node.dtype in ("float32", "float64")):
        return False
    full, k = node.inputs
    if not (full.op == "opaque" and full.attrs[:2] == ("ConstantOfShape", "") and k.op == "weight"
            and k.name in weights and np.asarray(weights[k.name]).size == 1 and int(np.asarray(weights[k.name])) == 1):
        return False
    value = attribute(full, "value")
    return value is not None and onnx.numpy_helper.to_array(value).size == 1 \
        and float(onnx.numpy_helper.to_array(value).reshape(())) <= CAUSAL_FLOOR


def causal_masks(nodes: Iterable[Any], weights: Mapping[str, Any]) -> frozenset[int]:
    """The ids of the nodes among ``nodes`` that are an ``attention``'s mask operand and a causal mask: a weight
    that holds one of 2 x 2 or more (:func:`is_causal_mask`; only those weights are read: a model's weights may be
    generated on first read; a 1 x 1 one, all zero, is no causal mask once broadcast over more queries, as in a
    shape-generic program sized 1) or a shape-generic import's Trilu of one (:func:`_is_causal_trilu`). The
    e-graph marks them ``Causal``."""
    masks = {id(n.inputs[3]): n.inputs[3] for n in nodes if n.op == "attention" and len(n.inputs) == 4}
    return frozenset(i for i, m in masks.items()
                     if (m.op == "weight" and len(m.shape) >= 2 and m.shape[-1] >= 2 and m.name in weights
                         and is_causal_mask(weights[m.name])) or _is_causal_trilu(m, weights))


def _causal_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    if len(shapes) != 3:
        raise fail("sdpa_causal", f"expects (q, kt, v), got {len(shapes)} operands")
    out = _shape(attrs, shapes, grouped=True)
    if shapes[0][-2] != shapes[1][-1]:
        raise fail("sdpa_causal", f"a causal mask needs as many queries as keys, got {shapes[0][-2]} queries and "
                                  f"{shapes[1][-1]} keys")
    return out


def _causal_rules() -> list[str]:
    """Per rank: q [..., m, d], kt [..., d, m] (as many keys as queries), v [..., m, dv]."""
    out = []
    for r in RANKS:
        lead = dim_vars("b", r - 2)
        kv = lead[:1] + ["h"] if r == 4 else lead  # grouped: kt and v of h heads, a divisor of q's
        conds = [f"(= {shape_of(lead + ['m', 'd'])} (shape q))", f"(= {shape_of(kv + ['d', 'm'])} (shape kt))",
                 f"(= {shape_of(kv + ['m', 'dv'])} (shape v))", *float_attr_conds("s"),
                 *(["(> h 0)", "(= 0 (% b1 h))"] if r == 4 else [])]
        out.append(rule(f"shape_SdpaCausal{r}", ["(= e (SdpaCausal s q kt v))", *conds],
                        [f"(set (shape e) {shape_of(lead + ['m', 'dv'])})"]))
    return out


def causal_mask(n: int) -> np.ndarray:
    """The additive causal mask of n queries over n keys: -inf above the diagonal, 0 on and below it."""
    return np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, 0.0)


def _causal_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    args = ungrouped(args, group_size([np.shape(a) for a in args]), heads.repeat)
    return _numpy(attrs, [*args, causal_mask(np.shape(args[0])[-2])], modulus)


def _causal_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    """opset 23's ``Attention`` with ``is_causal``; where the model may not take it, the decomposition with the
    mask computed from the scores' shape (float32's lowest above the diagonal: CumSum of ones along each of the
    last two axes gives j + 1 and i + 1; ops of opset 13, the oldest the importer takes)."""
    rank = len(shapes[0])
    if not newer_allowed(em):
        ins = _repeated(em, list(ins), shapes)
        s = em.emit("MatMul", ins[:2], "attention")
        s = em.emit("Mul", [s, em.const(np.array(float_value(attrs[0]), dtype=np.float32), "scale")], "attention")
        ones = em.emit("ConstantOfShape", [em.emit("Shape", [s], "causal")], "causal",
                       value=onnx.numpy_helper.from_array(np.ones(1, dtype=np.float32)))
        col, row = (em.emit("CumSum", [ones, em.const(np.array(axis, dtype=np.int64), "axis")], "causal")
                    for axis in (-1, -2))
        lowest = em.const(np.array(np.finfo(np.float32).min, dtype=np.float32), "lowest")
        mask = em.emit("Where", [em.emit("Greater", [col, row], "causal"), lowest,
                                 em.const(np.array(0, dtype=np.float32), "zero")], "causal")
        s = em.emit("Add", [s, mask], "attention")
        return em.emit("MatMul", [em.emit("Softmax", [s], "attention", axis=-1), ins[2]], "attention")
    k = em.emit("Transpose", [ins[1]], "sdpa", perm=[*range(rank - 2), rank - 1, rank - 2])
    heads = {"q_num_heads": 1, "kv_num_heads": 1} if rank == 3 else {}
    return emit_newer(em, "Attention", [ins[0], k, ins[2]], "sdpa", scale=float_value(attrs[0]), is_causal=1,
                      **heads)


def write_grouped(em: Emitter, attrs: tuple, q: str, k: str, v: str) -> str:
    """A causal attention of q [B, Hq, S, D] over keys k and values v of [B, Hkv, S, .] (Hkv dividing Hq: each
    key/value head read by Hq / Hkv query heads in turn) as opset 23's ``Attention`` (the caller checked that the
    writer may use it): the :mod:`eqsat.onnx.forms` form of an ``sdpa_causal`` over repeated heads."""
    return emit_newer(em, "Attention", [q, k, v], "sdpa", scale=float_value(attrs[0]), is_causal=1)


def _causal_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    scale, r = float_value(attrs[0]), group_size(shapes)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fn(q: Any, kt: Any, v: Any) -> Any:
        q, kt, v = ungrouped([q, kt, v], r, lambda x, k: x.repeat_interleave(k, dim=1))
        return sdpa(q, kt.transpose(-1, -2), v, is_causal=True, scale=scale)
    return fn


def _causal_flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    """The masked attention's (the mask applied per score): no analytic preference for the kernel."""
    return _flops(attrs, [*ins, ins[0]], out)


SDPA_CAUSAL = OpDef("sdpa_causal", "causal attention as one runtime kernel (ONNX Attention, opset 23, is_causal)",
                    "(scale_bits,)", _causal_shape, (Ctor("SdpaCausal", "ittt"),), _causal_rules, _causal_numpy,
                    _causal_onnx, _causal_torch, _causal_flops, _sdpa_bytes, kernel="Attention (opset 23)")


# -- attention in ONNX graphs (:mod:`eqsat.ops.matching`) --------------------------------------------------------------
def _scale_factor(v: View, name: str) -> tuple[onnx.NodeProto, str, float] | None:
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


def _attention(v: View, mm: onnx.NodeProto) -> Found | None:
    """``MatMul(q, kt) [* c | / c] [+ mask [+ mask2]] [-> Cast(float)...] -> Softmax(-1) [-> Cast(float)...] ->
    MatMul(., v)``; a scale may also sit on q and kt (torch's ``scaled_dot_product_attention`` export: ``q *
    sqrt(c)``, ``kt * sqrt(c)``). Two masks (operands q, kt, v, mask, mask2) are one mask, their sum, in the IR. A
    Softmax axis other than -1 is the last one at a single rank: a negative one never at the ranks the operator
    takes (3 and 4), a non-negative one is checked with the shapes (:attr:`Match.last_axis`)."""
    if not binary_matmul(mm):
        return None
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
    masks: list[str] = []
    add = v.sole_reader(cur, "Add")
    while add is not None and len(masks) < 2:  # T5 adds its position bias, then the padding mask
        mask = v.other(add, cur)
        if not mask:
            return None
        masks.append(mask)
        nodes.append(add)
        cur = add.output[0]
        add = v.sole_reader(cur, "Add")
    cur = v.through_float_casts(cur, nodes)  # T5's softmax(scores.float())
    soft = v.sole_reader(cur, "Softmax")
    if soft is None or v.softmax_axis(soft) < -1:
        return None
    nodes.append(soft)
    cur = soft.output[0]
    cur = v.through_float_casts(cur, nodes)
    zeroed = _nan_zeroed(v, cur)
    if zeroed is not None:
        nodes += zeroed
        cur = zeroed[-1].output[0]
    pv = v.sole_reader(cur, "MatMul")
    if pv is None or pv.input[0] != cur or pv.input[1] == cur or not math.isfinite(scale) or not scale > 0:
        return None
    inputs = (q, kt, pv.input[1], *masks)
    return "attention_nz" if zeroed else "attention", (float_bits(scale),), inputs, nodes + [pv], pv.output[0]


def _nan_zeroed(v: View, p: str) -> list[onnx.NodeProto] | None:
    """``Where(IsNaN(p), 0, p)``, read by nothing else (torch's export of ``scaled_dot_product_attention``: a query
    row whose scores are NaN, one masked throughout with -inf among them, attends to nothing): its two nodes."""
    readers = v.readers.get(p, [])
    if len(readers) != 2 or p in v.outputs:
        return None
    isnan = next((n for n in readers if n.op_type == "IsNaN"), None)
    where = next((n for n in readers if n.op_type == "Where"), None)
    if isnan is None or where is None or any(n.domain not in ("", "ai.onnx") for n in readers) \
            or list(where.input) != [isnan.output[0], where.input[1], p] or v.sole_reader(isnan.output[0]) is not where \
            or not v.is_scalar(where.input[1], 0.0):
        return None
    return [isnan, where]


PATTERNS: dict[str, Matcher] = {"MatMul": _attention}
"""op type of the node a matcher starts from -> the matcher (:mod:`eqsat.ops.matching`)"""
