"""The reproduction driver (quick mode) and the report generator, end to end on one small model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from paths import SCRIPTS


def script(name, *args, timeout=900):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_reproduce_quick_then_report(tmp_path):
    out, rep = tmp_path / "results", tmp_path / "report"
    proc = script("reproduce.py", "--model", "bert", "--quick", "--configs", "all", "--out", str(out), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    files = sorted(f for f in os.listdir(out) if not f.startswith("sweep-"))
    assert len(files) == 7  # 6 MCTS extractor pairs + TENSAT
    rec = json.loads((out / files[0]).read_text())
    assert rec["report"]["steps"] is not None and rec["spec"]["config"]["search"]["seed"] == 0
    assert rec["report"]["extracted_cost"] <= rec["report"]["original_cost"] * (1 + 1e-9)
    [sweep] = [json.loads((out / f).read_text())["sweep"] for f in os.listdir(out) if f.startswith("sweep-")]
    assert sweep["runs"] == 7 and sweep["skipped"] == 0 and sweep["failed"] == 0 and sweep["seeds"] == [0]
    assert sweep["per_model"]["bert"]["runs"] == 7 and sweep["wall_seconds"] > 0
    assert "sweep: 7 runs (0 failed, 0 skipped)" in proc.stderr
    again = script("reproduce.py", "--model", "bert", "--quick", "--out", str(out))
    assert again.returncode == 0 and "0 runs to do, 7 already finished" in again.stderr
    t1 = tmp_path / "t1.json"
    assert script("table1_extractors.py", "--small", "--models", "bert,nasrnn", "--json", str(t1)).returncode == 0
    proc = script("report.py", str(out), "-o", str(rep), "--table1", str(t1))
    assert proc.returncode == 0, proc.stderr
    text = (rep / "report.md").read_text()
    assert "| bert | MCTS | greedy-dag | ilp | 1 |" in text and "| bert | TENSAT k_multi=1 | - | ilp | 1 |" in text
    assert "Measured wall time of the sweep" in text and "2 invocation(s)" in text  # the first and the resume
    timing = json.loads((rep / "timing.json").read_text())
    assert timing["per_model"]["bert"]["runs"] == 7 and len(timing["sweeps"]) == 2
    for fig in ("speedup.png", "optimization_time.png", "rule_timeline.png"):
        assert (rep / fig).stat().st_size > 1000


def _reproduce(monkeypatch):
    # the scripts folder stays on sys.path for the test: spawned workers unpickle RunSpec from scripts/experiment.py
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import reproduce

    return reproduce


def timed_run(spec):
    """Stands in for one experiment in the scheduling test: records where and when it ran. A light run ends only
    once a heavy one has (a file in ``EQSAT_TEST_HEAVY_DONE``'s folder, at most 30 s): on a loaded machine the heavy
    worker may start seconds late, and the light worker would otherwise have taken every light run by then."""
    import time

    start = time.time()
    mark = os.path.join(os.environ["EQSAT_TEST_HEAVY_DONE"], "done")
    if spec.model == "vit-huge":
        time.sleep(0.05)
        with open(mark, "w"):
            pass
    else:
        time.sleep(0.4)
        while not os.path.exists(mark) and time.time() < start + 30:
            time.sleep(0.01)
    return {"pid": os.getpid(), "start": start, "end": time.time()}


@pytest.mark.timing
def test_reproduce_runs_heavy_models_one_at_a_time(monkeypatch, tmp_path):
    RunSpec = _reproduce(monkeypatch).RunSpec
    monkeypatch.setenv("EQSAT_TEST_HEAVY_DONE", str(tmp_path))  # the spawned workers inherit it (timed_run)
    import dispatch

    assert dispatch.heavy(RunSpec.of("vit-huge")) and dispatch.heavy(RunSpec.of("vit-large"))
    assert not any(dispatch.heavy(RunSpec.of(m)) for m in ("bert", "vit-base", "nasneta", "vgg19"))
    assert not dispatch.heavy(RunSpec.of("vit-huge", small=True))

    heavy = [RunSpec.of("vit-huge", seed=s) for s in range(3)]
    light = [RunSpec.of("bert", seed=s) for s in range(6)]
    got = {}
    dispatch.ProcessPool(2).run(light + heavy, timed_run, lambda spec, rec: got.setdefault(spec, rec))
    assert set(got) == set(light) | set(heavy)
    spans = sorted((got[s]["start"], got[s]["end"]) for s in heavy)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # never two heavy runs at once
    # the heavy worker, free early, took some of the queued light runs
    assert len({got[s]["pid"] for s in light}) == 2


def _record(seed: int, extracted_us: float, search_s: float, scheduler: str = "mcts") -> dict:
    config = {"scheduler": scheduler, "final_extractor": "ilp",
              "search": {"main_extractor": "greedy-dag", "seed": seed, "k_multi": 2}}
    return {"spec": {"model": "m", "small": True, "config": config}, "key": f"k{seed}{scheduler}", "seconds": search_s + 1,
            "report": {"original_cost": 1000.0, "extracted_cost": extracted_us, "times": {"search": search_s},
                       "egraph": {"enodes": 100 + seed}, "measured": None}}


def test_table2_gives_mean_and_std_over_seeds_per_approach(monkeypatch):
    _reproduce(monkeypatch)
    import report

    records = [_record(0, 800.0, 10.0), _record(1, 600.0, 30.0), _record(0, 900.0, 1.0, "tensat")]
    text, summary = report.table2(records)
    # speedups 20% and 40%: mean 30, sample std 14.1; search 10 s and 30 s: mean 20, std 14.1
    assert "| m | MCTS | greedy-dag | ilp | 2 | 1 ± 0 | 0.7 ± 0.14 | 30 ± 14 | 20 ± 14 | - | 100.5 ± 0.71 |" in text
    assert "| m | TENSAT k_multi=2 | - | ilp | 1 | 1 ± 0 | 0.9 ± 0 | 10 ± 0 | 1 ± 0 |" in text
    mcts = summary["m"]["MCTS greedy-dag / ilp"]
    assert mcts["speedup"] == 30.0 and abs(mcts["speedup_std"] - 200 ** 0.5) < 1e-9 and mcts["seeds"] == 2
    times, timing = report.sweep_time(records, [], seeds=5, approaches=2)
    # 5 seeds of each approach at its mean run time: 5 * (21 + 2)
    assert timing["per_model"]["m"]["estimate_seconds"] == 115.0 and timing["per_model"]["m"]["runs"] == 3
    # 4 approaches, 2 without runs: those at the mean of the others' means, 11.5 s
    assert report.sweep_time(records, [], seeds=5, approaches=4)[1]["estimate_seconds"] == 5 * (23 + 2 * 11.5)


def test_export_bert_like_gives_an_optimizable_model(tmp_path):
    out = tmp_path / "b.onnx"
    proc = script("export_bert_like.py", "-o", str(out), "--layers", "1", "--d", "64", "--seq", "8")
    assert proc.returncode == 0, proc.stderr
    from eqsat.onnx.importer import import_model

    g = import_model(str(out))
    ops = g.op_counts()  # six linear layers and one attention (composites: eqsat.onnx.patterns)
    assert ops["linear"] == 6 and ops["attention"] == 1 and ops["addnorm"] == 2 and ops["gelu"] == 1  # post-LN
    assert ops["matmul"] == 0 and ops["softmax"] == 0  # nothing of them left over as parts


def test_run_spec_takes_the_models_defaults_and_flags(monkeypatch):
    reproduce = _reproduce(monkeypatch)
    spec = reproduce.RunSpec.of("nasrnn", small=True)
    assert spec.config.search.rule_set == "nasrnn" and spec.config.search.k_multi == 3
    assert reproduce.RunSpec.of("bert").config.search.rule_set == "default"
    import experiment

    p = __import__("argparse").ArgumentParser()
    experiment.add_arguments(p)
    base = experiment.base_config(p.parse_args(["--budget", "7", "--measure"]))
    assert base.search.budget == 7 and base.measure and base.cost == "analytic"  # the scripts' default cost
    assert experiment.base_config(p.parse_args([])) == experiment.SCRIPT_DEFAULTS
