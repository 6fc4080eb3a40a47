"""Unusual models and environments a user brings (paths that are no regular file, oversized or unloadable models,
model-local functions, sequence outputs, huge shapes, unwritable targets and caches, float16 and QDQ models, the API
given the wrong kinds): each refusal is exit 2 with one
line naming the cause before any work; each accepted model is checked against the original in onnxruntime."""

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
from cli_cases import FAST, PRECIOUS, cli, leftovers, read_only_folder, small_matmul
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.onnx import prepare as onnx_prepare

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def _outputs(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    src = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)


def _optimized_matches(capsys, tmp_path: Path, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                       *flags: str, atol: float = 1e-5) -> onnx.ModelProto:
    """Optimize ``model`` through the command line (exit 0), run the written model and the original in
    onnxruntime on ``feeds`` and compare; the written model passes the full ONNX checker."""
    path, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(out), *(flags or FAST))
    assert rc == 0, line
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    for got, want in zip(_outputs(out, feeds), _outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-3)
    return written


# severe 3: unbounded reads -------------------------------------------------------------------------------------

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
    np.testing.assert_allclose(_outputs(out, {"x": x})[0], _outputs(model, {"x": x})[0], atol=1e-5)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\x00garbage" * 10)))
    rc, line = cli(capsys, "optimize-model", "-", "-o", str(tmp_path / "p.onnx"), *FAST)
    assert rc == 2 and "standard input" in line, line


# severe 7: inputs onnxruntime cannot load -----------------------------------------------------------------------

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


# severe 4: model-local functions -------------------------------------------------------------------------------

def _with_functions(case: str) -> onnx.ModelProto:
    """x [2, 4] -> y through model-local functions: ``plain`` (one function), ``nested`` (a function calling
    another, passing an attribute down by reference)."""
    local = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    x = helper.make_tensor_value_info("x", F, [2, 4])
    y = helper.make_tensor_value_info("y", F, [2, 4])
    if case == "plain":
        body = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Add", ["r", "a"], ["b"])]
        funcs = [helper.make_function("local", "ReluAdd", ["a"], ["b"], body, [helper.make_opsetid("", 17)])]
        nodes = [helper.make_node("ReluAdd", ["x"], ["h"], domain="local"), helper.make_node("Tanh", ["h"], ["y"])]
    else:
        ref = onnx.AttributeProto(name="alpha", ref_attr_name="a", type=onnx.AttributeProto.FLOAT)
        inner_body = [helper.make_node("LeakyRelu", ["p"], ["q"])]
        inner_body[0].attribute.append(ref)
        inner = helper.make_function("local", "Leaky", ["p"], ["q"], inner_body, [helper.make_opsetid("", 17)],
                                     attributes=["a"])
        outer_ref = onnx.AttributeProto(name="a", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT)
        call = helper.make_node("Leaky", ["u"], ["v"], domain="local")
        call.attribute.append(outer_ref)
        outer_body = [call, helper.make_node("Mul", ["v", "u"], ["w"])]
        outer = helper.make_function("local", "Outer", ["u"], ["w"], outer_body, local, attributes=["slope"])
        funcs = [inner, outer]
        nodes = [helper.make_node("Outer", ["x"], ["h"], domain="local", slope=0.3),
                 helper.make_node("Sigmoid", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=local, functions=funcs)


@pytest.mark.parametrize("case", ["plain", "nested"])
def test_model_local_functions_are_inlined(capsys, tmp_path, case):
    model = _with_functions(case)
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, model, {"x": x}, *FAST, "--allow-slower")  # the exported program
    assert not written.functions and all(n.domain != "local" for n in written.graph.node)


def test_torchscript_modules_exported_as_functions(capsys, tmp_path):
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.lin(x)) + x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    path = tmp_path / "ts.onnx"
    torch.onnx.export(Net().eval(), (torch.randn(2, 8),), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, export_modules_as_functions={Block}, dynamo=False)
    model = onnx.load(path)
    assert model.functions  # the case under test: the exporter wrote Block as a function
    x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, model, {"x": x}, *FAST, "--allow-slower")
    assert not written.functions


# severe 5: non-tensor graph outputs ----------------------------------------------------------------------------

def test_a_sequence_output_is_refused_naming_it(capsys, tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 4])
    seq = helper.make_tensor_sequence_value_info("s", F, [2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("SequenceConstruct", ["r", "x"], ["s"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [seq]), opset_imports=OPSET)
    assert len(_outputs(model, {"x": np.ones((2, 4), np.float32)})[0]) == 2  # valid: onnxruntime runs it
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
    out = _outputs(model, {"x": np.zeros((1, 3), np.float32)})[0]
    assert isinstance(out, list) and isinstance(out[0], dict)  # the oracle: a sequence of maps
    path = tmp_path / "in.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "output 'z' is a sequence" in line and "map" in line, line


# severe 8: huge shapes -----------------------------------------------------------------------------------------

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



# severe 9: write failures found after the work -----------------------------------------------------------------

@pytest.fixture()
def immutable(tmp_path):
    """make(path): ``path`` holding PRECIOUS, made immutable with chattr +i (root on a file system that has the
    attribute); the attribute is removed at the end."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        path.write_bytes(PRECIOUS)
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.parametrize("flag", ["-o", "--report", "-o's data"])
def test_an_immutable_target_is_found_up_front(capsys, tmp_path, immutable, flag):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    target = immutable({"-o": out, "--report": rep, "-o's data": tmp_path / "out.onnx.data"}[flag])
    with pytest.raises(PermissionError):  # the oracle: the file system refuses to replace it
        os.rename(_scratch(tmp_path), target)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and "immutable" in line and line.startswith(f"eqsat: error: {flag.split(chr(39))[0]} "), line
    assert target.read_bytes() == PRECIOUS and leftovers(tmp_path) == []


def _scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.write_bytes(b"x")
    return path


def test_a_staging_path_over_path_max_is_found_up_front(capsys, tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    folder = str(tmp_path)
    while len(folder) < 4096 - 250:
        folder = os.path.join(folder, "d" * min(200, 4096 - 250 - len(folder)))
    os.makedirs(folder)
    out = os.path.join(folder, "o" * (4090 - len(folder) - 1 - 5))  # the path itself fits, the staged one not
    assert len(out) < 4096
    rc, line = cli(capsys, "optimize-model", str(model), "-o", out, *FAST)
    assert rc == 2 and "limit of 4096" in line, line
    assert os.listdir(folder) == []


def test_a_disk_full_at_the_write_is_exit_2_with_the_cause(capsys, tmp_path, monkeypatch):
    from eqsat.onnx import io as onnx_io

    def full(model, path, external=False, weights=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(28, os.strerror(28), path)

    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    out.write_bytes(PRECIOUS)
    monkeypatch.setattr(onnx_io, "save", full)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and "disk is full" in line and "nothing was changed" in line, line
    assert out.read_bytes() == PRECIOUS and not rep.exists() and leftovers(tmp_path) == []


# severe 10: cost cache setup -----------------------------------------------------------------------------------

def _cache_run(capsys, tmp_path: Path) -> tuple[int, str]:
    """A run that times operators (ort-cpu): (exit code, stderr); the output is checked against the input."""
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out = tmp_path / "out.onnx"
    rc = main(["optimize-model", str(model), "-o", str(out), "--scheduler", "none", "--cost", "ort-cpu",
               "--no-measure", "-q", "--allow-slower"])
    err = capsys.readouterr().err
    if rc == 0:
        x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
        np.testing.assert_allclose(_outputs(out, {"x": x})[0], _outputs(small_matmul(), {"x": x})[0], atol=1e-5)
    return rc, err


@pytest.mark.parametrize("case", ["dir-is-a-file", "read-only-folder", "read-only-home"])
def test_an_unusable_cache_folder_runs_without_the_cache_and_says_so(capsys, tmp_path, monkeypatch, case):
    if case == "dir-is-a-file":
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("x")
        monkeypatch.setenv("EQSAT_CACHE_DIR", str(blocker))
    elif case == "read-only-folder":
        monkeypatch.setenv("EQSAT_CACHE_DIR", str(read_only_folder(tmp_path)))
    else:
        monkeypatch.delenv("EQSAT_CACHE_DIR")
        monkeypatch.setenv("HOME", str(read_only_folder(tmp_path)))
    rc, err = _cache_run(capsys, tmp_path)
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if "cost cache" in line]
    assert len(warnings) == 1 and warnings[0].startswith("eqsat: warning:") and "running without it" in warnings[0]
    assert "Traceback" not in err and "--cache" not in err


@pytest.mark.timing
def test_a_locked_cache_is_left_alone_after_a_short_wait(capsys, tmp_path, monkeypatch):
    import time

    from eqsat.cost import cache

    path = tmp_path / "cache" / "costs.sqlite"
    path.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "c.execute('CREATE TABLE t (x)'); c.execute('BEGIN EXCLUSIVE'); c.execute('INSERT INTO t VALUES (1)')\n"
        "print('locked', flush=True); time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(cache, "SETUP_LOCK_SECONDS", 0.5)
        start = time.perf_counter()
        rc, err = _cache_run(capsys, tmp_path)
        assert rc == 0, err
        assert "locked" in err and "running without it" in err and "Traceback" not in err
        assert time.perf_counter() - start < 50  # not the 60 s lock wait
    finally:
        holder.kill()
        holder.wait()


def test_an_explicit_unusable_cache_is_exit_2_naming_the_right_flag(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["cost", "show", "--cache", str(blocker / "costs.sqlite")])
    err = capsys.readouterr().err
    assert rc == 2 and "--cache FILE" in err and "EQSAT_CACHE_DIR (or --cache)" not in err, err


# severe 6: float16 LayerNorm as the TorchScript exporter decomposes it ------------------------------------------

def _layernorm16(upcast: int | None) -> onnx.ModelProto:
    """x float16 [2, 4, 8] -> ReduceMean, Sub, (Cast to ``upcast``), Pow 2, ReduceMean, Add eps, Sqrt, Div, (Cast
    back), Mul weight, Add bias: the decomposed LayerNorm the TorchScript exporter writes below opset 17."""
    h = TensorProto.FLOAT16
    inner = np.dtype(helper.tensor_dtype_to_np_dtype(upcast)) if upcast else np.float16
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "b"),
             numpy_helper.from_array(np.array(2.0, inner), "two"), numpy_helper.from_array(np.array(1e-5, inner), "eps")]
    n = helper.make_node
    nodes = [n("ReduceMean", ["x"], ["m"], axes=[-1]), n("Sub", ["x", "m"], ["c"])]
    if upcast:
        nodes.append(n("Cast", ["c"], ["c32"], to=upcast))
    c = "c32" if upcast else "c"
    nodes += [n("Pow", [c, "two"], ["p"]), n("ReduceMean", ["p"], ["v"], axes=[-1]), n("Add", ["v", "eps"], ["ve"]),
              n("Sqrt", ["ve"], ["s"]), n("Div", [c, "s"], ["d"])]
    if upcast:
        nodes.append(n("Cast", ["d"], ["d16"], to=h))
    nodes += [n("Mul", ["d16" if upcast else "d", "w"], ["sc"]), n("Add", ["sc", "b"], ["y"])]
    graph = helper.make_graph(nodes, "ln16", [helper.make_tensor_value_info("x", h, [2, 4, 8])],
                              [helper.make_tensor_value_info("y", h, [2, 4, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("upcast", [None, TensorProto.FLOAT, TensorProto.DOUBLE])
def test_float16_decomposed_layernorm_round_trips(capsys, tmp_path, upcast):
    x = np.random.default_rng(7).standard_normal((2, 4, 8)).astype(np.float16)
    written = _optimized_matches(capsys, tmp_path, _layernorm16(upcast), {"x": x}, *FAST, "--allow-slower",
                                 atol=1e-2)
    types = {i.name: i.type.tensor_type.elem_type for i in written.graph.input}
    assert types == {"x": TensorProto.FLOAT16}


def _transposed16() -> onnx.ModelProto:
    """x float16 [2, 64, 128] -> Transpose, Transpose back, MatMul by a float16 weight, Transpose -> y [2, 128, 64]:
    the layout operators are the e-graph's own at float16 (the MatMul is opaque), and the search rewrites them."""
    h = TensorProto.FLOAT16
    w = numpy_helper.from_array(np.random.default_rng(9).standard_normal((128, 128)).astype(np.float16) / 8, "w")
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["t1"], perm=[0, 2, 1]), n("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             n("MatMul", ["t2", "w"], ["m"]), n("Transpose", ["m"], ["y"], perm=[0, 2, 1])]
    graph = helper.make_graph(nodes, "t16", [helper.make_tensor_value_info("x", h, [2, 64, 128])],
                              [helper.make_tensor_value_info("y", h, [2, 128, 64])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_float16_program_is_searched_and_priced_at_float16(capsys, tmp_path):
    """The search and the ILP price the float16 transposes (timed in onnxruntime, where float16 and float32
    differ) as the program decoded from them is priced: at their element type, not float32's (they disagreed, and
    the run stopped on an assertion); the written model equals the original in onnxruntime."""
    x = np.random.default_rng(10).standard_normal((2, 64, 128)).astype(np.float16)
    written = _optimized_matches(capsys, tmp_path, _transposed16(), {"x": x}, "--budget", "4", "--cost", "ort-cpu",
                                 "--no-measure", "--allow-slower", "-q", atol=1e-2)
    assert sum(node.op_type == "Transpose" for node in written.graph.node) < 3  # the pair cancelled
    assert {i.name: i.type.tensor_type.elem_type for i in written.graph.input} == {"x": TensorProto.FLOAT16}


# medium: QDQ models and Dropout --------------------------------------------------------------------------------

def _qdq_conv() -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(int8 weight)) -> Q -> DQ: a statically quantized Conv in QDQ form."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ws"), numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.uint8), "xz"),
             numpy_helper.from_array(np.array(0.1, np.float32), "ys"), numpy_helper.from_array(np.array(128, np.uint8), "yz")]
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]), n("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             n("QuantizeLinear", ["c", "ys", "yz"], ["cq"]), n("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_qdq_weights_stay_quantized_and_the_conv_verifies(capsys, tmp_path):
    x = np.random.default_rng(8).uniform(0, 10, (1, 3, 8, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, _qdq_conv(), {"x": x}, *FAST, "--allow-slower", atol=0)
    weights = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    assert any(w.dtype == np.int8 and w.shape == (4, 3, 3, 3) for w in weights.values())
    assert all(w.size <= 1 for w in weights.values() if w.dtype.kind == "f"), "a weight was dequantized into floats"
    assert sum(n.op_type == "DequantizeLinear" for n in written.graph.node) == 3


def _dropout(case: str) -> onnx.ModelProto:
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "r"), numpy_helper.from_array(np.array(True), "t"),
             numpy_helper.from_array(np.array(False), "f")]
    if case == "training":
        nodes = [n("Relu", ["x"], ["h"]), n("Dropout", ["h", "r", "t"], ["y"], seed=3)]
    elif case == "mask-used":
        nodes = [n("Relu", ["x"], ["h"]), n("Dropout", ["h"], ["d", "mask"]), n("Cast", ["mask"], ["m"], to=F),
                 n("Mul", ["d", "m"], ["y"])]
    else:
        nodes = [n("Relu", ["x"], ["h"]), n("Dropout", ["h", "r", "f"], ["y"])]
    graph = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


@pytest.mark.parametrize("case", ["training", "mask-used", "inference"])
def test_dropout_is_removed_only_in_inference(capsys, tmp_path, case):
    x = np.random.default_rng(9).standard_normal((2, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, _dropout(case), {"x": x}, *FAST, "--allow-slower", atol=0)
    assert any(n.op_type == "Dropout" for n in written.graph.node) == (case != "inference")


# medium: metadata, a 0-sized dimension -------------------------------------------------------------------------

def test_the_written_model_keeps_the_inputs_metadata(capsys, tmp_path):
    model = small_matmul()
    model.producer_name, model.producer_version = "pytorch", "2.9.0"
    model.doc_string, model.graph.doc_string, model.model_version = "a model", "its graph", 7
    helper.set_model_props(model, {"author": "someone", "license": "MIT"})
    x = np.random.default_rng(10).standard_normal((2, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, model, {"x": x}, *FAST, "--allow-slower")
    assert (written.producer_name, written.producer_version, written.doc_string, written.graph.doc_string,
            written.model_version) == ("pytorch", "2.9.0", "a model", "its graph", 7)
    assert {p.key: p.value for p in written.metadata_props} == {"author": "someone", "license": "MIT"}


def test_a_zero_sized_dimension_is_named_as_such(capsys, tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [0, 32])],
                              [helper.make_tensor_value_info("y", F, [0, 32])])
    path = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "size 0" in line and "[0,32]" in line and "dynamic" not in line and "x=1" not in line, line


# medium: stale staging folders, a full stderr -----------------------------------------------------------------

def test_staging_folders_of_a_killed_run_are_cleaned_and_live_ones_kept(capsys, tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a PID no process has now
    stale = tmp_path / f".eqsat-{gone.pid}-abcd1234"
    (stale / "model").mkdir(parents=True)
    (stale / "model" / "out.onnx").write_bytes(b"partial")
    live = tmp_path / f".eqsat-{os.getppid()}-efgh5678"  # a running process's (the one that started the tests)
    live.mkdir()
    foreign = tmp_path / ".eqsat-notapid"  # not named by eqsat's rule: never touched
    foreign.mkdir()
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(tmp_path / "out.onnx"), *FAST)
    assert rc == 0, line
    assert not stale.exists() and live.is_dir() and foreign.is_dir()
    assert sorted(leftovers(tmp_path)) == sorted([live.name, foreign.name])


def test_a_full_stderr_does_not_stop_the_run(tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out = tmp_path / "out.onnx"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize-model", str(model), "-o", str(out),
                               "--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower"],
                              stderr=full, stdout=subprocess.PIPE, timeout=300)
    assert proc.returncode == 0
    x = np.random.default_rng(11).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(_outputs(out, {"x": x})[0], _outputs(small_matmul(), {"x": x})[0], atol=1e-5)


# medium: the Python API's arguments ----------------------------------------------------------------------------

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
    np.testing.assert_allclose(_outputs(result.optimized, {"x": x})[0], _outputs(model, {"x": x})[0], atol=1e-5)


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


# medium: messages ----------------------------------------------------------------------------------------------

def test_the_unsorted_nodes_message_is_whole(capsys, tmp_path):
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="second"), helper.make_node("Relu", ["x"], ["h"], name="first")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    path = tmp_path / "unsorted.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "topologically sorted" in line and "second" in line and "is not output of" in line, line


def test_output_to_a_pipe_names_the_stream(tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize-model", str(model), "-o", "/dev/stdout", *FAST],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is a stream" in proc.stderr and "/proc/" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


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
