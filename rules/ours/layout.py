"""Layout cancellations.

* ``transpose_cancel``: transpose(transpose(x, p), q) -> x when q o p is the identity (ranks 2-4).
* ``reshape_cancel``: reshape(reshape(x, s1), s2) -> reshape(x, s2), and reshape(x, shape(x)) -> x.
* ``transpose_unit``: transpose(x, p) -> reshape(x, shape) when p moves only axes of size 1 (the others keep their
  order): the same elements in the same order (a decode step's heads, ``[batch, 1, heads, d]`` to ``[batch, heads,
  1, d]``: then a reshape of the reshape before it, one node where there were two). In an e-graph with symbolic
  dimensions it commits only where the moved axes are 1 at every size (the reshape's ``sym`` is computed only for
  constant axes beside the kept leading ones, :mod:`eqsat.egglog.reshape_sym`): a batch that happens to be 1 at
  the representative size is not moved.
"""

from __future__ import annotations

from itertools import combinations, permutations

from eqsat import ir
from eqsat.ops.egglog_text import MAX_RANK, shape_of
from eqsat.shapes import volume

from ..rule import Rule
from .sampling import dim, factorize, retry


def _inverse(p):
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return tuple(inv)


def _perm(p) -> str:
    return f"(S{len(p)} {' '.join(map(str, p))})"


def _transpose_bodies():
    bodies = []
    for r in range(2, MAX_RANK + 1):
        for p in permutations(range(r)):
            if p == tuple(range(r)):
                continue
            q = _inverse(p)
            bodies.append((f"(= root (Transpose {_perm(q)} (Transpose {_perm(p)} x))) (= root_shape (shape root))",
                           "(Pend root x)"))
    return tuple(bodies)


def unit_axes(p: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The least sets of axes (of the operand) that, all of size 1, make ``transpose(x, p)`` a reshape: the other
    axes appear in ``p`` in increasing order (one set per longest such order; none for the identity)."""
    r = len(p)
    fits = [u for k in range(1, r) for u in combinations(range(r), k)
            if [a for a in p if a not in u] == sorted(a for a in p if a not in u)]
    return [u for u in fits if not any(set(v) < set(u) for v in fits)] if p != tuple(range(r)) else []


def _unit_bodies():
    bodies = []
    for r in range(2, MAX_RANK + 1):
        for p in permutations(range(r)):
            for u in unit_axes(p):
                dims = ["1" if i in u else f"a{i}" for i in range(r)]
                bodies.append((f"(= root (Transpose {_perm(p)} x)) (= {shape_of(dims)} (shape x)) "
                               "(= root_shape (shape root))", "(Pend root (Reshape root_shape x))"))
    return tuple(bodies)


def _unit_instance(rng):
    """transpose(x, p), ranks 2-4, x with some axes of size 1 and p moving them (or, a near miss, another axis)."""
    rank = dim(rng, 2, 4)
    shape = [1 if rng.random() < 0.5 else dim(rng, 2, 5) for _ in range(rank)]
    p = tuple(int(v) for v in rng.permutation(rank))
    return [ir.make("transpose", [ir.input_("x", tuple(shape))], p)]


def _transpose_instance(rng):
    """transpose(transpose(x, p), q), ranks 2-5, q the inverse of p or (a near miss) another permutation."""
    rank = dim(rng, 2, 5)
    x = ir.input_("x", tuple(dim(rng, 1, 6) for _ in range(rank)))
    p = tuple(int(v) for v in rng.permutation(rank))
    q = _inverse(p) if rng.random() < 0.7 else tuple(int(v) for v in rng.permutation(rank))
    return [ir.make("transpose", [ir.make("transpose", [x], p)], q)]


def _reshape_instance(rng):
    """reshape(reshape(x, s1), s2) with ranks 1-5, s2 sometimes x's own shape; and reshape(x, shape(x))."""
    x = ir.input_("x", tuple(dim(rng, 1, 6) for _ in range(dim(rng, 1, 4))))
    total = volume(x.shape)
    s1 = factorize(rng, total, dim(rng, 1, 5))
    s2 = x.shape if rng.random() < 0.3 else factorize(rng, total, dim(rng, 1, 5))
    roots = [ir.make("reshape", [ir.make("reshape", [x], s1)], s2)]
    if rng.random() < 0.3:
        roots.append(ir.make("ewadd", [ir.make("reshape", [x], x.shape), x]))
    return roots


rules = [
    Rule("transpose_cancel", "single", "ours", "transpose(transpose(x, p), inverse(p)) -> x", _transpose_bodies(),
         example=lambda rng: retry(rng, _transpose_instance)),
    Rule("reshape_cancel", "single", "ours", "reshape(reshape(x, s1), s2) -> reshape(x, s2); reshape(x, shape(x)) -> x",
         (("(= root (Reshape s2 (Reshape s1 x))) (= root_shape (shape root))", "(Pend root (Reshape s2 x))"),
          ("(= root (Reshape s x)) (= s (shape x))", "(Pend root x)")), example=lambda rng: retry(rng, _reshape_instance)),
    Rule("transpose_unit", "single", "ours", "transpose(x, p) -> reshape(x, shape), p moving only axes of size 1",
         _unit_bodies(), example=_unit_instance),
]
