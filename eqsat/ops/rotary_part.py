"""Rotary position embeddings on the first ``r`` entries of each head (partial rotary: the rest passes through) or
on neighbouring pairs (GPT-J, CodeGen, Cohere, ChatGLM: ``rotate_every_two``): ``rotary_part``, the decomposition the
exporters write, and ``rope_part``, the same values as one runtime kernel (opset 23's ``RotaryEmbedding`` with
``rotary_embedding_dim`` and ``interleaved``). The whole-head rotation of halves is :mod:`eqsat.ops.rotary`'s.

``rotary_part`` (x, cos, sin), attributes ``(r, interleaved)``: x [..., D] of rank 3 or 4; cos and sin of one shape,
x's rank, each dimension 1 or x's, the last ``r`` (even, at most D). With ``xr = x[..., :r]``::

    concat(xr * C + turn(xr) * S, x[..., r:])

where, ``interleaved`` (1), ``turn(xr)[..., 2i] = -xr[..., 2i + 1]``, ``turn(xr)[..., 2i + 1] = xr[..., 2i]`` and C, S
are the first entry of each pair of cos and sin written twice (``repeat_interleave``); else (0: Phi, GPT-NeoX,
StableLM) ``turn(xr) = concat(-xr[..., r/2:], xr[..., :r/2])`` and C, S the first halves of cos and sin written twice.
Only those entries of the tables are read: the importer takes the pattern only where the tables repeat them
(:func:`tables_repeat`), as the exporters' tables do, so the values are the model's; reading them alone makes
``rotary_part`` and ``rope_part`` equal for every operand, as the rule verifier checks. The ONNX form is the
exporters' decomposition (Slices, Neg, Concat, for pairs strided Slices, Unsqueeze and Reshape, two Muls, Add; the
pass-through part sliced and concatenated back); onnxruntime never fuses it.

``rope_part``: ``rotary_part`` at rank 4 with one angle per batch and position, shared by the heads: the heads at
axis 1 (x [B, H, S, D], cos [1 or B, 1, S, r]: opset 23's ``RotaryEmbedding`` on x as it is) or at axis 2 (x
[B, S, H, D], cos [1 or B, S, 1, r], GPT-J's order, before its heads are transposed: the kernel on x reshaped to
[B, S, H * D] with ``num_heads``); caches [B, S, r / 2] (the entries read, expanded over the batch),
``rotary_embedding_dim`` r where r < D. Written into an older model through an opset upgrade
(:mod:`eqsat.onnx.kernels`), and decomposed where that is not allowed. Only the rule ``rotary_part_kernel``
(rules/ours/kernels.py) makes one, and only a measured cost prefers it.

The matcher (import time, as :mod:`eqsat.ops.rotary`'s: the tables' values must be read) starts from the Add; where
its rotated part is a Slice of the first ``r`` entries of a value whose other part (a Slice from ``r`` on) is
concatenated after it, the match takes the Concat too, so that the kernel reads the whole heads (a rotation of
halves only so: over the whole head it is :mod:`eqsat.ops.rotary`'s ``rotary``).

>>> ROTARY_PART.shape((4, 1), [(1, 16, 2, 8), (1, 16, 1, 4), (1, 16, 1, 4)])
(1, 16, 2, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from .base import Ctor, Emitter, NotEvaluable, OpDef, Shape, emit_newer, fail, newer_allowed, volume
from .egglog_text import dim_vars
from .matching import Found, Matcher, View, const_ints, slice_of, sum_of_products
from .rotary import RANKS, cache_sizes, halves_repeat, sizes_key, table_rule

_TO_END = 2 ** 31
"""a Slice end at least this large runs to the end of its axis (the exporters write INT64_MAX)"""


def heads_axis(shapes: Sequence[Shape]) -> int | None:
    """The axis (1 or 2) of x's heads that the kernel reads the tables as shared by (cos 1 there at every size, the
    other of the two the sequence), 1 where both would do; None where x is not of rank 4 or cos is per head (the
    kernel is then written as the decomposition)."""
    x, cos = shapes[0], shapes[1]
    if len(x) != 4 or len(cos) != 4:
        return None
    return 1 if sizes_key(cos[1:2]) == (1,) else 2 if sizes_key(cos[2:3]) == (1,) else None


def _shape(op: str, kernel: bool) -> Callable[[tuple, Sequence[Shape]], Shape]:
    def shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
        if len(shapes) != 3 or len(attrs) != 2 or attrs[1] not in (0, 1):
            raise fail(op, f"expects (x, cos, sin) and (r, interleaved 0 or 1), got {len(shapes)} operands, "
                           f"attributes {attrs}")
        r = attrs[0]
        x, cos, sin = (tuple(s) for s in shapes)
        ranks = (4,) if kernel else RANKS
        if len(x) not in ranks or int(r) <= 0 or int(r) % 2 or int(r) > x[-1] or cos != sin or len(cos) != len(x) \
                or cos[-1] != r or any(c not in (1, d) for c, d in zip(cos[:-1], x[:-1])) \
                or kernel and 1 not in (int(cos[1]), int(cos[2])):
            where = "[1 or B, 1, S, r] or [1 or B, S, 1, r] for x of rank 4" if kernel else \
                "x's rank (3 or 4), each dimension 1 or x's, the last r"
            raise fail(op, f"expects an even r of at most x's last dimension and cos, sin of one shape, {where}; "
                           f"got r={r}, {x}, {cos}, {sin}")
        return x
    return shape


def _rules(ctor: str, kernel: bool) -> list[str]:
    out = []
    for rank in ((4,) if kernel else RANKS):
        x, c = dim_vars("x", rank), dim_vars("c", rank)
        heads = [[f"(= {c[1]} 1)"], [f"(= {c[2]} 1)"]] if kernel else [[]]  # the heads at axis 1 or 2
        for k, head in enumerate(heads):
            out.append(table_rule(f"shape_{ctor}{rank}_{k}", f"{ctor} r il x cos sin", x, c, "r",
                                  ["(= 0 (% r 2))", "(> r 0)", f"(<= r {x[-1]})"], attrs=["(= 0 (* il (- il 1)))"],
                                  heads=head))
    return out


def turn(x: Any, interleaved: int, stack: Callable[..., Any], cat: Callable[..., Any]) -> Any:
    """``turn(x)`` of the last axis (numpy or torch: ``stack(tensors, axis)``, ``cat(tensors, axis)``): each pair
    (x[2i], x[2i + 1]) written (-x[2i + 1], x[2i]) where ``interleaved``, else the halves (a, b) written (-b, a)."""
    if interleaved:
        return stack([-x[..., 1::2], x[..., 0::2]], -1).reshape(x.shape)
    h = x.shape[-1] // 2
    return cat([-x[..., h:], x[..., :h]], -1)


def read(t: Any, r: int, interleaved: int, repeat: Callable[..., Any], cat: Callable[..., Any]) -> Any:
    """The entries of a table ``t`` (last axis r) that ``rotary_part`` reads, each where x's rotated entries take
    it: the first of each pair written twice (``repeat(t, 2, axis)``), or the first half written twice."""
    return repeat(t[..., 0::2], 2, -1) if interleaved else cat([t[..., : r // 2], t[..., : r // 2]], -1)


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    if modulus is not None:
        raise NotEvaluable("rotary embeddings are not defined over a prime field")
    r, il = attrs
    x, cos, sin = (np.asarray(a, dtype=np.float64) for a in args)
    stack, cat = (lambda ts, axis: np.stack(ts, axis=axis)), (lambda ts, axis: np.concatenate(ts, axis=axis))
    c, s = (read(t, r, il, lambda a, k, axis: np.repeat(a, k, axis=axis), cat) for t in (cos, sin))
    xr = x[..., :r]
    return np.concatenate([xr * c + turn(xr, il, stack, cat) * s, x[..., r:]], axis=-1)


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    r, il = attrs
    stack, cat = (lambda ts, axis: torch.stack(ts, dim=axis)), (lambda ts, axis: torch.cat(ts, dim=axis))

    def fn(x: Any, cos: Any, sin: Any) -> Any:
        c, s = (read(t, r, il, lambda a, k, axis: torch.repeat_interleave(a, k, dim=axis), cat) for t in (cos, sin))
        xr = x[..., :r]
        return torch.cat([xr * c + turn(xr, il, stack, cat) * s, x[..., r:]], dim=-1)
    return fn


def _slice(em: Emitter, x: str, rank: int, start: int, end: int, step: int = 1) -> str:
    ins = [x, em.const(np.array([start]), "start"), em.const(np.array([end]), "end"), em.const(np.array([rank - 1]), "axis")]
    return em.emit("Slice", ins + ([em.const(np.array([step]), "step")] if step != 1 else []), "rotary")


def _read(em: Emitter, t: str, rank: int, r: int, interleaved: int) -> str:
    """:func:`read` in ONNX operators: the first of each pair of ``t``'s last axis (of r) written twice, or its
    first half written twice."""
    if not interleaved:
        half = _slice(em, t, rank, 0, r // 2)
        return em.emit("Concat", [half, half], "rotary", axis=rank - 1)
    first = em.emit("Unsqueeze", [_slice(em, t, rank, 0, r, 2), em.const(np.array([rank]), "axes")], "rotary")
    both = em.emit("Concat", [first, first], "rotary", axis=rank)
    return em.emit("Reshape", [both, em.const(np.array([0] * (rank - 1) + [r]), "shape")], "rotary")


def _turn(em: Emitter, xr: str, rank: int, r: int, interleaved: int) -> str:
    if not interleaved:
        second = em.emit("Neg", [_slice(em, xr, rank, r // 2, r)], "rotary")
        return em.emit("Concat", [second, _slice(em, xr, rank, 0, r // 2)], "rotary", axis=rank - 1)
    axes = em.const(np.array([rank]), "axes")
    odd = em.emit("Unsqueeze", [em.emit("Neg", [_slice(em, xr, rank, 1, r, 2)], "rotary"), axes], "rotary")
    even = em.emit("Unsqueeze", [_slice(em, xr, rank, 0, r, 2), axes], "rotary")
    return em.emit("Reshape", [em.emit("Concat", [odd, even], "rotary", axis=rank),
                               em.const(np.array([0] * (rank - 1) + [r]), "shape")], "rotary")


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    x, cos, sin = ins
    r, il = attrs
    rank, d = len(shapes[0]), shapes[0][-1]
    xr = _slice(em, x, rank, 0, r) if r < d else x
    out = em.emit("Add", [em.emit("Mul", [xr, _read(em, cos, rank, r, il)], "rotary"),
                          em.emit("Mul", [_turn(em, xr, rank, r, il), _read(em, sin, rank, r, il)], "rotary")],
                  "rotary")
    return out if r == d else em.emit("Concat", [out, _slice(em, x, rank, r, d)], "rotary", axis=rank - 1)


def _fixed(d: Any) -> bool:
    return not hasattr(d, "fp")


def _rope_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    r, il = attrs
    heads = heads_axis(shapes)
    x, cos, sin = ins
    b, d = shapes[0][0], shapes[0][3]
    seq_axis = 3 - heads if heads is not None else 2
    if not newer_allowed(em) or heads is None or heads == 2 and not (_fixed(shapes[0][2]) and _fixed(d)):
        return _onnx(em, attrs, ins, shapes)
    s, cb, cs = shapes[0][seq_axis], shapes[1][0], shapes[1][seq_axis]
    caches = []
    for t in (cos, sin):  # [cb, 1, cs, r] or [cb, cs, 1, r] -> [B, S, r / 2], the entries read
        t = em.emit("Squeeze", [t, em.const(np.array([heads]), "axes")], "rope")
        t = _slice(em, t, 3, 0, r, 2) if il else _slice(em, t, 3, 0, r // 2)
        if sizes_key((cb, cs)) != sizes_key((b, s)):
            t = em.emit("Expand", [t, cache_sizes(em, x, b, s, r // 2, seq_axis)], "rope")
        caches.append(t)
    partial = {"rotary_embedding_dim": int(r)} if r < d else {}
    if heads == 1:
        return emit_newer(em, "RotaryEmbedding", [x, *caches], "rope", interleaved=int(il), **partial)
    h = int(shapes[0][2])
    flat = em.emit("Reshape", [x, em.const(np.array([0, 0, -1]), "shape")], "rope")
    out = emit_newer(em, "RotaryEmbedding", [flat, *caches], "rope", interleaved=int(il), num_heads=h, **partial)
    return em.emit("Reshape", [out, em.const(np.array([0, 0, h, int(d)]), "shape")], "rope")


def _flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    """Two products, a sum and a negation per rotated element."""
    return 4.0 * volume(out) * attrs[0] / max(out[-1], 1)


def _bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """The operands read, the output written, and the decomposition's intermediate tensors of x's size (the turned
    pairs, the two products, the rotated part) written and read back."""
    return float(itemsize * (sum(volume(s) for s in ins) + volume(out) + 8 * volume(out)))


ROTARY_PART = OpDef("rotary_part", "x[..., :r] * cos + turn(x[..., :r]) * sin, x[..., r:] unchanged, neighbouring "
                    "pairs or halves turned, the entries of cos and sin they take read (ranks 3-4)",
                    "(r, interleaved)", _shape("rotary_part", False), (Ctor("RotaryPart", "iittt"),),
                    lambda: _rules("RotaryPart", False), _numpy, _onnx, _torch, _flops, _bytes)

ROPE_PART = OpDef("rope_part", "rotary_part as one runtime kernel (ONNX RotaryEmbedding, opset 23; rank 4)",
                  "(r, interleaved)", _shape("rope_part", True), (Ctor("RopePart", "iittt"),),
                  lambda: _rules("RopePart", True), _numpy, _rope_onnx, _torch, _flops, _bytes,
                  kernel="RotaryEmbedding (opset 23)")


def pairs_repeat(table: np.ndarray | None) -> bool:
    """Whether ``table`` (a cos or sin operand of ``rotary_part``) is a float32 constant whose last axis writes
    each of its pairs' entries twice, as ``repeat_interleave`` of the angles does."""
    if table is None or table.dtype != np.float32 or table.ndim not in RANKS or table.shape[-1] % 2:
        return False
    return bool(np.array_equal(table[..., 0::2], table[..., 1::2]))


def tables_repeat(attrs: tuple, table: np.ndarray | None) -> bool:
    """Whether ``table`` repeats the entries a ``rotary_part`` of ``attrs`` reads: each pair's, or its halves."""
    return pairs_repeat(table) if attrs[1] else halves_repeat(table)


# -- in ONNX graphs (:mod:`eqsat.ops.matching`) ------------------------------------------------------------------
# The matcher does not know x's rank: it records the axes it read (``last``: of x's rank, to be its last; ``pair``:
# of x's rank plus one, to be the new last axis), which :func:`ir_attrs` checks against the operands' shapes.
def _unsqueezed(v: View, name: str) -> tuple[str, int] | None:
    """``name = Unsqueeze(y, [axis])``: (y, axis)."""
    n = v.made_by(name, "Unsqueeze")
    if n is None or not n.input:
        return None
    axes = const_ints(v, n.input[1]) if len(n.input) > 1 and n.input[1] else v.attr(n, "axes")
    return (n.input[0], int(axes[0])) if isinstance(axes, list) and len(axes) == 1 else None


class _Turned:
    """``Reshape(Concat(Unsqueeze(Neg(Slice(x, 1::2)), -1), Unsqueeze(Slice(x, 0::2), -1), axis=-1), t)``
    (``torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)``) read from its value: x, the nodes, the strided
    Slices' least end, the axes read and the Reshape's target (a constant: :func:`ir_attrs` checks that it flattens
    the pairs back to x's shape)."""

    interleaved = 1

    def __init__(self, v: View, name: str):
        self.x: str | None = None
        self.half = 0
        reshape = v.made_by(name, "Reshape")
        cat = v.made_by(reshape.input[0], "Concat") if reshape is not None and reshape.input else None
        target = const_ints(v, reshape.input[1]) if reshape is not None and len(reshape.input) > 1 else None
        if reshape is None or cat is None or len(cat.input) != 2 or target is None \
                or v.attr(reshape, "allowzero", 0) != 0:
            return
        odd, even = (_unsqueezed(v, i) for i in cat.input)
        neg = v.made_by(odd[0], "Neg") if odd is not None else None
        first = slice_of(v, even[0]) if even is not None else None
        second = slice_of(v, neg.input[0]) if neg is not None and neg.input else None
        if first is None or second is None or odd is None or even is None or neg is None or first[0] != second[0] \
                or first[1:4:2] != (0, 2) or second[1:4:2] != (1, 2) or first[4] != second[4]:
            return
        self.x, self.ends, self.target = first[0], min(first[2], second[2]), tuple(target)
        self.last = [first[4]]
        self.pair = [odd[1], even[1], int(v.attr(cat, "axis", 0))]  # type: ignore[call-overload]
        self.nodes = [v.producer[even[0]], v.producer[neg.input[0]], neg, v.producer[cat.input[0]],
                      v.producer[cat.input[1]], cat, reshape]


class _Halves:
    """``Concat(Neg(Slice(x, h:)), Slice(x, :h), axis=-1)`` (transformers' ``rotate_half``) read from its value: x,
    h, the nodes, the second Slice's end and the axes read."""

    interleaved = 0

    def __init__(self, v: View, name: str):
        self.x: str | None = None
        self.target: tuple[int, ...] = ()
        self.pair: list[int] = []
        cat = v.made_by(name, "Concat")
        neg = v.made_by(cat.input[0], "Neg") if cat is not None and len(cat.input) == 2 else None
        second = slice_of(v, neg.input[0]) if neg is not None and neg.input else None
        first = slice_of(v, cat.input[1]) if cat is not None and neg is not None else None
        if cat is None or neg is None or first is None or second is None or first[0] != second[0] \
                or first[1] != 0 or not 0 < first[2] < _TO_END or first[3] != 1 or second[1:4:2] != (first[2], 1):
            return
        self.x, self.half, self.ends = first[0], first[2], second[2]
        self.last = [first[4], second[4], int(v.attr(cat, "axis", 0))]  # type: ignore[call-overload]
        self.nodes = [v.producer[cat.input[1]], v.producer[neg.input[0]], neg, cat]


def _rotary_part(v: View, add: onnx.NodeProto) -> Found | None:
    """``Add(Mul(x, cos), Mul(turn(x), sin))`` (either operand order of each Add and Mul; :class:`_Turned`,
    :class:`_Halves`); where x = Slice(y, :r) is concatenated before Slice(y, r:) along the last axis, the Concat's
    value over y (a rotation of halves only so)."""
    for mul1, mul2, x, cos, turned, sin in sum_of_products(v, add):
        for kind in (_Turned, _Halves):
            t = kind(v, turned)
            if t.x is None or t.x != x or x in v.consts or cos == sin or x in (cos, sin):
                continue
            found = _partial(v, add, t, [*t.nodes, mul1, mul2, add], cos, sin)
            if found is not None:
                return found
    return None


def _partial(v: View, add: onnx.NodeProto, t: _Turned | _Halves, nodes: list[onnx.NodeProto], cos: str,
             sin: str) -> Found | None:
    """The match over x (r = 0: x's whole last axis, read off its shape: :func:`ir_attrs`; pairs only), or over y
    where x = Slice(y, 0:r) and the Add's only reader is Concat(Add, Slice(y, r:)) along the last axis."""
    x = t.x
    assert x is not None
    head = slice_of(v, x)
    cat = v.sole_reader(add.output[0], "Concat")
    tail = slice_of(v, cat.input[1]) if cat is not None and len(cat.input) == 2 and cat.input[0] == add.output[0] \
        else None
    rest = (t.ends, tuple(t.pair), t.target, t.interleaved, t.half)
    if head is not None and tail is not None and cat is not None and head[0] == tail[0] not in v.consts \
            and head[1:4] == (0, head[2], 1) and 0 < head[2] < _TO_END and tail[1] == head[2] \
            and tail[2] >= _TO_END and tail[3] == 1:
        axes = (*t.last, head[4], tail[4], int(v.attr(cat, "axis", 0)))  # type: ignore[call-overload]
        parts = [v.producer[x], v.producer[cat.input[1]], *nodes, cat]
        return "rotary_part", (int(head[2]), axes, *rest), (head[0], cos, sin), parts, cat.output[0]
    if not t.interleaved:
        return None  # a rotation of halves over the whole of x: eqsat.ops.rotary's
    return "rotary_part", (0, tuple(t.last), *rest), (x, cos, sin), nodes, add.output[0]


def ir_attrs(attrs: tuple, shapes: Sequence[Shape]) -> tuple | None:
    """A match's IR attributes given its operands' shapes: ``(r, interleaved)``, r the Slice's end where the match
    took the pass-through part, else x's last dimension; None where an axis read is not the last (of x, or of the
    stacked pairs), the pairs' Reshape does not flatten them back (:func:`_flattens`), the halves are not r's, the
    Slices stop before r, or cos does not hold r entries."""
    r, last, ends, pair, target, interleaved, half = attrs
    rank = len(shapes[0])
    r = r or int(shapes[0][-1])
    if not all(a in (-1, rank - 1) for a in last) or not all(a in (-1, rank) for a in pair) \
            or (not _flattens(target, tuple(shapes[0][:-1]) + (r,)) if interleaved else 2 * half != r):
        return None
    return (r, interleaved) if ends >= r and len(shapes) == 3 and shapes[1][-1] == r else None


def _flattens(target: tuple[int, ...], shape: Shape) -> bool:
    """Whether a Reshape to ``target`` (``0`` copying the input's size, ``-1`` the rest) of the pairs stacked, of
    shape ``shape[:-1] + (r / 2, 2)``, gives ``shape`` at every size: its leading entries 0 or the sizes (equal for
    every value of the symbols), its last -1 or r."""
    return len(target) == len(shape) and target[-1] in (-1, shape[-1]) and all(
        t == 0 or sizes_key((t,)) == sizes_key((d,)) for t, d in zip(target[:-1], shape[:-1]))


PATTERNS: dict[str, Matcher] = {"Add": _rotary_part}
"""op type of the node a matcher starts from -> the matcher (:mod:`eqsat.ops.matching`)"""

IMPORT_ATTRS: dict[str, Callable[[tuple, Sequence[Shape]], tuple | None]] = {"rotary_part": ir_attrs}
"""IR op -> its matches' attributes given the operands' shapes (:meth:`eqsat.onnx.patterns.Match.ir_attrs`)"""
