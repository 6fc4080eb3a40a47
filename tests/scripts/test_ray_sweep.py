"""Sweeps on Ray (scripts/dispatch.py): a two-run reproduce.py sweep on a local Ray gives the process pool's
records, resumes like it, and each run declares its memory."""

from __future__ import annotations

import glob
import json
import os

import pytest
import ray
from paths import SCRIPTS

SWEEP = ["--model", "tt", "--quick", "--budget", "4", "--depth", "2", "--configs", "ours", "--seeds", "0-1",
         "--jobs", "2"]


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import dispatch
    import reproduce

    return reproduce, dispatch


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


def runs(folder) -> dict[str, dict]:
    out = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        with open(path) as f:
            rec = json.load(f)
        if "key" in rec:
            out[rec["key"]] = rec
    return out


@pytest.mark.slow  # about 30 s on 2 cores: Ray's start, then the sweep twice
def test_a_sweep_on_ray_gives_the_pools_records_and_resumes(scripts, local_ray, tmp_path, capsys):
    reproduce, _ = scripts
    assert reproduce.main([*SWEEP, "--ray", "auto", "--out", str(tmp_path / "ray")]) == 0
    assert "running on Ray (this process's instance)" in capsys.readouterr().err
    assert reproduce.main([*SWEEP, "--out", str(tmp_path / "pool")]) == 0
    assert "running on the process pool, 2 job(s)" in capsys.readouterr().err
    on_ray, in_pool = runs(tmp_path / "ray"), runs(tmp_path / "pool")
    assert len(on_ray) == 2 and on_ray.keys() == in_pool.keys()
    assert {r["spec"]["config"]["search"]["seed"] for r in on_ray.values()} == {0, 1}
    for key, a in on_ray.items():
        b = in_pool[key]
        assert "error" not in a and a["spec"] == b["spec"]
        assert a["program_digest"] == b["program_digest"]
        for k in ("original_cost", "extracted_cost", "optimized_cost"):
            assert a["report"][k] == pytest.approx(b["report"][k], rel=1e-12)
        assert a["report"]["rules_applied"] == b["report"]["rules_applied"]
    # each invocation's sweep file: its wall time, its runs' seconds per model
    sweep = [json.load(open(p))["sweep"] for p in glob.glob(str(tmp_path / "ray" / "sweep-*.json"))]
    assert len(sweep) == 1 and sweep[0]["runs"] == 2 and sweep[0]["dispatcher"].startswith("Ray")
    run_seconds = sum(r["seconds"] for r in on_ray.values())
    assert sweep[0]["per_model"]["tt"]["run_seconds"] == pytest.approx(run_seconds)
    assert 0 < sweep[0]["wall_seconds"]
    # resumed: nothing left to do on Ray either
    assert reproduce.main([*SWEEP, "--ray", "auto", "--out", str(tmp_path / "ray")]) == 0
    assert "0 runs to do, 2 already finished" in capsys.readouterr().err


def test_runs_declare_their_memory_and_heavy_ones_their_peak(scripts):
    reproduce, dispatch = scripts
    light, huge = reproduce.RunSpec.of("bert"), reproduce.RunSpec.of("vit-huge")
    assert dispatch.memory_bytes(light) == dispatch.LIGHT_RUN_BYTES
    assert 12e9 < dispatch.memory_bytes(huge) < 16e9  # ViT-Huge runs peak near 13 GB
    assert dispatch.memory_bytes(huge, limit_gb=3.0) == dispatch.LIGHT_RUN_BYTES  # not heavy under --heavy-gb 3
    assert dispatch.memory_bytes(reproduce.RunSpec.of("vit-huge", small=True)) == dispatch.LIGHT_RUN_BYTES


def test_ray_auto_falls_back_to_the_pool_without_ray(scripts, monkeypatch, capsys):
    _, dispatch = scripts
    import argparse
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    p = argparse.ArgumentParser()
    dispatch.add_arguments(p)
    chosen = dispatch.from_args(p.parse_args(["--ray", "auto", "--jobs", "2"]))
    assert isinstance(chosen, dispatch.ProcessPool) and chosen.jobs == 2
    assert "ray is not installed" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="ray is not installed"):
        dispatch.from_args(p.parse_args(["--ray", "head:6379"]))
