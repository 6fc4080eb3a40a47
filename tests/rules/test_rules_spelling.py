"""The rule family ``spelling`` (rules/ours/spelling.py): ``addnorm_unfuse`` relates the residual Add before a
LayerNormalization, which onnxruntime fuses into its SkipLayerNormalization kernel, to the same sum written as
ONNX Sum, which it leaves as two kernels. Oracles: onnxruntime's own optimized graph (what it fuses) and its
outputs on the original model; the rule verifier's random instances."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_graphs import fused, ort_graph

from eqsat import ir
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost.base import OpKey
from eqsat.cost.ort import op_model, runtime_nodes
from eqsat.egglog.egraph import EGraph
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.ops.composite import float_bits
from eqsat.rules import RuleEngine, by_name
from eqsat.rules.verify import check_rule

RULE = "addnorm_unfuse"
SHAPE = [1, 8, 16]
ROUND_TRIP = OptimizeConfig.of(scheduler="none", cost="analytic", measure=False)


def _post_ln(second_reader: bool = False, bias: bool = False) -> onnx.ModelProto:
    """y = LayerNormalization(x + r) (+ the sum read by a second output; or x + a [16] bias instead of r)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), n) for n in ("g", "beta", "c")]
    nodes = [helper.make_node("Add", ["x", "c" if bias else "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1, epsilon=1e-12)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)]
    if second_reader:
        nodes.append(helper.make_node("Relu", ["s"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, SHAPE))
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in (["x"] if bias else ["x", "r"])]
    graph = helper.make_graph(nodes, "post_ln", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(SHAPE).astype(np.float32) for i in model.graph.input}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_the_residual_add_before_a_layernorm_imports_as_addnorm_and_round_trips_fused():
    original = _post_ln()
    assert import_model(original).op_counts()["addnorm"] == 1
    out = optimize(original, ROUND_TRIP).optimized
    assert [n.op_type for n in out.graph.node] == ["Add", "LayerNormalization"]
    assert fused(ort_graph(out))["SkipLayerNormalization"] == fused(ort_graph(original))["SkipLayerNormalization"] == 1


@pytest.mark.parametrize("case", ["second-reader", "broadcast-bias"])
def test_an_add_read_elsewhere_or_of_two_shapes_stays_apart(case):
    original = _post_ln(second_reader=case == "second-reader", bias=case == "broadcast-bias")
    counts = import_model(original).op_counts()
    assert counts["addnorm"] == 0 and counts["layernorm"] == 1 and counts["ewadd"] == 1
    out = optimize(original, ROUND_TRIP).optimized
    feeds = _feeds(original)
    for a, b in zip(_run(original, feeds), _run(out, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _egraph(model: onnx.ModelProto) -> tuple[EGraph, ir.Graph]:
    graph = import_model(model)
    return EGraph.from_graph(graph), graph


def test_the_rule_fires_on_addnorm_only():
    eg, _ = _egraph(_post_ln())
    assert RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed
    snap = eg.snapshot()
    (root,) = snap.roots
    assert {"addnorm", "layernorm"} <= {snap.nodes[n].op for n in snap.classes[root]}
    assert "ewsum" in {n.op for n in snap.nodes}
    apart, _ = _egraph(_post_ln(second_reader=True))
    assert not RuleEngine(apart, [by_name()[RULE]]).apply(RULE).changed


def test_the_unfused_spelling_runs_unfused_and_computes_the_same():
    """The rule's right-hand side as the exporter writes it: Sum + LayerNormalization, which onnxruntime does not
    turn into SkipLayerNormalization, with the original's outputs."""
    original = _post_ln()
    graph = import_model(original)
    (norm,) = graph.outputs
    a, b, g, beta = norm.inputs
    unfused = ir.make("layernorm", [ir.make("ewsum", [a, b]), g, beta], norm.attrs)
    program = export_model(dataclasses.replace(graph, outputs=(unfused,)))
    assert sorted(n.op_type for n in program.graph.node) == ["LayerNormalization", "Sum"]
    assert fused(ort_graph(program))["SkipLayerNormalization"] == 0
    for seed in (0, 1):
        feeds = _feeds(original, seed)
        np.testing.assert_allclose(_run(original, feeds)[0], _run(program, feeds)[0], rtol=1e-5, atol=1e-5)


def test_the_ort_cost_times_each_spelling_as_the_runtime_runs_it():
    eps = float_bits(1e-12)
    add_norm = OpKey("addnorm", (eps,), ((1, 128, 64), (1, 128, 64), (64,), (64,)), (1, 128, 64))
    assert runtime_nodes(op_model(add_norm)[0]) == ["SkipLayerNormalization"]  # timed as the fused kernel
    norm = OpKey("layernorm", (eps,), ((1, 128, 64), (64,), (64,)), (1, 128, 64))
    summed = OpKey("ewsum", (), ((1, 128, 64), (1, 128, 64)), (1, 128, 64))
    assert runtime_nodes(op_model(norm)[0]) == ["LayerNormalization"]
    assert runtime_nodes(op_model(summed)[0]) == ["Sum"]


def test_the_verifier_passes_the_rule():
    check = check_rule(by_name()[RULE], seed=2)
    assert check.passed and not check.thin and check.fired == check.instances, check.detail
    ranks = {s.split("]")[0].count(",") + 1 for s in check.shapes}
    assert ranks == {1, 2, 3, 4}, check.shapes


FUSE = "addnorm_fuse"


def test_the_fusing_rule_fires_on_a_layernorm_of_a_sum_of_one_shape_only():
    """The Add the importer leaves apart (it has a second reader) gets the addnorm spelling in the e-graph; a
    bias Add (operands of two shapes) does not."""
    eg, graph = _egraph(_post_ln(second_reader=True))
    assert graph.op_counts()["addnorm"] == 0
    assert RuleEngine(eg, [by_name()[FUSE]]).apply(FUSE).changed
    snap = eg.snapshot()
    assert {"addnorm", "layernorm"} <= {snap.nodes[n].op for n in snap.classes[snap.roots[0]]}
    bias, _ = _egraph(_post_ln(bias=True))
    assert not RuleEngine(bias, [by_name()[FUSE]]).apply(FUSE).changed


def test_the_fused_spelling_of_a_shared_sum_computes_the_same():
    from eqsat.decode import build_program

    original = _post_ln(second_reader=True)
    eg, graph = _egraph(original)
    RuleEngine(eg, [by_name()[FUSE]]).apply(FUSE)
    snap = eg.snapshot().restrict()
    choice = {c: ([n for n in nodes if snap.nodes[n].op == "addnorm"] or nodes)[0] for c, nodes in enumerate(snap.classes)}
    program_graph = build_program(snap, choice, graph)
    assert program_graph.op_counts()["addnorm"] == 1
    program = export_model(program_graph)
    feeds = _feeds(original)
    for a, b in zip(_run(original, feeds), _run(program, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_the_verifier_passes_the_fusing_rule():
    check = check_rule(by_name()[FUSE], seed=2)
    assert check.passed and not check.thin, check.detail
    assert 0 < check.fired < check.instances  # the broadcast near misses do not fire
