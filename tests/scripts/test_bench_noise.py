"""scripts/bench_noise.py: the between-session and within-session spreads it reports (checked against the spreads
a synthetic table of log times was drawn with), and a run on a small model that writes every figure."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper
from script_loader import load_script


def test_variance_components_recover_the_spreads_drawn():
    noise = load_script("bench_noise")
    rng = np.random.default_rng(0)
    offsets = rng.normal(0.0, 0.04, (400, 1))  # 400 sessions 4% apart, 50 rounds each with 10% noise
    spikes = rng.normal(0.0, 0.2, (1, 50)) * (rng.random((1, 50)) < 0.2)  # load that reaches every session of a round
    between, within = noise.variance_components(-6.0 + offsets + spikes + rng.normal(0.0, 0.10, (400, 50)))
    assert abs(between - 0.04) < 0.006 and abs(within - 0.10) < 0.003  # the rounds' common load taken out
    none, _ = noise.variance_components(-6.0 + spikes + rng.normal(0.0, 0.10, (400, 50)))
    assert none < 0.01  # no offsets drawn: what is left is the estimate's own noise


def test_run_on_a_small_model_writes_the_figures(tmp_path):
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], [w])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    out = tmp_path / "noise.json"
    assert load_script("bench_noise").main([str(path), "--input-shape", "x=16,64", "--blocks", "1,4", "--seconds",
                                            "0.5", "--sessions", "2", "--rounds", "3", "--calls", "2",
                                            "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert [row["block"] for row in figures["blocks"]] == [1, 4]
    assert all(row["pairs"] > 2 and np.isfinite(row["sd"]) for row in figures["blocks"])
    assert [row["arena"] for row in figures["offsets"]] == [True, False]
    assert all(len(row["sessions_ms"]) == 2 and row["ms"] > 0 for row in figures["offsets"])
