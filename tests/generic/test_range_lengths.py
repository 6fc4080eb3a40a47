"""A Range of relative positions over an opaque size (``range(frames - 1, -frames, -1)``: ``2 * frames - 1`` of them,
a Parakeet's positions computed live) typed by its arithmetic (eqsat.generic.strided), as onnxruntime sizes it at
every sample count; a Range whose delta is not 1 or -1 is left to the runs. Oracle: onnxruntime's output shapes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from eqsat.generic import Original
from eqsat.generic.strided import opaque_at
from eqsat.generic.typed_original import typed


def _positions(delta: int) -> onnx.ModelProto:
    """Frames of a strided Conv (``(samples - 10) // 5 + 1``), then ``range(frames - 1, -frames, delta)``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 1, 10)).astype(np.float32), "k"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("one", 1), ("last", 2), ("delta", delta)))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["y"], kernel_shape=[10], strides=[5]),
             helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Gather", ["s", "last"], ["frames"]),
             helper.make_node("Sub", ["frames", "one"], ["first"]),
             helper.make_node("Neg", ["frames"], ["limit"]),
             helper.make_node("Range", ["first", "limit", "delta"], ["positions"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 1, "samples"])],
                              [helper.make_tensor_value_info("positions", TensorProto.INT64, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_relative_positions_are_twice_the_frames_less_one_at_every_count():
    model = _positions(-1)
    w = typed(Original(model, {"batch": 1, "samples": 200}))
    (length,) = w.shapes["positions"]
    assert length is not None and not length.is_const
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for samples in range(10, 400):
        at = opaque_at(w, {"batch": 1, "samples": samples})
        assert at is not None
        (got,) = sess.run(None, {"x": np.zeros((1, 1, samples), np.float32)})
        assert int(length.value(at)) == got.shape[0], samples


def test_a_range_by_another_step_is_not_typed():
    w = typed(Original(_positions(-2), {"batch": 1, "samples": 200}))
    assert w.shapes["positions"] == [None]
