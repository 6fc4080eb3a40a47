"""The progress lines a run prints on stderr: a large model's import runs it at several sizes for a minute or more
(PE-Audio printed nothing for 67 s, ZoeDepth for 50 s), so a line says it begins, naming its nodes; a small model's
import is quick and says nothing before its own line at its end (nor does a model the import refuses: its error is
the first line, tests/app/test_refused_models.py)."""

from __future__ import annotations

import onnx
import pytest
from cli_cases import cli
from onnx import TensorProto, helper

from eqsat.app.cli import main
from eqsat.app.pipeline import SAID_BEFORE_IMPORT


def _chain(length: int, opset: int = 17, names_twice: bool = False) -> onnx.ModelProto:
    """``length`` Abs and Neg nodes, alternating, over a ``[batch, 8]`` input (``names_twice``: two nodes of one
    name, which onnxruntime refuses to load)."""
    names = ["x", *(f"v{k}" for k in range(length - 1)), "y"]
    nodes = [helper.make_node("Abs" if k % 2 else "Neg", [names[k]], [names[k + 1]],
                              name=f"n{k // 2 if names_twice and k < 2 else k}") for k in range(length)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("length", [SAID_BEFORE_IMPORT, 12], ids=["large", "small"])
def test_a_large_model_s_import_says_it_begins_before_it_ends(tmp_path, capsys, length):
    model = _chain(length)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--scheduler", "none", "--cost",
                 "analytic", "--no-measure"]) == 0
    lines = capsys.readouterr().err.splitlines()
    ends = next(k for k, line in enumerate(lines) if "imported:" in line)
    begins = [k for k, line in enumerate(lines) if f"importing {length} ONNX nodes" in line]
    if length >= SAID_BEFORE_IMPORT:
        assert len(begins) == 1 and begins[0] < ends, lines
    else:
        assert begins == [], lines


@pytest.mark.parametrize("refused", ["opset-6", "names-twice"])
def test_a_large_model_refused_prints_its_error_first(tmp_path, capsys, refused):
    """The checks that refuse a model (its opset, onnxruntime's load) come before the import's runs, and its line:
    the error is the first line (cli_cases.cli asserts no progress line before it)."""
    path = tmp_path / "m.onnx"
    onnx.save(_chain(SAID_BEFORE_IMPORT, opset=6 if refused == "opset-6" else 17,
                     names_twice=refused == "names-twice"), path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--scheduler", "none",
                   "--cost", "analytic", "--no-measure")
    assert rc == 2 and ("opset 6" in line if refused == "opset-6" else "onnxruntime cannot load" in line), line
