"""A constant scale over the output features of a product, folded into its weights (the layer scale of ConvNeXt,
CaiT and their kin: ``gamma * Linear(x)``), so that the element-wise product disappears into a weight computed
once at export.

* ``fold_scale_matmul``: ewmul(matmul(x, W), g) -> matmul(x, W * g) and ewmul(linear(x, W, b), g) ->
  linear(x, W * g, b * g), either operand order of the product, where ``W``, ``b`` and ``g`` are weights and
  ``g`` scales the output features alone (shape [1, .., 1, n] at the product's rank). The product is in the IR's
  form (:mod:`rules.ours.linear`: x of rank 1, 3 or 4 flattened to 2-D and reshaped back).
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ops.egglog_text import MAX_RANK

from ..rule import Rule
from .sampling import dim


def _product(rank: int, weight: str, query: bool) -> str:
    """The IR's form of ``x @ weight`` for an x of ``rank`` (its leading dimensions p, q, s and k; in a query the
    flattened rows are the variable m)."""
    lead = ["p", "q", "s"][:rank - 1]
    if rank == 2:
        return f"(Matmul 0 x {weight})"
    rows = "1" if rank == 1 else lead[0]
    for d in lead[1:]:
        rows = f"(* {rows} {d})"
    rows = "m" if query else rows
    return f"(Reshape (S{rank} {' '.join(lead + ['n'])}) (Matmul 0 (Reshape (S2 {rows} k) x) {weight}))"


def _bodies() -> tuple[tuple[str, str], ...]:
    bodies = []
    scaled_w = "(Ewmul w (Reshape (S2 1 n) g))"
    for rank in range(1, MAX_RANK + 1):
        lead = ["p", "q", "s"][:rank - 1]
        conds = (f"(= (S{rank} {' '.join(lead + ['k'])}) (shape x)) (= (S2 k n) (shape w)) "
                 f"(= (S{rank} {' '.join(['1'] * (rank - 1) + ['n'])}) (shape g)) (AllW w) (AllW g)")
        product = _product(rank, "w", True)
        for total in (f"(Ewmul {product} g)", f"(Ewmul g {product})"):
            bodies.append((f"(= r {total}) {conds}", f"(Pend r {_product(rank, scaled_w, False)})"))
        for total in ("(Ewmul (Linear x w b) g)", "(Ewmul g (Linear x w b))"):
            bodies.append((f"(= r {total}) {conds} (AllW b)",
                           f"(Pend r (Linear x {scaled_w} (Ewmul b (Reshape (S1 n) g))))"))
    return tuple(bodies)


def _instance(rng):
    """A product of x (rank 1-4) by a weight, in the IR's form or as a ``linear``, times a scale: a weight over
    the output features (either operand order), or, as near misses, a scale over more than the last axis or one
    that is an input."""
    rank = int(rng.integers(1, MAX_RANK + 1))
    shape = tuple(dim(rng, 1, 4) for _ in range(rank))
    k, n = shape[-1], dim(rng)
    x = ir.input_("x", shape)
    w = ir.weight("w", (k, n))
    if rng.random() < 0.4:
        product = ir.make("linear", [x, w, ir.weight("b", (n,))])
    else:
        rows = 1
        for d in shape[:-1]:
            rows *= d
        flat = x if rank == 2 else ir.make("reshape", [x], (rows, k))
        product = ir.make("matmul", [flat, w], (0,))
        if rank != 2:
            product = ir.make("reshape", [product], shape[:-1] + (n,))
    miss = rng.random()
    g_shape = (1,) * (rank - 1) + (n,) if miss < 0.8 or rank == 1 else shape[:-1] + (n,)
    g = ir.input_("g", g_shape) if 0.9 <= miss else ir.weight("g", g_shape)
    return [ir.make("ewmul", [product, g] if rng.random() < 0.5 else [g, product])]


rules = [
    Rule("fold_scale_matmul", "single", "ours", "ewmul(matmul(x, W) [+ b], g) -> matmul(x, W * g) [+ b * g], g [1, .., n]",
         _bodies(), example=_instance),
]
