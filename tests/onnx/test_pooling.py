"""A pooling that rounds up (``ceil_mode=1``) sized as onnxruntime sizes it (eqsat.onnx.windows), not as onnx's shape
inference does: onnxruntime drops a last window that would start in the end padding. Oracles: onnxruntime's output
lengths of one-node models, and the original in onnxruntime against the program eqsat writes (which failed to run
before: the import carried onnx's length into the Reshape targets after the pool, and the run ended with exit 3)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx_builders import windowed_rows
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.onnx.windows import ceil_length

OPSET = [helper.make_opsetid("", 17)]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


CASES = [(op, k, s, d, pb, pe) for op, k, s, d, pb, pe in itertools.product(
    ("MaxPool", "AveragePool"), (1, 2, 3), (1, 2, 3), (1, 2), (0, 1), (0, 1, 2))
    if pb < k and pe < k and not (op == "AveragePool" and d > 1)]


@pytest.mark.parametrize("op,k,s,d,pb,pe", CASES)
def test_a_pooling_that_rounds_up_has_onnxruntimes_length(op, k, s, d, pb, pe):
    attrs = {"kernel_shape": [k], "strides": [s], "pads": [pb, pe], "ceil_mode": 1, **({"dilations": [d]} if d > 1 else {})}
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = _session(helper.make_model(graph, opset_imports=OPSET))
    for n in range(d * (k - 1) + 1, 24):
        (y,) = sess.run(None, {"x": np.zeros((1, 1, n), np.float32)})
        assert ceil_length(n, k, s, d, pb, pe) == y.shape[2], (n, y.shape)


def _pooled_rows() -> onnx.ModelProto:
    """A Conv, then a MaxPool of kernel 2, stride 2, padding 1 that rounds up (13 samples: 7 windows; onnx's inference
    says 8), its rows through a MatMul and back (:func:`onnx_builders.windowed_rows`)."""
    return windowed_rows(3, [
        helper.make_node("Conv", ["x", "k"], ["cv"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("MaxPool", ["cv"], ["w"], kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1)])


@pytest.mark.parametrize("tuned", [4001, 4000, 13])
def test_a_model_pooling_that_rounds_up_is_written_and_matches(tuned):
    """(A static model of this kind fails in onnxruntime itself: its graph optimizer folds the Shape from onnx's
    inferred 2002 frames.)"""
    original = _pooled_rows()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 1, tuned)}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert_same_at(original, result.optimized, [{"x": (b, 1, n)} for b, n in [(1, 4001), (2, 4000), (3, 13),
                                                                             (1, 257)]], seed=3)
