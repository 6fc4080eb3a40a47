"""The reproduction driver (quick mode) and the report generator, end to end on one small model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script(name, *args, timeout=900):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_reproduce_quick_then_report(tmp_path):
    out, rep = tmp_path / "results", tmp_path / "report"
    proc = script("reproduce.py", "--model", "bert", "--quick", "--configs", "all", "--out", str(out), "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    files = sorted(os.listdir(out))
    assert len(files) == 7  # 6 MCTS extractor pairs + TENSAT
    rec = json.loads((out / files[0]).read_text())
    assert rec["report"]["steps"] is not None and rec["spec"]["config"]["search"]["seed"] == 0
    assert rec["report"]["extracted_cost"] <= rec["report"]["original_cost"] * (1 + 1e-9)
    again = script("reproduce.py", "--model", "bert", "--quick", "--out", str(out))
    assert again.returncode == 0 and "0 runs to do, 7 already finished" in again.stderr
    t1 = tmp_path / "t1.json"
    assert script("table1_extractors.py", "--small", "--models", "bert,nasrnn", "--json", str(t1)).returncode == 0
    proc = script("report.py", str(out), "-o", str(rep), "--table1", str(t1))
    assert proc.returncode == 0, proc.stderr
    text = (rep / "report.md").read_text()
    assert "| bert | MCTS greedy-dag / ilp |" in text and "TENSAT" in text and "greedy-constituent" in text
    for fig in ("speedup.png", "optimization_time.png", "rule_timeline.png"):
        assert (rep / fig).stat().st_size > 1000


def _reproduce(monkeypatch):
    # the scripts folder stays on sys.path for the test: spawned workers unpickle RunSpec from scripts/experiment.py
    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    import reproduce

    return reproduce


def timed_run(spec):
    """Stands in for one experiment in the scheduling test: records where and when it ran."""
    import time

    start = time.time()
    time.sleep(0.05 if spec.model == "vit-huge" else 0.4)
    return {"pid": os.getpid(), "start": start, "end": time.time()}


def test_reproduce_runs_heavy_models_one_at_a_time(monkeypatch):
    reproduce = _reproduce(monkeypatch)
    RunSpec = reproduce.RunSpec

    assert reproduce.heavy(RunSpec.of("vit-huge")) and reproduce.heavy(RunSpec.of("vit-large"))
    assert not any(reproduce.heavy(RunSpec.of(m)) for m in ("bert", "vit-base", "nasneta", "vgg19"))
    assert not reproduce.heavy(RunSpec.of("vit-huge", small=True))

    heavy = [RunSpec.of("vit-huge", seed=s) for s in range(3)]
    light = [RunSpec.of("bert", seed=s) for s in range(6)]
    got = {}
    reproduce.run_all(light, heavy, 2, timed_run, lambda spec, rec: got.setdefault(spec, rec))
    assert set(got) == set(light) | set(heavy)
    spans = sorted((got[s]["start"], got[s]["end"]) for s in heavy)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # never two heavy runs at once
    # the heavy worker, free early, took some of the queued light runs
    assert len({got[s]["pid"] for s in light}) == 2


def test_export_bert_like_gives_an_optimizable_model(tmp_path):
    out = tmp_path / "b.onnx"
    proc = script("export_bert_like.py", "-o", str(out), "--layers", "1", "--d", "64", "--seq", "8")
    assert proc.returncode == 0, proc.stderr
    from eqsat.onnx_import import import_model

    g = import_model(str(out))
    ops = g.op_counts()  # six linear layers and the two attention products
    assert ops["matmul"] == 8 and ops["softmax"] == 1 and ops["layernorm"] == 2  # composites (eqsat.onnx_patterns)


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
