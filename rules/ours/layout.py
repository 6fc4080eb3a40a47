"""Layout cancellations.

* ``transpose_cancel``: transpose(transpose(x, p), q) -> x when q o p is the identity (ranks 2-4).
* ``reshape_cancel``: reshape(reshape(x, s1), s2) -> reshape(x, s2), and reshape(x, shape(x)) -> x.
"""

from __future__ import annotations

from itertools import permutations

from eqsat import ir

from ..rule import Rule


def _inverse(p):
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return tuple(inv)


def _perm(p) -> str:
    return f"(S{len(p)} {' '.join(map(str, p))})"


def _transpose_bodies():
    bodies = []
    for r in (2, 3, 4):
        for p in permutations(range(r)):
            if p == tuple(range(r)):
                continue
            q = _inverse(p)
            bodies.append((f"(= root (Transpose {_perm(q)} (Transpose {_perm(p)} x))) (= root_shape (shape root))",
                           "(Pend root x)"))
    return tuple(bodies)


def _transpose_example(rng):
    x = ir.input_("x", (2, 3, 4))
    t = ir.make("transpose", [x], (1, 2, 0))
    return [ir.make("ewadd", [ir.make("transpose", [t], (2, 0, 1)), x])]


def _reshape_example(rng):
    x = ir.input_("x", (2, 3, 4))
    r = ir.make("reshape", [ir.make("reshape", [x], (6, 4))], (4, 6))
    back = ir.make("reshape", [ir.make("reshape", [x], (24,))], (2, 3, 4))
    return [r, ir.make("ewadd", [back, x])]


rules = [
    Rule("transpose_cancel", "single", "ours", "transpose(transpose(x, p), inverse(p)) -> x", _transpose_bodies(), 0,
         example=_transpose_example),
    Rule("reshape_cancel", "single", "ours", "reshape(reshape(x, s1), s2) -> reshape(x, s2); reshape(x, shape(x)) -> x",
         (("(= root (Reshape s2 (Reshape s1 x))) (= root_shape (shape root))", "(Pend root (Reshape s2 x))"),
          ("(= root (Reshape s x)) (= s (shape x))", "(Pend root x)")), 1, example=_reshape_example),
]
