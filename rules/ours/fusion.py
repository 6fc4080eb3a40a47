"""Activation and batch-norm fusion.

* ``fuse_relu_conv``: relu(conv2d(x, w, act=NONE)) -> conv2d(x, w, act=RELU), any stride and padding
  (TASO's m01/m02 cover stride 1, SAME only).
* ``fuse_act_matmul``: f(matmul(a, b)) -> matmul_f(a, b) for f in relu, sigmoid, tanh.
* ``fold_bn_conv``: batchnorm(conv2d(x, w), s, b, m, v) -> conv2d(x, w * k) + (b - m k), k = s / sqrt(v + eps),
  when the batch-norm parameters and w are weights (so k and the shift are precomputed at export).
"""

from __future__ import annotations

from eqsat import ir

from ..rule import Rule


def _conv_example(rng):
    x = ir.input_("x", (1, 4, 6, 6))
    w = ir.weight("w", (6, 4, 3, 3))
    return [ir.make("relu", [ir.make("conv2d", [x, w], (2, 2, 1, 1, 0))]),
            ir.make("relu", [ir.make("conv2d", [x, w], (1, 1, -1, -1, 0))])]


def _matmul_example(rng):
    a, b = ir.input_("a", (3, 4)), ir.weight("b", (4, 5))
    m = ir.make("matmul", [a, b], (0,))
    return [ir.make(op, [m]) for op in ("relu", "sigmoid", "tanh")]


def _bn_example(rng):
    x = ir.input_("x", (2, 3, 5, 5))
    w = ir.weight("w", (4, 3, 3, 3))
    params = [ir.weight(n, (4,)) for n in ("s", "b", "m", "v")]
    conv = ir.make("conv2d", [x, w], (1, 1, -1, -1, 0))
    return [ir.make("batchnorm", [conv, *params], (10_000_000,))]


rules = [
    Rule("fuse_relu_conv", "single", "ours", "relu(conv2d(x, w, act=NONE)) -> conv2d(x, w, act=RELU)",
         (("(= root (Relu (Conv2d sh sw ph pw 0 x w))) (= root_shape (shape root))",
           "(Pend root (Conv2d sh sw ph pw 2 x w))"),), 1, example=_conv_example),
    Rule("fuse_act_matmul", "single", "ours", "f(matmul(a, b)) -> matmul_f(a, b), f in relu, sigmoid, tanh",
         tuple((f"(= root ({op} (Matmul 0 a b))) (= root_shape (shape root))", f"(Pend root (Matmul {code} a b))")
               for op, code in (("Relu", 2), ("Sigmoid", 1), ("Tanh", 3))), 1, example=_matmul_example),
    Rule("fold_bn_conv", "single", "ours", "batchnorm(conv2d(x, w), s, b, m, v) -> conv2d(x, w * k) + (b - m * k)",
         (("(= root (BatchNorm eps (Conv2d sh sw ph pw 0 x w) s b m v)) (= root_shape (shape root)) "
           "(AllW w) (AllW s) (AllW b) (AllW m) (AllW v) (= (S1 c) (shape s))",
           "(Pend root (Ewadd (Conv2d sh sw ph pw 0 x (Ewmul w (Reshape (S4 c 1 1 1) (BnScale eps s v)))) "
           "(Reshape (S4 1 c 1 1) (BnShift eps b m s v))))"),), 7, example=_bn_example),
]
