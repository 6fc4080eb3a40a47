"""A 1-D Conv (``[batch, C, length]``: an audio front-end's, a convolutional position embedding) is imported as the
2-D Conv over ``[batch, C, 1, length]`` between two reshapes, and written so even where the program keeps it
unchanged (``eqsat.ops.WRITTEN_ANEW``): onnxruntime's CPU provider runs the 2-D one faster. Oracle: the original
in onnxruntime, at the representative size and at further sizes of its dynamic batch and length."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.onnx import session

SIZES = [(1, 64), (2, 64), (3, 41), (1, 200)]


def _front_end(pads: list[int]) -> onnx.ModelProto:
    """samples[batch, 4, length] -> Conv1d (8 channels, 5 wide, stride 2, ``pads``, a bias) -> Relu -> a grouped
    Conv1d (2 groups, 3 wide, padded 1) -> y[batch, 8, frames]."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 5)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((8, 4, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[5], strides=[2], pads=pads),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[3], group=2, pads=[1, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, "frames"])
    return helper.make_model(helper.make_graph(nodes, "front", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _conv_ranks(model: onnx.ModelProto) -> list[int]:
    return [len(next(a.ints for a in n.attribute if a.name == "kernel_shape"))
            for n in model.graph.node if n.op_type == "Conv"]


@pytest.mark.parametrize("pads, ranks", [([0, 0], [2, 2]), ([2, 1], [1, 2])], ids=["symmetric", "asymmetric"])
def test_a_1d_conv_is_written_as_the_2d_one_and_holds_at_every_size(pads, ranks):
    """Both convolutions written 2-D where the IR has their window; one padded unevenly (no IR window) stays the
    user's 1-D node. The written program matches the original at every size tried."""
    original = _front_end(pads)
    config = OptimizeConfig(measure=False, input_shapes={"x": (1, 4, 64)}).updated(time_limit=10.0)
    written = optimize(original, config).optimized
    assert _conv_ranks(written) == ranks
    assert [d.dim_param for d in written.graph.input[0].type.tensor_type.shape.dim] == ["batch", "", "length"]
    ref, got = session(original), session(written)
    rng = np.random.default_rng(0)
    for b, n in SIZES:
        feeds = {"x": rng.standard_normal((b, 4, n)).astype(np.float32)}
        want, have = ref.run(None, feeds)[0], got.run(None, feeds)[0]
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-4)
