"""scripts/bench_gpu.py and the torch runtimes in scripts/bench_cost_model.py, run as a machine with no GPU can
(``--runtime torch-cpu``: the same code path as torch-cuda but the clock and the capture), and the cost script's
estimated-against-measured latency over models, checked against figures worked out by hand."""

from __future__ import annotations

import json
import math

import pytest
from script_loader import load_script


@pytest.mark.slow
def test_bench_gpu_dry_run_on_the_cpu_writes_verified_rows(tmp_path):
    out = tmp_path / "gpu.json"
    bench = load_script("bench_gpu")
    assert bench.main(["--runtime", "torch-cpu", "--models", "nasrnn", "--small", "--time-limit", "6", "--budget",
                       "0.3", "--no-compile", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert "error" not in row, row.get("traceback")
    assert row["verified_onnxruntime_cpu"]["passed"]
    vs = row["against_original_torch_cuda"]
    assert set(vs) == {"a_a", "eqsat_torch_cuda"}
    for c in vs.values():
        assert c["ci_low"] <= c["speedup"] <= c["ci_high"] and c["rounds"] > 0
    assert row["eqsat"]["returned"] in ("optimized", "original") and row["runtime"]["name"] == "torch-cpu"


def test_bench_gpu_refuses_unknown_models():
    with pytest.raises(SystemExit):
        load_script("bench_gpu").main(["--runtime", "torch-cpu", "--models", "nosuchnet"])


def test_absolute_latency_figures_match_a_hand_computation():
    cost = load_script("bench_cost_model")
    per_model = {"a": {"original_estimated_us": {"m": 100.0}}, "b": {"original_estimated_us": {"m": 300.0}},
                 "c": {"original_estimated_us": {"m": 200.0}}}
    rows = [{"model": "a", "original_ms": 0.1}, {"model": "a", "original_ms": 0.3}, {"model": "a", "original_ms": 0.2},
            {"model": "b", "original_ms": 0.4}, {"model": "c", "original_ms": 0.25}]
    out = cost.absolute(per_model, rows, ["m"])
    # measured (median of each model's rows, us): a 200, b 400, c 250; estimated 100, 300, 200: the same order
    assert out["measured_us"] == pytest.approx({"a": 200.0, "b": 400.0, "c": 250.0})
    assert out["m"]["spearman"] == pytest.approx(1.0)
    assert out["m"]["mean_abs_rel_error"] == pytest.approx((0.5 + 0.25 + 0.2) / 3)
    per_model["c"]["original_estimated_us"]["m"] = 50.0  # estimated order c < a < b against measured a < c < b
    assert cost.absolute(per_model, rows, ["m"])["m"]["spearman"] == pytest.approx(0.5)
    assert math.isnan(cost.absolute({}, [], ["m"])["m"]["mean_abs_rel_error"])
