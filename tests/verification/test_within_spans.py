"""The original a program kept to a span carries beyond it (eqsat.verification.verify_within): its copy run alone at
the tuned sizes against the original in onnxruntime. A copy that computes something else fails the check, though no
size the verification runs at further sizes reaches beyond the span."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx.axes.branches import WITHIN, within_spans
from eqsat.verification import verify_within


def _original() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _kept(beyond: str) -> onnx.ModelProto:
    """Relu within ``n`` from 2 to 50; ``beyond`` (an operator of one input) past it."""
    def branch(op: str, out: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [out])], out, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])

    nodes = [helper.make_node("Shape", ["x"], ["n"], start=1, end=2),
             helper.make_node("Less", ["n", "low"], ["below"]),
             helper.make_node("Greater", ["n", "high"], ["above"]),
             helper.make_node("Or", ["below", "above"], ["outside"]),
             helper.make_node("Not", ["outside"], ["inside"]),
             helper.make_node("If", ["inside"], ["y"], name=f"{WITHIN}_1", then_branch=branch("Relu", "y_in"),
                              else_branch=branch(beyond, "y_out"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])],
                              [numpy_helper.from_array(np.array([2], np.int64), "low"),
                               numpy_helper.from_array(np.array([50], np.int64), "high")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_span_is_read_back_from_the_written_program():
    assert within_spans(_kept("Relu")) == {("x", 1): (2, 50)}
    assert within_spans(_original()) == {}


def test_a_copy_of_the_original_passes_and_one_that_computes_otherwise_fails():
    values = {"batch": 2, "n": 8}
    passed = verify_within(_original(), _kept("Relu"), values)
    assert passed.passed and passed.verified, passed.detail
    failed = verify_within(_original(), _kept("Neg"), values)
    assert not failed.passed and "differs" in failed.detail
