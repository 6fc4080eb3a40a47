"""Flags at their limits and the messages that name them: ``--workers`` bounded and started inside
``--time-limit``, ``--static-shape`` errors naming ``--static-shape``, onnxruntime's load errors naming the user's
file (not eqsat's temporary copy), and no numpy RuntimeWarning from eqsat's source before an exit-3 message."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat import ir
from eqsat.app import config as app_config
from eqsat.app.cli import main
from eqsat.app.config import OptimizeConfig, bounded_workers
from eqsat.app.pipeline import optimize
from eqsat.cost import make
from eqsat.egglog.egraph import EGraph
from eqsat.errors import InputError
from eqsat.ir import Graph
from eqsat.mcts import MCTS, Env, SearchConfig
from eqsat.mcts.config import WORKERS_CAP
from eqsat.mcts.parallel import Forest
from eqsat.models import build
from eqsat.onnx.export import fold_weights
from eqsat.rules import rule_set

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]
FAST = ["--scheduler", "none", "--cost", "analytic", "--no-measure", "-q"]


def _cores() -> int:
    """The usable cores, as the run counts them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, the one ``eqsat: error:`` line or '', the whole stderr)."""
    rc = main(list(args))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("eqsat: error:")]
    assert len(lines) <= 1, err
    return rc, lines[0] if lines else "", err


def _matmul(tmp_path: Path, dims: list, name: str = "in.onnx") -> Path:
    """x [dims] @ w [8, 8] -> Relu -> y, saved."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", F, dims)],
                              [helper.make_tensor_value_info("y", F, dims)], [w])
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    return path


# --workers: a hard cap, the usable cores, the time limit ----------------------------------------------------------

@pytest.mark.timing
@pytest.mark.parametrize("workers", [WORKERS_CAP + 1, 100000])
def test_workers_over_the_cap_are_refused_naming_value_and_cap(capsys, tmp_path, workers):
    path = _matmul(tmp_path, [2, 8])
    start = time.perf_counter()
    # --scheduler none: where the cap were missing, this test must not start 100,000 processes to find out
    rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--workers",
                         str(workers), "--time-limit", "5", *FAST)
    assert rc == 2, err
    assert f"--workers {workers}" in line and f"cap of {WORKERS_CAP}" in line and f"from 1 to {WORKERS_CAP}" in line
    assert not any(ln.startswith("[") for ln in err.splitlines()), err  # refused before any work
    assert time.perf_counter() - start < 10 and not (tmp_path / "o.onnx").exists()


def test_workers_over_the_cap_are_refused_by_the_api():
    with pytest.raises(InputError, match=f"--workers 1000000: over the cap of {WORKERS_CAP}"):
        OptimizeConfig.of(workers=10**6).validate()
    with pytest.raises(InputError, match="over the cap"):
        optimize(build("squeezenet", small=True), OptimizeConfig.of(workers=10**6, scheduler="none", measure=False))
    OptimizeConfig.of(workers=WORKERS_CAP).validate()  # the cap itself is accepted
    egraph = EGraph.from_graph(build("squeezenet", small=True))
    env = Env(egraph, rule_set("default"), make("analytic"), SearchConfig())
    with pytest.raises(InputError, match="from 1 to"):  # the search's own guard, for callers of the search API
        Forest(MCTS(env, SearchConfig()), 10**6)


def test_workers_beyond_the_usable_cores_run_as_many_with_a_warning(monkeypatch):
    monkeypatch.setattr(app_config, "available_mb", lambda: 10**6)  # memory is not what bounds it here
    cores = _cores()
    said: list[str] = []
    bounded = bounded_workers(OptimizeConfig.of(workers=cores + 3), said.append)
    assert bounded.search.workers == cores
    assert len(said) == 1 and f"--workers {cores + 3}" in said[0] and f"{cores} usable cores" in said[0]
    assert said[0].startswith("eqsat: warning:") and f"running {cores} tree" in said[0]
    said.clear()
    assert bounded_workers(OptimizeConfig.of(workers=cores), said.append).search.workers == cores and not said


def test_workers_beyond_what_memory_holds_run_as_many_with_a_warning(monkeypatch):
    monkeypatch.setattr(app_config, "available_mb", lambda: 300)  # half of it holds one worker of about 130 MB
    monkeypatch.setattr(app_config, "usable_cores", lambda: 16)
    said: list[str] = []
    assert bounded_workers(OptimizeConfig.of(workers=8), said.append).search.workers == 2
    assert len(said) == 1 and "available memory (300 MB)" in said[0] and "running 2 trees" in said[0]


def test_the_cli_runs_at_most_the_usable_cores_and_records_them(capsys, tmp_path):
    path, report = _matmul(tmp_path, [2, 8]), tmp_path / "r.json"
    cores = _cores()
    rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--report",
                         str(report), "--workers", str(cores + 1), "--time-limit", "2", "--cost", "analytic",
                         "--no-measure", "-q")
    assert rc == 0, err
    assert f"eqsat: warning: --workers {cores + 1}" in err
    ran = json.loads(report.read_text())["config"]["search"]["workers"]
    assert 1 <= ran <= cores


WORKER_DELAY_S = 10.0


class SlowStart(MCTS):
    """A search tree whose spawned replicas take ``WORKER_DELAY_S`` to start (a loaded machine, a huge model):
    the caller must not wait for them past the time limit."""

    def __init__(self, env, config, progress=None, tree: int = 0):
        super().__init__(env, config, progress, tree)
        self.index = tree

    def start(self) -> float:
        if self.index:
            time.sleep(WORKER_DELAY_S)
        return super().start()


@pytest.mark.timing
def test_the_workers_start_inside_the_time_limit():
    egraph = EGraph.from_graph(build("squeezenet", small=True))
    config = SearchConfig(workers=2, time_limit=1.0, budget=4, depth=2, prelude=False, finish=False)
    search = SlowStart(Env(egraph, rule_set("default"), make("analytic"), config), config)
    start = time.perf_counter()
    report = search.run()
    took = time.perf_counter() - start
    assert took < config.time_limit + 2.5, f"the search took {took:.1f} s for a time limit of 1 s"
    assert report.steps or report.stop_reason  # it decided without the late tree


# --static-shape errors name --static-shape ---------------------------------------------------------------------

@pytest.mark.parametrize("spec, expected", [
    ("nope=2,8", "--static-shape names ['nope'], which are not model inputs"),
    ("x=2,8,3", "--static-shape x: model input has rank 2"),
    ("x=2,9", "--static-shape x=2,9: dimension 1 of input 'x' is static (8)"),
])
def test_a_static_shape_error_names_the_static_shape_flag(capsys, tmp_path, spec, expected):
    path = _matmul(tmp_path, ["b", 8])
    rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--static-shape", spec,
                         *FAST)
    assert rc == 2 and expected in line, err
    assert "--input-shape" not in line
    rc, line, err = _cli(capsys, "info", str(path), "--static-shape", spec)
    assert rc == 2 and expected in line, err


def test_an_input_shape_error_still_names_the_input_shape_flag(capsys, tmp_path):
    path = _matmul(tmp_path, ["b", 8])
    rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--input-shape",
                         "nope=2,8", *FAST)
    assert rc == 2 and "--input-shape names ['nope']" in line and "--static-shape" not in line, err


def test_two_flags_sizing_one_dimension_otherwise_are_both_named(capsys, tmp_path):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["b", 8]),
                                           helper.make_tensor_value_info("z", F, ["b", 8])],
                              [helper.make_tensor_value_info("y", F, ["b", 8])])
    path = tmp_path / "in.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--input-shape", "x=2,8",
                         "--static-shape", "z=3,8", *FAST)
    assert rc == 2 and "--input-shape x" in line and "--static-shape z" in line and "'b'" in line, err


# onnxruntime's load errors name the user's file ----------------------------------------------------------------

@pytest.mark.parametrize("external", [False, True])
def test_an_onnxruntime_load_error_names_the_users_file(capsys, tmp_path, external):
    # a weight large enough for the run's weight pool, so onnxruntime loads eqsat's temporary copy of the model
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="same"),
             helper.make_node("Relu", ["h"], ["y"], name="same")]  # onnxruntime refuses duplicate node names
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 128])],
                              [helper.make_tensor_value_info("y", F, [2, 256])], [w])
    path = tmp_path / "users-model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path, save_as_external_data=external,
              location="users-model.onnx.data")
    rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), *FAST)
    assert rc == 2 and "onnxruntime cannot load the model" in line, err
    assert str(path) in line, line
    assert "eqsat-weights-" not in line and "model-" not in line.replace("users-model", ""), line
    assert not (tmp_path / "o.onnx").exists()


# no numpy RuntimeWarning from eqsat's source ---------------------------------------------------------------------

def test_folding_weights_that_overflow_warns_nothing():
    big = np.full((8, 8), 1e30, np.float32)
    x = ir.input_("x", (2, 8), "float32")
    w, v = ir.weight("w", (8, 8), "float32"), ir.weight("v", (8, 8), "float32")
    folded = ir.make("matmul", [w, v], (0,))  # 8 x 1e60: past float32's range
    graph = Graph((x,), (ir.make("matmul", [x, folded], (0,)),), ("y",), {"w": big, "v": big})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would raise here
        _order, consts = fold_weights(graph)
    assert np.isinf(consts[id(folded)]).all()


def test_an_overflowing_model_fails_verification_without_a_numpy_warning(capsys, tmp_path):
    # x @ (w @ v) folds w @ v to infinities; the original's (x @ w) @ v stays finite in its first product
    w = numpy_helper.from_array(np.full((8, 8), 1e30, np.float32), "w")
    v = numpy_helper.from_array(np.full((8, 8), 1e30, np.float32), "v")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "v"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8])], [w, v])
    path = tmp_path / "in.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET), path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, line, err = _cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--scheduler",
                             "tensat", "--time-limit", "5", "--cost", "analytic", "--no-measure", "-q")
    numpy_warnings = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if issubclass(w.category, RuntimeWarning)]
    assert numpy_warnings == [], numpy_warnings
    assert rc in (0, 3), err
    if rc == 3:
        assert "does not match the original" in line and "RuntimeWarning" not in err
