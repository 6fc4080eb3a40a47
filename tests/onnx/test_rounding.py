"""Which models round coarsely (a quantizer, a narrow float computation), where a legitimate reorder may move an
output past the dtype's tolerance; a float32 computation whose weights are merely stored narrow does not."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx.rounding import rounding


def _model(nodes, inits=(), elem=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [2, 4])],
                              [helper.make_tensor_value_info("y", elem, [2, 4])], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_float32_with_weights_stored_narrow_does_not_round():
    w16 = numpy_helper.from_array(np.ones((4, 4), np.float16), "w16")
    m = _model([helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT),
                helper.make_node("MatMul", ["x", "w"], ["y"])], [w16])
    assert rounding(m) == ""


def test_a_quantizer_a_cast_down_and_narrow_inputs_round():
    q = _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
                helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])])
    assert rounding(q) == "DynamicQuantizeLinear"
    cast = _model([helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
                   helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)])
    assert rounding(cast) == "a Cast to float16 or narrower"
    assert rounding(_model([helper.make_node("Relu", ["x"], ["y"])], elem=TensorProto.FLOAT16))
