"""scripts/time_alone.py: each program timed in a process of its own, A and its control in other processes than B's,
the order alternating, and the document it writes (no latency is asserted here)."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from paths import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
import time_alone  # noqa: E402


def _model(scale: float) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((8, 8), scale, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_each_program_runs_alone_and_the_rounds_are_written(tmp_path):
    a, b, out = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "r.json"
    onnx.save(_model(1.0), str(a))
    onnx.save(_model(2.0), str(b))
    assert time_alone.main([str(a), str(b), "--shape", "x=4,8", "--rounds", "3", "--calls", "3", "--warmup", "1",
                            "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["rounds"]) == 3
    pids = [pid for r in doc["rounds"] for pid in r["pids"]]
    assert len(set(pids)) == len(pids) == 9  # a process each
    assert all(r[k] > 0 for r in doc["rounds"] for k in ("a", "b", "a2"))
    for key in ("a_over_b", "a_over_a"):
        mid, low, high = doc[key]
        assert low <= mid <= high


def test_a_missing_file_is_exit_2(tmp_path, capsys):
    onnx.save(_model(1.0), str(tmp_path / "a.onnx"))
    assert time_alone.main([str(tmp_path / "a.onnx"), str(tmp_path / "none.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
