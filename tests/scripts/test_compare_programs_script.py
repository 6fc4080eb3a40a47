"""scripts/compare_programs.py: which files it pairs, and the document it writes (its timing is eqsat.measurement.timing's,
tested there; no latency is asserted here)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from paths import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
import compare_programs  # noqa: E402


def _model(scale: float) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((8, 8), scale, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_two_workdirs_pair_the_programs_both_hold(tmp_path):
    for side in ("old", "new"):
        for rel in ("m/torchscript", "m/dynamo"):
            os.makedirs(tmp_path / side / rel)
            onnx.save(_model(1.0), str(tmp_path / side / rel / "eqsat.onnx"))
    os.makedirs(tmp_path / "old" / "only_old")
    onnx.save(_model(1.0), str(tmp_path / "old" / "only_old" / "eqsat.onnx"))
    found = compare_programs.pairs(str(tmp_path / "old"), str(tmp_path / "new"), "eqsat.onnx")
    assert [label for label, _a, _b in found] == ["m/dynamo", "m/torchscript"]
    out = tmp_path / "r.json"
    assert compare_programs.main([str(tmp_path / "old"), str(tmp_path / "new"), "--budget", "0.5",
                                  "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["pair"] for r in rows] == ["m/dynamo", "m/torchscript"]
    assert all(r["ci"][0] <= r["a_over_b"] <= r["ci"][1] for r in rows)


def test_nothing_to_compare_is_exit_2(tmp_path, capsys):
    os.makedirs(tmp_path / "a")
    os.makedirs(tmp_path / "b")
    assert compare_programs.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "no eqsat.onnx" in capsys.readouterr().err
