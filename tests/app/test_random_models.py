"""A model that draws random numbers is refused (exit 2, nothing written): eqsat verifies against the original on the
same inputs, which says nothing of a random output, and two unseeded draws of one value read alike in the e-graph
(a sweep's torch export of ``rand_like(h) - rand_like(h)`` came back with the noise made 0). A refusal no size could
change suggests no ``--input-shape``. Oracle for what is accepted: the original in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_cases import FAST, cli
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto] | None = None,
           dims: tuple = ("batch", 8)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, list(dims))],
                              [helper.make_tensor_value_info("y", F, list(dims))], inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _noise_difference() -> onnx.ModelProto:
    """y = x + 1e-5 * (u1 - u2), two uniform draws shaped like x: random in the original, never 0 at once."""
    return _model([helper.make_node("RandomUniformLike", ["x"], ["u1"]),
                   helper.make_node("RandomUniformLike", ["x"], ["u2"]),
                   helper.make_node("Sub", ["u1", "u2"], ["d"]),
                   helper.make_node("Mul", ["d", "tiny"], ["n"]),
                   helper.make_node("Add", ["x", "n"], ["y"])],
                  [numpy_helper.from_array(np.array(1e-5, np.float32), "tiny")])


def _seeded_noise() -> onnx.ModelProto:
    """y = x + a seeded draw: the same in a session's first call, another in its next."""
    return _model([helper.make_node("RandomUniformLike", ["x"], ["u"], seed=3.0),
                   helper.make_node("Add", ["x", "u"], ["y"])])


def _in_a_branch() -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("RandomNormalLike", ["x"], ["r"])], "b", [],
                               [helper.make_tensor_value_info("r", F, None)])
    return _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                   helper.make_node("Greater", ["s", "zero"], ["c"]),
                   helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
                  [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])


def _dropout(training: bool) -> onnx.ModelProto:
    return _model([helper.make_node("Dropout", ["x", "ratio", "training"], ["h"]),
                   helper.make_node("Relu", ["h"], ["y"])],
                  [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
                   numpy_helper.from_array(np.array(training), "training")])


@pytest.mark.parametrize("build, named", [
    (_noise_difference, "RandomUniformLike"),
    (_seeded_noise, "RandomUniformLike"),
    (_in_a_branch, "RandomNormalLike"),
    (lambda: _dropout(True), "Dropout"),
], ids=["unseeded", "seeded", "in-a-branch", "dropout-training"])
def test_a_model_drawing_random_numbers_is_refused_naming_them(capsys, tmp_path, build, named):
    model = build()
    sess = ort.InferenceSession(model.SerializeToString())
    x = np.ones((2, 8), np.float32)
    assert not np.array_equal(sess.run(None, {"x": x})[0], sess.run(None, {"x": x})[0])  # random, as the oracle runs it
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(out), *FAST)
    assert rc == 2 and "random numbers" in line and named in line and "model.eval()" in line, line
    assert "--input-shape" not in line  # no size would change it
    assert not out.exists()


def test_a_dropout_in_inference_is_optimized_and_equals_the_original(capsys, tmp_path):
    model = _dropout(False)
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(out), *FAST, "--allow-slower")
    assert rc == 0, line
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ort.InferenceSession(str(out)).run(None, {"x": x})[0], want)


def test_a_model_onnxruntime_cannot_load_suggests_no_input_shape(capsys, tmp_path):
    """An Add of [batch, 8] and a [3] weight: onnxruntime refuses it at load, at any size."""
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [numpy_helper.from_array(np.ones(3, np.float32), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "onnxruntime cannot load the model" in line and "--input-shape" not in line, line
