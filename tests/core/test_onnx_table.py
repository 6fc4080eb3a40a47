"""The two-way operator table: every ONNX operator in ``eqsat.ops.IMPORTS`` imports as IR
operators (no opaque node) whose numpy semantics compute what onnxruntime computes for the original node, and
every anchor in ``eqsat.ops.PATTERNS`` starts a composite that imports as one IR node computing the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat import ops
from eqsat.evaluate import evaluate
from eqsat.onnx import export_model, import_model
from eqsat.ops.mapping import window_attrs

RNG = np.random.default_rng(0)
X4 = (2, 4, 6, 6)


def _w(name: str, *shape: int, positive: bool = False) -> onnx.TensorProto:
    a = RNG.standard_normal(shape).astype(np.float32)
    return numpy_helper.from_array(np.abs(a) + 0.5 if positive else a, name)


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


# ONNX op type -> (nodes, input shape, initializers): one model whose node of that type the importer maps
CASES = {
    "Relu": ([helper.make_node("Relu", ["x"], ["y"])], X4, []),
    "Tanh": ([helper.make_node("Tanh", ["x"], ["y"])], X4, []),
    "Sigmoid": ([helper.make_node("Sigmoid", ["x"], ["y"])], X4, []),
    "Add": ([helper.make_node("Add", ["x", "b"], ["y"])], X4, [_w("b", 6)]),
    "Mul": ([helper.make_node("Mul", ["x", "s"], ["y"])], X4, [_w("s", 4, 1, 1)]),
    "Softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], X4, []),
    "MatMul": ([helper.make_node("MatMul", ["x", "w"], ["y"])], X4, [_w("w", 6, 3)]),
    "Gemm": ([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)], (3, 5),
             [_w("w", 7, 5), _w("c", 7)]),
    "Conv": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 0, 1, 0],
                               strides=[2, 1], group=2)], X4, [_w("w", 8, 2, 3, 3), _w("b", 8)]),
    "MaxPool": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], X4, []),
    "AveragePool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], X4, []),
    "GlobalAveragePool": ([helper.make_node("GlobalAveragePool", ["x"], ["y"])], X4, []),
    "BatchNormalization": ([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                           X4, [_w("s", 4), _w("b", 4), _w("m", 4), _w("v", 4, positive=True)]),
    "Concat": ([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["x", "r"], ["y"], axis=-1)],
               X4, []),
    "Transpose": ([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], X4, []),
    "Reshape": ([helper.make_node("Reshape", ["x", "shape"], ["y"])], X4, [_i64("shape", [0, -1, 12])]),
    "Flatten": ([helper.make_node("Flatten", ["x"], ["y"], axis=2)], X4, []),
    "Squeeze": ([helper.make_node("Squeeze", ["x", "axes"], ["y"])], (2, 1, 6, 6), [_i64("axes", [1])]),
    "Unsqueeze": ([helper.make_node("Unsqueeze", ["x", "axes"], ["y"])], (2, 6, 6), [_i64("axes", [-1])]),
}


def _model(nodes, shape, inits):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check_against_ort(model, shape) -> list[str]:
    """Import ``model``; its IR (numpy semantics) must compute onnxruntime's output. Returns the IR's ops."""
    graph = import_model(model)
    feed = RNG.standard_normal(shape).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": feed})
    (got,) = evaluate(list(graph.outputs), lambda n: feed if n.op == "input" else graph.weights[n.name])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return [n.op for n in graph.nodes()]


def test_cases_cover_the_table():
    assert set(CASES) == set(ops.IMPORTS)


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_every_mapped_operator_imports_as_ir_and_computes_what_onnxruntime_does(op_type):
    nodes, shape, inits = CASES[op_type]
    ir_ops = _check_against_ort(_model(nodes, shape, inits), shape)
    assert "opaque" not in ir_ops, ir_ops


def test_a_node_the_mapper_refuses_is_carried_opaque():
    """A dilated Conv has no IR window: the mapper says None and the node is kept as it was (the exported model
    computes what the original does)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], dilations=[2, 2])]
    model = _model(nodes, X4, [_w("w", 3, 4, 3, 3)])
    graph = import_model(model)
    assert [n.op for n in graph.nodes()].count("opaque") == 1
    assert not any(n.op == "conv2d" for n in graph.nodes())
    feed = {"x": RNG.standard_normal(X4).astype(np.float32)}
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
            for m in (model, export_model(graph))]
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)


def test_window_attrs_against_the_padding_onnxruntime_applies():
    """The IR window of a Conv (SAME spelled -1) gives the output size onnxruntime gives, over paddings."""
    for pads, strides in [([1, 1, 1, 1], [1, 1]), ([0, 2, 0, 2], [2, 1]), ([1, 0, 1, 0], [1, 2])]:
        at = {"pads": pads, "strides": strides}
        sh, sw, ph, pw = window_attrs(at, (3, 3))
        assert ((ph, pw) == (-1, -1)) == (pads == [1, 1, 1, 1])
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], **at)]
        ir_ops = _check_against_ort(_model(nodes, X4, [_w("w", 2, 4, 3, 3)]), X4)
        assert ir_ops.count("conv2d") == 1
    assert window_attrs({"pads": [1, 0, 0, 1]}, (3, 3)) is None  # asymmetric: no IR window


# composites: a model of the decomposition each anchor starts; it must become one IR node of that operator
PATTERN_CASES = {
    "Sigmoid": ("silu", [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])], []),
    "Softmax": ("softmax", [helper.make_node("Softmax", ["x"], ["y"])], []),
    "Gelu": ("gelu", [helper.make_node("Gelu", ["x"], ["y"])], []),
    "LayerNormalization": ("layernorm", [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"])],
                           [_w("g", 6), _w("b", 6)]),
    "MatMul": ("linear", [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
               [_w("w", 6, 5), _w("b", 5)]),
}


@pytest.mark.parametrize("anchor", sorted(PATTERN_CASES))
def test_composites_found_through_the_pattern_table(anchor):
    op, nodes, inits = PATTERN_CASES[anchor]
    assert anchor in ops.PATTERNS
    opset = 20 if anchor == "Gelu" else 17
    model = _model(nodes, X4, inits)
    model.opset_import[0].version = opset
    ir_ops = _check_against_ort(model, X4)
    assert ir_ops.count(op) == 1 and "opaque" not in ir_ops, ir_ops

