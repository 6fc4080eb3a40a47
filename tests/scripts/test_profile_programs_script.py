"""scripts/profile_programs.py: the operator types onnxruntime ran for each program and how many nodes of each a
call ran (the oracle: the programs as built, after onnxruntime's fusions); no time is asserted."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from paths import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
import profile_programs  # noqa: E402


def _model(relus: int) -> onnx.ModelProto:
    """x [batch, 8] -> MatMul -> ``relus`` Relu-then-Neg pairs (nothing onnxruntime fuses) -> y."""
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"])]
    for k in range(relus):
        nodes += [helper.make_node("Relu", [f"h{k}"], [f"r{k}"]), helper.make_node("Neg", [f"r{k}"], [f"h{k + 1}"])]
    nodes.append(helper.make_node("Identity", [f"h{relus}"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_each_program_profiled_by_operator_type_with_its_node_counts(tmp_path, capsys):
    paths = []
    for relus in (1, 3):
        paths.append(str(tmp_path / f"m{relus}.onnx"))
        onnx.save(_model(relus), paths[-1])
    out = tmp_path / "p.json"
    assert profile_programs.main([*paths, "--shape", "x=4,8", "--rounds", "5", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["programs"]
    assert [r["program"] for r in rows] == paths
    for relus, r in zip((1, 3), rows):
        assert r["ops"]["Relu"]["nodes"] == relus and r["ops"]["Neg"]["nodes"] == relus
        assert r["ops"]["MatMul"]["nodes"] == 1 and r["median_call_us"] > 0
    printed = capsys.readouterr().out
    assert "Relu" in printed and "median call" in printed


def test_a_missing_program_is_exit_2(tmp_path, capsys):
    assert profile_programs.main([str(tmp_path / "none.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
