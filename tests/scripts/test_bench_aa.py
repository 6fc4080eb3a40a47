"""scripts/bench_aa.py's scaled A/B case: the second side is the same program with its timings divided by the gain,
so the measured speedup is the gain (the oracle: the division itself, on two programs that are the same ONNX model),
and a gain of 1 is an A/A comparison."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from script_loader import load_script

pytestmark = pytest.mark.timing  # every test asserts on a measured speedup


def _model() -> onnx.ModelProto:
    """A MatMul chain that takes about a tenth of a millisecond a call."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(3):
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{k}"], [f"h{k}"]))
        x = f"h{k}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [32, 64])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_scaled_case_measures_the_gain_it_was_given():
    aa = load_script("bench_aa")
    model = _model()
    protocol = aa.Protocol(budget_s=0.5, seed=0, gate=aa.Gate(), max_budget_s=0.5, sessions=3)
    doubled = aa.scaled_compare(model, 2.0, protocol)
    assert 1.8 < doubled.speedup < 2.2 and doubled.ci_low > 1.5
    same = aa.scaled_compare(model, 1.0, protocol)
    assert 0.9 < same.speedup < 1.1


def test_cli_writes_both_rates_with_the_scaled_case(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    out = tmp_path / "aa.json"
    assert load_script("bench_aa").main(["--models", str(path), "--trials", "2", "--budget", "0.3", "--gain", "1.5",
                                         "--ab", "scaled", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["aa"]["trials"] == 2 and figures["ab"]["trials"] == 2
    assert figures["models"][0]["calibration"]["ab"] == "scaled"
    assert figures["ab"]["ships"] == 2  # a 1.5x gain on a 0.1 ms program resolves in 0.3 s
    assert all(row["speedup"] > 1.3 for row in figures["models"][0]["ab_rows"])


def test_cli_runs_only_the_cases_asked(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    out = tmp_path / "aa.json"
    script = load_script("bench_aa")
    assert script.main(["--models", str(path), "--trials", "2", "--budget", "0.3", "--ab", "scaled", "--cases", "aa",
                        "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["aa"]["trials"] == 2 and "ab" not in figures
    assert len(figures["models"][0]["aa_rows"]) == 2 and figures["models"][0]["ab_rows"] == []
    assert all(0.8 < row["speedup"] < 1.25 for row in figures["models"][0]["aa_rows"])  # the model against itself
