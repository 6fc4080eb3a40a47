"""``linear`` and its parts, both ways, so that the TASO rules reach the matmul and the bias add of an imported
``linear`` and the merges of ``linear`` apply to a product and bias the search (or a Gemm) left apart.

* ``linear_split``: linear(x, W, b) <-> ewadd(matmul(x, W), b) in the IR's form: x of rank 3-4 flattened to
  2-D for the product and reshaped back (what the importer makes of an N-D MatMul by a weight), and the
  bias reshaped to the product's rank with leading 1s (equal-rank broadcasting); rank 1 through a [1, k] row.
  The parts -> linear direction takes a bias of exactly that broadcast form ([1, .., 1, n]) and either operand
  order of the sum.
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ops.egglog_text import MAX_RANK

from ..rule import Rule
from .sampling import dim


def _forms(rank: int, query: bool) -> tuple[str, str, str]:
    """(x's shape pattern, the product of x's IR form, the bias's broadcast shape) for an x of ``rank``; in a
    query the flattened rows are a variable (a valid reshape of x makes them the product of its leading
    dimensions), in an action that product."""
    lead = ["p", "q", "s"][:rank - 1]
    x_shape = f"(S{rank} {' '.join(lead + ['k'])})"
    if rank == 2:
        return x_shape, "(Matmul 0 x w)", "(S2 1 n)"
    rows = "1" if rank == 1 else lead[0]
    for d in lead[1:]:
        rows = f"(* {rows} {d})"
    rows = "m" if query else rows
    product = f"(Reshape (S{rank} {' '.join(lead + ['n'])}) (Matmul 0 (Reshape (S2 {rows} k) x) w))"
    return x_shape, product, f"(S{rank} {' '.join(['1'] * (rank - 1) + ['n'])})"


def _bodies() -> tuple[tuple[str, str], ...]:
    bodies = []
    for rank in range(1, MAX_RANK + 1):
        x_shape, product, bias_shape = _forms(rank, False)
        shapes = f"(= {x_shape} (shape x)) (= (S2 k n) (shape w))"
        bias = "b" if rank == 1 else f"(Reshape {bias_shape} b)"
        bodies.append((f"(= r (Linear x w b)) {shapes}", f"(Pend r (Ewadd {product} {bias}))"))
        back = "c" if rank == 1 else "(Reshape (S1 n) c)"
        product = _forms(rank, True)[1]
        for total in (f"(Ewadd {product} c)", f"(Ewadd c {product})"):
            bodies.append((f"(= r {total}) {shapes} (= {'(S1 n)' if rank == 1 else bias_shape} (shape c))",
                           f"(Pend r (Linear x w {back}))"))
    return tuple(bodies)


def _instance(rng):
    """A ``linear`` on an x of rank 1-4, beside the IR's parts form of another product on the same x: the
    importer's, or (as a near miss) with a bias that broadcasts over more than the last axis, a product
    reshaped to other leading dimensions, or a fused activation."""
    rank = int(rng.integers(1, MAX_RANK + 1))
    shape = tuple(dim(rng, 1, 4) for _ in range(rank))
    k, n, n2 = shape[-1], dim(rng), dim(rng)
    x = ir.input_("x", shape)
    lin = ir.make("linear", [x, ir.weight("w", (k, n)), ir.weight("b", (n,))])
    rows = 1
    for d in shape[:-1]:
        rows *= d
    flat = x if rank == 2 else ir.make("reshape", [x], (rows, k))
    miss = rng.random()
    product = ir.make("matmul", [flat, ir.weight("w2", (k, n2))], (2 if miss < 0.1 else 0,))
    lead = shape[:-1]
    if 0.1 <= miss < 0.2 and rank >= 3 and lead[0] != lead[1]:
        lead = (lead[1], lead[0], *lead[2:])
    if rank != 2:
        product = ir.make("reshape", [product], lead + (n2,))
    bias = (1,) * (rank - 1) + (n2,) if miss < 0.8 else lead + (n2,)
    parts = [product, ir.weight("b2", bias)]
    total = ir.make("ewadd", parts if rng.random() < 0.5 else parts[::-1])
    return [lin, total]


rules = [
    Rule("linear_split", "single", "ours", "linear(x, W, b) <-> ewadd(matmul(x, W), b)", _bodies(), example=_instance),
]
