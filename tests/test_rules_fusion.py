"""The rule family of fusions (rules/ours/fusion.py): an activation fused into the convolution or the product
before it, a batch norm folded into the convolution before it. Each rule fires on a tiny graph made for it, not on
a near miss, and the fused program computes the original's outputs (onnxruntime on both exported programs)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from rule_cases import apply, check_same, optimized

from eqsat import ir


def test_conv_relu_fusion_and_bn_fold():
    rng = np.random.default_rng(1)
    x = ir.input_("x", (1, 3, 8, 8))
    w = ir.weight("w", (4, 3, 3, 3))
    params = {n: ir.weight(n, (4,)) for n in ("s", "b", "m", "v")}
    weights = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
               **{n: rng.standard_normal(4).astype(np.float32) for n in ("s", "b", "m")},
               "v": rng.uniform(0.5, 1.5, 4).astype(np.float32)}
    conv = ir.make("conv2d", [x, w], (2, 2, -1, -1, 0))
    bn = ir.make("batchnorm", [conv, *params.values()], (10_000_000,))
    relu = ir.make("relu", [ir.make("conv2d", [x, w], (1, 1, 0, 0, 0))])
    g = ir.Graph((x,), (ir.make("relu", [bn]), relu), ("y", "z"), weights)
    eg, reports = apply(g, "fold_bn_conv", "fuse_relu_conv")
    assert reports[0].changed and reports[1].changed
    new = optimized(g, eg)
    check_same(g, new)
    ops = Counter(n.op for n in new.nodes())
    assert ops["batchnorm"] == 0
    assert any(n.op == "conv2d" and n.attrs[4] == 2 for n in new.nodes())
    # negative: an activation already fused, and a batch norm whose statistics are not weights
    xin = ir.input_("m", (4,))
    bn2 = ir.make("batchnorm", [conv, params["s"], params["b"], xin, params["v"]], (10_000_000,))
    _, reps = apply(ir.Graph((x, xin), (bn2, ir.make("conv2d", [x, w], (1, 1, 0, 0, 2))), ("a", "b")),
                    "fold_bn_conv", "fuse_relu_conv")
    assert not reps[0].changed and not reps[1].changed

