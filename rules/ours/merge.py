"""Merging operators that share an input into one wider operator.

* ``merge_matmul_bias``: x W1 + b1, x W2 + b2 -> the column halves of x [W1 W2] + [b1 b2]: the Q/K/V
  projections of an ONNX attention block (biases, 3-D activations reshaped to 2-D by the importer).
* ``merge_linear_qkv``: three ``linear`` on one x (Q/K/V) -> the column thirds of one ``linear`` with the
  weights and biases concatenated.
* ``merge_conv_shared_input``: conv(x, w1), conv(x, w2) -> the channel halves of conv(x, concat(w1, w2)),
  any stride, padding and activation (Inception-style branches), ordinary (ungrouped) convs only.
"""

from __future__ import annotations

from eqsat import ir

from ..rule import Rule
from .sampling import conv_attrs, conv_weight_shape, dim, factorize, retry


def _matmul_bias_instance(rng):
    """x W1 + b1, x W2 + b2 in the 2-D form, or with each product reshaped to 3-D: by (p, q, n) with
    p q = m (keeps the last dimension) or by any 3-D factorization (moves the column boundary). Biases
    broadcast; in the 2-D form a one-column product sometimes broadcasts up to a wider bias."""
    m, k = dim(rng), dim(rng)
    x = ir.input_("x", (m, k))
    n1 = dim(rng)
    ns = (n1, n1 if rng.random() < 0.5 else dim(rng))
    three_d = rng.random() < 0.6
    p, q = factorize(rng, m, 2)
    keep = rng.random() < 0.5
    mask = [rng.random() < 0.4 for _ in range(3)]
    outs, targets = [], []
    narrow = not three_d and rng.random() < 0.4  # the first product has one column, its bias n1
    for i, n in enumerate(ns):
        cols = 1 if narrow and i == 0 else n
        y = ir.make("matmul", [x, ir.weight(f"w{i}", (k, cols))], (0,))
        if three_d:
            target = (p, q, n) if keep else targets[0] if i and n == ns[0] else factorize(rng, m * n, 3)
            targets.append(target)
            y = ir.make("reshape", [y], target)
        else:
            target = (m, n)
        if rng.random() < 0.3:
            mask = [rng.random() < 0.4 for _ in range(3)]
        bias = tuple(1 if drop else d for d, drop in zip(target, mask[-len(target):]))
        if narrow:
            bias = (*bias[:-1], n if i == 0 else 1)
        outs.append(ir.make("ewadd", [y, ir.weight(f"b{i}", bias)]))
    return outs


def _linear_triple_instance(rng):
    """Three ``linear`` layers on one x of rank 1-4 (widths equal or not); as a near miss, sometimes the
    third on another input of the same shape."""
    shape = tuple(dim(rng, 1, 4) for _ in range(int(rng.integers(1, 5))))
    x = ir.input_("x", shape)
    other = ir.input_("x2", shape) if rng.random() < 0.2 else x
    outs = []
    for i in range(3):
        n = dim(rng)
        w, b = ir.weight(f"w{i}", (shape[-1], n)), ir.weight(f"b{i}", (n,))
        outs.append(ir.make("linear", [other if i == 2 else x, w, b]))
    return outs


def _qkv_body(rank: int) -> tuple[str, str]:
    """The rule on an x of ``rank``: the slices cut its last axis."""
    d = [f"d{i}" for i in range(rank)]
    merged = "(Linear x (Concat 1 (Concat 1 w1 w2) w3) (Concat 0 (Concat 0 b1 b2) b3))"
    ax = rank - 1
    query = ("(= r1 (Linear x w1 b1)) (= r2 (Linear x w2 b2)) (= r3 (Linear x w3 b3)) "
             "(!= r1 r2) (!= r2 r3) (!= r1 r3) (= r1 (ordering-max r1 r2)) (= r2 (ordering-max r2 r3)) "
             f"(= (S{rank} {' '.join(d)}) (shape x)) (= (S2 {d[-1]} n1) (shape w1)) (= (S2 {d[-1]} n2) (shape w2)) "
             f"(= (S2 {d[-1]} n3) (shape w3))")
    actions = (f"(Pend r1 (Slice {ax} 0 n1 {merged})) (Pend r2 (Slice {ax} n1 (+ n1 n2) {merged})) "
               f"(Pend r3 (Slice {ax} (+ n1 n2) (+ (+ n1 n2) n3) {merged}))")
    return query, actions


def _conv_pair_instance(rng):
    """conv(x, w1), conv(x, w2): equal or different strides, padding and activations; grouped or not
    (sometimes with equal groups), equal or different kernels."""
    attrs = conv_attrs(rng)
    attrs2 = attrs if rng.random() < 0.7 else conv_attrs(rng)
    c = dim(rng, 1, 6)
    w1 = conv_weight_shape(rng, c, attrs)
    w2 = conv_weight_shape(rng, c, attrs2, groups=c // w1[1] if rng.random() < 0.5 else None,
                           kernel=w1[2:] if rng.random() < 0.7 else None)
    x = ir.input_("x", (dim(rng, 1, 2), c, dim(rng, max(w1[2], w2[2]), 9), dim(rng, max(w1[3], w2[3]), 9)))
    return [ir.make("conv2d", [x, ir.weight("w1", w1)], attrs), ir.make("conv2d", [x, ir.weight("w2", w2)], attrs2)]


# W1, W2 are 2-D with n1, n2 columns: the product itself has the width that the slices cut. Without it
# the 3-D form fires on a reshape that moves the column boundary ((6, 4) -> (2, 4, 3): the slices pick
# wrong elements while the shapes agree), and the 2-D form on a one-column product broadcast up to a wider
# bias.
_COLUMNS = "(= (S2 k n1) (shape w1)) (= (S2 k n2) (shape w2))"

rules = [
    Rule("merge_matmul_bias", "multi", "ours", "x W1 + b1, x W2 + b2 -> split(x concat(W1, W2) + concat(b1, b2))",
         (("(= r1 (Ewadd (Matmul 0 x w1) b1)) (= r2 (Ewadd (Matmul 0 x w2) b2)) (!= r1 r2) "
           "(= (S2 m n1) (shape r1)) (= (S2 m n2) (shape r2)) (= r1 (ordering-max r1 r2)) " + _COLUMNS,
           "(Pend r1 (Slice 1 0 n1 (Ewadd (Matmul 0 x (Concat 1 w1 w2)) (Concat 1 b1 b2)))) "
           "(Pend r2 (Slice 1 n1 (+ n1 n2) (Ewadd (Matmul 0 x (Concat 1 w1 w2)) (Concat 1 b1 b2))))"),
          # the form the ONNX importer gives [B, S, H] x [H, N] + b: reshape(x2d W) + b
          ("(= r1 (Ewadd (Reshape (S3 p q n1) (Matmul 0 x w1)) b1)) (= r2 (Ewadd (Reshape (S3 p q n2) (Matmul 0 x w2)) b2)) "
           "(!= r1 r2) (= r1 (ordering-max r1 r2)) " + _COLUMNS,
           "(Pend r1 (Slice 2 0 n1 (Ewadd (Reshape (S3 p q (+ n1 n2)) (Matmul 0 x (Concat 1 w1 w2))) (Concat 2 b1 b2)))) "
           "(Pend r2 (Slice 2 n1 (+ n1 n2) (Ewadd (Reshape (S3 p q (+ n1 n2)) (Matmul 0 x (Concat 1 w1 w2))) "
           "(Concat 2 b1 b2))))")),
         example=lambda rng: retry(rng, _matmul_bias_instance)),
    Rule("merge_linear_qkv", "multi", "ours",
         "linear(x, W1, b1), linear(x, W2, b2), linear(x, W3, b3) -> split(linear(x, [W1 W2 W3], [b1 b2 b3]))",
         tuple(_qkv_body(r) for r in range(1, 5)), example=lambda rng: retry(rng, _linear_triple_instance)),
    Rule("merge_conv_shared_input", "multi", "ours", "conv(x, w1), conv(x, w2) -> split(conv(x, concat(w1, w2)))",
         (("(= r1 (Conv2d sh sw ph pw act x w1)) (= r2 (Conv2d sh sw ph pw act x w2)) (!= r1 r2) "
           "(= (S4 n a1 h wd) (shape r1)) (= (S4 n a2 h wd) (shape r2)) (= r1 (ordering-max r1 r2)) "
           "(= (S4 n c xh xw) (shape x)) (= (S4 a1 c k1 l1) (shape w1))",
           "(Pend r1 (Slice 1 0 a1 (Conv2d sh sw ph pw act x (Concat 0 w1 w2)))) "
           "(Pend r2 (Slice 1 a1 (+ a1 a2) (Conv2d sh sw ph pw act x (Concat 0 w1 w2))))"),),
         example=lambda rng: retry(rng, _conv_pair_instance)),
]
