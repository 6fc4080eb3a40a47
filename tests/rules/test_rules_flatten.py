"""The rule family of the flattened spelling (rules/ours/flatten.py): ``reshape_sink`` moves a rank-raising reshape
below the operators that act per element or along the last axis, so that with ``reshape_cancel`` a dense block
on 3-D activations runs on 2-D ones with fewer reshapes; ``matmul_flatten`` relates the importer's spelling of an
N-D product by a weight to ONNX's N-D MatMul. Each case fires on a tiny graph made for it and not on a
near miss, and the cheapest program (layout priced) computes the original's outputs (onnxruntime on both)."""

from __future__ import annotations

import pytest
from rule_cases import apply, check_same, graph_of, op_counts, optimized

from eqsat import ir
from eqsat.ops.composite import float_bits

EPS = (float_bits(1e-5),)


def _dense(x: ir.Node, k: int, n: int, name: str) -> ir.Node:
    """The importer's dense layer on a [1, s, k] activation: reshape -> 2-D matmul -> reshape, plus a [1, 1, n] bias."""
    s = x.shape[1]
    flat = ir.make("matmul", [ir.make("reshape", [x], (s, k)), ir.weight(f"w{name}", (k, n))], (0,))
    return ir.make("ewadd", [ir.make("reshape", [flat], (1, s, n)), ir.weight(f"b{name}", (1, 1, n))])


def _block() -> ir.Node:
    """Two dense layers with a residual add and a LayerNormalization between them, on [1, 5, 6]."""
    x = ir.input_("x", (1, 5, 6))
    h = _dense(x, 6, 6, "1")
    norm = ir.make("layernorm", [ir.make("ewadd", [x, h]), ir.weight("g", (6,)), ir.weight("beta", (6,))], EPS)
    return ir.make("gelu", [_dense(norm, 6, 4, "2")], (0,))


def _sunk(g: ir.Graph, rounds: int = 4) -> ir.Graph:
    eg, reports = apply(g, "reshape_sink", "reshape_cancel", rounds=rounds)
    assert reports[0].changed
    return optimized(g, eg, price_layout=True)


def test_a_dense_block_runs_flattened_with_fewer_reshapes():
    g = graph_of(_block())
    new = _sunk(g)
    # before: the input's flattening, each layer's reshape back to 3-D, the second layer's flattening: 4; after:
    # the flattenings of x (for the first layer and for the residual) and the output's reshape back to 3-D
    assert op_counts(g)["reshape"] == 4
    assert op_counts(new)["reshape"] < 4
    assert all(n.shape != (1, 5, 6) for n in new.nodes() if n.op == "layernorm")
    check_same(g, new)


UNARY = {"relu": (), "tanh": (), "sigmoid": (), "silu": (), "gelu": (1,), "scale": (float_bits(0.5),)}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_operators_take_the_reshape_below_them(op):
    x = ir.input_("x", (3, 4))
    g = graph_of(ir.make(op, [ir.make("reshape", [x], (1, 3, 2, 2))], UNARY[op]))
    eg, (report,) = apply(g, "reshape_sink")
    assert report.changed and report.matches == 1
    check_same(g, optimized(g, eg, price_layout=True))


def _up(x: ir.Node) -> ir.Node:
    return ir.make("reshape", [x], (1, 3, 8))


MISSES = {  # name: a root on x [3, 8] whose reshape is not sunk (an axis the reshape does not keep, or moves)
    "bias_along_another_axis": lambda x: ir.make("ewadd", [_up(x), ir.weight("c", (1, 3, 1))]),
    "rank_two_to_four": lambda x: ir.make("ewadd", [ir.make("reshape", [x], (1, 3, 2, 4)), ir.weight("c", (1, 1, 1, 4))]),
    "slice_of_another_axis": lambda x: ir.make("slice", [_up(x)], (1, 0, 2)),
    # slices are not sunk, even of the last axis: a merged projection's parts then read one value (one Split)
    "slice_of_the_last_axis": lambda x: ir.make("slice", [_up(x)], (2, 0, 4)),
    "layernorm_last_dim_changed": lambda x: ir.make(
        "layernorm", [ir.make("reshape", [x], (1, 12, 2)), ir.weight("g", (2,)), ir.weight("beta", (2,))], EPS),
}


@pytest.mark.parametrize("case", sorted(MISSES))
def test_near_misses_are_left_alone(case):
    g = graph_of(MISSES[case](ir.input_("x", (3, 8))))
    eg, (report,) = apply(g, "reshape_sink")
    assert report.matches == 0 and not report.changed


def test_a_lower_rank_target_is_not_sunk():
    x = ir.input_("x", (1, 3, 4))
    g = graph_of(ir.make("ewadd", [ir.make("reshape", [x], (3, 4)), ir.weight("c", (1, 4))]))
    eg, (report,) = apply(g, "reshape_sink")
    assert report.matches == 0


def test_an_operand_of_another_flattening_is_reshaped_to_match():
    """Both operands reshaped to [1, 3, 8] from different shapes: the sum moves below, the other operand
    reshaped to x's shape (the result computes the same)."""
    x, z = ir.input_("x", (3, 8)), ir.input_("z", (6, 4))
    g = graph_of(ir.make("ewadd", [_up(x), ir.make("reshape", [z], (1, 3, 8))]))
    eg, (report,) = apply(g, "reshape_sink")
    assert report.changed
    check_same(g, optimized(g, eg, price_layout=True))


@pytest.mark.parametrize("shape", [(1, 5, 6), (2, 3, 2, 6)])
def test_matmul_flatten_gives_the_importers_product_its_n_d_spelling_and_back(shape):
    """The importer's reshape -> 2-D matmul -> reshape and ONNX's N-D MatMul by a weight: each rule direction
    makes the other, and the program of either computes the original (onnxruntime on both)."""
    x = ir.input_("x", shape)
    rows = 1
    for d in shape[:-1]:
        rows *= d
    flat = ir.make("matmul", [ir.make("reshape", [x], (rows, 6)), ir.weight("w", (6, 4))], (0,))
    g = graph_of(ir.make("relu", [ir.make("reshape", [flat], (*shape[:-1], 4))]))
    eg, (report,) = apply(g, "matmul_flatten")
    assert report.changed
    new = optimized(g, eg, price_layout=True)
    assert op_counts(new) == {"matmul": 1, "relu": 1}
    assert [n.inputs[0].name for n in new.nodes() if n.op == "matmul"] == ["x"]
    check_same(g, new)
    back = graph_of(ir.make("relu", [ir.make("matmul", [x, ir.weight("w", (6, 4))], (0,))]))
    eg, (report,) = apply(back, "matmul_flatten")
    assert report.changed and {"reshape", "matmul"} <= {e.op for e in eg.snapshot().nodes}
    check_same(back, optimized(back, eg))


def test_matmul_flatten_leaves_a_product_reshaped_to_other_leading_dimensions():
    x = ir.input_("x", (2, 3, 6))
    flat = ir.make("matmul", [ir.make("reshape", [x], (6, 6)), ir.weight("w", (6, 4))], (0,))
    g = graph_of(ir.make("reshape", [flat], (3, 2, 4)))
    eg, (report,) = apply(g, "matmul_flatten")
    assert report.matches == 0


def _dense_block_model():
    """ONNX: two biased dense layers on [1, 128, 256] with a residual add and a LayerNormalization between them,
    MatMul + Add on 3-D activations as the exporters write them."""
    import numpy as np
    import onnx_builders as ob
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["b1", "m1"], ["h1"]),
             helper.make_node("Add", ["h1", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["y"])]
    return ob.model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 256])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 256])],
                    [w("w1", 256, 256), w("b1", 256), w("g", 256), w("beta", 256), w("w2", 256, 256), w("b2", 256)])


def test_under_the_ort_cost_a_dense_block_reaches_the_flattened_form_and_runs_no_more_reshapes():
    """End to end under ort-cpu (Reshape priced as onnxruntime runs it): onnxruntime turns each 3-D MatMul + Add
    into Reshape + Gemm + Reshape; the search reaches the flattened form, and the program eqsat writes runs no more
    Reshapes than the original in onnxruntime (its own optimized graph, the independent count), and computes the
    same outputs. Which of the two forms ships is the measured costs' call: here they are within the timing noise
    of each other (fresh measurements chose the 3-D form in 4 runs of 10), so only the bound is asserted; the
    priced-layout tests above check that the flattened form is the cheaper one where Reshapes cost."""
    from ort_check import outputs_match

    from eqsat.app.pipeline import OptimizeConfig, optimize
    from eqsat.cost.ort import runtime_nodes

    model = _dense_block_model()
    result = optimize(model, OptimizeConfig.of(cost="ort-cpu", measure=False, time_limit=10.0, seed=0))
    before, after = runtime_nodes(model), runtime_nodes(result.optimized)
    assert before.count("Reshape") == 4 and after.count("Reshape") <= 4, (before, after)
    assert {"reshape_sink", "reshape_cancel"} <= set(result.report.search.rules_applied())
    assert outputs_match(model, result.optimized)
