"""The original typed once by the writer's arithmetic (eqsat.generic.typed_original): a size it folded that no
monomial of the samples is (a Slice of the data to the frames, ``Shape(k)[1]``) is written as the candidate's frames,
read off the same arithmetic, not fitted from runs; a Pad is typed by its counts; sums that are not exact (a drop
clamped at 0, twice a floor) are not read. Oracles: onnxruntime's output shapes at every sample count of a range,
and the original in onnxruntime at every count of a range."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.generic import Original
from eqsat.generic.strided import opaque_at
from eqsat.generic.typed_original import typed

OPSET = [helper.make_opsetid("", 17)]


def _front(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], two_d: bool = False) -> onnx.ModelProto:
    """``x`` of ``[batch, 1, samples]`` through a strided Conv to ``y`` of ``[batch, 4, frames]`` (``(samples - 10) //
    5 + 1``; ``two_d``: as the 2-D Conv over a height of 1 eqsat writes for it), then ``kk = y^T @ W`` of ``[batch,
    frames, 4]`` and ``frames`` read off it (``Shape(kk)[1]``), then ``nodes`` to the output ``out``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 1, 1, 10) if two_d else (4, 1, 10)).astype(np.float32),
                                     "k"),
             numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("one", 1), ("two", 2), ("three", 3), ("ax0", [0]), ("ax1", [1]), ("end", [2**62]))), *inits]
    head = [helper.make_node("Unsqueeze", ["x", "two"], ["x4"])] if two_d else []
    head += [helper.make_node("Conv", ["x4" if two_d else "x", "k"], ["y4" if two_d else "y"],
                              kernel_shape=[1, 10] if two_d else [10], strides=[1, 5] if two_d else [5])]
    if two_d:
        head.append(helper.make_node("Squeeze", ["y4", "two"], ["y"]))
    head += [helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["yt", "W"], ["kk"]),
             helper.make_node("Shape", ["kk"], ["ks"]),
             helper.make_node("Gather", ["ks", "one"], ["frames"])]
    graph = helper.make_graph(head + nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                ["batch", 1, "samples"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "rows", 4])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _sliced_to(end: list[onnx.NodeProto], inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """``kk`` joined to itself along the frames (``2 * frames`` rows, Relu'd twice: the data) and sliced to ``e``,
    which ``end`` computes from ``frames``."""
    return _front([*end, helper.make_node("Unsqueeze", ["e", "ax0"], ["e1"]),
                   helper.make_node("Concat", ["kk", "kk"], ["z"], axis=1),
                   helper.make_node("Relu", ["z"], ["z1"]), helper.make_node("Relu", ["z1"], ["z2"]),
                   helper.make_node("Slice", ["z2", "ax0", "e1", "ax1"], ["out"])], list(inits))


def _same_everywhere(original: onnx.ModelProto, written: onnx.ModelProto, counts: range) -> None:
    sizes = [{"x": (1 + n % 3, 1, n)} for n in counts] + [{"x": (2, 1, n)} for n in (4096, 16003)]
    assert_same_at(original, written, sizes, seed=0)


def _optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    return optimize(model, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0)).optimized


def test_a_slice_to_the_frames_read_off_another_value_is_written_as_the_frames():
    """The import folds the Slice's end (``Shape(kk)[1]``, the frames) and no run fits it (a
    floor arithmetic of the samples); it is read off the original typed once, as the candidate's frames. Before,
    the end stayed as the tuned size's and the input came back."""
    model = _sliced_to([helper.make_node("Identity", ["frames"], ["e"])])
    result = optimize(model, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    _same_everywhere(model, result.optimized, range(10, 300, 7))


def test_a_size_that_dropped_a_count_and_gains_it_back_is_not_read_as_the_frames():
    """``Shape(kk[:, 3:])[1] + 3`` is ``max(frames - 3, 0) + 3``: the frames from 3 frames on, 3 below (a review found
    it read as the frames: wrong at 10 to 19 samples, where the verified sizes all have 6 frames or more)."""
    model = _sliced_to([helper.make_node("Slice", ["kk", "three3", "end", "ax1"], ["kd"]),  # frames from the 4th
                        helper.make_node("Shape", ["kd"], ["kds"]),
                        helper.make_node("Gather", ["kds", "one"], ["kept"]),
                        helper.make_node("Add", ["kept", "three"], ["e"])],
                       [numpy_helper.from_array(np.array([3], np.int64), "three3")])
    _same_everywhere(model, _optimized(model), range(10, 60))


def test_twice_a_pooled_length_is_not_the_samples():
    """``2 * Shape(MaxPool(x, 2, 2))[2]`` is ``2 * floor(samples / 2)``: a floor's multiple is no monomial (a review
    found it read as the samples; the verification at an odd count returned the input)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2]),
             helper.make_node("Shape", ["p"], ["ps"]), helper.make_node("Gather", ["ps", "two"], ["half"]),
             helper.make_node("Mul", ["half", "two"], ["e"]), helper.make_node("Unsqueeze", ["e", "ax0"], ["e1"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Slice", ["r", "zero", "e1", "two1"], ["out"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("two", 2), ("ax0", [0]), ("zero", [0]), ("two1", [2]))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, "samples"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 1, "kept"])], inits)
    model = helper.make_model(graph, opset_imports=OPSET)
    _same_everywhere(model, _optimized(model), range(2, 80))


def _padded(two_d: bool = False) -> onnx.ModelProto:
    """The frames padded by one row at the head and two at the tail (``frames + 3``)."""
    return _front([helper.make_node("Pad", ["kk", "pads"], ["out"])],
                  [numpy_helper.from_array(np.array([0, 1, 0, 0, 2, 0], np.int64), "pads")], two_d)


def test_a_pad_by_constant_counts_is_typed_by_their_sum():
    model = _padded()
    w = typed(Original(model, {"batch": 1, "samples": 200}))
    dims = w.shapes["out"]
    assert all(d is not None for d in dims), dims
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for samples in range(10, 400):
        at = opaque_at(w, {"batch": 2, "samples": samples})
        assert at is not None
        (got,) = sess.run(None, {"x": np.zeros((2, 1, samples), np.float32)})
        assert [int(d.value(at)) for d in dims if d is not None] == list(got.shape), samples


def test_a_one_d_conv_and_the_two_d_one_eqsat_writes_for_it_are_one_arithmetic():
    """The frames of a 1-D Conv and of the 2-D one over a height of 1 carry one arithmetic: the original's sizes read
    as a candidate's (a key naming the value or the Conv's attributes told them apart)."""
    ones = typed(Original(_padded(), {"batch": 1, "samples": 200}))
    twos = typed(Original(_padded(two_d=True), {"batch": 1, "samples": 200}))
    for name in ("kk", "out"):
        frames_1d, frames_2d = ones.shapes[name][1], twos.shapes[name][1]
        assert frames_1d is not None and frames_2d is not None and not frames_1d.is_const
        (s1, _), (s2, _) = frames_1d.powers[0], frames_2d.powers[0]
        assert ones.fits.canon[s1] == twos.fits.canon[s2]
