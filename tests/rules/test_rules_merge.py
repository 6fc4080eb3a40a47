"""The rule family of merges (rules/ours/merge.py): two or three products, biased products or convolutions of one
input become one wider one and slices of it. Each rule fires on a tiny graph made for it, not on a near miss, and
the merged program computes the original's outputs (onnxruntime on both exported programs)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_builders as ob
from rule_cases import apply, check_same, choose, graph_of, ops_of, optimized

from eqsat import ir
from eqsat.onnx.importer import import_model


def test_qkv_merge_on_onnx_attention_block():
    g = import_model(ob.attention())  # the projections (MatMul + bias) import as linear
    assert [n.shape for n in g.nodes() if n.op == "linear"] == [(1, 8, 16)] * 3
    eg, reports = apply(g, "merge_linear_qkv")
    assert reports[0].changed and reports[0].matches == 1
    new = optimized(g, eg)
    check_same(g, new)
    assert [n.shape for n in new.nodes() if n.op == "linear"] == [(1, 8, 3 * 16)]  # Q, K and V in one product


def test_qkv_merge_negative_case():
    x = ir.input_("x", (4, 8))
    y = ir.input_("y", (4, 8))  # different inputs: nothing to merge
    outs = [ir.make("ewadd", [ir.make("matmul", [v, ir.weight(f"w{i}", (8, 8))], (0,)), ir.weight(f"b{i}", (1, 8))])
            for i, v in enumerate((x, y))]
    _, reports = apply(ir.Graph((x, y), tuple(outs), ("a", "b")), "merge_matmul_bias")
    assert reports[0].matches == 0 and not reports[0].changed


def _inception_block():
    rng = np.random.default_rng(0)
    x = ir.input_("x", (1, 8, 9, 9))
    ws = {f"w{k}": rng.standard_normal((co, 8, k, k)).astype(np.float32) for k, co in ((1, 4), (3, 6))}
    ws["w3b"] = rng.standard_normal((5, 8, 3, 3)).astype(np.float32)
    b1 = ir.make("conv2d", [x, ir.weight("w1", ws["w1"].shape)], (1, 1, -1, -1, 2))
    b3 = ir.make("conv2d", [x, ir.weight("w3", ws["w3"].shape)], (1, 1, -1, -1, 2))
    b3b = ir.make("conv2d", [x, ir.weight("w3b", ws["w3b"].shape)], (1, 1, -1, -1, 2))
    out = ir.make("concat", [b1, b3, b3b], (1,))
    return ir.Graph((x,), (out,), ("y",), ws)


def test_same_input_conv_merge_on_inception_block():
    g = _inception_block()
    eg, reports = apply(g, "merge_conv_shared_input", "taso_m14")
    assert reports[0].changed  # the two 3x3 branches
    assert reports[1].changed  # 1x1 enlarged to 3x3 and merged
    new = optimized(g, eg)
    check_same(g, new)
    assert Counter(n.op for n in new.nodes())["conv2d"] < 3


def test_conv_merge_negative_case_grouped_or_different_stride():
    x = ir.input_("x", (1, 8, 9, 9))
    a = ir.make("conv2d", [x, ir.weight("a", (8, 1, 3, 3))], (1, 1, -1, -1, 0))  # depthwise
    b = ir.make("conv2d", [x, ir.weight("b", (8, 1, 3, 3))], (1, 1, -1, -1, 0))
    c = ir.make("conv2d", [x, ir.weight("c", (4, 8, 3, 3))], (2, 2, -1, -1, 0))
    d = ir.make("conv2d", [x, ir.weight("d", (4, 8, 3, 3))], (1, 1, -1, -1, 0))
    _, reports = apply(ir.Graph((x,), (a, b, c, d), ("a", "b", "c", "d")), "merge_conv_shared_input", "taso_m11")
    assert not reports[0].changed and not reports[1].changed


def test_merge_matmul_bias_computes_both_products_as_one():
    """x W1 + b1 and x W2 + b2 of widths 3 and 5 (test_qkv_merge_negative_case: two inputs, no merge)."""
    x = ir.input_("x", (4, 8))
    g = graph_of([ir.make("ewadd", [ir.make("matmul", [x, ir.weight(f"w{i}", (8, n))], (0,)),
                                    ir.weight(f"b{i}", (1, n))]) for i, n in enumerate((3, 5))])
    eg, (report,) = apply(g, "merge_matmul_bias")
    assert report.changed and report.matches == 1
    merged = choose(eg, g, "slice")
    assert Counter(n.op for n in merged.nodes())["matmul"] == 1
    assert [(y.attrs[0], y.attrs[2] - y.attrs[1]) for y in merged.outputs] == [(1, 3), (1, 5)]
    check_same(g, merged)


def test_merge_linear_qkv_needs_three_linears_of_one_input():
    x, x2 = ir.input_("x", (2, 4, 8)), ir.input_("x2", (2, 4, 8))
    linears = [ir.make("linear", [v, ir.weight(f"w{i}", (8, 8)), ir.weight(f"b{i}", (8,))])
               for i, v in enumerate((x, x, x2))]
    for roots in (linears, linears[:2]):
        eg, (report,) = apply(graph_of(roots), "merge_linear_qkv")
        assert report.matches == 0 and not report.changed and "slice" not in ops_of(eg)
