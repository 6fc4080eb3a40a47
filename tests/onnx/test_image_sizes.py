"""An image's sides default to 224, not to a sequence's 128: vision models are fed 224-pixel images, and many refuse a
power of two (Swin's windows of 7 patches of 4). The checks read the declared interface (which symbol sizes which
axis) and run the written model against the original in onnxruntime (the oracle) at sizes the run was not tuned at."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from eqsat.app.cli import main
from eqsat.onnx import session
from eqsat.onnx.axes.interface import IMAGE_DEFAULT, OTHER_DEFAULT, runnable_values, symbol_values

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _identity_model(*inputs: tuple[str, int, list]) -> onnx.ModelProto:
    """Each input passed through to an output of its own (only the interface matters here)."""
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"]) for name, _, _ in inputs]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
                              [helper.make_tensor_value_info(f"{n}_out", t, d) for n, t, d in inputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dims, expected", [
    (["batch", 3, "height", "width"], {"batch": 1, "height": IMAGE_DEFAULT, "width": IMAGE_DEFAULT}),  # NCHW
    (["N", "H", "W", 3], {"N": 1, "H": IMAGE_DEFAULT, "W": IMAGE_DEFAULT}),  # channels last
    (["batch", 1, "side", "side"], {"batch": 1, "side": IMAGE_DEFAULT}),  # one symbol for both sides, grey
    (["batch", 64, "height", "width"], {"batch": 1, "height": OTHER_DEFAULT, "width": OTHER_DEFAULT}),  # features
    (["batch", "channels", "height", "width"],
     {"batch": 1, "channels": OTHER_DEFAULT, "height": OTHER_DEFAULT, "width": OTHER_DEFAULT}),
    (["batch", 3, "seq"], {"batch": 1, "seq": OTHER_DEFAULT}),  # not 4-D
    (["batch", 2, "past", 64], {"batch": 1, "past": OTHER_DEFAULT}),  # a cache of 2 heads: one side static
])
def test_an_image_side_defaults_to_224_and_nothing_else_does(dims, expected):
    model = _identity_model(("x", F, dims))
    assert symbol_values(model, {}) == expected


def test_a_side_that_also_sizes_another_input_or_an_integer_image_is_not_an_image_side():
    shared = _identity_model(("pixels", F, ["batch", 3, "height", "width"]), ("ids", I64, ["batch", "height"]))
    assert symbol_values(shared, {})["height"] == OTHER_DEFAULT and symbol_values(shared, {})["width"] == IMAGE_DEFAULT
    integers = _identity_model(("x", I64, ["batch", 3, "height", "width"]))
    assert symbol_values(integers, {})["height"] == OTHER_DEFAULT
    given = _identity_model(("x", F, ["batch", 3, "height", "width"]))
    assert symbol_values(given, {"x": (2, 3, 96, 160)}) == {"batch": 2, "height": 96, "width": 160}


def _windows_model() -> onnx.ModelProto:
    """Rows of 7 pixels scaled and put back: onnxruntime runs it only where 3 * height * width is a multiple of 7
    (a window partition's reshape), so at no power of two."""
    shape = helper.make_tensor("shape", I64, [4], [0, 3, -1, 7])
    scale = helper.make_tensor("scale", F, [7], [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["rows"]),
             helper.make_node("Mul", ["rows", "scale"], ["scaled"]),
             helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Reshape", ["scaled", "x_shape"], ["back"]),
             helper.make_node("Relu", ["back"], ["y"])]
    graph = helper.make_graph(nodes, "windows", [helper.make_tensor_value_info("x", F, ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", F, ["batch", 3, "height", "width"])],
                              [shape, scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_refusing_powers_of_two_runs_at_the_image_default(tmp_path, capsys):
    """The window model runs at 224 x 224 without --input-shape (every power of two from 8 to 4096 is refused, which
    used to be exit 2), says it tuned there, and the written model equals the original at other sizes."""
    model = _windows_model()
    values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "height", "width"])
    assert ran and values == {"batch": 1, "height": IMAGE_DEFAULT, "width": IMAGE_DEFAULT}
    path, out, rep = tmp_path / "w.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(rep.read_text())["interface"]["symbols"] == {"batch": 1, "height": 224, "width": 224}
    original, written = session(model), session(onnx.load(out))
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 224, 224), (1, 3, 7, 448), (3, 3, 14, 5)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(written.run(None, {"x": x})[0], original.run(None, {"x": x})[0], rtol=1e-6)


def test_an_image_model_refusing_224_is_halved_from_it(tmp_path):
    """A side of at most 150 (a position table of 150 rows): 224 is refused, its half 112 runs."""
    table = helper.make_tensor("table", F, [150], np.linspace(0.0, 1.0, 150).astype(np.float32).tolist())
    start = helper.make_tensor("s", I64, [1], [0])
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=3, end=4),
             helper.make_node("Slice", ["table", "s", "shape"], ["rows"]),
             helper.make_node("Add", ["x", "rows"], ["y"])]
    graph = helper.make_graph(nodes, "positions", [helper.make_tensor_value_info("x", F, ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", F, ["batch", 3, "h", "w"])],
                              [table, start])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "h", "w"])
    assert ran and values == {"batch": 1, "h": 112, "w": 112}
