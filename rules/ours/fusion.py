"""Activation and batch-norm fusion.

* ``fuse_relu_conv``: relu(conv2d(x, w, act=NONE)) -> conv2d(x, w, act=RELU), any stride and padding
  (TASO's m01/m02 cover stride 1, SAME only).
* ``fuse_act_matmul``: f(matmul(a, b)) -> matmul_f(a, b) for f in relu, sigmoid, tanh.
* ``fold_bn_conv``: batchnorm(conv2d(x, w), s, b, m, v) -> conv2d(x, w * k) + (b - m k), k = s / sqrt(v + eps),
  when the batch-norm parameters and w are weights (so k and the shift are precomputed at export).
* ``fuse_silu``: ewmul(x, sigmoid(x)) -> silu(x) (either operand order): the importer's SiLU recognition as a
  rule, so that a product that other rewrites form (or an exporter's variant the matcher misses) meets it too.
"""

from __future__ import annotations

from eqsat import ir

from ..rule import Rule
from .sampling import conv_attrs, conv_weight_shape, dim, pick, retry


def _conv(rng, act_choices=(0, 0, 0, 2, 1)) -> ir.Node:
    """A random conv: grouped or not, strided, padded; its activation is usually NONE."""
    attrs = conv_attrs(rng, act_choices)
    channels = dim(rng, 1, 6)
    w = conv_weight_shape(rng, channels, attrs)
    x = ir.input_("x", (dim(rng, 1, 2), channels, dim(rng, w[2], 9), dim(rng, w[3], 9)))
    return ir.make("conv2d", [x, ir.weight("w", w)], attrs)


def _conv_instance(rng):
    return [ir.make("relu", [_conv(rng)])]


def _matmul_instance(rng):
    batch = (dim(rng, 1, 3),) if rng.random() < 0.4 else ()
    m, k, n = dim(rng), dim(rng), dim(rng)
    a = ir.input_("a", (*batch, m, k))
    b = ir.weight("b", (*batch, k, n)) if rng.random() < 0.7 else ir.input_("b", (*batch, k, n))
    act = 0 if rng.random() < 0.8 else pick(rng, (1, 2, 3))
    return [ir.make(pick(rng, ("relu", "sigmoid", "tanh")), [ir.make("matmul", [a, b], (act,))])]


def _bn_instance(rng):
    conv = _conv(rng, (0, 0, 0, 0, 2))
    c = conv.shape[1]
    params = [ir.weight(n, (c,)) if rng.random() < 0.9 else ir.input_(n, (c,)) for n in ("s", "b", "m", "v")]
    eps = pick(rng, (0, 10_000_000, 1_000_000_000))
    return [ir.make("batchnorm", [conv, *params], (eps,))]


def _silu_instance(rng):
    """x * sigmoid(x) in either order over a tensor of rank 1-4, or, as a near miss, y * sigmoid(x)."""
    shape = tuple(dim(rng, 1, 5) for _ in range(dim(rng, 1, 4)))
    x = ir.input_("x", shape)
    other = x if rng.random() < 0.7 else ir.input_("y", shape)
    gate = ir.make("sigmoid", [x])
    return [ir.make("ewmul", [other, gate] if rng.random() < 0.5 else [gate, other])]


rules = [
    Rule("fuse_relu_conv", "single", "ours", "relu(conv2d(x, w, act=NONE)) -> conv2d(x, w, act=RELU)",
         (("(= root (Relu (Conv2d sh sw ph pw 0 x w))) (= root_shape (shape root))",
           "(Pend root (Conv2d sh sw ph pw 2 x w))"),), example=lambda rng: retry(rng, _conv_instance)),
    Rule("fuse_act_matmul", "single", "ours", "f(matmul(a, b)) -> matmul_f(a, b), f in relu, sigmoid, tanh",
         tuple((f"(= root ({op} (Matmul 0 a b))) (= root_shape (shape root))", f"(Pend root (Matmul {code} a b))")
               for op, code in (("Relu", 2), ("Sigmoid", 1), ("Tanh", 3))), example=lambda rng: retry(rng, _matmul_instance)),
    Rule("fold_bn_conv", "single", "ours", "batchnorm(conv2d(x, w), s, b, m, v) -> conv2d(x, w * k) + (b - m * k)",
         (("(= root (BatchNorm eps (Conv2d sh sw ph pw 0 x w) s b m v)) (= root_shape (shape root)) "
           "(AllW w) (AllW s) (AllW b) (AllW m) (AllW v) (= (S1 c) (shape s))",
           "(Pend root (Ewadd (Conv2d sh sw ph pw 0 x (Ewmul w (Reshape (S4 c 1 1 1) (BnScale eps s v)))) "
           "(Reshape (S4 1 c 1 1) (BnShift eps b m s v))))"),), example=lambda rng: retry(rng, _bn_instance)),
    Rule("fuse_silu", "single", "ours", "ewmul(x, sigmoid(x)) -> silu(x)",
         (("(= root (Ewmul x (Sigmoid x)))", "(Pend root (Silu x))"),
          ("(= root (Ewmul (Sigmoid x) x))", "(Pend root (Silu x))")), example=_silu_instance),
]
