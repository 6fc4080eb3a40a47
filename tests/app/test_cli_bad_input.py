"""What a careless or hostile user does to the command line: each case checks the exit code, one
error line naming the cause, files left as they were, and no ``.eqsat-*`` leftovers."""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_cases import FAST, PRECIOUS, cli, leftovers, read_only_folder, small_matmul
from onnx import TensorProto, helper, numpy_helper
from paths import REPO

from eqsat.app.config import ilp_seconds, search_seconds
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.errors import InputError
from eqsat.models import build
from eqsat.onnx import io as onnx_io


def relu_chain(n: int, size: int = 4) -> onnx.ModelProto:
    """x -> Relu -> ... (n times) -> y, built with the onnx helper API."""
    names = ["x"] + [f"v{i}" for i in range(1, n)] + ["y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]]) for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture()
def model(tmp_path) -> Path:
    path = tmp_path / "in.onnx"
    onnx.save(small_matmul(), path)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# 1. path collisions -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["report=output", "report=input", "output=input", "output=symlink-to-input",
                                  "report=hardlink-to-input", "report=output.data"])
def test_colliding_paths_are_refused(capsys, tmp_path, model, case):
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    out.write_bytes(PRECIOUS)
    if case == "report=output":
        rep = out
    elif case == "report=input":
        rep = model
    elif case == "output=input":
        out = model
    elif case == "output=symlink-to-input":
        out = tmp_path / "link.onnx"
        out.symlink_to(model)
    elif case == "report=hardlink-to-input":
        rep = tmp_path / "hard.json"
        os.link(model, rep)
    elif case == "report=output.data":
        rep = tmp_path / "out.onnx.data"
    before = snapshot(tmp_path)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and "same file" in line, line
    assert ("--report" if "report" in case.split("=")[0] else "-o") in line, line
    assert snapshot(tmp_path) == before
    assert leftovers(tmp_path) == []


def test_report_same_as_output_for_builtin_model(capsys, tmp_path):
    out = tmp_path / "o.onnx"
    rc, line = cli(capsys, "optimize-model", "--model", "squeezenet", "--small", "-o", str(out), "--report",
                   str(tmp_path / "." / "o.onnx"), *FAST)
    assert rc == 2 and "--report" in line and "same file" in line
    assert list(tmp_path.iterdir()) == []


# 7a. files the input owns and targets that are not regular files (never written over nor replaced) ----------

def _with_external_data(tmp_path: Path, location: str = "in.onnx.data") -> tuple[Path, Path]:
    """in.onnx keeping its weight in the external data file ``location`` beside it; (model, data file)."""
    path = tmp_path / "in.onnx"
    proto = small_matmul()
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(proto.graph.initializer[0]), "w"))
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    data = tmp_path / location
    assert data.is_file() and data.stat().st_size == 8 * 8 * 4
    return path, data


def _runs_in_onnxruntime(path: Path) -> bool:
    x = np.ones((2, 8), np.float32)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].shape == (2, 8)


@pytest.mark.parametrize("case", ["output=data", "report=data", "output=symlink-to-data", "report=hardlink-to-data",
                                  "output.data=data"])
def test_the_inputs_external_data_is_never_a_target(capsys, tmp_path, case):
    model, data = _with_external_data(tmp_path, "w.onnx.data" if case == "output.data=data" else "in.onnx.data")
    assert _runs_in_onnxruntime(model)
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    if case == "output=data":
        out = data
    elif case == "report=data":
        rep = data
    elif case == "output=symlink-to-data":
        out = tmp_path / "link.onnx"
        out.symlink_to(data)
    elif case == "report=hardlink-to-data":
        rep = tmp_path / "hard.json"
        os.link(data, rep)
    elif case == "output.data=data":
        out = tmp_path / "w.onnx"  # its external data file would be w.onnx.data: the input's weights
    before = snapshot(tmp_path)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and "same file" in line and "external data" in line, line
    assert snapshot(tmp_path) == before and _runs_in_onnxruntime(model)
    assert leftovers(tmp_path) == []


def _special_file(tmp_path: Path, kind: str) -> Path:
    """A FIFO, or a character device made like /dev/null (root only: mknod needs CAP_MKNOD)."""
    path = tmp_path / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:  # not root: a FIFO is the non-regular file this user can make
            os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
@pytest.mark.parametrize("flag", ["-o", "--report", "-o's data"])
def test_a_target_that_is_not_a_regular_file_is_refused_not_replaced(capsys, tmp_path, model, kind, flag):
    special = _special_file(tmp_path, kind)
    mode = special.lstat().st_mode
    out, rep = str(tmp_path / "out.onnx"), str(tmp_path / "rep.json")
    if flag == "-o":
        out = str(special)
    elif flag == "--report":
        rep = str(special)
    else:
        out = str(special).removesuffix(".data")
        os.rename(special, out + ".data")
        special = Path(out + ".data")
    rc, line = cli(capsys, "optimize-model", str(model), "-o", out, "--report", rep, *FAST)
    assert rc == 2 and "not a regular file" in line and line.startswith(f"eqsat: error: {flag.split()[0][:2]}"), line
    assert special.lstat().st_mode == mode  # still the FIFO or the device, not a file renamed over it
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "rep.json").exists()
    assert leftovers(tmp_path) == []


def test_the_writer_never_renames_over_a_special_file(tmp_path):
    special = _special_file(tmp_path, "fifo")
    report = tmp_path / "rep.json"
    report.write_bytes(PRECIOUS)
    with pytest.raises(OSError, match="not a regular file"):
        onnx_io.write_together(small_matmul(), str(tmp_path / "m.onnx"), {str(report): b"{}", str(special): b"x"})
    assert stat.S_ISFIFO(special.lstat().st_mode) and report.read_bytes() == PRECIOUS
    assert not (tmp_path / "m.onnx").exists() and leftovers(tmp_path) == []


# 7. unwritable outputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["-o", "--report"])
@pytest.mark.parametrize("case", ["empty", "missing-folder", "trailing-slash", "existing-folder", "too-long",
                                  "read-only"])
def test_unwritable_output_is_found_up_front(capsys, tmp_path, model, flag, case):
    target = {
        "empty": "",
        "missing-folder": str(tmp_path / "nowhere" / "x"),
        "trailing-slash": str(tmp_path / "newdir") + "/",
        "existing-folder": str(tmp_path),
        "too-long": str(tmp_path / ("n" * 300)),
        "read-only": str(read_only_folder(tmp_path) / "x.onnx"),
    }[case]
    paths = {"-o": str(tmp_path / "out.onnx"), "--report": str(tmp_path / "rep.json")} | {flag: target}
    before = snapshot(tmp_path)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", paths["-o"], "--report", paths["--report"], *FAST)
    assert rc == 2, line
    assert line.startswith(f"eqsat: error: {flag} "), line
    other = "--report" if flag == "-o" else "-o "
    assert other not in line, line
    expected = {"empty": "is empty", "missing-folder": "does not exist", "trailing-slash": "ends with /",
                "existing-folder": "is a directory", "too-long": "too long",
                "read-only": "cannot write"}[case]
    assert expected in line, line
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "newdir").exists()
    assert leftovers(tmp_path) == []


# 10. bad flag values ------------------------------------------------------------------------------------------

@pytest.mark.timing
@pytest.mark.parametrize("flags, named", [
    (["--budget", "0"], "--budget"), (["--budget", "-3"], "--budget"), (["--depth", "-1"], "--depth"),
    (["--time-limit", "0"], "--time-limit"), (["--time-limit", "-1"], "--time-limit"),
    (["--time-limit", "nan"], "--time-limit"), (["--time-limit", "inf"], "--time-limit"),
    (["--ilp-time-limit", "0"], "--ilp-time-limit"), (["--ilp-time-limit", "NaN"], "--ilp-time-limit"),
    (["--ilp-time-limit=-inf"], "--ilp-time-limit"), (["--node-limit", "0"], "--node-limit"),
    (["--node-limit", "-5"], "--node-limit"), (["--seed", "-1"], "--seed"),
    (["--scheduler", "tensat", "--k-multi", "-1"], "--k-multi"),
    (["--scheduler", "mcts", "--k-multi", "2"], "--k-multi"),
    (["--final-extractor", "ilpp"], "--final-extractor"), (["--main-extractor", "greedy"], "--main-extractor"),
    (["--small"], "--small"),
])
def test_bad_flag_values_exit_2_before_any_work(capsys, tmp_path, model, flags, named):
    args = ["optimize-model", str(model), "-o", str(tmp_path / "o.onnx"), "--cost", "analytic", "--no-measure"]
    start = time.perf_counter()
    rc, line = cli(capsys, *args, *flags)
    assert rc == 2 and named in line, line
    assert time.perf_counter() - start < 5
    assert not (tmp_path / "o.onnx").exists() and leftovers(tmp_path) == []


def test_api_rejects_bad_config_before_loading():
    # the path does not exist: the config error must come first, so it cannot be "no such file"
    for config, named in [(OptimizeConfig(final_extractor="ilpp"), "--final-extractor"),
                          (OptimizeConfig.of(time_limit=math.nan), "--time-limit"),
                          (OptimizeConfig(scheduler="mtcs"), "--scheduler"),
                          (OptimizeConfig(cost="analytic-tpu"), "--cost")]:
        with pytest.raises(InputError, match=named):
            optimize("/nonexistent/model.onnx", config)


# 14. node limit default and time limit ----------------------------------------------------------------------

def test_model_over_2000_operators_runs_with_default_node_limit(capsys, tmp_path):
    n = 2100
    path = tmp_path / "chain.onnx"
    onnx.save(relu_chain(n), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--report",
                   str(tmp_path / "r.json"), "--final-extractor", "greedy-dag", *FAST)
    assert rc == 0, line
    egraph = json.loads((tmp_path / "r.json").read_text())["egraph"]
    assert egraph["initial_enodes"] >= n
    assert egraph["node_limit"] == 4 * egraph["initial_enodes"]
    x = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
    got = ort.InferenceSession(str(tmp_path / "o.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--node-limit", "1000",
                   *FAST)
    assert rc == 2 and "--node-limit 1000" in line


def test_explicit_node_limit_is_reported(capsys, tmp_path, model):
    rc, _ = cli(capsys, "optimize-model", str(model), "-o", str(tmp_path / "o.onnx"), "--report",
                str(tmp_path / "r.json"), "--node-limit", "777", *FAST)
    assert rc == 0
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["egraph"]["node_limit"] == 777 and r["config"]["search"]["node_limit"] == 777


def test_ilp_gets_what_the_time_limit_leaves():
    config = OptimizeConfig.of(time_limit=10.0, ilp_time_limit=60.0)
    assert ilp_seconds(config, 2.5) == pytest.approx(7.5)
    assert ilp_seconds(config, 11.0) == pytest.approx(0.1)  # the floor: SCIP returns its warm start
    assert ilp_seconds(OptimizeConfig.of(time_limit=600.0, ilp_time_limit=3.0), 1.0) == pytest.approx(3.0)


def test_the_search_leaves_the_ilp_its_share_of_the_time_limit(monkeypatch):
    """The scheduler is handed --time-limit less the ILP's share (a search that spent it all left SCIP 0.1 s) and
    less the import (at most half the limit)."""
    from eqsat.app import pipeline

    seen = []
    real = pipeline.run_scheduler
    monkeypatch.setattr(pipeline, "run_scheduler", lambda name, eg, search, *a, **k: seen.append(search) or real(
        name, eg, search, *a, **k))
    for final, limit, ilp_limit, search_s in (("ilp", 10.0, 60.0, 8.0), ("ilp", 600.0, 3.0, 597.0),
                                              ("greedy-dag", 10.0, 60.0, 10.0)):
        config = OptimizeConfig.of(scheduler="tensat", time_limit=limit, ilp_time_limit=ilp_limit,
                                   final_extractor=final, cost="analytic", measure=False)
        assert search_seconds(config) == pytest.approx(search_s)
        took = optimize(build("tt", small=True), config).report.times["import"]
        left = config.updated(time_limit=max(limit / 2, limit - took))
        assert seen[-1].time_limit == pytest.approx(search_seconds(left)) and seen[-1].time_limit <= search_s


# 3. interrupts -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_search_exits_130_and_keeps_outputs(tmp_path, sig):
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    out.write_bytes(PRECIOUS)
    rep.write_bytes(PRECIOUS)
    proc = subprocess.Popen([sys.executable, "-m", "eqsat", "optimize-model", "--model", "squeezenet", "--small",
                             "--scheduler", "mcts", "--budget", "1000000", "--cost", "analytic", "--no-measure",
                             "--no-prelude",  # with it the search saturates in a second: no time to interrupt
                             "-o", str(out), "--report", str(rep)], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # wait until the search is under way
            if "imported" in line:
                break
        time.sleep(2.0)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(sig)
        rest = proc.stderr.read()
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 130, rest
    assert "interrupted" in rest and "Traceback" not in rest
    assert out.read_bytes() == PRECIOUS and rep.read_bytes() == PRECIOUS
    assert leftovers(tmp_path) == []


def test_second_rename_failing_restores_the_first(tmp_path):
    out = tmp_path / "out.onnx"
    out.write_bytes(PRECIOUS)
    blocker = tmp_path / "rep.json"  # a non-empty folder: renaming a file onto it fails
    blocker.mkdir()
    (blocker / "keep").write_text("x")
    with pytest.raises(OSError):
        onnx_io.write_together(small_matmul(), str(out), {str(blocker): b"{}"})
    assert out.read_bytes() == PRECIOUS
    assert leftovers(tmp_path) == []
    fresh = tmp_path / "fresh.onnx"
    with pytest.raises(OSError):
        onnx_io.write_together(small_matmul(), str(fresh), {str(blocker): b"{}"})
    assert not fresh.exists()


def test_interrupt_during_commit_restores_both(tmp_path, monkeypatch):
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    out.write_bytes(PRECIOUS)
    real_replace = os.replace

    def replace_then_interrupt(src, dst):  # Ctrl-C arrives right after the model was renamed into place
        real_replace(src, dst)
        if Path(dst) == out:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        onnx_io.write_together(small_matmul(), str(out), {str(rep): b"{}"})
    monkeypatch.undo()
    assert out.read_bytes() == PRECIOUS and not rep.exists()
    assert leftovers(tmp_path) == []


def test_model_and_report_written_together(tmp_path):
    out, rep = tmp_path / "out.onnx", tmp_path / "sub" / "rep.json"
    rep.parent.mkdir()
    out.write_bytes(PRECIOUS)
    onnx_io.write_together(small_matmul(), str(out), {str(rep): b'{"ok": 1}'})
    assert onnx.load(out).graph.node[0].op_type == "MatMul"
    assert json.loads(rep.read_text()) == {"ok": 1}
    assert leftovers(tmp_path, rep.parent) == []


# 13. packaging -------------------------------------------------------------------------------------------------

def test_pyproject_lists_every_package():
    """A regular install takes only the listed packages: each folder with an __init__.py must be listed."""
    import tomllib

    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for name, folder in tool["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            if "__pycache__" not in rel:
                found.add(".".join((name, *rel)))
    assert "eqsat.rules.ours" in found
    assert found == set(tool["packages"])
