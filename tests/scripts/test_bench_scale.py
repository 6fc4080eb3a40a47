"""scripts/bench_scale.py end to end at the smallest size: one run per (depth, width), each record with its
per-phase times and memory, the blocks found (by default: repeated blocks searched once from three copies on),
and the figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from paths import SCRIPTS


def test_bench_scale_writes_a_record_per_run_and_the_figure(tmp_path):
    out = tmp_path / "scale"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_scale.py"), "--layers", "2,3",
                           "--widths", "64", "--seq", "8", "--out", str(out), "--", "--budget", "2",
                           "--depth", "1", "--cost", "analytic", "--no-measure", "--final-extractor", "greedy-dag"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads((out / "scale.json").read_text())
    assert [(r["layers"], r["hidden"]) for r in records] == [(2, 64), (3, 64)]
    for r in records:
        assert r["exit_code"] == 0 and r == json.loads((out / f"bert-L{r['layers']}-H64.json").read_text())
        # by default, one copy per encoder layer from three layers on; two layers: the whole model searched
        found = r["blocks"]["found"]
        assert (found["copies"] == r["layers"]) if r["layers"] >= 3 else found is None
        assert set(r["memory_mb"]) == set(r["times"]) and "search" in r["times"]
        assert r["max_rss_mb"] is None or r["max_rss_mb"] >= max(r["memory_mb"].values()) - 1
        assert r["weights_mb"] > 0
    assert (out / "scale.png").stat().st_size > 0


def test_llama_builder_writes_external_data_that_optimizes_with_blocks(tmp_path, monkeypatch):
    """The LLaMA builder (grouped KV heads) with its weights in one external data file (as a 1B model is written:
    the threshold lowered here), optimized by default: its layers found as blocks, the result verified against the
    original in onnxruntime."""
    import onnx

    sys.path.insert(0, str(SCRIPTS))
    import bench_scale

    from eqsat.app.config import OptimizeConfig
    from eqsat.app.pipeline import optimize
    from eqsat.verification import verify

    monkeypatch.setattr(bench_scale, "EXTERNAL_BYTES", 0)
    path = str(tmp_path / "llama.onnx")
    size = bench_scale.export_llama(path, 3, 64, 8, vocab=64)
    assert sorted(os.listdir(tmp_path)) == ["llama.onnx", "llama.onnx.data"]
    assert os.path.getsize(path + ".data") >= size > os.path.getsize(path)
    model = onnx.load(path, load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    result = optimize(path, OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1,
                                              final_extractor="greedy-dag", allow_slower=True))
    assert result.report.blocks["found"]["copies"] == 3
    check = verify(onnx.load(path), result.optimized, seed=3)
    assert check.passed, check.detail


def test_compare_times_the_default_and_the_whole_model_search_in_one_run(tmp_path):
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_scale.py"), "--arch", "llama",
                           "--layers", "3", "--widths", "64", "--seq", "8", "--compare", "--compare-budget", "0.5",
                           "--out", str(out), "--", "--budget", "2", "--depth", "1", "--cost", "analytic",
                           "--no-measure", "--final-extractor", "greedy-dag", "--allow-slower"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "llama-L3-H64.json").read_text())
    assert r["arch"] == "llama" and r["blocks"]["found"]["copies"] == 3 and r["whole"]["blocks"] is None
    assert set(r["compare"]) == {"blocks", "whole"}
    for c in r["compare"].values():  # one run: one original time for both, each speedup inside its interval
        assert c["original_ms"] == r["compare"]["blocks"]["original_ms"] > 0 and c["ms"] > 0
        assert c["ci"][0] <= c["speedup"] <= c["ci"][1] and c["rounds"] >= 2
    assert not any(f.suffix in (".onnx", ".data") for f in out.iterdir())  # only the records are kept
