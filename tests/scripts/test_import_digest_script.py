"""scripts/import_digest.py: one digest per model, the same for the same model imported twice, another for a model
that computes something else (the oracle: the models as built), a refused model a row with its reason."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from paths import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
import import_digest  # noqa: E402


def _model(scale: float) -> onnx.ModelProto:
    """x [batch, 8] -> MatMul by ``scale`` times the identity -> Relu -> y."""
    w = numpy_helper.from_array(scale * np.eye(8, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_same_model_the_same_digest_another_model_another(tmp_path, capsys):
    paths = [str(tmp_path / f"{k}.onnx") for k in ("a", "b", "c")]
    for path, scale in zip(paths, (1.0, 1.0, 2.0)):
        onnx.save(_model(scale), path)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    out = tmp_path / "d.json"
    assert import_digest.main([*paths, str(broken), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["models"]
    assert rows[0]["digest"] == rows[1]["digest"] != rows[2]["digest"]
    assert rows[0]["nodes"] >= 2 and "error" in rows[3] and "digest" not in rows[3]
    assert "refused" in capsys.readouterr().out


def test_a_missing_model_is_exit_2(tmp_path, capsys):
    assert import_digest.main([str(tmp_path / "none.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
