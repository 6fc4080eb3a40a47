"""A size exact on a span of the interface's sizes only (eqsat.generic.ranged: a table sliced between bounds around
its centre has ``2 * frames - 1`` rows only while the frames stay within the table; past it onnx's Slice wraps the
start) is written for that span, and the program the user gets runs the original beyond it (eqsat.generic.within).
Oracles: the original in onnxruntime at every sample count of a range that crosses the table's end, and at the one
length past the table where a Wav2Vec2-Conformer's original still runs."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.generic import Original
from eqsat.generic.typed_original import typed
from eqsat.onnx.axes.branches import within_spans

CENTRE = 30


def _relative(centre: int = CENTRE, fed: bool = False, constant: bool = False) -> onnx.ModelProto:
    """``x`` of ``[batch, 1, samples]`` through a strided Conv to ``kk`` of ``[batch, frames, 4]``; a table of ``2 *
    centre + 1`` rows sliced between ``centre + 1 - frames`` and ``centre + frames`` (``rows``); the data, ``kk``
    twice along the frames, transposed there and back and sliced to one more than the rows (all of it while the
    frames are within the table, fewer past it); and the rows summed. ``fed``: the weight ``W`` also an input, the
    user's to feed; ``constant``: also the rows of a weight up to the table's rows less twice the frames plus 3 (2
    rows within the table, none past it)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 1, 10)).astype(np.float32), "k"),
             numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((2 * centre + 1, 4)).astype(np.float32), "table"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("zero", 0), ("one", 1), ("centre", centre), ("ax0", [0]), ("ax1", [1]), ("start", [0])))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["y"], kernel_shape=[10], strides=[5]),
             helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["yt", "W"], ["kk"]),
             helper.make_node("Shape", ["kk"], ["ks"]),
             helper.make_node("Gather", ["ks", "one"], ["frames"]),
             helper.make_node("Sub", ["centre", "frames"], ["c0"]),
             helper.make_node("Add", ["c0", "one"], ["first"]),
             helper.make_node("Add", ["centre", "frames"], ["last"]),
             helper.make_node("Unsqueeze", ["first", "ax0"], ["first1"]),
             helper.make_node("Unsqueeze", ["last", "ax0"], ["last1"]),
             helper.make_node("Slice", ["table", "first1", "last1", "ax0"], ["rows"]),
             helper.make_node("Shape", ["rows"], ["rs"]),
             helper.make_node("Gather", ["rs", "zero"], ["r"]),
             helper.make_node("Add", ["r", "one"], ["g"]),
             helper.make_node("Unsqueeze", ["g", "ax0"], ["g1"]),
             helper.make_node("Concat", ["kk", "kk"], ["z"], axis=1),
             helper.make_node("Transpose", ["z"], ["zt"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["zt"], ["z2"], perm=[0, 2, 1]),
             helper.make_node("Slice", ["z2", "start", "g1", "ax1"], ["out"]),
             helper.make_node("ReduceSum", ["rows"], ["summed"], keepdims=0)]
    if constant:
        inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("two", 2), ("three", 3))]
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W2"))
        nodes += [helper.make_node("Mul", ["frames", "two"], ["f2"]), helper.make_node("Sub", ["r", "f2"], ["d0"]),
                  helper.make_node("Add", ["d0", "three"], ["d1"]), helper.make_node("Unsqueeze", ["d1", "ax0"], ["d2"]),
                  helper.make_node("Slice", ["W2", "start", "d2", "ax0"], ["picked"])]
    weight = [helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 4])] if fed else []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 1, "samples"]), *weight],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "rows", 4]),
                               helper.make_tensor_value_info("summed", TensorProto.FLOAT, []),
                               *([helper.make_tensor_value_info("picked", TensorProto.FLOAT, ["picks", 4])]
                                 if constant else [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    result = optimize(model, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    return result.optimized


def test_a_table_sliced_around_its_centre_is_written_for_its_span_and_the_original_runs_beyond():
    """The frames stay within the table up to 31 (164 samples); from 165 samples on the original's rows wrap. Before
    the span, this program was written as ``2 * frames`` rows at every length, and was wrong from 165 samples on."""
    original = _relative()
    written = _optimized(original)
    assert list(within_spans(written).values()) == [(10, 5 * CENTRE + 14)]
    assert_same_at(original, written, [{"x": (1 + n % 3, 1, n)} for n in range(10, 420)], seed=0)


def test_a_size_constant_on_the_span_is_not_kept_beyond_it():
    """The table's rows less twice the frames, plus 3, are 2 at every size within the table, and the import folds
    what it computes from the sizes: a candidate holding that constant is kept to the span too (a review found it
    written as 2 rows at every length: wrong from 10,015 samples, far past every size the verification runs)."""
    original = _relative(centre=2000, constant=True)
    written = _optimized(original)
    assert list(within_spans(written).values()) == [(10, 5 * 2000 + 14)]
    sizes = [{"x": (1, 1, n)} for n in (128, 10014, 10015, 10100)]
    assert_same_at(original, written, sizes, seed=0)


def test_a_weight_the_user_may_feed_is_read_where_the_feed_reaches_it():
    """A weight the user may feed (an initializer the graph also lists as an input) is read from the feed on both
    sides of the span, not from a copy of its default."""
    original = _relative(fed=True)
    written = _optimized(original)
    assert within_spans(written)
    assert_same_at(original, written, [{"x": (2, 1, n), "W": (4, 4)} for n in (40, 100, 164, 165, 300)], seed=0)


def _conformer() -> onnx.ModelProto:
    """transformers' Wav2Vec2-Conformer with relative positions, 2 layers of width 32, a table of 999 positions,
    TorchScript's export with dynamic batch and samples."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Wav2Vec2ConformerConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        position_embeddings_type="relative", conv_dim=(16,) * 7, conv_depthwise_kernel_size=3,
        max_source_positions=500)
    model = transformers.Wav2Vec2ConformerModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.m(x).last_hidden_state

    buf = io.BytesIO()
    torch.onnx.export(Hidden(), (torch.randn(1, 4096),), buf, input_names=["input_values"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_values": {0: "batch", 1: "samples"},
                                    "last_hidden_state": {0: "batch", 1: "frames"}})
    return onnx.load_from_string(buf.getvalue())


def test_a_relative_position_conformer_is_written_for_its_table_and_runs_as_the_original_past_it():
    """Before, it came back as the input (its scores sliced to the frames no run fits). 500 frames end at 160,399
    samples; at 501 frames (160,400) the original's table slice wraps to one row and still runs, and the written
    program computes what it computes there."""
    original = _conformer()
    written = _optimized(original)
    assert list(within_spans(written).values()) == [(400, 160399)]
    sizes = [(2, 2049), (1, 401), (3, 16000), (2, 7777), (1, 160399), (1, 160400), (1, 160719)]
    assert_same_at(original, written, [{"input_values": s} for s in sizes], seed=0)


def test_the_span_is_where_onnxruntime_gives_the_rows_their_difference():
    """The span read off the arithmetic (a bisection) against onnxruntime at every count: the table's rows are ``2 *
    frames - 1`` exactly at the counts within it."""
    model = _relative()
    w = typed(Original(model, {"batch": 1, "samples": 100}))
    (sym, low, high), = set(w.fits.ranged["rows"])
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("rows", "kk")])
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sym == "samples"
    for n in range(10, 400):
        rows, kk = sess.run(["rows", "kk"], {"x": np.zeros((1, 1, n), np.float32)})
        assert (rows.shape[0] == 2 * kk.shape[1] - 1) == (low <= n <= high), n
