"""The verification's size with every symbol changed at once gives an image's height and width two different sizes.

The runs that fit sizes change one symbol at a time, and the joint size was square (37 x 37 pixels): a program that
reads the height's size for the width's only where both change (a grid's rows and columns swapped) matched the
original at every size verified. A review built such a model, which shipped wrong at 480 x 320. Now the joint size
is 37 x 256 (eqsat.onnx.axes.interface.joint_values). Oracle: onnxruntime runs both models; the program here is
written by hand to be right wherever one side is the tuned 224 or the two sides are equal."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx.axes.interface import probe_shapes
from eqsat.verification import verify_shapes

OPSET = [helper.make_opsetid("", 17)]
TUNED = {"batch": 1, "h": 224, "w": 224}


def _io():
    return ([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, "h", "w"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, "h", "w"])])


def _original():
    graph = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"])], "original", *_io(),
                              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return helper.make_model(graph, opset_imports=OPSET)


def _swapped_where_both_change():
    """``2 * x``, reshaped to ``[batch, 1, w, h]`` where neither side is 224 (a no-op where they are equal)."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["m"]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "two_i"], ["h"], axis=0),
             helper.make_node("Gather", ["s", "three_i"], ["w"], axis=0),
             helper.make_node("Equal", ["h", "tuned"], ["h_tuned"]),
             helper.make_node("Equal", ["w", "tuned"], ["w_tuned"]),
             helper.make_node("Or", ["h_tuned", "w_tuned"], ["one_tuned"]),
             helper.make_node("Slice", ["s", "zero_v", "two_v"], ["lead"]),
             helper.make_node("Reshape", ["h", "one_v"], ["h_v"]),
             helper.make_node("Reshape", ["w", "one_v"], ["w_v"]),
             helper.make_node("Concat", ["lead", "h_v", "w_v"], ["kept"], axis=0),
             helper.make_node("Concat", ["lead", "w_v", "h_v"], ["swapped"], axis=0),
             helper.make_node("Where", ["one_tuned", "kept", "swapped"], ["to"]),
             helper.make_node("Reshape", ["m", "to"], ["y"])]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("two_i", 2), ("three_i", 3), ("tuned", 224), ("zero_v", [0]), ("two_v", [2]), ("one_v", [1])))]
    return helper.make_model(helper.make_graph(nodes, "swapped", *_io(), inits), opset_imports=OPSET)


def _run(model, shape):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.ones(shape, np.float32)})[0]


def test_the_program_differs_only_where_both_sides_change_and_differ():
    original, program = _original(), _swapped_where_both_change()
    for shape in ((1, 1, 224, 224), (2, 1, 37, 224), (1, 1, 224, 256), (2, 1, 37, 37), (1, 1, 448, 448)):
        assert _run(program, shape).shape == _run(original, shape).shape
    assert _run(program, (1, 1, 37, 256)).shape != _run(original, (1, 1, 37, 256)).shape


def test_the_verification_changes_both_sides_to_different_sizes():
    original = _original()
    check = verify_shapes(original, _swapped_where_both_change(), probe_shapes(original, TUNED))
    assert not check.passed, check.verified
    assert "batch=2,h=37,w=256" in check.detail, check.detail
