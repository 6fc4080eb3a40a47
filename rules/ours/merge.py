"""Merging operators that share an input into one wider operator.

* ``merge_matmul_bias``: x W1 + b1, x W2 + b2 -> the column halves of x [W1 W2] + [b1 b2]: the Q/K/V
  projections of an ONNX attention block (biases, 3-D activations reshaped to 2-D by the importer).
* ``merge_conv_shared_input``: conv(x, w1), conv(x, w2) -> the channel halves of conv(x, concat(w1, w2)),
  any stride, padding and activation (Inception-style branches), ordinary (ungrouped) convs only.
"""

from __future__ import annotations

from eqsat import ir

from ..rule import Rule


def _matmul_example(rng):
    x = ir.input_("x", (6, 4))
    outs = []
    for n in (3, 6):
        w, b = ir.weight(f"w{n}", (4, n)), ir.weight(f"b{n}", (1, n))
        outs.append(ir.make("ewadd", [ir.make("matmul", [x, w], (0,)), b]))
        b3 = ir.weight(f"c{n}", (1, 1, n))
        outs.append(ir.make("ewadd", [ir.make("reshape", [ir.make("matmul", [x, w], (0,))], (2, 3, n)), b3]))
    return outs


def _conv_example(rng):
    x = ir.input_("x", (1, 3, 7, 7))
    return [ir.make("conv2d", [x, ir.weight(f"w{co}", (co, 3, 3, 3))], (2, 2, 1, 1, 2)) for co in (4, 5)]


rules = [
    Rule("merge_matmul_bias", "multi", "ours", "x W1 + b1, x W2 + b2 -> split(x concat(W1, W2) + concat(b1, b2))",
         (("(= r1 (Ewadd (Matmul 0 x w1) b1)) (= r2 (Ewadd (Matmul 0 x w2) b2)) (!= r1 r2) "
           "(= (S2 m n1) (shape r1)) (= (S2 m n2) (shape r2)) (= r1 (ordering-max r1 r2))",
           "(Pend r1 (Slice 1 0 n1 (Ewadd (Matmul 0 x (Concat 1 w1 w2)) (Concat 1 b1 b2)))) "
           "(Pend r2 (Slice 1 n1 (+ n1 n2) (Ewadd (Matmul 0 x (Concat 1 w1 w2)) (Concat 1 b1 b2))))"),
          # the form the ONNX importer gives [B, S, H] x [H, N] + b: reshape(x2d W) + b
          ("(= r1 (Ewadd (Reshape (S3 p q n1) (Matmul 0 x w1)) b1)) (= r2 (Ewadd (Reshape (S3 p q n2) (Matmul 0 x w2)) b2)) "
           "(!= r1 r2) (= r1 (ordering-max r1 r2))",
           "(Pend r1 (Slice 2 0 n1 (Ewadd (Reshape (S3 p q (+ n1 n2)) (Matmul 0 x (Concat 1 w1 w2))) (Concat 2 b1 b2)))) "
           "(Pend r2 (Slice 2 n1 (+ n1 n2) (Ewadd (Reshape (S3 p q (+ n1 n2)) (Matmul 0 x (Concat 1 w1 w2))) "
           "(Concat 2 b1 b2))))")), 9,
         example=_matmul_example),
    Rule("merge_conv_shared_input", "multi", "ours", "conv(x, w1), conv(x, w2) -> split(conv(x, concat(w1, w2)))",
         (("(= r1 (Conv2d sh sw ph pw act x w1)) (= r2 (Conv2d sh sw ph pw act x w2)) (!= r1 r2) "
           "(= (S4 n a1 h wd) (shape r1)) (= (S4 n a2 h wd) (shape r2)) (= r1 (ordering-max r1 r2)) "
           "(= (S4 n c xh xw) (shape x)) (= (S4 a1 c k1 l1) (shape w1))",
           "(Pend r1 (Slice 1 0 a1 (Conv2d sh sw ph pw act x (Concat 0 w1 w2)))) "
           "(Pend r2 (Slice 1 a1 (+ a1 a2) (Conv2d sh sw ph pw act x (Concat 0 w1 w2))))"),), 4,
         example=_conv_example),
]
