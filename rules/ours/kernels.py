"""The runtime's kernels as operators: each rule relates an IR operator's decomposition (as the importer and the
other rules hold it) to the operator written as one kernel of the runtime, so that the measured cost of each,
timed as onnxruntime runs it, decides which the program keeps. Nothing here says which is faster; the kernels
are exported only where the model's opset has them or an opset upgrade takes it there (:mod:`eqsat.onnx.kernels`),
and these rules join a search only where onnxruntime runs the kernels and ``--portable`` is off
(:func:`eqsat.rules.registry.rule_set`).

* ``attention_kernel``: attention(q, kt, v[, mask]) -> sdpa(q, kt, v[, mask]): the decomposed attention core
  (MatMul, scale, mask Add, Softmax, MatMul, which onnxruntime runs as FusedMatMul + Softmax + MatMul:
  :data:`eqsat.onnx.fusions.MATMUL_SCALE`, :data:`~eqsat.onnx.fusions.MATMUL_TRANSPOSE`) as opset
  23's ``Attention``. ``attention_split`` relates ``attention`` to its parts, so the kernel is reached from any
  spelling that rule recombines. A masked one only where the encoder marked the mask ``Finite`` (finite on every
  input: :func:`eqsat.ops.bounds.finite_masks`): where a query row's mask is -inf throughout, the decomposition
  gives NaN and the kernel finite values, and a mask read from a float input can hold that (a padded row).
* ``attention_causal``: attention(q, kt, v, mask) -> sdpa_causal(q, kt, v) where the mask is a weight the encoder
  marked ``Causal`` (0 on and below the diagonal, float32's lowest or -inf above: :func:`eqsat.ops.attention.
  is_causal_mask`) and its last two dimensions are the scores' (as many keys as queries): opset 23's ``Attention``
  with ``is_causal``, which reads no mask. In a shape-generic program the mask is computed every call (a Trilu of
  the sequence length squared: 5 us of the zoo LLaMA's 250 at sequence 128); the kernel computes none.
* ``rotary_kernel``: rotary(x, cos, sin) -> rope(x, cos, sin) where cos and sin are [1 or B, 1, S, D] (one angle
  per position, shared by the heads): the rotary embedding LLaMA and Qwen exports decompose (which onnxruntime
  never fuses) as opset 23's ``RotaryEmbedding``.
* ``rotary_part_kernel``: rotary_part(x, cos, sin) -> rope_part(x, cos, sin) where cos and sin are shared by
  the heads (at axis 1 or 2): a partial rotary embedding (Phi, GPT-NeoX) or one of neighbouring pairs (GPT-J,
  CodeGen; :mod:`eqsat.ops.rotary_part`) as opset 23's ``RotaryEmbedding`` (``rotary_embedding_dim``, ``interleaved``).
* ``attention_grouped``: sdpa(q, transpose(repeat_heads(k, r)), repeat_heads(v, r)[, mask]) -> sdpa(q,
  transpose(k), v[, mask]), and ``sdpa_causal`` alike: grouped-query attention (transformers' ``repeat_kv``, which a
  shape-generic import reads as ``repeat_heads``: :mod:`eqsat.ops.heads`) read by the kernel over the unrepeated
  keys and values (opset 23's ``Attention`` takes fewer key/value heads than query heads), so that a decode step
  does not copy its cache each call; ``sdpa_nz`` alike.
* ``attention_nz_kernel``: attention_nz(q, kt, v[, mask]) -> sdpa_nz(q, kt, v[, mask]): the attention whose NaN
  softmax rows are zeros (torch's export of ``scaled_dot_product_attention``, every decoder transformers exports:
  :mod:`eqsat.ops.attention_nz`) as opset 23's ``Attention`` with its NaN rows zeroed where any is NaN. A row
  masked with -inf throughout is zeros in both, so no ``Finite`` mark is needed; a masked one only where the encoder
  marked the mask ``AboveLowest`` (its finite entries far above float32's lowest on every input: torch's export of
  a boolean mask; :func:`eqsat.ops.bounds.above_lowest_masks`), since the kernel also writes zeros where a row's
  masked scores reach float32's lowest, where the decomposition averages v.
"""

from __future__ import annotations

import numpy as np

from eqsat import ir
from eqsat.ops.attention import RANKS
from eqsat.ops.composite import float_bits
from eqsat.ops.egglog_text import dim_vars, shape_of

from ..rule import Rule
from .attention import SCALES
from .sampling import broadcastable, dim, pick

FINITE = "fmask"
"""the name the instances give a finite mask weight (:func:`_finite_mask` holds its value)"""


def _finite_mask(leaf: ir.Node) -> np.ndarray | None:
    """A :data:`FINITE` weight's value: normal, with float32's lowest on every third query row (the padded rows
    transformers write, on which the kernel must give the decomposition's values); None for any other weight."""
    if leaf.name != FINITE:
        return None
    value = np.random.default_rng(len(leaf.shape) * 100 + sum(leaf.shape)).standard_normal(leaf.shape)
    if len(leaf.shape) >= 2:
        value[..., ::3, :] = np.finfo(np.float32).min
    return value.astype(np.float32)


def _attention_instance(rng):
    """An ``attention`` of rank 3 or 4 (masked half the time, the mask broadcast over some dimensions: a finite
    weight, or as a near miss on which the rule must not fire, a model input that may hold -inf), beside its parts
    (a matmul, scale, softmax and matmul), on which the rule does not fire."""
    rank = pick(rng, RANKS)
    lead = tuple(dim(rng, 1, 3) for _ in range(rank - 2))
    rows, d, keys, dv = (dim(rng, 1, 5) for _ in range(4))
    q, kt, v = ir.input_("q", lead + (rows, d)), ir.input_("kt", lead + (d, keys)), ir.input_("v", lead + (keys, dv))
    scale = float_bits(pick(rng, SCALES))
    mask_shape = broadcastable(rng, lead + (rows, keys))
    draw = rng.random()
    operands = [q, kt, v, ir.weight(FINITE, mask_shape)] if draw < 0.4 else \
        [q, kt, v, ir.input_("mask", mask_shape)] if draw < 0.55 else [q, kt, v]
    scores = ir.make("scale", [ir.make("matmul", [q, kt], (0,))], (scale,))
    parts = ir.make("matmul", [ir.make("softmax", [scores], (rank - 1,)), v], (0,))
    return [ir.make("attention", operands, (scale,)), parts]


PADDED = "padded"
"""the name the instances give a NaN-zeroing attention's mask weight: 0, and -inf on every third query row and
here and there (:func:`_padded_mask`); its finite entries far above float32's lowest: marked ``AboveLowest``"""


def _nz_instance(rng):
    """An ``attention_nz`` of rank 3 or 4, unmasked, or masked by a weight of 0 and -inf (:data:`PADDED`: whole query
    rows masked), broadcast over some dimensions; beside it the same ``attention``, and as near misses on which the
    rule must not fire, one masked by a model input (which may hold float32's lowest, where the kernel writes zeros
    and the decomposition averages v) or by a weight with rows of float32's lowest."""
    rank = pick(rng, RANKS)
    lead = tuple(dim(rng, 1, 3) for _ in range(rank - 2))
    rows, d, keys, dv = (dim(rng, 1, 5) for _ in range(4))
    q, kt, v = ir.input_("q", lead + (rows, d)), ir.input_("kt", lead + (d, keys)), ir.input_("v", lead + (keys, dv))
    mask_shape, draw = broadcastable(rng, lead + (rows, keys)), rng.random()
    operands = [q, kt, v, ir.weight(PADDED, mask_shape)] if draw < 0.45 else \
        [q, kt, v, ir.input_("mask", mask_shape)] if draw < 0.6 else \
        [q, kt, v, ir.weight(FINITE, mask_shape)] if draw < 0.75 else [q, kt, v]
    scale = (float_bits(pick(rng, SCALES)),)
    return [ir.make("attention_nz", operands, scale), ir.make("attention", operands, scale)]


def _padded_mask(leaf: ir.Node) -> np.ndarray | None:
    """A :data:`PADDED` weight's value (0, -inf on every third query row and on a fifth of the entries), else a
    :data:`FINITE` one's (:func:`_finite_mask`)."""
    if leaf.name != PADDED:
        return _finite_mask(leaf)
    rng = np.random.default_rng(len(leaf.shape) * 100 + sum(leaf.shape))
    value = np.where(rng.random(leaf.shape) < 0.2, -np.inf, 0.0)
    if len(leaf.shape) >= 2:
        value[..., ::3, :] = -np.inf
    return value.astype(np.float32)


CAUSAL = "causal"
"""the name the instances give a causal mask (:func:`_fixed_mask` holds its value fixed)"""
SOFT = "soft"
"""the name of a near miss: a triangle whose masked entries are -3, not past every score"""


def _causal_bodies() -> tuple[tuple[str, str], ...]:
    bodies = []
    for rank in RANKS:
        lead = dim_vars("b", rank - 2)
        query = (f"(= root (AttentionMasked c q kt v mk)) (Causal mk) (= {shape_of(lead + ['m', 'd'])} (shape q)) "
                 f"(= {shape_of(lead + ['d', 'm'])} (shape kt)) "
                 f"(= {shape_of(dim_vars('k', rank - 2) + ['m', 'm'])} (shape mk))")
        bodies.append((query, "(Pend root (SdpaCausal c q kt v))"))
    return tuple(bodies)


def _causal_instance(rng):
    """A masked ``attention`` of rank 3 or 4 with as many keys as queries: its mask a causal weight (broadcast
    over some leading dimensions), or, as near misses, a random weight, a triangle of -3 above the diagonal
    (:data:`SOFT`), and causal-named weights the rule must not read as causal: one row broadcast over the queries,
    a 1 x 1 zero, or a triangle over fewer queries than keys."""
    rank = pick(rng, RANKS)
    lead = tuple(dim(rng, 1, 3) for _ in range(rank - 2))
    n, d, dv = dim(rng, 2, 5), dim(rng, 1, 5), dim(rng, 1, 5)
    miss = rng.random()
    rows = n - 1 if miss < 0.08 else n
    q, kt, v = ir.input_("q", lead + (rows, d)), ir.input_("kt", lead + (d, n)), ir.input_("v", lead + (n, dv))
    mask_lead = tuple(x if rng.random() < 0.3 else 1 for x in lead)
    name = SOFT if 0.24 <= miss < 0.32 else "mask" if 0.32 <= miss < 0.38 else CAUSAL
    last = (1, n) if 0.08 <= miss < 0.16 else (1, 1) if 0.16 <= miss < 0.24 else (rows, n)
    return [ir.make("attention", [q, kt, v, ir.weight(name, mask_lead + last)], (float_bits(pick(rng, SCALES)),))]


def _fixed_mask(leaf: ir.Node) -> np.ndarray | None:
    """The value of an instance's mask: float32's lowest strictly above the diagonal for :data:`CAUSAL` (causal
    where square), -3 there for :data:`SOFT` (a wrong rewrite shows in the values); None (random) for any other
    weight."""
    if leaf.name not in (CAUSAL, SOFT):
        return None
    rows, keys = leaf.shape[-2:]
    above = np.triu(np.ones((rows, keys), dtype=bool), 1)
    floor = np.finfo(np.float32).min if leaf.name == CAUSAL else -3.0
    return np.broadcast_to(np.where(above, floor, 0.0).astype(np.float32), leaf.shape).copy()


def _rotary_instance(rng):
    """A ``rotary`` of rank 4 whose cos and sin are shared by the heads (dimension 1 of 1), or, as near misses,
    one of rank 3 or with cos and sin per head."""
    rank = 3 if rng.random() < 0.2 else 4
    x_shape = tuple(dim(rng, 1, 3) for _ in range(rank - 2)) + (dim(rng, 1, 5), 2 * dim(rng, 1, 4))
    table = tuple(1 if k == 1 and rank == 4 and rng.random() < 0.8 else d if rng.random() < 0.7 else 1
                  for k, d in enumerate(x_shape[:-1])) + (x_shape[-1],)
    x = ir.input_("x", x_shape)
    return [ir.make("rotary", [x, ir.input_("cos", table), ir.input_("sin", table)])]


def _part_instance(rng):
    """A ``rotary_part`` of rank 4 (r the whole last axis or part of it; pairs or halves) whose cos and sin are shared
    by the heads, at axis 1 or at axis 2, or, as near misses, one of rank 3 or with cos and sin per head."""
    rank = 3 if rng.random() < 0.2 else 4
    heads = 1 if rng.random() < 0.5 else 2
    x_shape = tuple(dim(rng, 1, 3) for _ in range(rank - 2)) + (dim(rng, 1, 5), 2 * dim(rng, 2, 4))
    r = x_shape[-1] if rng.random() < 0.5 else 2 * dim(rng, 1, x_shape[-1] // 2)
    table = tuple(1 if k == heads and rank == 4 and rng.random() < 0.8 else d if rng.random() < 0.7 else 1
                  for k, d in enumerate(x_shape[:-1])) + (r,)
    x = ir.input_("x", x_shape)
    return [ir.make("rotary_part", [x, ir.input_("cos", table), ir.input_("sin", table)], (r, int(rng.random() < 0.5)))]


GROUPED_PERM = "(S4 0 1 3 2)"
"""the keys' transposition an attention reads (kt = k with its last two axes swapped)"""


def _grouped_bodies() -> tuple[tuple[str, str], ...]:
    """The kernels over keys (transposed) and values whose heads are repeated alike: the same kernels over the
    unrepeated ones."""
    kt = f"(= kt (Transpose {GROUPED_PERM} (RepeatHeads r k))) (= v (RepeatHeads r vv))"
    new = f"(Transpose {GROUPED_PERM} k)"
    return ((f"(= root (Sdpa c q kt v)) {kt}", f"(Pend root (Sdpa c q {new} vv))"),
            (f"(= root (SdpaMasked c q kt v mk)) {kt}", f"(Pend root (SdpaMasked c q {new} vv mk))"),
            (f"(= root (SdpaCausal c q kt v)) {kt}", f"(Pend root (SdpaCausal c q {new} vv))"),
            (f"(= root (SdpaNz c q kt v)) {kt}", f"(Pend root (SdpaNz c q {new} vv))"),
            (f"(= root (SdpaNzMasked c q kt v mk)) {kt}", f"(Pend root (SdpaNzMasked c q {new} vv mk))"))


def _grouped_instance(rng):
    """An ``sdpa`` (masked half the time: a finite weight) or a causal one (as many keys as queries) over keys
    and values whose heads are repeated r times, r >= 2: the rule fires. Near misses, where it must not: the
    values repeated another number of times than the keys (shapes that still match), the keys transposed
    otherwise, or only one of the two repeated."""
    miss = rng.random()
    hk, r, b = 2 if 0.2 <= miss < 0.3 else dim(rng, 1, 3), dim(rng, 2, 3), dim(rng, 1, 2)
    rows, d, dv = dim(rng, 1, 4), dim(rng, 1, 5), dim(rng, 1, 5)
    causal = rng.random() < 0.3
    keys = rows if causal else dim(rng, 1, 5)
    q = ir.input_("q", (b, hk * r, rows, d))
    k, v = ir.input_("k", (b, hk, keys, d)), ir.input_("v", (b, hk, keys, dv))
    kt = ir.make("transpose", [ir.make("repeat_heads", [k], (r,))], (0, 1, 3, 2))
    if miss < 0.1 and d == keys:  # another transposition of the same shape: the rule must not read it
        kt = ir.make("transpose", [ir.make("repeat_heads", [k], (r,))], (0, 1, 2, 3))
    if 0.1 <= miss < 0.2:
        vr = ir.input_("v_full", (b, hk * r, keys, dv))  # the values not repeated
    elif 0.2 <= miss < 0.3:  # half the heads repeated twice as often: the same shape
        vr = ir.make("repeat_heads", [ir.input_("v_half", (b, hk // 2, keys, dv))], (2 * r,))
    else:
        vr = ir.make("repeat_heads", [v], (r,))
    scale = (float_bits(pick(rng, SCALES)),)
    if causal:
        return [ir.make("sdpa_causal", [q, kt, vr], scale)]
    mask_shape, draw = broadcastable(rng, (b, hk * r, rows, keys)), rng.random()
    if draw < 0.3:  # NaN rows zeroed: the mask a weight with rows of -inf, or none
        return [ir.make("sdpa_nz", [q, kt, vr, *([ir.weight(PADDED, mask_shape)] if draw < 0.2 else [])], scale)]
    mask = [ir.weight(FINITE, mask_shape)] if draw < 0.65 else []
    return [ir.make("sdpa", [q, kt, vr, *mask], scale)]


rules = [
    Rule("attention_grouped", "single", "ours",
         "sdpa(q, transpose(repeat_heads(k, r)), repeat_heads(v, r)[, mask]) -> sdpa(q, transpose(k), v[, mask]) "
         "(and sdpa_causal): grouped-query attention reads the unrepeated keys and values",
         _grouped_bodies(), example=_grouped_instance, fixed=_padded_mask),
    Rule("attention_kernel", "single", "ours", "attention(q, kt, v[, mask]) -> sdpa(q, kt, v[, mask])",
         (("(= root (Attention c q kt v))", "(Pend root (Sdpa c q kt v))"),
          ("(= root (AttentionMasked c q kt v mk)) (Finite mk)", "(Pend root (SdpaMasked c q kt v mk))")),
         example=_attention_instance, fixed=_finite_mask),
    Rule("attention_nz_kernel", "single", "ours", "attention_nz(q, kt, v[, mask]) -> sdpa_nz(q, kt, v[, mask])",
         (("(= root (AttentionNz c q kt v))", "(Pend root (SdpaNz c q kt v))"),
          ("(= root (AttentionNzMasked c q kt v mk)) (AboveLowest mk)", "(Pend root (SdpaNzMasked c q kt v mk))")),
         example=_nz_instance, fixed=_padded_mask),
    Rule("attention_causal", "single", "ours", "attention(q, kt, v, causal mask) -> sdpa_causal(q, kt, v)",
         _causal_bodies(), example=_causal_instance, fixed=_fixed_mask),
    Rule("rotary_kernel", "single", "ours", "rotary(x, cos, sin) -> rope(x, cos, sin), cos and sin [1 or B, 1, S, D]",
         (("(= root (Rotary x cos sin)) (= (S4 c0 1 s d) (shape cos))", "(Pend root (Rope x cos sin))"),),
         example=_rotary_instance),
    Rule("rotary_part_kernel", "single", "ours",
         "rotary_part(x, cos, sin) -> rope_part(x, cos, sin), cos and sin [1 or B, 1, S, r] or [1 or B, S, 1, r]",
         (("(= root (RotaryPart r il x cos sin)) (= (S4 c0 1 s d) (shape cos))", "(Pend root (RopePart r il x cos sin))"),
          ("(= root (RotaryPart r il x cos sin)) (= (S4 c0 s 1 d) (shape cos))", "(Pend root (RopePart r il x cos sin))")),
         example=_part_instance),
]
