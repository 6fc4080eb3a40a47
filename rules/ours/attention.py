"""``attention`` and its parts, both ways, so that the TASO rules reach the products and the element-wise parts of
an imported ``attention`` (its matmuls re-associate, its mask add meets the other adds), and the search can
recombine parts it moved back into one ``attention``.

* ``attention_split``: attention(q, kt, v[, mask]) <-> matmul(softmax(scale(matmul(q, kt), c) [+ mask],
  axis r - 1), v) for operands of rank r = 3 or 4: both matmuls without an activation, the softmax over the last
  axis (the IR's softmax takes a non-negative axis), the scale ``c`` an attribute (:data:`eqsat.ops.composite.SCALE`:
  a rule cannot create the scalar constant a Mul would need). The parts -> attention direction takes either
  operand order of the mask add, and only a mask the add does not broadcast the scores up by (the sum has the
  scores' shape: each mask dimension 1 or the scores'), which is the mask ``attention`` takes. Scores that are not
  scaled (T5's attention) recombine with the scale 1, and two masks added in turn (T5's position bias, then
  the padding mask: ``(scores + m1) + m2``, the second add in either operand order) recombine with their sum as
  the one mask.
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ops.attention import RANKS
from eqsat.ops.composite import float_bits
from eqsat.ops.egglog_text import dim_vars, shape_of

from ..rule import Rule
from .sampling import broadcastable, dim, pick

SCALES = (0.125, 0.35355338, 0.5, 1.0, 2.0)
"""scales the instances draw (1 / sqrt(d) for d = 64 and 8 among them)"""


def _parts(rank: int, scores: str) -> str:
    """The parts form over (masked) scaled scores ``scores``: softmax over the last axis, times v."""
    return f"(Matmul 0 (Softmax {rank - 1} {scores}) v)"


ONE = float_bits(1.0)
"""the scale of scores that are not scaled"""


def _bodies() -> tuple[tuple[str, str], ...]:
    bodies = []
    for rank in RANKS:
        q_rank = f"(= {shape_of(dim_vars('d', rank))} (shape q))"
        scaled = "(Scale c (Matmul 0 q kt))"
        bodies.append((f"(= root (Attention c q kt v)) {q_rank}", f"(Pend root {_parts(rank, scaled)})"))
        bodies.append((f"(= root (AttentionMasked c q kt v mk)) {q_rank}",
                       f"(Pend root {_parts(rank, f'(Ewadd {scaled} mk)')})"))
        bodies.append((f"(= root {_parts(rank, scaled)}) {q_rank}", "(Pend root (Attention c q kt v))"))
        bodies.append((f"(= root {_parts(rank, '(Matmul 0 q kt)')}) {q_rank}", f"(Pend root (Attention {ONE} q kt v))"))
        whole = "(= sh (shape sum)) (= sh (shape p))"
        for scores, c in (("(Scale c p)", "c"), ("p", str(ONE))):
            for total in (f"(Ewadd {scores} mk)", f"(Ewadd mk {scores})"):
                bodies.append((f"(= root {_parts(rank, 'sum')}) (= sum {total}) (= p (Matmul 0 q kt)) {q_rank} {whole}",
                               f"(Pend root (AttentionMasked {c} q kt v mk))"))
            for total in ("(Ewadd inner m2)", "(Ewadd m2 inner)"):
                bodies.append((f"(= root {_parts(rank, 'sum')}) (= sum {total}) (= inner (Ewadd {scores} m1)) "
                               f"(= p (Matmul 0 q kt)) {q_rank} {whole}",
                               f"(Pend root (AttentionMasked {c} q kt v (Ewadd m1 m2)))"))
    return tuple(bodies)


def _instance(rng):
    """An ``attention`` of rank 3 or 4 (masked half the time), beside the parts form of another attention on the
    same q: as the rule writes it (the mask add in either order), or as a near miss: an activation fused into
    either product, the softmax over another axis, or a mask that the add broadcasts the scores up by (over the
    queries: q of one row, a mask of several)."""
    rank = pick(rng, RANKS)
    lead = tuple(dim(rng, 1, 3) for _ in range(rank - 2))
    miss = rng.random()
    rows = 1 if 0.3 <= miss < 0.4 else dim(rng, 1, 5)
    d, keys, dv = dim(rng, 1, 5), dim(rng, 1, 5), dim(rng, 1, 5)
    q = ir.input_("q", lead + (rows, d))

    def attention_operands(tag: str, keys: int) -> tuple[ir.Node, ir.Node, ir.Node]:
        mask = ir.input_(f"mask{tag}", broadcastable(rng, lead + (rows, keys)))
        return ir.input_(f"kt{tag}", lead + (d, keys)), ir.input_(f"v{tag}", lead + (keys, dv)), mask

    kt, v, mask = attention_operands("", keys)
    scale = float_bits(pick(rng, SCALES))
    whole = ir.make("attention", [q, kt, v, mask] if rng.random() < 0.5 else [q, kt, v], (scale,))
    kt2, v2, mask2 = attention_operands("2", dim(rng, 1, 5))
    scores = ir.make("matmul", [q, kt2], (2 if miss < 0.1 else 0,))
    if rng.random() < 0.7:  # else not scaled (T5)
        scores = ir.make("scale", [scores], (float_bits(pick(rng, SCALES)),))
    if 0.3 <= miss < 0.4:
        mask2 = ir.input_("mask2", mask2.shape[:-2] + (dim(rng, 2, 4), mask2.shape[-1]))
    if 0.3 <= miss < 0.4 or rng.random() < 0.5:
        if rng.random() < 0.3:  # two masks added in turn (T5's position bias, then the padding mask)
            scores = ir.make("ewadd", [scores, ir.input_("bias2", broadcastable(rng, mask2.shape))])
        scores = ir.make("ewadd", [scores, mask2] if rng.random() < 0.5 else [mask2, scores])
    axis = pick(rng, range(rank - 1)) if 0.2 <= miss < 0.3 else rank - 1
    parts = ir.make("matmul", [ir.make("softmax", [scores], (axis,)), v2], (2 if 0.1 <= miss < 0.2 else 0,))
    return [whole, parts]


rules = [
    Rule("attention_split", "single", "ours",
         "attention(q, kt, v[, mask]) <-> matmul(softmax(scale(matmul(q, kt), c) [+ mask [+ mask2]], axis=-1), v)",
         _bodies(), example=_instance),
]
