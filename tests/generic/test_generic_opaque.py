"""A size no monomial of the symbols fits (the frames of an audio front-end: a floor of a quotient of the samples)
is an opaque symbol in a program written for the user (:meth:`eqsat.generic.state.Rewrite.opaque_shape`): read off
the value that has it, kept by a Reshape target (``0``) or read where one needs it. At a batch of 1 a target reads
two ways (``[frames*batch, 8]`` and ``[frames, 8*batch]``): the original's target at a batch of 2 decides where it
computes it, else the reading networks write (the batch with the rows, an axis of 1 after the frames holding it).
Oracle: the original, whose targets are computed from its values' shapes, run in onnxruntime at several sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import audio_attention, audio_residual_rows

from eqsat.generic import import_generic, make_generic
from eqsat.onnx import session

VALUES = {"batch": 1, "length": 64}
"""the representative sizes: 11 frames (a convolution 10 wide, of stride 5)"""
SIZES = [(1, 64), (2, 64), (3, 50), (2, 101), (4, 15)]


def _runs_at_every_size(original: onnx.ModelProto, written: onnx.ModelProto) -> bool:
    ref, got = session(original), session(written)
    rng = np.random.default_rng(9)
    for b, n in SIZES:
        feeds = {"samples": rng.standard_normal((b, n)).astype(np.float32)}
        want = ref.run(None, feeds)[0]
        try:
            have = got.run(None, feeds)[0]
        except Exception:  # noqa: BLE001 - a program that does not run at a size
            return False
        if have.shape != want.shape or not np.allclose(have, want, rtol=1e-4, atol=1e-4):
            return False
    return True


@pytest.mark.parametrize("names", ["", "copy_"], ids=["targets-the-original-computes", "targets-of-a-replayed-layer"])
def test_a_size_no_monomial_fits_is_read_off_its_value_and_every_reshape_holds_at_every_size(names):
    original, program = audio_attention(static=False), audio_attention(static=True, names=names)
    assert _runs_at_every_size(original, original)
    assert not _runs_at_every_size(original, program)  # the static program is the representative sizes' only
    written = make_generic(program, original, VALUES).model
    assert _runs_at_every_size(original, written)
    g = written.graph
    reads = [n for n in g.node if n.op_type == "Shape"]
    assert reads, "the frames are read off a value of the program"
    assert not g.value_info  # a program for the user: no inner shapes, no opaque symbol named anywhere
    declared = {d.dim_param for vi in [*g.input, *g.output] for d in vi.type.tensor_type.shape.dim}
    assert not any("@" in d for d in declared)


def test_the_import_rewrite_has_no_opaque_symbols():
    """The import's rewrite (read again by eqsat) keeps an unknown size unknown: its value_info names only the
    interface's symbols."""
    from eqsat.generic import simplify_for_import

    original = audio_attention(static=False)
    simplified = simplify_for_import(original, {"samples": (1, 64)})
    assert simplified is not None and simplified.graph.value_info  # the import's rewrite, with its inner shapes
    params = {d.dim_param for vi in simplified.graph.value_info for d in vi.type.tensor_type.shape.dim}
    assert not any("@" in p for p in params), params


def test_rows_of_frames_times_the_batch_reshaped_batch_first_keep_the_batch():
    """Rows ``[batch*frames, 8]`` whose shape shape inference cannot give (a sum of rows holding the frames under two
    readings) get an opaque size fitted at a batch of 1, where it is the frames alone: reshaped back to
    ``[batch, frames, 8]`` by the constant ``[1, 11, 8]``, the target was written ``[1, rows, 8]``, which at a batch
    of 2 puts both sequences in one (WavLM TorchScript's search candidates: a residual sum over rows, then its
    attention's heads). Runs at other sizes show the rows are the batch times the frames of another value, so the
    batch is kept. Oracle: the original in onnxruntime at several sizes."""
    original, program = audio_residual_rows(static=False), audio_residual_rows(static=True)
    assert _runs_at_every_size(original, original)
    assert not _runs_at_every_size(original, program)
    assert _runs_at_every_size(original, make_generic(program, original, VALUES).model)


def _padded_back() -> onnx.ModelProto:
    """SEW's encoder: its frames (a convolution 50 wide, of stride 50) cut to an even number, then padded back by
    ``frames - 2 * (frames // 2)``: 0 at 640 samples, at 639, 638 and at 320 (12, 12, 12 and 6 frames), 1 at 480."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 1, 50)).astype(np.float32), "w")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              [("one", [1]), ("two", 2), ("axis2", 2), ("zeros", [0, 0, 0, 0, 0]), ("zero", [0]), ("axes", [2])]]
    nodes = [helper.make_node("Unsqueeze", ["samples", "one"], ["x1"]),
             helper.make_node("Conv", ["x1", "w"], ["c"], kernel_shape=[50], strides=[50]),
             helper.make_node("Shape", ["c"], ["cs"]), helper.make_node("Gather", ["cs", "axis2"], ["frames"], axis=0),
             helper.make_node("Div", ["frames", "two"], ["half"]), helper.make_node("Mul", ["half", "two"], ["even"]),
             helper.make_node("Sub", ["frames", "even"], ["odd"]),
             helper.make_node("Unsqueeze", ["even", "zero"], ["even_v"]),
             helper.make_node("Slice", ["c", "zero", "even_v", "axes"], ["cut"]), helper.make_node("Relu", ["cut"], ["r"]),
             helper.make_node("Unsqueeze", ["odd", "zero"], ["odd_v"]),
             helper.make_node("Concat", ["zeros", "odd_v"], ["pads"], axis=0), helper.make_node("Pad", ["r", "pads"], ["y"])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "frames"])
    return helper.make_model(helper.make_graph(nodes, "padded_back", [x], [y], [w, *consts]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_padding_back_to_an_odd_number_of_frames_is_no_constant():
    """The padding is 0 at every size a fit read it at but three quarters of the tuned one (480 samples: 9 frames):
    read as a constant 0, the program cut the last frame of every odd number and padded none back (the right shape,
    a wrong last frame; SEW and SEW-D: input returned where the check at further sizes saw it)."""
    from eqsat.onnx import export_model

    original = _padded_back()
    written = make_generic(export_model(import_generic(original, {"samples": (1, 640)})), original,
                           {"batch": 1, "length": 640}).model
    ref, got = session(original), session(written)
    rng = np.random.default_rng(2)
    for b, n in [(1, 640), (1, 480), (2, 1000), (1, 530), (3, 690)]:
        feeds = {"samples": rng.standard_normal((b, n)).astype(np.float32)}
        np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
