"""Models outside the zoo's test set (DistilBERT, T5 and Whisper encoders, ConvNeXt, ResNet-50; built by
``zoo.UNSEEN`` for ``scripts/bench_peers.py``): the spellings they showed eqsat, each on a small hand-built graph
and where cheap on the model itself. Oracles: onnxruntime on the original, numpy's attention.

* T5's attention: the scores not scaled, its position bias and then the padding mask added in turn, and the
  Softmax of ``scores.float()`` (a Cast to float of a float) with a Cast back after it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from attention_cases import attention_model, numpy_attention, ort_outputs, random_feeds
from onnx import TensorProto, helper

from eqsat import OptimizeConfig, optimize
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.onnx.patterns import find_composites
from eqsat.verification import verify

N = helper.make_node
F = TensorProto.FLOAT
Q, KT, V, BIAS, MASK = (1, 2, 4, 3), (1, 2, 3, 5), (1, 2, 5, 3), (1, 2, 4, 5), (1, 1, 1, 5)
T5_ATTENTION = [N("MatMul", ["q", "kt"], ["s"]), N("Add", ["s", "bias"], ["sb"]), N("Add", ["sb", "mask"], ["m"]),
                N("Cast", ["m"], ["mf"], to=F), N("Softmax", ["mf"], ["p0"], axis=-1), N("Cast", ["p0"], ["p"], to=F),
                N("MatMul", ["p", "v"], ["y"])]


def _t5_model() -> onnx.ModelProto:
    return attention_model(T5_ATTENTION, {}, inputs=(("q", Q), ("kt", KT), ("v", V), ("bias", BIAS), ("mask", MASK)))


def test_t5_attention_with_two_masks_and_casts_is_one_attention():
    model = _t5_model()
    (match,) = find_composites(model.graph, {})
    assert (match.op, match.inputs, len(match.nodes)) == ("attention", ("q", "kt", "v", "bias", "mask"), 7)
    graph = import_model(model)
    (y,) = graph.outputs
    assert y.op == "attention" and y.inputs[3].op == "ewadd"  # one mask: the sum of the two
    assert {i.name for i in y.inputs[3].inputs} == {"bias", "mask"}
    out = export_model(graph)
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        expected = numpy_attention(feeds["q"], feeds["kt"], feeds["v"], 1.0, feeds["bias"] + feeds["mask"])
        for m in (model, out):
            np.testing.assert_allclose(ort_outputs(m, feeds)[0], expected, rtol=1e-5, atol=1e-5)


def test_a_third_mask_add_is_not_taken_into_the_attention():
    """Two masks at most: a third Add leaves the first two outside the match (the nodes one by one, the
    program still exact)."""
    nodes = [*T5_ATTENTION[:3], N("Add", ["m", "bias"], ["m3"]), N("Softmax", ["m3"], ["p"], axis=-1),
             N("MatMul", ["p", "v"], ["y"])]
    model = attention_model(nodes, {}, inputs=(("q", Q), ("kt", KT), ("v", V), ("bias", BIAS), ("mask", MASK)))
    assert "attention" not in [m.op for m in find_composites(model.graph, {})]
    check = verify(model, export_model(import_model(model)), seed=3)
    assert check.passed, check.detail


def test_a_cast_to_the_input_s_own_type_is_dropped_at_import_and_others_are_kept():
    nodes = [N("Cast", ["q"], ["qf"], to=F), N("Relu", ["qf"], ["r"]), N("Cast", ["r"], ["r16"], to=TensorProto.FLOAT16),
             N("Cast", ["r16"], ["y"], to=F)]
    model = attention_model(nodes, {}, inputs=(("q", Q),), outputs=(("y", Q),))
    graph = import_model(model)
    counts = graph.op_counts()
    assert counts["Cast"] == 2 and counts["relu"] == 1  # the float16 round trip stays: it rounds
    (y,) = graph.outputs
    assert y.inputs[0].inputs[0].op == "relu" and y.inputs[0].inputs[0].inputs[0].op == "input"
    check = verify(model, export_model(graph), seed=0)
    assert check.passed, check.detail


@pytest.mark.parametrize("exporter,opset", [("torchscript", 17), ("dynamo", 18)])
def test_t5_encoder_attention_is_recognized_and_the_round_trip_verifies(exporter, opset):
    model = zoo.build("t5_encoder", exporter, opset)
    graph = import_model(model)
    counts = graph.op_counts()
    assert counts["attention"] == 2 and "softmax" not in counts, counts  # one per layer
    assert counts["Cast"] <= 1, counts  # the attention mask's int -> float; no float -> float Cast kept
    result = optimize(model, OptimizeConfig(scheduler="none", cost="analytic", measure=False, allow_slower=True))
    check = verify(model, result.optimized, seed=1)
    assert check.passed, check.detail


# -- operations with a neutral constant (the zero biases of freshly initialized layers) --------------------------
def _neutral_model(op: str, value: float, shape: tuple[int, ...], first: bool = False) -> onnx.ModelProto:
    nodes = [N(op, ["c", "r"] if first else ["r", "c"], ["s"]), N("Relu", ["s"], ["y"])]
    model = attention_model([N("Relu", ["q"], ["r"]), *nodes], {"c": np.full(shape, value, np.float32)},
                            inputs=(("q", Q),), outputs=(("y", Q),))
    return model


@pytest.mark.parametrize("op,value,shape,first", [("Add", 0.0, (3,), False), ("Add", 0.0, (1, 1, 1, 3), True),
                                                  ("Sub", 0.0, (3,), False), ("Mul", 1.0, (4, 3), True),
                                                  ("Div", 1.0, (), False)])
def test_an_operation_with_a_neutral_constant_is_dropped(op, value, shape, first):
    model = _neutral_model(op, value, shape, first)
    graph = import_model(model)
    assert dict(graph.op_counts()) == {"input": 1, "relu": 2}
    check = verify(model, export_model(graph), seed=0)
    assert check.passed and check.max_abs_error == 0.0, check.detail


@pytest.mark.parametrize("op,value,shape,first", [("Add", 0.5, (3,), False),  # not neutral
                                                  ("Add", 0.0, (2, 1, 2, 4, 3), False),  # broadcasts x up
                                                  ("Sub", 0.0, (3,), True),  # 0 - x
                                                  ("Div", 1.0, (3,), True),  # 1 / x
                                                  ("Mul", 0.0, (3,), False)])  # x * 0
def test_an_operation_whose_constant_is_not_neutral_is_kept(op, value, shape, first):
    out = Q if len(shape) <= len(Q) else (2, *Q)
    nodes = [N("Relu", ["q"], ["r"]), N(op, ["c", "r"] if first else ["r", "c"], ["s"]), N("Relu", ["s"], ["y"])]
    model = attention_model(nodes, {"c": np.full(shape, value, np.float32)}, inputs=(("q", Q),), outputs=(("y", out),))
    graph = import_model(model)
    assert graph.op_counts().total() - len(graph.weights) > 3, graph.op_counts()
    check = verify(model, export_model(graph), seed=0)
    assert check.passed, check.detail


def test_a_program_equal_to_the_import_is_written_where_the_import_dropped_a_node():
    """``Relu(Relu(x) + 0)``: the Add dropped at import; with nothing for the search to change, the written model
    still differs from the original (one Add fewer), so it is verified and returned (measured where measuring is
    on) rather than the original as "no other program"."""
    model = _neutral_model("Add", 0.0, (3,))
    result = optimize(model, OptimizeConfig(scheduler="none", cost="analytic", measure=False))
    assert [n.op_type for n in result.optimized.graph.node] == ["Relu", "Relu"]
    assert verify(model, result.optimized, seed=2).passed


def test_a_linear_s_zero_bias_stays_its_bias():
    """A MatMul with an all-zero bias is still a ``linear`` (the zoo's freshly initialized layers: what
    onnxruntime fuses of it, and the merges of linears, stay as for any bias)."""
    rng = np.random.default_rng(0)
    nodes = [N("MatMul", ["q", "w"], ["h"]), N("Add", ["h", "b"], ["y"])]
    model = attention_model(nodes, {"w": rng.standard_normal((3, 3)).astype(np.float32), "b": np.zeros(3, np.float32)},
                            inputs=(("q", Q),), outputs=(("y", Q),))
    assert dict(import_model(model).op_counts())["linear"] == 1
