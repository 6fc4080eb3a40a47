"""External data in and out: a model keeping its weights in external data files (one file,
several, one per tensor as torch's exporter writes big models) is written with its weights in ``OUT.onnx.data``
beside the output, staged and renamed with the model and the report; an inline model stays inline unless it is
too large for one protobuf message (the limit lowered here, :data:`eqsat.onnx.io.LIMIT`; nothing on the way
serializes such a model whole); a missing, truncated or wrong-length data file, or one outside the model's folder,
is exit 2 naming the file, with nothing written. The oracle: onnxruntime running the original from its file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.errors import InputError
from eqsat.onnx import external, reading
from eqsat.onnx import io as onnx_io

FAST = ["--scheduler", "none", "--cost", "analytic", "--no-measure", "-q"]
PRECIOUS = b"precious bytes that must survive"
RNG = np.random.default_rng(27)


def mlp(width: int = 48, bias: bool = True) -> onnx.ModelProto:
    """x -> MatMul w1 (+ b1) -> Relu -> MatMul w2 -> y: two weights of ``width`` x ``width`` float32."""
    w1, w2 = (numpy_helper.from_array(RNG.standard_normal((width, width)).astype(np.float32), n) for n in ("w1", "w2"))
    b1 = numpy_helper.from_array(RNG.standard_normal(width).astype(np.float32), "b1")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m"])]
    nodes += [helper.make_node("Add", ["m", "b1"], ["h"])] if bias else [helper.make_node("Identity", ["m"], ["h"])]
    nodes += [helper.make_node("Relu", ["h"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, width])],
                              [w1, w2] + ([b1] if bias else []))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save_input(folder: Path, layout: str, model: onnx.ModelProto | None = None) -> Path:
    """``folder/in.onnx`` with its weights ``inline``, in ``one`` file (weights.bin), or one file ``per-tensor``
    (named after the tensor, as torch's exporter writes a big model)."""
    path = folder / "in.onnx"
    model = model or mlp()
    if layout == "inline":
        onnx.save_model(model, path)
    else:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=layout == "one",
                        location="weights.bin", size_threshold=1024)
    return path


def run(path: Path, x: np.ndarray) -> np.ndarray:
    """onnxruntime's output of the model at ``path``, read from its file (external data from beside it)."""
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".eqsat-")]


def cli(capsys, *args: str) -> tuple[int, str]:
    rc = main(list(args))
    err = capsys.readouterr().err
    return rc, next((line for line in err.splitlines() if line.startswith("eqsat: error:")), "")


def external_locations(path: Path) -> set[str]:
    """The locations the model at ``path`` names for its external tensors."""
    model = onnx.load(str(path), load_external_data=False)
    return {dict((e.key, e.value) for e in t.external_data)["location"] for t in reading.external_tensors(model)}


# 1. the same layout out ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["one", "per-tensor"])
def test_external_data_in_gives_external_data_beside_the_output(capsys, tmp_path, layout):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    model = save_input(src, layout)
    inputs = sorted(p.name for p in src.iterdir())
    assert inputs == (["in.onnx", "weights.bin"] if layout == "one" else ["in.onnx", "w1", "w2"])
    out, rep = dst / "out.onnx", dst / "rep.json"
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 0, line
    assert sorted(p.name for p in dst.iterdir()) == ["out.onnx", "out.onnx.data", "rep.json"]
    assert external_locations(out) == {"out.onnx.data"}  # relative, beside the output
    weights = 2 * 48 * 48 * 4
    assert os.path.getsize(out) < weights <= os.path.getsize(str(out) + ".data")
    assert json.loads(rep.read_text())["external_data"] == str(out) + ".data"
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    np.testing.assert_allclose(run(out, x), run(model, x), rtol=1e-5, atol=1e-5)
    assert sorted(p.name for p in src.iterdir()) == inputs


def two_branches() -> onnx.ModelProto:
    """x @ w1 and x @ w2, each through a Relu: the search merges the two MatMuls into one on a new, concatenated
    weight (a tensor the input does not hold)."""
    w1, w2 = (numpy_helper.from_array(RNG.standard_normal((48, 48)).astype(np.float32), n) for n in ("w1", "w2"))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["x", "w2"], ["b"]),
             helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Relu", ["b"], ["yb"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 48])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 48]) for n in ("ya", "yb")],
                              [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_optimized_programs_new_weights_go_to_the_data_file(capsys, tmp_path):
    model = save_input(tmp_path, "one", two_branches())
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), "--scheduler",
                   "tensat", "--cost", "analytic", "--no-measure", "-q")
    assert rc == 0, line
    report = json.loads(rep.read_text())
    assert report["returned"] == "optimized" and report["operators"]["optimized"].get("matmul") == 1, report
    skeleton = onnx.load(str(out), load_external_data=False)
    shapes = {t.name: list(t.dims) for t in reading.external_tensors(skeleton)}
    assert sorted(shapes.values()) == [[48, 96]], shapes  # the merged weight, outside the model
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    sessions = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (out, model)]
    got, want = (s.run(["ya", "yb"], {"x": x}) for s in sessions)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_moved_output_folder_still_runs(capsys, tmp_path):
    """The output's data location is relative: the output and its data file move together."""
    model = save_input(tmp_path, "one")
    out = tmp_path / "out.onnx"
    assert cli(capsys, "optimize-model", str(model), "-o", str(out), *FAST)[0] == 0
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("out.onnx", "out.onnx.data"):
        os.rename(tmp_path / name, moved / name)
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    np.testing.assert_allclose(run(moved / "out.onnx", x), run(model, x), rtol=1e-5, atol=1e-5)


def test_output_through_a_symbolic_link_keeps_its_data_beside_the_target(capsys, tmp_path):
    """-o a link to real.onnx: the writer writes through the link, so the data file is real.onnx.data, named by
    real.onnx (and the report) and found through the link in the same folder."""
    model = save_input(tmp_path, "one")
    real, link, rep = tmp_path / "real.onnx", tmp_path / "out.onnx", tmp_path / "rep.json"
    real.write_bytes(PRECIOUS)
    link.symlink_to(real.name)
    assert cli(capsys, "optimize-model", str(model), "-o", str(link), "--report", str(rep), *FAST)[0] == 0
    assert link.is_symlink() and not (tmp_path / "out.onnx.data").exists()
    assert external_locations(real) == {"real.onnx.data"}
    assert json.loads(rep.read_text())["external_data"] == str(real) + ".data"
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    np.testing.assert_allclose(run(link, x), run(model, x), rtol=1e-5, atol=1e-5)


def test_inline_input_stays_inline(capsys, tmp_path):
    model = save_input(tmp_path, "inline")
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    assert cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)[0] == 0
    assert not (tmp_path / "out.onnx.data").exists() and external_locations(out) == set()
    assert json.loads(rep.read_text())["external_data"] is None
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    np.testing.assert_allclose(run(out, x), run(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("before", ["existing", "fresh"])
def test_failed_write_keeps_the_old_output_and_its_data(tmp_path, monkeypatch, before):
    """The data file is staged and renamed with the model and the report: a rename failing after the data file
    was replaced puts the old data file back (or removes it, where there was none)."""
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    targets = (out, Path(str(out) + ".data"), rep)
    if before == "existing":
        for p in targets:
            p.write_bytes(PRECIOUS)
    real_replace = os.replace

    def fail_on_the_model(src, dst):
        if Path(dst) == out:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_the_model)
    with pytest.raises(OSError):
        onnx_io.write_together(mlp(), str(out), {str(rep): b"{}"}, external=True)
    monkeypatch.undo()
    if before == "existing":
        assert all(p.read_bytes() == PRECIOUS for p in targets)
    else:
        assert not any(p.exists() for p in targets)
    assert leftovers(tmp_path) == []


# 2. models too large for one message (the limit lowered) -------------------------------------------------------

def test_save_external_round_trips_every_field(tmp_path):
    """A model written with external data and read back equals the model (metadata, subgraph weights included);
    a tensor of a MiB or more starts at a 64 KiB boundary; the model given is left as it was."""
    big = numpy_helper.from_array(RNG.standard_normal((600, 600)).astype(np.float32), "big")
    inner = numpy_helper.from_array(RNG.standard_normal((32, 32)).astype(np.float32), "inner")
    then = helper.make_graph([helper.make_node("Add", ["x", "inner"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [32, 32])], [inner])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [32, 32])])
    nodes = [helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 32])],
                              [numpy_helper.from_array(np.zeros(8, np.float32), "pad"), big,
                               numpy_helper.from_array(np.float32(-1e9), "zero")], doc_string="a graph")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tester",
                              doc_string="a model")
    onnx.helper.set_model_props(model, {"owner": "eqsat"})
    before = model.SerializeToString()
    path = tmp_path / "m.onnx"
    onnx_io.save(model, str(path), external=True)
    assert model.SerializeToString() == before
    skeleton = onnx.load(str(path), load_external_data=False)
    placed = {t.name: {e.key: e.value for e in t.external_data} for t in reading.external_tensors(skeleton)}
    assert set(placed) == {"big", "inner"} and int(placed["big"]["offset"]) % external.ALIGNMENT == 0
    assert reading.load_model(path) == model  # the weights read back, their external fields dropped
    x = RNG.standard_normal((32, 32)).astype(np.float32)
    np.testing.assert_array_equal(run(path, x), x + numpy_helper.to_array(inner))


def test_model_over_the_limit_is_written_with_external_data_and_never_serialized_whole(capsys, tmp_path,
                                                                                         monkeypatch):
    """With the one-message limit lowered below the model's weights, an inline model imports, optimizes, verifies
    and is written with external data; onnxruntime, onnx's checker and shape inference are never handed the
    whole model as one message on the way (the calls that serialize it)."""
    limit = 2 * 48 * 48 * 4 - 1  # the two weights together pass it; each alone does not
    monkeypatch.setattr(onnx_io, "LIMIT", limit)
    model = save_input(tmp_path, "inline")
    whole: list[str] = []

    def guard(name, real):
        def call(first, *args, **kwargs):
            if isinstance(first, onnx.ModelProto) and onnx_io.is_large(first) or \
                    isinstance(first, bytes) and len(first) > limit:
                whole.append(name)
            return real(first, *args, **kwargs)
        return call

    monkeypatch.setattr(ort, "InferenceSession", guard("InferenceSession", ort.InferenceSession))
    monkeypatch.setattr(onnx.checker, "check_model", guard("check_model", onnx.checker.check_model))
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", guard("infer_shapes", onnx.shape_inference.infer_shapes))
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    monkeypatch.undo()
    assert rc == 0, line
    assert whole == []
    assert external_locations(out) == {"out.onnx.data"}
    assert json.loads(rep.read_text())["external_data"] == str(out) + ".data"
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    np.testing.assert_allclose(run(out, x), run(model, x), rtol=1e-5, atol=1e-5)


# 3. data files that cannot be read: exit 2 naming the file, nothing written ------------------------------------

def _set(model_path: Path, **fields: str) -> None:
    """Rewrite the external data fields (location, offset, length; '' removes one) of every external tensor."""
    model = onnx.load(str(model_path), load_external_data=False)
    for t in reading.external_tensors(model):
        kept = {e.key: e.value for e in t.external_data} | fields
        del t.external_data[:]
        for key, value in kept.items():
            if value:
                t.external_data.add(key=key, value=value)
    onnx.save_model(model, str(model_path))


def _break(folder: Path, model: Path, case: str) -> str:
    """Spoil the input's data file ``weights.bin`` as ``case`` says; the words the error must hold."""
    data = folder / "weights.bin"
    if case == "missing":
        data.unlink()
        return "'weights.bin'.*is missing"
    if case == "truncated":
        with open(data, "r+b") as f:
            f.truncate(data.stat().st_size - 4)
        return "'weights.bin'.*is truncated"
    if case == "wrong-length":
        _set(model, length="100")
        return "'weights.bin'.*wrong length"
    if case == "no-length-longer":  # no length: the tensor is the rest of the file, which is longer
        _set(model, length="")
        with open(data, "ab") as f:
            f.write(b"\0" * 8)
        return "'weights.bin'.*wrong length"
    if case == "offset-past-end":
        _set(model, offset=str(data.stat().st_size))
        return "'weights.bin'.*is truncated"
    if case == "outside":
        (folder.parent / "elsewhere.bin").write_bytes(data.read_bytes())
        _set(model, location="../elsewhere.bin")
        return "'../elsewhere.bin'.*outside the model's folder"
    if case == "absolute":
        _set(model, location=str(data))
        return "is an absolute path"
    if case == "symlink-outside":
        os.rename(data, folder.parent / "elsewhere.bin")
        data.symlink_to(folder.parent / "elsewhere.bin")
        return "'weights.bin'.*outside the model's folder"
    if case == "symlink-inside":  # onnx reads no link, even one to a file beside the model
        (folder / "sub").mkdir()
        os.rename(data, folder / "sub" / "weights.bin")
        data.symlink_to(Path("sub") / "weights.bin")
        return "'weights.bin'.*is a symbolic link"
    if case == "directory":
        data.unlink()
        data.mkdir()
        return "'weights.bin'.*is a directory"
    assert case == "fifo"
    data.unlink()
    os.mkfifo(data)
    return "'weights.bin'.*is a FIFO"


CASES = ["missing", "truncated", "wrong-length", "no-length-longer", "offset-past-end", "outside", "absolute",
         "symlink-outside", "symlink-inside", "directory", "fifo"]


@pytest.mark.parametrize("case", CASES)
def test_unreadable_data_file_is_exit_2_naming_it(capsys, tmp_path, case):
    import re

    folder = tmp_path / "in"
    folder.mkdir()
    model = save_input(folder, "one", mlp(bias=False))
    expected = _break(folder, model, case)
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    out.write_bytes(PRECIOUS)
    Path(str(out) + ".data").write_bytes(PRECIOUS)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and re.search(expected, line) and str(model) in line, line
    assert out.read_bytes() == PRECIOUS and Path(str(out) + ".data").read_bytes() == PRECIOUS
    assert not rep.exists() and leftovers(tmp_path) == []


def test_the_data_files_are_checked_before_any_is_read(tmp_path, monkeypatch):
    """A truncated second file is found before the first file's bytes are read (no weight loaded in vain)."""
    model = save_input(tmp_path, "per-tensor")
    with open(tmp_path / "w2", "r+b") as f:
        f.truncate(10)
    read: list[str] = []
    real = onnx.external_data_helper.load_external_data_for_tensor
    monkeypatch.setattr(onnx.external_data_helper, "load_external_data_for_tensor",
                        lambda t, base: read.append(t.name) or real(t, base))
    with pytest.raises(InputError, match="'w2'.*is truncated: it holds 10 bytes"):
        reading.load_model(model)
    assert read == []


def test_tensor_bytes_of_packed_and_plain_types():
    assert external.tensor_bytes(helper.make_tensor("a", TensorProto.FLOAT16, [3, 5], np.zeros(15).tolist())) == 30
    assert external.tensor_bytes(helper.make_tensor("b", TensorProto.INT4, [3], [1, 2, 3])) == 2
    assert external.tensor_bytes(helper.make_tensor("c", TensorProto.STRING, [1], [b"s"])) is None


def test_a_large_model_is_upgraded_and_checked_with_its_weights_set_aside(monkeypatch):
    """kernels.upgrade (the opset upgrade a newer kernel needs) of a model over the limit: onnx's version converter
    and checker get the model with its weights set aside, never whole; the upgraded model keeps every weight and
    computes what the original does (onnxruntime)."""
    from eqsat.onnx import kernels
    from eqsat.ops.base import UPGRADE_DOMAIN, UPGRADE_OPSET

    w = numpy_helper.from_array(RNG.standard_normal((48, 48)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ReduceMean", ["r"], ["y"], axes=[1], keepdims=1)]  # axes: an input from opset 18

    def model(domain: str) -> onnx.ModelProto:
        nodes[1].domain = domain
        graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 48])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])], [w])
        imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        return helper.make_model(graph, opset_imports=imports)

    pending = model(UPGRADE_DOMAIN)
    monkeypatch.setattr(onnx_io, "LIMIT", 48 * 48 * 4 - 1)
    assert onnx_io.is_large(pending)
    whole: list[str] = []
    for module, name in ((kernels.version_converter, "convert_version"), (onnx.checker, "check_model")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda m, *a, _real=real, _name=name, **k: (
            whole.append(_name) if isinstance(m, onnx.ModelProto) and onnx_io.is_large(m) else None) or
            _real(m, *a, **k))
    up = kernels.upgrade(pending)
    onnx_io.check(up)
    monkeypatch.undo()
    assert whole == []
    assert {o.domain: o.version for o in up.opset_import} == {"": UPGRADE_OPSET}
    assert [n.op_type for n in up.graph.node if n.op_type != "Constant"] == ["MatMul", "Relu", "ReduceMean"]
    assert [numpy_helper.to_array(t).tobytes() for t in up.graph.initializer if t.name == "w"] == \
        [numpy_helper.to_array(w).tobytes()]
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    got, want = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                 for m in (up, model("")))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_check_of_a_large_model_still_finds_a_wrong_shape(monkeypatch):
    """onnx_io.check of a model over the limit (weights set aside) refuses what the full check refuses: a MatMul
    whose weight's shape does not fit its input (shape inference reads the set-aside weights' shapes)."""
    monkeypatch.setattr(onnx_io, "LIMIT", 100)
    good, bad = mlp(), mlp()
    bad.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.zeros((40, 48), np.float32), "w2"))
    assert onnx_io.is_large(good) and onnx_io.is_large(bad)
    onnx_io.check(good)
    with pytest.raises(onnx.shape_inference.InferenceError, match="w2|MatMul|dimension"):
        onnx_io.check(bad)
