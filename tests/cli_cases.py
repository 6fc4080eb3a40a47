"""The command line as the hostile-user tests drive it (tests/app/test_cli_bad_input.py,
tests/app/test_refused_models.py, test_unusual_models.py, test_unusual_environments.py): the fast flags, a small
model, the CLI run in this process with its one error line, and the checks on what a run leaves behind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from eqsat.app.cli import main

FAST = ["--scheduler", "none", "--cost", "analytic", "--no-measure", "-q"]
PRECIOUS = b"precious bytes that must survive"


def small_matmul() -> onnx.ModelProto:
    """x [2, 8] -> MatMul by an 8x8 weight -> Relu -> y."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], np.random.default_rng(0).standard_normal(64).tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in this process; (exit code, the one ``eqsat: error:`` line, or '' if none)."""
    rc = main(list(args))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("eqsat: error:")]
    assert len(lines) <= 1, err
    if rc == 2:
        assert len(lines) == 1, err
        assert not any(line.startswith("[") for line in err.splitlines()), f"work was done before the error: {err}"
    return rc, lines[0] if lines else ""


def leftovers(*folders: Path) -> list[str]:
    """The ``.eqsat-*`` staging files and folders left in ``folders``."""
    return [p.name for f in folders for p in f.iterdir() if p.name.startswith(".eqsat-")]


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: chmod 555, or /sys for root (who ignores modes)."""
    if os.geteuid() == 0:
        return Path("/sys")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return ro
