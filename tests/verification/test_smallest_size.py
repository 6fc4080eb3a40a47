"""The smallest size the original runs at, verified too (eqsat.onnx.axes.smallest): for a waveform's samples, which
the default sizes (1, 37, 256) all lie below a front end's receptive field, the edge where the frames are 1. Oracles:
onnxruntime run at every size (the edge), and the original in onnxruntime at the sizes with one frame (a program
written for every size)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.onnx.axes.smallest import smallest_shapes

OPSET = [helper.make_opsetid("", 17)]
RECEPTIVE = 20
"""the samples the front end's two Convs (kernel 10 stride 5, kernel 3 stride 2) need for one frame"""


def _front_end(least: int) -> onnx.ModelProto:
    """samples [batch, 1, samples] -> two strided Convs -> frames [batch, frames, 8], plus a row expanded to
    ``[batch, max(frames, least), 8]`` (its count read off the samples' Shape as data) added to them: at one frame
    the row's count is ``least`` and the Add broadcasts the frame to it."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("k1", (8, 1, 10)), ("k2", (8, 8, 3)), ("row", (1, 1, 8)), ("m", (8, 8)))]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("m10", -10), ("five", 5), ("m3", -3), ("two", 2), ("one", 1), ("least", least), ("a0", [0]),
               ("eight", [8]))]
    nodes = [helper.make_node("Conv", ["x", "k1"], ["c1"], kernel_shape=[10], strides=[5]),
             helper.make_node("Conv", ["c1", "k2"], ["c2"], kernel_shape=[3], strides=[2]),
             helper.make_node("Transpose", ["c2"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Shape", ["x"], ["xs"], start=2, end=3),
             helper.make_node("Squeeze", ["xs"], ["n"]),
             helper.make_node("Add", ["n", "m10"], ["n1"]), helper.make_node("Div", ["n1", "five"], ["n2"]),
             helper.make_node("Add", ["n2", "one"], ["f1"]), helper.make_node("Add", ["f1", "m3"], ["n3"]),
             helper.make_node("Div", ["n3", "two"], ["n4"]), helper.make_node("Add", ["n4", "one"], ["frames"]),
             helper.make_node("Max", ["frames", "least"], ["count"]),
             helper.make_node("Unsqueeze", ["count", "a0"], ["count1"]),
             helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
             helper.make_node("Concat", ["b", "count1", "eight"], ["target"], axis=0),
             helper.make_node("Expand", ["row", "target"], ["rows"]),
             helper.make_node("Add", ["t", "rows"], ["h"]),
             helper.make_node("MatMul", ["h", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [
        "batch", 1, "samples"])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 8])],
                              inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _runs(sess: ort.InferenceSession, batch: int, samples: int) -> bool:
    try:
        sess.run(None, {"x": np.zeros((batch, 1, samples), np.float32)})
    except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type
        return False
    return True


def test_the_smallest_size_is_the_first_that_onnxruntime_runs():
    model = _front_end(1)
    sess = _session(model)
    first = next(n for n in range(1, 200) if _runs(sess, 1, n))
    assert first == RECEPTIVE
    assert smallest_shapes(model, {"batch": 1, "samples": 4000}) == [("samples=20", {"x": (1, 1, 20)})]
    assert smallest_shapes(model, {"batch": 1, "samples": 128}) == []  # the default sizes reach below it


@pytest.mark.parametrize("least", [1, 2])
def test_a_count_that_differs_from_the_frames_at_one_frame_only_is_written_right_there(least):
    """``max(frames, 2)`` is the frames wherever there are two or more: a program that reads it as the frames (an
    Expand to them written as no Expand) broadcasts nothing at one frame (samples 20-29), where the original adds the
    frame to two rows; the default sizes verified (37 samples: two frames; 256; 4000 and beyond) never show it."""
    original = _front_end(least)
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 1, 4000)}))
    assert_same_at(original, result.optimized, [{"x": (b, 1, n)} for b, n in ((1, 20), (2, 25), (1, 29), (1, 37),
                                                                             (3, 4000), (1, 9999))], seed=1)
