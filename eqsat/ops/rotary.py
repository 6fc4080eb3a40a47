"""Rotary position embeddings: ``rotary`` (the decomposition LLaMA and Qwen exports write) and ``rope`` (the
same values as one runtime kernel, opset 23's ``RotaryEmbedding``).

``rotary`` (x, cos, sin), no attributes: with ``h`` half of x's last dimension ``D`` (even),
``x * C + rotate_half(x) * S`` where ``rotate_half(x) = concat(-x[..., h:], x[..., :h])`` and ``C``, ``S`` are
the first halves of ``cos`` and ``sin`` written twice (``concat(cos[..., :h], cos[..., :h])``). ``cos`` and
``sin`` have x's rank (3 or 4), each dimension 1 or x's, the last ``D``. Only the first halves are read: the
importer takes the pattern only where the cos and sin it reads repeat their halves (as every rotary cache does: a
constant checked, a table computed from the position checked by construction, :func:`computed_halves_repeat`), so
the values are the model's; reading the first halves alone makes ``rotary`` and ``rope`` equal
for every operand, as the rule verifier checks. The ONNX form is the exporters' decomposition (two Slices, Neg,
Concat, two Muls, Add; the halves of cos and sin concatenated, which onnxruntime folds for constant caches);
onnxruntime never fuses it.

``rope`` (x, cos, sin): ``rotary`` at rank 4, x [B, H, S, D], cos and sin [1 or B, 1, S, D] (one angle per
batch and position, shared by the heads), written as opset 23's ``RotaryEmbedding`` with caches
[B, S, D / 2] (``cos[:, 0, :, :h]`` expanded over the batch) and no position ids. Like ``sdpa``, it is written
into an older model through an opset upgrade (:mod:`eqsat.onnx.kernels`), and decomposed where that fails.

The matcher (import time, not a rule in the e-graph: it must read the values of cos and sin, which the e-graph
does not hold, and the exporters' ``Slice`` and ``Neg`` nodes are opaque to it) starts from the Add.

>>> ROTARY.shape((), [(1, 4, 16, 8), (1, 1, 16, 8), (1, 1, 16, 8)])
(1, 4, 16, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from .base import Ctor, Emitter, NotEvaluable, OpDef, Shape, dim_fp, emit_newer, fail, newer_allowed, volume
from .egglog_text import dim_vars, rule, shape_of
from .matching import Found, Matcher, View, const_ints, slice_of, sum_of_products

RANKS = (3, 4)


def _shape(op: str, kernel: bool) -> Callable[[tuple, Sequence[Shape]], Shape]:
    def shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
        if len(shapes) != 3:
            raise fail(op, f"expects (x, cos, sin), got {len(shapes)} operands")
        x, cos, sin = (tuple(s) for s in shapes)
        ranks = (4,) if kernel else RANKS
        if len(x) not in ranks or x[-1] % 2 or cos != sin or len(cos) != len(x) or cos[-1] != x[-1] \
                or any(c not in (1, d) for c, d in zip(cos, x)) or kernel and cos[1] != 1:
            where = "[1 or B, 1, S, D] for x [B, H, S, D]" if kernel else "x's rank (3 or 4), each dimension 1 or x's"
            raise fail(op, f"expects x with an even last dimension D and cos, sin of one shape, {where}, the last D; "
                           f"got {x}, {cos}, {sin}")
        return x
    return shape


def table_rule(name: str, term: str, x: list[str], c: list[str], last: str, conds: Sequence[str],
               attrs: Sequence[str] = (), heads: Sequence[str] = ()) -> str:
    """The shape rule ``name`` of ``e = (term)``, an operator on (x, cos, sin) of x's shape: x of dimensions ``x``,
    ``attrs`` (conditions on the attributes), cos of dimensions ``c`` but the last ``last``, sin of cos's shape,
    ``conds``, each other dimension of cos 1 or x's, ``heads`` (a kernel's conditions on cos)."""
    broadcast = [f"(= 0 (* (- {a} {b}) (- {a} 1)))" for a, b in zip(c[:-1], x[:-1])]
    return rule(name, [f"(= e ({term}))", *attrs, f"(= {shape_of(x)} (shape x))",
                       f"(= {shape_of(c[:-1] + [last])} (shape cos))", "(= (shape cos) (shape sin))", *conds,
                       *broadcast, *heads], [f"(set (shape e) {shape_of(x)})"])


def _rules(ctor: str, kernel: bool) -> list[str]:
    out = []
    for r in ((4,) if kernel else RANKS):
        x, c = dim_vars("x", r), dim_vars("c", r)
        out.append(table_rule(f"shape_{ctor}{r}", f"{ctor} x cos sin", x, c, x[-1], [f"(= 0 (% {x[-1]} 2))"],
                              heads=[f"(= {c[1]} 1)"] if kernel else []))
    return out


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    if modulus is not None:
        raise NotEvaluable("rotary embeddings are not defined over a prime field")
    x, cos, sin = (np.asarray(a, dtype=np.float64) for a in args)
    h = x.shape[-1] // 2
    c, s = (np.concatenate([t[..., :h], t[..., :h]], axis=-1) for t in (cos, sin))
    return x * c + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * s


def _halves(em: Emitter, name: str, rank: int, h: int, twice: bool) -> str:
    """The first half of ``name`` along the last axis (written twice, concatenated, where ``twice``)."""
    k = em.emit("Slice", [name, em.const(np.array([0]), "start"), em.const(np.array([h]), "end"),
                          em.const(np.array([rank - 1]), "axis")], "rotary")
    return em.emit("Concat", [k, k], "rotary", axis=rank - 1) if twice else k


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    x, cos, sin = ins
    rank, h = len(shapes[0]), shapes[0][-1] // 2
    axis = em.const(np.array([rank - 1]), "axis")
    first = em.emit("Slice", [x, em.const(np.array([0]), "start"), em.const(np.array([h]), "end"), axis], "rotary")
    second = em.emit("Slice", [x, em.const(np.array([h]), "start"), em.const(np.array([2 * h]), "end"), axis],
                     "rotary")
    turned = em.emit("Concat", [em.emit("Neg", [second], "rotary"), first], "rotary", axis=rank - 1)
    scaled = em.emit("Mul", [x, _halves(em, cos, rank, h, True)], "rotary")
    return em.emit("Add", [scaled, em.emit("Mul", [turned, _halves(em, sin, rank, h, True)], "rotary")], "rotary")


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    h = shapes[0][-1] // 2

    def fn(x: Any, cos: Any, sin: Any) -> Any:
        c, s = (torch.cat([t[..., :h], t[..., :h]], dim=-1) for t in (cos, sin))
        return x * c + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * s
    return fn


def _flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    """Two products, a sum and a negation per element."""
    return 4.0 * volume(out)


def _bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """The operands read, the output written, and the decomposition's three intermediate tensors of x's size
    written and read back (the rotated halves, the two products)."""
    return float(itemsize * (sum(volume(s) for s in ins) + volume(out) + 6 * volume(out)))


ROTARY = OpDef("rotary", "x * cos + rotate_half(x) * sin, the first halves of cos and sin read (ranks 3-4)", "()",
               _shape("rotary", False), (Ctor("Rotary", "ttt"),), lambda: _rules("Rotary", False), _numpy, _onnx,
               _torch, _flops, _bytes)


def sizes_key(dims: Sequence[int]) -> tuple[int, ...]:
    """``dims`` as compared for every value of the symbols: a symbolic dimension (:class:`eqsat.dims.Dim`) by its
    fingerprint, so that a batch of 1 in the cache is not taken for a symbolic batch at 1."""
    return tuple(dim_fp(d) for d in dims)


def cache_sizes(em: Emitter, x: str, b: int, s: int, h: int, seq_axis: int = 2) -> str:
    """The caches' shape [b, s, h]: a constant, or, where b or s is symbolic, x's own sizes read at run time
    (``Shape`` of x's axes 0 and ``seq_axis``, and h), which a shape-generic program keeps."""
    if not any(hasattr(d, "fp") for d in (b, s)):
        return em.const(np.array([b, s, h], dtype=np.int64), "shape")
    batch = em.emit("Shape", [x], "rope", start=0, end=1)
    seq = em.emit("Shape", [x], "rope", start=seq_axis, end=seq_axis + 1)
    return em.emit("Concat", [batch, seq, em.const(np.array([h], dtype=np.int64), "half")], "rope", axis=0)


def _rope_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    if not newer_allowed(em):
        return _onnx(em, attrs, ins, shapes)
    x, cos, sin = ins
    (b, _, s, d), (cb, _, cs, _) = shapes[0], shapes[1]
    caches = []
    for t in (cos, sin):  # [cb, 1, cs, D] -> [B, S, D / 2]
        # axis 1 squeezed, not a Reshape to [cb, cs, D]: a decode step's cs is 1 where the program is tuned, and a
        # target written from sizes cannot tell it from a constant 1 (it became [0, 1, -1], every position's angles
        # on one row, at a sequence of 8)
        t = em.emit("Squeeze", [t, em.const(np.array([1], dtype=np.int64), "axes")], "rope")
        t = _halves(em, t, 3, d // 2, False)
        if sizes_key((cb, cs)) != sizes_key((b, s)):
            t = em.emit("Expand", [t, cache_sizes(em, x, b, s, d // 2)], "rope")
        caches.append(t)
    return emit_newer(em, "RotaryEmbedding", [x, *caches], "rope")


def _rope_bytes(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """The decomposition's: no analytic preference (only a measured cost tells the kernel apart)."""
    return _bytes(ins, out, itemsize)


ROPE = OpDef("rope", "rotary as one runtime kernel (ONNX RotaryEmbedding, opset 23; rank 4)", "()",
             _shape("rope", True), (Ctor("Rope", "ttt"),), lambda: _rules("Rope", True), _numpy, _rope_onnx,
             _torch, _flops, _rope_bytes, kernel="RotaryEmbedding (opset 23)")


# -- rotary embeddings in ONNX graphs (:mod:`eqsat.ops.matching`) ------------------------------------------------------
def _half(v: View, name: str, rank: int, d: int) -> tuple[str, int] | None:
    """``name = Slice(x, [a], [b], [last axis][, [1]])``, x of rank ``rank``: (x, 0) for the first half of x's
    last dimension ``d``, (x, 1) for the second."""
    s = slice_of(v, name)
    if s is None or s[3] != 1 or s[4] not in (-1, rank - 1):
        return None
    x, start, end = s[:3]
    h = d // 2
    if start == 0 and end == h:
        return x, 0
    if start in (h, -h) and end >= d:
        return x, 1
    return None


def _rotary(v: View, add: onnx.NodeProto) -> Found | None:
    """``Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h:)), Slice(x, :h), axis=-1), sin))`` (either operand order of
    each Add and Mul: :func:`~eqsat.ops.matching.sum_of_products`), cos and sin constants of x's rank whose halves
    along the last axis are equal."""
    for mul1, mul2, x, cos, turned, sin in sum_of_products(v, add):
        found = _rest(v, add, mul1, mul2, x, cos, turned, sin)
        if found is not None:
            return found
    return None


def halves_repeat(table: np.ndarray | None) -> bool:
    """Whether ``table`` (a cos or sin operand of ``rotary``) is a float32 constant whose last axis is its first
    half written twice, as rotary caches are (the importer checks it once constants are folded)."""
    if table is None or table.dtype != np.float32 or table.ndim not in RANKS or table.shape[-1] % 2:
        return False
    h = table.shape[-1] // 2
    return bool(np.array_equal(table[..., :h], table[..., h:]))


_EACH = frozenset({"Sin", "Cos", "Cast", "Neg", "Identity", "Exp", "Sqrt", "Abs", "Reciprocal", "Tanh", "Sigmoid"})
"""operators that act on each element alike"""
_PAIRWISE = frozenset({"Mul", "Add", "Sub", "Div"})


def computed_halves_repeat(name: str, producer: Callable[[str], onnx.NodeProto | None],
                           const: Callable[[str], np.ndarray | None], shape: Callable[[str], Sequence[int] | None],
                           depth: int = 12) -> bool:
    """Whether the value ``name`` repeats its halves along its last axis by construction, as LLaMA's exports compute
    the rotary tables of a decode step from the position (``Unsqueeze(Cos(Concat(f, f, axis=-1)))``, the angles
    ``f`` written twice): a ``Concat`` of one value with itself along the last axis, then only operators that act
    on each element alike, element-wise ones with operands that do too or are constant along the last axis (a
    scalar, a last dimension of 1), and ``Unsqueeze``, ``Reshape``, ``Expand`` or ``Transpose`` that keep every row
    of the last axis whole (its size unchanged, no axis inserted after it); or a constant whose halves are equal.
    ``producer``, ``const`` and ``shape`` read the model (a node, a constant value, a value's shape)."""
    c = const(name)
    if c is not None:
        return c.ndim >= 1 and c.shape[-1] % 2 == 0 and bool(np.array_equal(c[..., :c.shape[-1] // 2],
                                                                           c[..., c.shape[-1] // 2:]))
    n = producer(name)
    out = shape(name)
    if depth == 0 or n is None or n.domain not in ("", "ai.onnx") or not out or not n.input:
        return False

    def each(x: str) -> bool:
        return computed_halves_repeat(x, producer, const, shape, depth - 1)

    def flat(x: str) -> bool:  # constant along the last axis: broadcast over it (a last dimension 1 at every size)
        value = const(x)
        dims = value.shape if value is not None else shape(x)
        return dims is not None and (len(dims) == 0 or sizes_key(dims[-1:]) == (1,))

    ins, rank = list(n.input), len(out)
    if n.op_type == "Concat":
        axis = next((a.i for a in n.attribute if a.name == "axis"), None)
        return len(ins) == 2 and ins[0] == ins[1] and axis in (-1, rank - 1)
    if n.op_type in _EACH:
        return each(ins[0])
    if n.op_type in _PAIRWISE:
        return len(ins) == 2 and all(each(x) or flat(x) for x in ins) and not all(flat(x) for x in ins)
    before = shape(ins[0])
    if before is None or len(before) == 0 or sizes_key(before[-1:]) != sizes_key(out[-1:]):  # equal at every size
        return False
    if n.op_type == "Transpose":
        perm = next((list(a.ints) for a in n.attribute if a.name == "perm"), None)
        return perm is not None and perm[-1] == rank - 1 and each(ins[0])
    if n.op_type == "Unsqueeze":
        axes = const(ins[1]) if len(ins) > 1 else None
        return axes is not None and (rank - 1) not in {int(a) % rank for a in axes.reshape(-1)} and each(ins[0])
    return n.op_type in ("Reshape", "Expand") and each(ins[0])


def _rest(v: View, add: onnx.NodeProto, mul1: onnx.NodeProto, mul2: onnx.NodeProto, x: str, cos: str,
          turned: str, sin: str) -> Found | None:
    """The rest of the pattern for one operand order. cos and sin that are constants already must repeat their
    halves; those that torch's exports compute from constants (TorchScript: Gather, Unsqueeze of the caches) are
    checked by the importer once folded (:func:`halves_repeat`)."""
    cat = v.made_by(turned, "Concat")
    if cat is None or x in v.consts or cos == sin and cos not in v.consts or len(cat.input) != 2:
        return None
    neg = v.made_by(cat.input[0], "Neg")
    first_slice = v.made_by(cat.input[1], "Slice")
    ends = const_ints(v, first_slice.input[2]) if first_slice is not None and len(first_slice.input) > 2 else None
    if first_slice is None or neg is None or not neg.input or ends is None or len(ends) != 1 or ends[0] <= 0:
        return None
    d = 2 * ends[0]
    rank = next((v.consts[t].ndim for t in (cos, sin) if t in v.consts), 4)
    if int(v.attr(cat, "axis", 0)) not in (-1, rank - 1):  # type: ignore[call-overload]
        return None
    if any(t in v.consts and (not halves_repeat(v.consts[t]) or v.consts[t].shape[-1] != d) for t in (cos, sin)):
        return None
    if _half(v, neg.input[0], rank, d) != (x, 1) or _half(v, cat.input[1], rank, d) != (x, 0):
        return None
    nodes = [first_slice, v.producer[neg.input[0]], neg, cat, mul1, mul2, add]
    return "rotary", (), (x, cos, sin), nodes, add.output[0]


PATTERNS: dict[str, Matcher] = {"Add": _rotary}
"""op type of the node a matcher starts from -> the matcher (:mod:`eqsat.ops.matching`)"""
