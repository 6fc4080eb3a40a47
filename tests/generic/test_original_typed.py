"""The original typed once by the writer's arithmetic (eqsat.generic.typed_original): a size it folded that no
monomial of the samples is (a relative-position model slices its scores to the frames, ``Shape(k)[2]``) is written as
the candidate's frames, read off the same arithmetic, not fitted from runs; a table sliced between bounds around its
centre, and a Pad, are typed by their arithmetic. Oracles: onnxruntime's output shapes at every sample count of a
range, and the original in onnxruntime at lengths the program was not tuned at."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.generic import Original
from eqsat.generic.strided import opaque_at
from eqsat.generic.typed_original import typed

OPSET = [helper.make_opsetid("", 17)]


def _conformer() -> onnx.ModelProto:
    """transformers' Wav2Vec2-Conformer with relative positions, 2 layers of width 32, TorchScript's export with
    dynamic batch and samples: each layer's shifted scores are sliced to the frames read off its keys' shape."""
    torch.manual_seed(0)
    config = transformers.Wav2Vec2ConformerConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        position_embeddings_type="relative", conv_dim=(16,) * 7, conv_depthwise_kernel_size=3,
        max_source_positions=500)
    model = transformers.Wav2Vec2ConformerModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x).last_hidden_state

    buf = io.BytesIO()
    torch.onnx.export(Hidden(), (torch.randn(1, 4096),), buf, input_names=["input_values"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_values": {0: "batch", 1: "samples"},
                                    "last_hidden_state": {0: "batch", 1: "frames"}})
    return onnx.load_from_string(buf.getvalue())


def test_a_relative_position_conformer_is_written_for_every_length():
    """Before, the slice to the frames was written as the 12 of the tuned 4096 samples, and the program failed at
    2049: the input came back."""
    original = _conformer()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    sizes = [{"input_values": s} for s in ((2, 2049), (1, 401), (3, 16000), (2, 7777), (1, 4096))]
    assert_same_at(original, result.optimized, sizes, seed=0)


CENTRE = 49


def _relative_table(two_d: bool = False) -> onnx.ModelProto:
    """Frames of a strided Conv (``(samples - 10) // 5 + 1``; ``two_d``: as the 2-D Conv over a height of 1 eqsat
    writes for it), a table of ``2 * CENTRE + 1`` rows sliced between ``CENTRE + 1 - frames`` and ``CENTRE + frames``
    (``2 * frames - 1`` rows), then padded by one row (``2 * frames``)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 1, 1, 10) if two_d else (4, 1, 10)).astype(np.float32),
                                     "k"),
             numpy_helper.from_array(rng.standard_normal((2 * CENTRE + 1, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(np.array(CENTRE, np.int64), "centre"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2 if two_d else 1, np.int64), "last"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([1, 0, 0, 0], np.int64), "pads")]
    conv = helper.make_node("Conv", ["x4" if two_d else "x", "k"], ["y"], kernel_shape=[1, 10] if two_d else [10],
                            strides=[1, 5] if two_d else [5])
    nodes = ([helper.make_node("Unsqueeze", ["x", "one"], ["x4"])] if two_d else []) + [
        conv,
        helper.make_node("Shape", ["y"], ["s"], start=-1),
        helper.make_node("Squeeze", ["s"], ["frames"]),
        helper.make_node("Sub", ["centre", "frames"], ["c0"]),
        helper.make_node("Add", ["c0", "one"], ["start0"]),
        helper.make_node("Add", ["centre", "frames"], ["end0"]),
        helper.make_node("Unsqueeze", ["start0", "ax0"], ["start"]),
        helper.make_node("Unsqueeze", ["end0", "ax0"], ["end"]),
        helper.make_node("Slice", ["table", "start", "end", "ax0"], ["rows"]),
        helper.make_node("Pad", ["rows", "pads"], ["padded"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 1, "samples"])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "rows",
                                                                                                   "padded")],
                              inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_a_table_sliced_between_bounds_around_its_centre_and_padded_is_typed_by_their_arithmetic():
    model = _relative_table()
    w = typed(Original(model, {"batch": 1, "samples": 200}))
    shapes = {name: w.shapes[name] for name in ("y", "rows", "padded")}
    assert all(d is not None for dims in shapes.values() for d in dims), shapes
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for samples in range(10, 5 * CENTRE + 10):  # every count whose frames the table holds (1 to 49 frames)
        at = opaque_at(w, {"batch": 2, "samples": samples})
        assert at is not None
        got = sess.run(None, {"x": np.zeros((2, 1, samples), np.float32)})
        for (name, dims), value in zip(shapes.items(), got):
            assert [int(d.value(at)) for d in dims if d is not None] == list(value.shape), (samples, name)


def test_a_one_d_conv_and_the_two_d_one_eqsat_writes_for_it_are_one_arithmetic():
    """The frames of a 1-D Conv and of the 2-D one over a height of 1 carry one arithmetic: the original's sizes read
    as a candidate's (a key naming the value or the Conv's attributes told them apart)."""
    ones = typed(Original(_relative_table(), {"batch": 1, "samples": 200}))
    twos = typed(Original(_relative_table(two_d=True), {"batch": 1, "samples": 200}))
    frames_1d, frames_2d = ones.shapes["y"][-1], twos.shapes["y"][-1]
    assert frames_1d is not None and frames_2d is not None and not frames_1d.is_const
    (s1, _), (s2, _) = frames_1d.powers[0], frames_2d.powers[0]
    assert ones.fits.canon[s1] == twos.fits.canon[s2]
    assert ones.fits.canon[ones.shapes["rows"][0].powers[0][0]] == twos.fits.canon[twos.shapes["rows"][0].powers[0][0]]
