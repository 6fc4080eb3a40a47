"""Models a user brings that eqsat refuses (paths that are no regular file, oversized files or garbage on standard
input, models onnxruntime cannot load, sequence outputs, huge shapes and intermediates, a 0-sized dimension, unsorted
nodes; the API given a model or a config of the wrong kind): each refusal is exit 2 (or an ``InputError``) with one
line naming the cause before any work; where such a model is accepted (standard input, a model onnxruntime
optimized and saved that it loads), it is checked against the original in onnxruntime."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_cases import FAST, cli, leftovers, small_matmul
from onnx import TensorProto, helper, numpy_helper
from unusual_cases import OPSET, F, outputs

from eqsat.onnx import prepare as onnx_prepare

# unbounded reads: paths that are no regular file, oversized files, standard input -------------------------------------

@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_model_path_that_is_not_a_regular_file_is_refused_unread(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "model.onnx"
        os.mkfifo(path)  # no writer: opening it for reading would block forever
    else:
        path = Path("/dev/zero")  # read to the end, it never ends
    proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"),
                           *FAST], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert ("a FIFO" if kind == "fifo" else "a character device") in proc.stderr and "regular file" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o.onnx").exists()


def test_an_oversized_model_file_is_refused_before_reading(capsys, tmp_path, monkeypatch):
    path = tmp_path / "big.onnx"
    with open(path, "wb") as f:  # a sparse file: 3 GiB of size, no data
        f.truncate(3 * 2**30)
    opened = []
    real_open = onnx.load

    monkeypatch.setattr(onnx, "load", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "3.0 GiB" in line and "2 GiB" in line, line
    assert opened == []


def test_standard_input_is_read_when_asked(capsys, tmp_path, monkeypatch):
    model = small_matmul()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(model.SerializeToString())))
    out = tmp_path / "o.onnx"
    rc, line = cli(capsys, "optimize-model", "-", "-o", str(out), *FAST)
    assert rc == 0, line
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(outputs(out, {"x": x})[0], outputs(model, {"x": x})[0], atol=1e-5)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\x00garbage" * 10)))
    rc, line = cli(capsys, "optimize-model", "-", "-o", str(tmp_path / "p.onnx"), *FAST)
    assert rc == 2 and "standard input" in line, line


# inputs onnxruntime cannot load ---------------------------------------------------------------------------------------

def _unloadable(case: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", F, [2, 4])
    y = helper.make_tensor_value_info("y", F, [2, 4])
    if case == "duplicate-node-names":
        nodes = [helper.make_node("Relu", ["x"], ["h"], name="same"), helper.make_node("Neg", ["h"], ["y"], name="same")]
        return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=OPSET)
    if case == "initializer-shadowing-input":
        w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")  # the input w is declared [2, 4]
        nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
        graph = helper.make_graph(nodes, "g", [x, helper.make_tensor_value_info("w", F, [2, 4])], [y], [w])
        return helper.make_model(graph, opset_imports=OPSET)
    if case == "batchnorm-training-one-output":
        x4 = helper.make_tensor_value_info("x", F, [2, 3, 4, 4])
        y4 = helper.make_tensor_value_info("y", F, [2, 3, 4, 4])
        inits = [numpy_helper.from_array(np.full(3, v, np.float32), n) for n, v in
                 (("s", 1.0), ("b", 0.0), ("m", 0.0), ("v", 1.0))]
        nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], training_mode=1)]
        return helper.make_model(helper.make_graph(nodes, "g", [x4], [y4], inits), opset_imports=OPSET)
    assert case == "opset-99"
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 99)])


@pytest.mark.parametrize("case", ["duplicate-node-names", "initializer-shadowing-input",
                                  "batchnorm-training-one-output", "opset-99"])
def test_a_model_onnxruntime_cannot_load_is_refused_before_any_work(capsys, tmp_path, case):
    model = _unloadable(case)
    with pytest.raises(Exception, match=r"\S"):  # the oracle: onnxruntime itself refuses it
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--scheduler", "mcts",
                   "--cost", "analytic", "--no-measure")
    assert rc == 2 and "onnxruntime cannot load the model" in line, line
    assert not (tmp_path / "o.onnx").exists() and leftovers(tmp_path) == []


def test_a_model_onnxruntime_optimized_and_saved_is_judged_by_onnxruntime(capsys, tmp_path):
    """BERT saved by onnxruntime at optimization level 1 (basic): a later session, with onnxruntime's default
    optimizations (as eqsat verifies), fails to initialize it; eqsat says so before any work. Where onnxruntime
    loads it, it is optimized like any model."""
    import zoo

    source, saved = tmp_path / "bert.onnx", tmp_path / "bert-ort1.onnx"
    onnx.save(zoo.build("bert", "torchscript", 17), source)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = str(saved)
    ort.InferenceSession(str(source), opts, providers=["CPUExecutionProvider"])
    try:
        ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"])
        loads = True
    except Exception:  # noqa: BLE001 - the oracle: onnxruntime's own verdict
        loads = False
    rc, line = cli(capsys, "optimize-model", str(saved), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert (rc, "onnxruntime cannot load the model" in line) == ((0, False) if loads else (2, True)), line


# non-tensor graph outputs ---------------------------------------------------------------------------------------------

def test_a_sequence_output_is_refused_naming_it(capsys, tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 4])
    seq = helper.make_tensor_sequence_value_info("s", F, [2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("SequenceConstruct", ["r", "x"], ["s"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [seq]), opset_imports=OPSET)
    assert len(outputs(model, {"x": np.ones((2, 4), np.float32)})[0]) == 2  # valid: onnxruntime runs it
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "output 's' is a sequence" in line, line


def test_zipmap_sequence_of_maps_is_refused_naming_it(capsys, tmp_path):
    x = helper.make_tensor_value_info("x", F, [1, 3])
    zipped = helper.make_value_info("z", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, []))))
    nodes = [helper.make_node("Softmax", ["x"], ["p"]),
             helper.make_node("ZipMap", ["p"], ["z"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [zipped]),
                              opset_imports=[*OPSET, helper.make_opsetid("ai.onnx.ml", 3)])
    out = outputs(model, {"x": np.zeros((1, 3), np.float32)})[0]
    assert isinstance(out, list) and isinstance(out[0], dict)  # the oracle: a sequence of maps
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "output 'z' is a sequence" in line and "map" in line, line


# huge shapes, a 0-sized dimension -------------------------------------------------------------------------------------

def _dynamic_matmul(tmp_path: Path, dims: list) -> Path:
    w = numpy_helper.from_array(np.ones((32, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, dims)],
                              [helper.make_tensor_value_info("y", F, [dims[0], 4])], [w])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    return path


@pytest.mark.parametrize("dims, flag, named", [
    ([1, 2**34], None, "GiB"),
    ([2**40, 2**40], None, "2^62"),
    (["n", 32], "x=100000000000,32", "TiB"),
    (["n", 32], "x=99999999999999999999,32", "2^62"),
])
def test_huge_shapes_are_refused_before_any_work(capsys, tmp_path, dims, flag, named):
    if dims[-1] != 32:
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", F, dims)],
                                  [helper.make_tensor_value_info("y", F, dims)])
        path = tmp_path / "big.onnx"
        onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    else:
        path = _dynamic_matmul(tmp_path, dims)
    extra = ["--input-shape", flag] if flag else []
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *extra, *FAST)
    assert rc == 2 and named in line and "input 'x'" in line, line


def test_the_cap_is_a_fraction_of_memory(capsys, tmp_path, monkeypatch):
    """[1, 2^31] float32 is 8 GiB: refused where that is over the cap, and the message names both sizes."""
    monkeypatch.setattr(onnx_prepare, "memory_cap", lambda: 4 * 2**30)
    path = _dynamic_matmul(tmp_path, [1, 32])
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 0, line  # 128 bytes: fine
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [1, 2**31])],
                              [helper.make_tensor_value_info("y", F, [1, 2**31])])
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "8.0 GiB" in line and "4.0 GiB" in line, line


def test_a_huge_intermediate_is_refused(monkeypatch):
    """The inputs fit, a value computed from them does not (an outer product)."""
    from eqsat.errors import InputError
    from eqsat.onnx.importer import import_model

    monkeypatch.setattr(onnx_prepare, "memory_cap", lambda: 2**20)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", F, [1024, 1]),
                               helper.make_tensor_value_info("b", F, [1, 1024])],
                              [helper.make_tensor_value_info("y", F, [1024, 1024])])
    with pytest.raises(InputError, match=r"1,048,576 elements, 4\.0 MiB"):
        import_model(helper.make_model(graph, opset_imports=OPSET))


def test_a_zero_sized_dimension_is_named_as_such(capsys, tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [0, 32])],
                              [helper.make_tensor_value_info("y", F, [0, 32])])
    path = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "size 0" in line and "[0,32]" in line and "dynamic" not in line and "x=1" not in line, line


# the Python API's arguments -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, named", [
    (123, "got int 123"), (None, "got NoneType"), ("graph", "onnx.GraphProto"), ("bytesio", "file object"),
    (b"\x08\x07garbage-that-is-not-a-model" * 50, "not a readable ONNX model"),
])
def test_the_api_names_a_model_of_the_wrong_kind(model, named):
    from eqsat.app.pipeline import optimize
    from eqsat.errors import InputError

    model = {"graph": small_matmul().graph, "bytesio": io.BytesIO(small_matmul().SerializeToString())}.get(
        model, model) if isinstance(model, str) else model
    with pytest.raises(InputError, match=named) as info:
        optimize(model)
    assert len(str(info.value)) < 400  # never the whole model in the message


def test_the_api_takes_a_serialized_model():
    from eqsat.app.pipeline import OptimizeConfig, optimize

    model = small_matmul()
    result = optimize(model.SerializeToString(), OptimizeConfig.of(scheduler="none", cost="analytic", measure=False,
                                                                     allow_slower=True))
    x = np.random.default_rng(12).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(outputs(result.optimized, {"x": x})[0], outputs(model, {"x": x})[0], atol=1e-5)


@pytest.mark.parametrize("config, named", [
    ({"time_limit": 5.0}, "got dict; give an eqsat.app.config.OptimizeConfig"),
    ("input_shapes=x=1", "got the string 'x=1'"),
    ("input_shapes=list", "got list"),
    ("input_shapes=zero", "positive integer"),
])
def test_the_api_names_a_config_of_the_wrong_kind(config, named):
    from eqsat.app.pipeline import OptimizeConfig, optimize
    from eqsat.errors import InputError

    shapes = {"input_shapes=x=1": "x=1", "input_shapes=list": [("x", (2, 8))], "input_shapes=zero": {"x": (0, 8)}}
    if isinstance(config, str):
        config = OptimizeConfig(input_shapes=shapes[config])  # type: ignore[arg-type]
    with pytest.raises(InputError, match=named):
        optimize(small_matmul(), config)


# unsorted nodes -------------------------------------------------------------------------------------------------------

def test_the_unsorted_nodes_message_is_whole(capsys, tmp_path):
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="second"), helper.make_node("Relu", ["x"], ["h"], name="first")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    path = tmp_path / "unsorted.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "topologically sorted" in line and "second" in line and "is not output of" in line, line
