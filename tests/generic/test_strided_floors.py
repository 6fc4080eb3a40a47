"""A size of fractional coefficient stands for a floor (``1/4*h``: ``floor(h/4)``, a Conv of stride 4's output
side). A Reshape that flattens two of them (``[1, 8, h/4, w/4]`` to ``[1, 8, -1]``) takes their product, which the
writer wrote as ``floor(h*w/16)``: the program computed another mean at a side of 18 (20 where the original's
flattened axis holds 16). Now a product of floors is written as one (eqsat.generic.sizes.SizeWriter._floors); the
program written for every size is checked against the original in onnxruntime at sides that are no multiple of 4."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.generic import Original, make_generic

OPSET = [helper.make_opsetid("", 17)]


def _model(target: list[int]):
    """A strided Conv, a Reshape of its output to ``target``, and the mean over its last axis computed from that
    axis's size read at run time (``Shape``, ``Gather``): the size the writer computes from the symbols."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Reshape", ["c", "t"], ["f"]),
             helper.make_node("Shape", ["f"], ["fs"]),
             helper.make_node("Gather", ["fs", "last"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["f", "ax"], ["s"], keepdims=0),
             helper.make_node("Div", ["s", "nf"], ["y"])]
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 4, 4)).astype(np.float32), "k"),
             numpy_helper.from_array(np.array(len(target) - 1, np.int64), "last"),
             numpy_helper.from_array(np.array(target, np.int64), "t"),
             numpy_helper.from_array(np.array([len(target) - 1], np.int64), "ax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=OPSET)


@pytest.mark.parametrize("target", [[0, 0, -1], [1, -1], [2, 4, 0, 0]], ids=["flattened", "with-channels", "kept-whole"])
def test_a_strided_conv_s_sides_are_written_as_floors(target):
    model = _model(target)
    values = {"h": 16, "w": 16}
    written = make_generic(model, model, values, Original(model, values)).model
    rng = np.random.default_rng(1)
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
                for m in (model, written)]
    for h, w in ((16, 16), (18, 18), (18, 22), (31, 17), (16, 40)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        want, got = (s.run(None, {"x": x})[0] for s in sessions)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"at h={h}, w={w}")
