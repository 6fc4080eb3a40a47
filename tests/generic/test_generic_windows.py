"""A windowed vision transformer (Swin V2) exported with dynamic batch, height and width is written for every batch:
the program the writer gives for the import at one batch of one 32-pixel image computes what the original computes
at a batch of 2 and 3. Its window padding is traced, so the original runs at multiples of its tuned side only
(its prefixes at more sizes: a convolution of stride 4 floors 33 pixels to the 32's 8), and a fit of a size from
runs near the tuned side failed for every entry, the batch's included: the writer wrote the embeddings' Reshape
target ``[batch, 8, 8, 8]`` with a constant 1 for the batch (onnxruntime then refuses a batch of 2). Oracle: the
original in onnxruntime at each batch.

The parts of that fix, one at a time, on small inputs: a fit checked above the tuned size (:func:`fit_vectors`), a
symbol refused near its value leaving the others' sizes fitted (:func:`fit_sizes`), a size as a program computes
it (floor division: :func:`agrees`), a target written with -1 (:func:`reshape_target`); and a constant target the
import names anew (a vision tower's pooled rows ``[-1, width]``, which SigLIP's export reshapes to) kept constant."""

from __future__ import annotations

import contextlib
import io
import math
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.dims import Mono
from eqsat.generic import import_generic, make_generic
from eqsat.onnx import export_model, session
from eqsat.onnx.axes.fitting import REFUSED, agrees, fit_sizes, fit_vectors
from eqsat.onnx.axes.interface import symbol_values
from eqsat.onnx.axes.targets import reshape_target

SIDE = 32
"""the side the model is tuned and imported at: one window of 4 of the 4 patches of the last stage"""


@pytest.fixture(scope="module")
def swin() -> onnx.ModelProto:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Swinv2Config(image_size=SIDE, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1],
                                       window_size=4, mlp_ratio=2.0)
    model = transformers.Swinv2Model(config, add_pooling_layer=False).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state

    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(), (torch.randn(1, 3, SIDE, SIDE),), buf, input_names=["pixel_values"],
                          output_names=["out"], opset_version=17, dynamo=False,
                          dynamic_axes={"pixel_values": {0: "batch", 2: "height", 3: "width"}})
    return onnx.load_from_string(buf.getvalue())


def test_a_windowed_model_with_dynamic_sides_is_written_for_every_batch(swin):
    shapes = {"pixel_values": (1, 3, SIDE, SIDE)}
    program = export_model(import_generic(swin, shapes))
    written = make_generic(program, swin, symbol_values(swin, shapes)).model
    want, got = session(swin), session(written)
    rng = np.random.default_rng(0)
    for size in [(1, 3, SIDE, SIDE), (2, 3, SIDE, SIDE), (3, 3, SIDE, SIDE)]:
        x = rng.standard_normal(size).astype(np.float32)
        expected = want.run(None, {"pixel_values": x})[0]  # the original runs there: the written program must too
        actual = got.run(None, {"pixel_values": x})[0]
        assert actual.shape == expected.shape, size
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def _windows(at: dict[str, int]) -> list[list[int]]:
    """A Reshape target into windows of 7 (a batch, the windows per side, the window): the windows rounded up from a
    side of 224 / 32, 1 at every side up to 224."""
    per_side = math.ceil(at["h"] / 32 / 7)
    return [[at["b"], per_side, 7, per_side, 7, 48]]


@contextlib.contextmanager
def _model_runs(refuses):
    """The fits told where the model runs, as the writer tells them (:data:`REFUSED`)."""
    token = REFUSED.set(refuses)
    try:
        yield
    finally:
        REFUSED.reset(token)


def test_a_size_the_same_below_the_tuned_one_is_not_read_as_a_constant():
    """Every side from 1 to 224 has one window, 448 two: no monomial is the count at every side (it is left unknown,
    and the program computes it as the original does), nor is the constant 1."""
    b, c = Mono.symbol("b"), Mono.const
    with _model_runs(lambda at: False):
        assert fit_vectors(_windows, {"b": 1, "h": 224}) == [[b, None, c(7), None, c(7), c(48)]]


def test_a_batch_is_fitted_where_the_sides_run_at_their_multiples_only():
    """The model refuses every side but the multiples of 224 (a prefix of it runs there too, and its count of
    windows there is 1): the batch is fitted, the windows from twice and three times the side."""
    b, h, c = Mono.symbol("b"), Mono.symbol("h"), Mono.const
    with _model_runs(lambda at: at["h"] % 224 != 0):
        assert fit_vectors(_windows, {"b": 1, "h": 224}) == \
            [[b, c(1) / c(224) * h, c(7), c(1) / c(224) * h, c(7), c(48)]]
    assert fit_sizes([[1, 56]], {"b": ((2, [[2, 56]]), (3, [[3, 56]])), "h": None}, {"b": 1, "h": 224},
                     {"h": [[[1, 112]]]}) == [[b, None]]


def test_a_size_agrees_as_a_program_computes_it():
    h = Mono.symbol("h")
    assert agrees(Mono.const(1) / Mono.const(4) * h, {"h": 33}, 8)
    assert not agrees(Mono.const(1) / Mono.const(4) * h, {"h": 33}, 9)
    assert not agrees(Mono.const(4) / h, {"h": 3}, 1)


def test_a_target_written_with_minus_one_takes_the_windows_at_one():
    b, wh, ww, c = Mono.symbol("b"), Mono.symbol("wh"), Mono.symbol("ww"), Mono.const
    out = reshape_target([b, wh, ww, c(4), c(4), c(16)], [-1, 16, 16], {"b": 1, "wh": 1, "ww": 1})
    assert out == [b * wh * ww, c(16), c(16)]


def _pooled(computed: bool, width: int = 6) -> onnx.ModelProto:
    """Rows split into two heads, laid out as torch's multi-head attention pooling lays them (``[1, batch * 2,
    width / 2]``), joined back by a constant target ``[-1, width]`` (``[1, width * batch]`` at a batch of 1 reads
    alike) or, as TorchScript exports it, one computed from the input's shape (``[batch, width]``), then
    projected."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Reshape", ["x", "heads"], ["split"]),
             helper.make_node("Unsqueeze", ["split", "axes"], ["first"]),
             helper.make_node("Reshape", ["first", "rows"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["out"])]
    if computed:
        nodes[2:2] = [helper.make_node("Shape", ["x"], ["shape"], end=1),
                      helper.make_node("Concat", ["shape", "width"], ["rows"], axis=0)]
    inits = [numpy_helper.from_array(np.array([-1, width // 2], np.int64), "heads"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([width], np.int64) if computed else np.array([-1, width], np.int64),
                                     "width" if computed else "rows"),
             numpy_helper.from_array(rng.standard_normal((width, 3)).astype(np.float32), "w")]
    graph = helper.make_graph(nodes, "pooled", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["batch", 2, width // 2])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _written_anew(original: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """The generic import's program of ``original``, every integer constant named anew (the import may keep a
    name; SigLIP's are new), written for every size."""
    program = export_model(import_generic(original, shapes))
    for init in program.graph.initializer:
        if init.data_type == TensorProto.INT64:
            old, init.name = init.name, init.name + "_anew"
            for node in program.graph.node:
                node.input[:] = [init.name if i == old else i for i in node.input]
    return make_generic(program, original, symbol_values(original, shapes)).model


def _agree(original: onnx.ModelProto, written: onnx.ModelProto, sizes: list[dict[str, tuple[int, ...]]]) -> None:
    want, got = session(original), session(written)
    rng = np.random.default_rng(1)
    for size in sizes:
        feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in size.items()}
        for expected, actual in zip(want.run(None, feeds), got.run(None, feeds)):
            assert actual.shape == expected.shape, size
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("computed", [False, True], ids=["constant", "computed"])
def test_a_target_named_anew_is_read_for_every_batch(computed):
    original = _pooled(computed)
    written = _written_anew(original, {"x": (1, 2, 3)})
    _agree(original, written, [{"x": (1, 2, 3)}, {"x": (2, 2, 3)}, {"x": (3, 2, 3)}])


def test_a_target_named_anew_equal_to_a_constant_by_chance_follows_the_sequence():
    """A target computed from the sequence (``[-1, seq]``, ``[-1, 6]`` at a sequence of 6) equal to another
    Reshape's constant target (``[-1, 6]``): read as a constant, the rows would be ``2 * batch * seq / 6`` (at a
    sequence of 7 onnxruntime refuses it, at 12 the shape is transposed)."""
    nodes = [helper.make_node("Reshape", ["z", "six"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["projected"]),
             helper.make_node("Shape", ["x"], ["length"], start=2),
             helper.make_node("Concat", ["rest", "length"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["out"])]
    inits = [numpy_helper.from_array(np.array([-1, 6], np.int64), "six"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest"),
             numpy_helper.from_array(np.ones((6, 2), np.float32), "w")]
    graph = helper.make_graph(nodes, "chance", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "seq"]),
                                                helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3, 2])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["rows", "seq"]),
                               helper.make_tensor_value_info("projected", TensorProto.FLOAT, ["batch", 2])], inits)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    written = _written_anew(original, {"x": (1, 2, 6), "z": (1, 3, 2)})
    _agree(original, written, [{"x": (b, 2, s), "z": (b, 3, 2)} for b, s in [(1, 6), (2, 7), (3, 12)]])
