"""scripts/bench_peers.py: every tool's program is verified against the original in onnxruntime before it is
timed; a tool that breaks the model, crashes or is missing is reported, never timed; the A/A control is there."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "bench_peers.py")


def _script():
    spec = importlib.util.spec_from_file_location("bench_peers", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mlp(path) -> str:
    """x @ w + b -> Relu, with an Identity chain onnxsim removes."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    nodes = [helper.make_node("Identity", ["x"], ["x1"]), helper.make_node("MatMul", ["x1", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]), helper.make_node("Relu", ["hb"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _negate(model, _name, _args):
    """A 'tool' that writes a wrong program: the output negated."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    y = out.graph.output[0].name
    for n in out.graph.node:
        n.output[:] = ["y_pre" if o == y else o for o in n.output]
    out.graph.node.append(helper.make_node("Neg", ["y_pre"], [y]))
    return out


def _crash(_model, _name, _args):
    raise ValueError("this peer cannot handle the model")


def test_peers_are_verified_then_timed_beside_an_aa_control(tmp_path, monkeypatch):
    mod = _script()
    monkeypatch.setitem(mod.TOOLS, "wrong", (_negate, "onnx"))
    monkeypatch.setitem(mod.TOOLS, "crashing", (_crash, "onnx"))
    monkeypatch.setitem(mod.TOOLS, "missing", (_crash, "no_such_module_for_peers"))
    out = tmp_path / "run.json"
    rc = mod.main(["--models", "", "--onnx", _mlp(tmp_path / "mlp.onnx"), "--tools",
                   "onnxsim,onnxscript,wrong,crashing,missing", "--threads", "1,2", "--time-budget", "0.2",
                   "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())  # strict JSON
    (row,) = doc["rows"]
    tools = row["tools"]
    assert tools["onnxsim"]["status"] == "verified" and tools["onnxscript"]["status"] == "verified"
    assert tools["onnxsim"]["operators"] < row["nodes"]  # it removed the Identity: a real program, not the input
    assert tools["wrong"]["status"] == "wrong" and tools["wrong"]["max_abs_error"] > 0.1
    assert tools["crashing"]["status"] == "failed" and "cannot handle" in tools["crashing"]["reason"]
    assert tools["missing"]["status"] == "unavailable"
    for name in ("wrong", "crashing", "missing"):
        assert "timed" not in tools[name]  # never timed
    for name in ("original-copy", "onnxsim", "onnxscript"):
        for threads in ("1", "2"):
            t = tools[name]["timed"][threads]
            assert t["ci_low"] <= t["speedup"] <= t["ci_high"] and t["program_ms"] > 0
    assert tools["original-copy"]["status"] == "control"


def test_unknown_tool_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        _script().main(["--models", "", "--tools", "onnxsimm"])
    assert exc.value.code == 2
