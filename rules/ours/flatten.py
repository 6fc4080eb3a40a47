"""The flattened spelling of a program on N-D activations, and the N-D spelling of a product: reshapes moved past
the operators that act per element or along the last axis, so that reshape chains meet and cancel (``reshape_cancel``).

The importer writes a dense layer on a ``[B, S, H]`` activation as ``reshape(matmul(reshape(x, [B S, H]), W),
[B, S, N])`` plus a ``[1, 1, N]`` bias; onnxruntime runs that (MatMul + Add on 3-D) as Reshape + Gemm + Reshape,
so a transformer block pays two Reshapes per dense layer. With the reshape back to 3-D moved below the bias add,
the residual add, the LayerNormalization and the next layer's flattening reshape, the chain
``reshape(reshape(...))`` cancels and the block can run on ``[B S, H]`` throughout (one Gemm per dense layer, a
Reshape only where attention needs heads). Both spellings stay in the e-graph; the cost of each (Reshape timed
like every operator under the ort-cpu cost) decides.

* ``reshape_sink``: op(reshape(x, s), ...) -> reshape(op(x, ...), s) where the reshape raises the rank (x of rank
  2, s of rank 3; unary operators: any reshape):

  - a unary element-wise operator (relu, tanh, sigmoid, silu, gelu, scale): any reshape;
  - ``ewadd``, ``ewmul``, ``ewsum`` with the other operand of shape s: it is reshaped to x's shape (either
    operand order);
  - ``ewadd``, ``ewmul`` with a bias of shape ``[1, .., 1, n]`` (the last dimension of s and of x): the bias
    reshaped to x's rank (either operand order);
  - ``layernorm``, ``rmsnorm`` over the last axis, and ``addnorm`` (the other operand reshaped to
    x's shape), where the reshape keeps the last dimension.

  Slices are not sunk: the parts of a merged projection then read one value, which the exporter writes as one
  Split (slices of a flattened and an unflattened spelling of it would be written as separate Slices).
* ``matmul_flatten``: reshape(matmul(reshape(x, [m, k]), W), [..., n]) <-> matmul(x, W) for an x of rank 3-4 and
  a 2-D W (the leading dimensions kept): the importer's spelling of an N-D MatMul by a weight and ONNX's own,
  which onnxruntime runs as one MatMul (with a bias: Reshape + Gemm + Reshape), beside each other, so that each
  is priced as written.
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ops.composite import float_bits

from ..rule import Rule
from .sampling import dim, factorize, pick, retry

_PAIRS = ((2, 3),)
"""(rank of x, rank of the reshape's target): the rank-raising reshapes sunk (only [B S, H] -> [B, S, H]: each
pair adds 15 egglog rules to every application, and the other pairs gave nothing on the zoo)"""

_UNARY = ("(Relu {})", "(Tanh {})", "(Sigmoid {})", "(Silu {})", "(Gelu k {})", "(Scale k {})")
"""the unary element-wise constructors, ``{}`` the operand"""


def _dims(prefix: str, rank: int, last: str | None = None) -> str:
    """A shape pattern of ``rank`` dimensions named ``prefix0``, ..., the last one ``last`` when given."""
    names = [f"{prefix}{i}" for i in range(rank)]
    if last is not None:
        names[-1] = last
    return f"(S{rank} {' '.join(names)})"


def _ones(rank: int) -> str:
    return f"(S{rank} {' '.join(['1'] * (rank - 1) + ['n'])})"


def _pair_bodies(rx: int, rs: int) -> list[tuple[str, str]]:
    """The bodies for a reshape of an x of rank ``rx`` to a target of rank ``rs``."""
    bodies = []
    # any target shape of a higher rank (same-shape operands)
    free = f"(= a (Reshape s x)) (= sx (shape x)) (= s {_dims('t', rs)}) (= sx {_dims('u', rx)})"
    for op in ("Ewadd", "Ewmul", "Ewsum"):
        bodies.append((f"(= r ({op} a b)) (= s (shape b)) {free}", f"(Pend r (Reshape s ({op} x (Reshape sx b))))"))
        bodies.append((f"(= r ({op} b a)) (= s (shape b)) {free}", f"(Pend r (Reshape s ({op} (Reshape sx b) x)))"))
    # targets that keep the last dimension n
    kept = f"(= a (Reshape s x)) (= sx (shape x)) (= s {_dims('t', rs, 'n')}) (= sx {_dims('u', rx, 'n')})"
    for op in ("Ewadd", "Ewmul"):
        bias = f"(= {_ones(rs)} (shape c))"
        flat = f"(Reshape {_ones(rx)} c)"
        bodies.append((f"(= r ({op} a c)) {bias} {kept}", f"(Pend r (Reshape s ({op} x {flat})))"))
        bodies.append((f"(= r ({op} c a)) {bias} {kept}", f"(Pend r (Reshape s ({op} {flat} x)))"))
    bodies.append((f"(= r (LayerNorm eps a g bb)) {kept}", "(Pend r (Reshape s (LayerNorm eps x g bb)))"))
    bodies.append((f"(= r (RmsNorm eps a g)) {kept}", "(Pend r (Reshape s (RmsNorm eps x g)))"))
    bodies.append((f"(= r (AddNorm eps a b g bb)) (= s (shape b)) {kept}",
                   "(Pend r (Reshape s (AddNorm eps x (Reshape sx b) g bb)))"))
    bodies.append((f"(= r (AddNorm eps b a g bb)) (= s (shape b)) {kept}",
                   "(Pend r (Reshape s (AddNorm eps (Reshape sx b) x g bb)))"))
    return bodies


def _bodies() -> tuple[tuple[str, str], ...]:
    bodies = [(f"(= r {u.format('a')}) (= a (Reshape s x))", f"(Pend r (Reshape s {u.format('x')}))") for u in _UNARY]
    for rx, rs in _PAIRS:
        bodies.extend(_pair_bodies(rx, rs))
    return tuple(bodies)


def _raised(rng, x: ir.Node) -> tuple[int, ...]:
    """A target of a higher rank (one more, sometimes two: a near miss for all but the unary operators) for a
    reshape of ``x``: keeping its last dimension, or (a near miss for the last-axis operators) any factorization
    of its size."""
    rank = min(len(x.shape) + (1 if rng.random() < 0.8 else 2), 4)
    lead = 1
    for d in x.shape[:-1]:
        lead *= d
    if rng.random() < 0.7:
        return (*factorize(rng, lead, rank - 1), x.shape[-1])
    return factorize(rng, lead * x.shape[-1], rank)


def _instance(rng):
    """One operator on reshape(x, s) with x of rank 2 (or 3) and s of a higher rank: unary, binary with an operand
    of s's shape (fed or a weight, either order), a bias of shape [1, .., 1, k] (k the last dimension, or as a
    near miss broadcast along another axis), a normalization or addnorm (the other operand of s's shape, or as a
    near miss broadcast along the first axis)."""
    x = ir.input_("x", tuple(dim(rng, 1, 5) for _ in range(2 if rng.random() < 0.8 else 3)))
    s = _raised(rng, x)
    a = ir.make("reshape", [x], s)
    kind = pick(rng, ("unary", "binary", "bias", "norm", "addnorm"))
    if kind == "unary":
        op = pick(rng, ("relu", "tanh", "sigmoid", "silu", "gelu", "scale"))
        attrs = {"gelu": (int(rng.integers(0, 2)),), "scale": (float_bits(0.125),)}.get(op, ())
        return [ir.make(op, [a], attrs)]
    if kind == "binary":
        b = ir.input_("b", s) if rng.random() < 0.6 else ir.weight("b", s)
        ops = [a, b] if rng.random() < 0.5 else [b, a]
        return [ir.make(pick(rng, ("ewadd", "ewmul", "ewsum")), ops)]
    if kind == "bias":
        shape = [1] * len(s)
        axis = len(s) - 1 if rng.random() < 0.8 else int(rng.integers(0, len(s)))
        shape[axis] = s[axis]
        c = ir.weight("c", tuple(shape))
        ops = [a, c] if rng.random() < 0.5 else [c, a]
        return [ir.make(pick(rng, ("ewadd", "ewmul")), ops)]
    params = [ir.weight("g", (s[-1],)), ir.weight("beta", (s[-1],))]
    eps = (float_bits(1e-5),)
    if kind == "norm":
        if rng.random() < 0.5:
            return [ir.make("layernorm", [a, *params], eps)]
        return [ir.make("rmsnorm", [a, params[0]], eps)]
    b = ir.input_("b", s if rng.random() < 0.7 else (1, *s[1:]))  # a near miss: b broadcast along the first axis
    ops = [a, b] if rng.random() < 0.5 else [b, a]
    return [ir.make("addnorm", [*ops, *params], eps)]


def _matmul_bodies() -> tuple[tuple[str, str], ...]:
    bodies = []
    for rank in (3, 4):
        lead = ["p", "q", "s"][:rank - 1]
        rows = lead[0]
        for d in lead[1:]:
            rows = f"(* {rows} {d})"
        x_shape, out = f"(S{rank} {' '.join(lead)} k)", f"(S{rank} {' '.join(lead)} n)"
        shapes = f"(= {x_shape} (shape x)) (= (S2 k n) (shape w))"
        bodies.append((f"(= r (Reshape {out} mm)) (= mm (Matmul act f w)) (= f (Reshape (S2 m k) x)) {shapes}",
                       "(Pend r (Matmul act x w))"))
        bodies.append((f"(= r (Matmul act x w)) {shapes}",
                       f"(Pend r (Reshape {out} (Matmul act (Reshape (S2 {rows} k) x) w)))"))
    return tuple(bodies)


def _matmul_instance(rng):
    """An N-D matmul by a weight (x of rank 3-4) beside the importer's spelling of another: reshape, 2-D matmul,
    reshape back to x's leading dimensions, or (a near miss) to other ones of the same size; an activation
    sometimes fused."""
    rank = dim(rng, 3, 4)
    x = ir.input_("x", tuple(dim(rng, 1, 4) for _ in range(rank)))
    k, lead = x.shape[-1], x.shape[:-1]
    act = (int(rng.integers(0, 4)),) if rng.random() < 0.3 else (0,)
    nd = ir.make("matmul", [x, ir.weight("w", (k, dim(rng)))], act)
    rows = 1
    for d in lead:
        rows *= d
    n = dim(rng)
    flat = ir.make("matmul", [ir.make("reshape", [x], (rows, k)), ir.weight("w2", (k, n))], act)
    back = lead if rng.random() < 0.7 else factorize(rng, rows, rank - 1)
    return [nd, ir.make("reshape", [flat], (*back, n))]


rules = [
    Rule("reshape_sink", "single", "ours",
         "op(reshape(x, s), ..) -> reshape(op(x, ..), s): element-wise, bias, last-axis norms",
         _bodies(), example=lambda rng: retry(rng, _instance)),
    Rule("matmul_flatten", "single", "ours", "reshape(matmul(reshape(x, [m, k]), W), [.., n]) <-> matmul(x, W), x N-D",
         _matmul_bodies(), example=lambda rng: retry(rng, _matmul_instance)),
]
