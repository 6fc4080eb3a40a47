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


def _upsampled_to_twice_the_grid():
    """A patch grid (a Conv of stride 16: ``floor(h/16)``), resized to twice its sides read off its Shape
    (``interpolate(y, size=(2 * y.shape[2], 2 * y.shape[3]))``, as torch's TorchScript exporter writes it)."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[16, 16], strides=[16, 16]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Slice", ["s", "two", "four"], ["sides"]),
             helper.make_node("Mul", ["sides", "twice"], ["doubled"]),
             helper.make_node("Slice", ["s", "zero", "two"], ["lead"]),
             helper.make_node("Concat", ["lead", "doubled"], ["to"], axis=0),
             helper.make_node("Resize", ["r", "", "", "to"], ["y"], mode="nearest")]
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 16, 16)).astype(np.float32), "k"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("zero", [0]), ("two", [2]), ("four", [4]), ("twice", [2])))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "oh", "ow"])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_a_floor_times_a_constant_is_not_another_floor():
    """``2 * floor(h/16)`` was read as the monomial ``1/8*h`` (``floor(h/8)``): right at the sides the program was
    verified at (37, 256, 448), one row and column more wherever ``h mod 16`` is 8 or more (a side of 24: 3 against
    2), a wrong model shipped. The product of a floor is no monomial now (eqsat.onnx.axes.shape_values), and the
    verification also checks one below the tuned side (223: every remainder by 16 at its largest)."""
    from ort_check import assert_same_at

    from eqsat.app.config import OptimizeConfig
    from eqsat.app.pipeline import optimize

    original = _upsampled_to_twice_the_grid()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0))
    assert "h=223" in result.report.interface.verified_at
    assert_same_at(original, result.optimized if result.optimized is not None else original,
                   [{"x": (1, 3, h, w)} for h, w in ((224, 224), (24, 40), (250, 57), (37, 255), (16, 31))], seed=0)
