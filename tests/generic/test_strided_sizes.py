"""Sizes no monomial of the symbols is, typed by their arithmetic (eqsat.generic.strided), not fitted from runs: an
audio front-end's strided Conv frames (``(samples - 10) // 5 + 1``, then ``(f - 3) // 2 + 1``) and a convolutional
position embedding (a Conv padded to ``frames + 1``, sliced back by ``[..., :-1]`` and added). Oracles: onnxruntime's
output lengths of one-node models (the window's arithmetic), and the original in onnxruntime at sample counts and
batches the program was not tuned at (the written program)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import windowed_rows
from ort_check import assert_same_at
from run_records import program_runs, written_without_runs

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.generic.strided import window

OPSET = [helper.make_opsetid("", 17)]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


WINDOWS = [
    ("Conv", {"kernel_shape": [10], "strides": [5]}),
    ("Conv", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("Conv", {"kernel_shape": [4], "pads": [2, 2]}),
    ("Conv", {"kernel_shape": [3], "strides": [3], "dilations": [2], "pads": [0, 2]}),
    ("Conv", {"kernel_shape": [5], "strides": [2], "auto_pad": "SAME_UPPER"}),
    ("Conv", {"kernel_shape": [5], "strides": [3], "auto_pad": "VALID"}),
    ("MaxPool", {"kernel_shape": [2], "strides": [2]}),
    ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "dilations": [2]}),
    ("AveragePool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", {"kernel_shape": [2], "strides": [2], "auto_pad": "SAME_LOWER"}),
    ("MaxPool", {"kernel_shape": [2], "strides": [2], "pads": [1, 1], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [1], "strides": [2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3], "strides": [3], "pads": [1, 1], "ceil_mode": 1}),
]
LEFT_TO_RUNS = [
    ("MaxPool", {"kernel_shape": [2], "dilations": [2], "auto_pad": "SAME_UPPER"}),
    ("MaxPool", {"kernel_shape": [3], "dilations": [2], "strides": [2], "auto_pad": "SAME_LOWER"}),
]
"""windows whose lengths follow onnxruntime's own rule (SAME padding computed from the undilated kernel): not typed,
fitted from runs as before"""


class _Shapes:
    """What :func:`window` reads of a rewrite: the weight's shape only where the Conv names no kernel_shape."""

    shapes: dict = {}


def _window(op: str, attrs: dict) -> tuple[onnx.NodeProto, ort.InferenceSession]:
    node = helper.make_node(op, ["x", "k"] if op == "Conv" else ["x"], ["y"], **attrs)
    inits = [numpy_helper.from_array(np.ones((1, 1, attrs["kernel_shape"][0]), np.float32), "k")] if op == "Conv" else []
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return node, _session(helper.make_model(graph, opset_imports=OPSET))


@pytest.mark.parametrize("op,attrs", WINDOWS, ids=[f"{op}-{k}" for k, (op, _a) in enumerate(WINDOWS)])
def test_a_windows_output_length_is_onnxruntimes_at_every_length(op, attrs):
    node, sess = _window(op, attrs)
    length = window(_Shapes(), node, 0)  # type: ignore[arg-type]
    assert length is not None
    for n in (12, 13, 14, 16, 17, 31, 100, 101, 160, 1001):
        (y,) = sess.run(None, {"x": np.zeros((1, 1, n), np.float32)})
        assert length(n) == y.shape[2], (n, length(n), y.shape)


@pytest.mark.parametrize("op,attrs", LEFT_TO_RUNS, ids=[f"{op}-{k}" for k, (op, _a) in enumerate(LEFT_TO_RUNS)])
def test_a_window_whose_length_follows_onnxruntimes_own_rules_is_not_typed(op, attrs):
    node, sess = _window(op, attrs)
    lengths = {n: sess.run(None, {"x": np.zeros((1, 1, n), np.float32)})[0].shape[2] for n in (12, 13, 14)}
    same = {n: -(-n // attrs.get("strides", [1])[0]) for n in lengths}
    assert lengths != same  # SAME's textbook length misses onnxruntime's (the oracle)
    assert window(_Shapes(), node, 0) is None  # type: ignore[arg-type]


def _front_end() -> onnx.ModelProto:
    """Two strided Convs over the samples, a position Conv padded to one frame more and sliced back, added, and the
    frames' rows through a MatMul and back to ``[batch, frames, 8]`` (a target computed from the Shape, as
    exporters write it)."""
    rng = np.random.default_rng(0)
    w = {"k1": (8, 1, 10), "k2": (8, 8, 3), "kp": (8, 8, 4), "m": (8, 8)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n) for n, s in w.items()]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("s0", [0]), ("e1", [-1]), ("a2", [2]), ("rows", [-1, 8]), ("i0", [0]), ("i1", [1]), ("eight", [8]))]
    nodes = [helper.make_node("Conv", ["x", "k1"], ["c1"], kernel_shape=[10], strides=[5]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "k2"], ["c2"], kernel_shape=[3], strides=[2]),
             helper.make_node("Conv", ["c2", "kp"], ["cp"], kernel_shape=[4], pads=[2, 2]),
             helper.make_node("Slice", ["cp", "s0", "e1", "a2"], ["sp"]),
             helper.make_node("Add", ["c2", "sp"], ["h"]),
             helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "rows"], ["flat"]),
             helper.make_node("MatMul", ["flat", "m"], ["mm"]),
             helper.make_node("Shape", ["t"], ["ts"]),
             helper.make_node("Gather", ["ts", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["ts", "i1"], ["f"], axis=0),
             helper.make_node("Concat", ["b", "f", "eight"], ["back"], axis=0),
             helper.make_node("Reshape", ["mm", "back"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [
        "batch", 1, "samples"])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 8])],
                              inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_a_front_ends_frames_are_written_for_every_length_without_a_run_of_the_program(monkeypatch):
    """No prefix of a written program is run to fit the frames (before: one fit of the front end and one of the
    position embedding's slice, each a batch of runs, for every candidate); the program matches the original at
    lengths and batches it was not tuned at."""
    asked = program_runs(monkeypatch)
    original = _front_end()
    config = OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                               input_shapes={"x": (1, 1, 4000)})
    result = optimize(original, config)
    assert asked == [], asked
    assert_same_at(original, result.optimized, [{"x": (b, 1, n)} for b, n in ((1, 4000), (1, 4011), (2, 16003),
                                                                             (3, 257), (1, 9999))], seed=1, atol=1e-4)


def _patches() -> onnx.ModelProto:
    """A Conv of kernel 2 and stride 2 over the samples (``floor(samples / 2)`` frames), its rows through a MatMul
    and back (:func:`onnx_builders.windowed_rows`)."""
    return windowed_rows(2, [helper.make_node("Conv", ["x", "k"], ["w"], kernel_shape=[2], strides=[2])])


@pytest.mark.parametrize("samples", [4000, 4001])
def test_a_floor_window_tuned_at_a_size_its_stride_does_not_divide_is_written_for_every_size(samples):
    """``floor(samples / 2)`` is the fractional monomial ``1/2*samples`` only where the tuned size is a multiple of 2
    (at 4001 it would read 2000.5, and the Reshape back would not line up: the input returned); else it is an opaque
    symbol with its formula. Either way the program is written, and matches the original in onnxruntime."""
    original = _patches()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 1, samples)}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert_same_at(original, result.optimized, [{"x": (b, 1, n)} for b, n in ((1, samples), (2, 4001), (3, 257),
                                                                             (1, 16000))], seed=2)


HUBERT_STACK = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
"""(kernel, stride) of an audio front end's Convs as HuBERT's: ``(samples - 400) // 320 + 1`` frames"""


def _guarded_mean(guard: str) -> onnx.ModelProto:
    """An audio front end (:data:`HUBERT_STACK`, 4 channels), its last 3 frames dropped (``[..., :-3]``: no frame
    left below 1360 samples, where the model still runs), summed over the frames and divided by their count read off
    the Shape and guarded against 0 (``guard``: ``max``, ``max(len, 1)``; ``where``, ``Where(len == 0, 1, len)``):
    a mean over lengths as models write it."""
    rng = np.random.default_rng(3)
    inits, nodes, x = [], [], "x"
    for k, (kernel, stride) in enumerate(HUBERT_STACK):
        inits.append(numpy_helper.from_array((rng.standard_normal((4, 1 if k == 0 else 4, kernel)) * 0.3)
                                             .astype(np.float32), f"k{k}"))
        nodes.append(helper.make_node("Conv", [x, f"k{k}"], [f"c{k}"], kernel_shape=[kernel], strides=[stride]))
        x = f"c{k}"
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("s0", [0]), ("e3", [-3]), ("a2", [2]), ("zero", 0), ("one", 1), ("i2", [2]))]
    nodes += [helper.make_node("Slice", [x, "s0", "e3", "a2"], ["kept"]),
              helper.make_node("ReduceSum", ["kept", "i2"], ["total"], keepdims=0),
              helper.make_node("Shape", ["kept"], ["ks"], start=2, end=3),
              helper.make_node("Squeeze", ["ks"], ["n"])]
    if guard == "max":
        nodes.append(helper.make_node("Max", ["n", "one"], ["count"]))
    else:
        nodes += [helper.make_node("Equal", ["n", "zero"], ["empty"]),
                  helper.make_node("Where", ["empty", "one", "n"], ["count"])]
    nodes += [helper.make_node("Cast", ["count"], ["countf"], to=TensorProto.FLOAT),
              helper.make_node("Div", ["total", "countf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [
        "batch", 1, "samples"])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


@pytest.mark.parametrize("guard", ["max", "where"])
def test_a_count_of_frames_that_can_be_zero_keeps_its_guard(guard):
    """The count of frames left after a Slice is 0 at 400-1359 samples, where the original divides by its guard's 1;
    the written program must too (a count typed as at least 1 divides 0 by 0 there: NaN), at sizes the
    verification's default ones (1, 37, 256 samples: refused by the original; 4000 and beyond: frames left) never
    reach; its smallest (eqsat.onnx.axes.smallest: 400 samples) does, so both the writer and that check stand
    between such a count and a wrong model."""
    original = _guarded_mean(guard)
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 1, 4000)}))
    assert_same_at(original, result.optimized, [{"x": (b, 1, n)} for b, n in ((1, 400), (1, 1000), (2, 1359),
                                                                             (1, 1360), (3, 4000), (1, 9999))], seed=4)


def _class_token() -> onnx.ModelProto:
    """A ViT's tokens: patches of 4x4 (a Conv of stride 4) flattened, a class token expanded to the batch and put
    before them (``1 + floor(h / 4) * floor(w / 4)`` tokens), a linear layer over every token, then the class token's row
    (``[:, :1]``) added to the patches' rows (``[:, 1:]``)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 4, 4)) * 0.2).astype(np.float32), "k"),
             numpy_helper.from_array((rng.standard_normal((1, 1, 8))).astype(np.float32), "cls"),
             numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "m"),
             numpy_helper.from_array((rng.standard_normal(8)).astype(np.float32), "bias")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("flat", [0, 8, -1]), ("i0", [0]), ("one", [1]), ("rest", [1, 1, 1]), ("big", [2**62]), ("ax1", [1]))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Reshape", ["c", "flat"], ["cf"]),
             helper.make_node("Transpose", ["cf"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Concat", ["s", "one", "one"], ["to"], axis=0),
             helper.make_node("Expand", ["cls", "to"], ["token"]),
             helper.make_node("Concat", ["token", "t"], ["tokens"], axis=1),
             helper.make_node("MatMul", ["tokens", "m"], ["product"]),
             helper.make_node("Add", ["product", "bias"], ["mixed"]),
             helper.make_node("Slice", ["mixed", "i0", "one", "ax1"], ["head"]),
             helper.make_node("Slice", ["mixed", "one", "big", "ax1"], ["patches"]),
             helper.make_node("Add", ["patches", "head"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "patches", 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_a_class_token_before_the_patches_is_typed_without_a_run_of_the_program(monkeypatch):
    """The tokens are the patches plus one (a Concat of a size of the symbols and a constant), the class token's
    slice one at every size, and the patches' slice the patches again: no prefix of the written program is run to
    fit them (before: the tokens' size fitted from runs, an opaque symbol, for every candidate; the import's rewrite
    of the original, not final, still fits the patches once per model)."""
    written_without_runs(monkeypatch, _class_token(), (1, 3, 32, 32),
                         [(1, 3, 32, 32), (2, 3, 37, 50), (1, 3, 4, 4), (3, 3, 61, 19)], seed=3)


def _dropped_then_joined(count: int) -> onnx.ModelProto:
    """Frames (``floor(length / 4)``) with their first ``count`` dropped (``max(0, frames - count)`` left: a Slice
    clamps), ``count`` register tokens joined after them, and a position table's rows sliced to the tokens' count
    read off their Shape and added; then a linear layer."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 2, 4)) * 0.2).astype(np.float32), "k"),
             numpy_helper.from_array((rng.standard_normal((1, count, 8))).astype(np.float32), "reg"),
             numpy_helper.from_array((rng.standard_normal((1, 512, 8))).astype(np.float32), "pos"),
             numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "m"),
             numpy_helper.from_array((rng.standard_normal(8)).astype(np.float32), "bias")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("drop", [count]), ("big", [2**62]), ("ax1", [1]), ("rest", [count, 8]), ("i0", [0]))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[4], strides=[4]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Slice", ["t", "drop", "big", "ax1"], ["kept"]),
             helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Concat", ["s", "rest"], ["to"], axis=0),
             helper.make_node("Expand", ["reg", "to"], ["regs"]),
             helper.make_node("Concat", ["kept", "regs"], ["tokens"], axis=1),
             helper.make_node("Shape", ["tokens"], ["n"], start=1, end=2),
             helper.make_node("Slice", ["pos", "i0", "n", "ax1"], ["rows"]),
             helper.make_node("Add", ["tokens", "rows"], ["z"]),
             helper.make_node("MatMul", ["z", "m"], ["product"]),
             helper.make_node("Add", ["product", "bias"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 2, "length"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "tokens", 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


@pytest.mark.parametrize("count", [3, 9])
def test_tokens_joined_after_a_clamped_drop_are_not_the_frames(count):
    """``max(0, frames - count) + count`` is the frames only from ``count`` frames up; below, at lengths none of the
    verified sizes reach, a program that wrote the tokens as the frames sliced the table to the frames (a review's
    repro: with 9, a wrong model at every length from 4 to 35, which the typing of a join brought; with 3, one older
    than it, from runs). The original in onnxruntime at every length from 4 to 40 is the oracle."""
    original = _dropped_then_joined(count)
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 2, 64)}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert_same_at(original, result.optimized, [{"x": (b, 2, n)} for b in (1, 3) for n in range(4, 41)], seed=4)
