"""An audio encoder whose output length is derived from the waveform's, written for every size: the result matches the
original well above the size it was tuned at. SEW pools its frames by 2 and upsamples them back, padding the one
frame an odd count loses (a Pad whose width follows the frames); at the tuned 4096 samples every size derived from
them (12 frames) is even and the pad is 0, and every size verified below 4096 has fewer frames, so a program with
those sizes written as constants matches there. Oracle: the original in onnxruntime at 16000 and 8229 samples."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

from eqsat.app.pipeline import OptimizeConfig, optimize


def _sew() -> onnx.ModelProto:
    torch.manual_seed(0)
    config = transformers.SEWConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                    conv_dim=(32,) * 13, squeeze_factor=2, num_conv_pos_embeddings=16,
                                    num_conv_pos_embedding_groups=2)
    model = transformers.SEWModel(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x).last_hidden_state

    buf = io.BytesIO()
    torch.onnx.export(Hidden(), (torch.randn(1, 4096),), buf, input_names=["input_values"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_values": {0: "batch", 1: "samples"}, "last_hidden_state": {0: "batch", 1: "frames"}})
    return onnx.load_from_string(buf.getvalue())


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"input_values": x})[0]


def test_a_pooled_and_padded_audio_encoder_matches_the_original_above_its_tuned_size():
    original = _sew()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False))
    rng = np.random.default_rng(0)
    for samples in (16000, 8229, 4096):
        x = rng.standard_normal((1, samples)).astype(np.float32)
        want, got = _run(original, x), _run(result.optimized, x)
        assert got.shape == want.shape, (samples, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_input_written_shape_generic_keeps_the_frames_a_slice_reads_off_an_equal_length():
    """SEW slices the pooled frames and the positional convolution's output to the shorter of the two lengths, which
    are equal at every size and no monomial of the samples: the Slice's end, folded at the tuned size, must be
    written to run to the axis' end, not as the constant 6 (which cut every longer waveform to 12 frames). The input
    written with no rule applied (every candidate's base) against the original in onnxruntime."""
    from eqsat.app.candidates import written_input
    from eqsat.app.pipeline import shaped_import_phase

    original = _sew()
    _, graph, shaping = shaped_import_phase(original, OptimizeConfig.of(cost="analytic", measure=False))
    written = written_input(graph, shaping).model
    rng = np.random.default_rng(1)
    for samples in (16000, 8229, 24037):
        x = rng.standard_normal((1, samples)).astype(np.float32)
        want, got = _run(original, x), _run(written, x)
        assert got.shape == want.shape, (samples, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
