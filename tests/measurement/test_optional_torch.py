"""torch is optional (the ``torch`` extra): the ONNX path on the CPU imports and runs without it, never imports it
where it is installed, and a torch runtime or torch cost model asked for without it is exit 2 naming the extra.

"Without torch" is a subprocess whose ``sitecustomize`` (first on PYTHONPATH) puts ``None`` in
``sys.modules["torch"]``: ``import torch`` raises ModuleNotFoundError there and ``importlib.util.find_spec`` finds
nothing, as where torch is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from paths import REPO

from eqsat.measurement.torch_run import TORCH_EXTRA

MAIN_JOB = ["optimize-model", "--model", "encoder", "--small", "--scheduler", "none", "--cost", "analytic",
            "--no-measure", "-q"]
"""the CLI's main job on a small built-in model (the wheel smoke test's)"""


def _without_torch(tmp_path: Path) -> dict[str, str]:
    """The environment of a subprocess in which torch cannot be imported."""
    block = tmp_path / "no_torch"
    block.mkdir(exist_ok=True)
    (block / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None  # torch: not installed\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(block), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _eqsat(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eqsat", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def test_the_blocker_makes_torch_unimportable(tmp_path):
    code = ("import importlib.util, sys\n"
            "assert importlib.util.find_spec('torch') is None\n"
            "try:\n    import torch\nexcept ImportError:\n    print('blocked')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=_without_torch(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "blocked", proc.stderr


def test_the_main_job_runs_without_torch(tmp_path):
    out, report = tmp_path / "x.onnx", tmp_path / "x.json"
    proc = _eqsat([*MAIN_JOB, "-o", str(out), "--report", str(report)], tmp_path, _without_torch(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and json.loads(report.read_text())["verified"] is True


def test_the_onnx_path_imports_and_resolves_without_torch(tmp_path):
    code = ("import eqsat, eqsat.app.cli, eqsat.app.pipeline, eqsat.cost, eqsat.measurement.runtimes\n"
            "from eqsat import cost\nfrom eqsat.measurement import runtimes\n"
            "print(runtimes.resolve('auto'), cost.resolve_auto(), cost.resolve_auto('auto'),"
            " type(cost.make('auto', runtime='ort-cpu')).__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=_without_torch(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ort-cpu", "ort-cpu", "ort-cpu", "OrtCost"]  # no torch: no GPU for it


def test_the_onnx_path_never_imports_torch_where_it_is_installed(tmp_path):
    """The main job and an ort-cpu measurement (runtime, its cost model, a timed comparison) with torch installed:
    torch is never imported (it takes seconds and about 180 MiB)."""
    code = f"""
import sys
from eqsat.app.cli import main
assert main({[*MAIN_JOB, "-o", str(tmp_path / "x.onnx")]!r}) == 0
from eqsat import cost
from eqsat.measurement import runtimes
from eqsat.models import build
from eqsat.onnx import export_model
from eqsat.measurement.timing import Protocol
runtime = runtimes.make("ort-cpu")
assert type(cost.make("auto", runtime="ort-cpu")).__name__ == "OrtCost"
model = export_model(build("encoder", small=True))
program = runtimes.Program(model)
protocol = Protocol(budget_s=0.2, min_rounds=2, max_rounds=2, sessions=1, warmup=1, resamples=100)
measured = runtimes.compare_programs(program, [program], runtime, protocol)
assert len(measured.comparisons) == 1
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("flags, asked, instead", [
    (["--runtime", "torch-cpu"], "--runtime torch-cpu", "--runtime ort-cpu"),
    (["--runtime", "torch-compile"], "--runtime torch-compile", "--runtime ort-cpu"),
    (["--runtime", "torch-cuda"], "--runtime torch-cuda", "--runtime ort-cpu"),
    (["--cost", "cpu", "--no-measure"], "--cost cpu", "--cost ort-cpu"),
    (["--cost", "cuda", "--no-measure"], "--cost cuda", "--cost ort-cpu"),
    (["--runtime", "torch-compile", "--no-measure"], "--cost auto (here cpu, for --runtime torch-compile)",
     "--cost ort-cpu"),
])
def test_a_torch_runtime_or_cost_without_torch_is_exit_2_naming_the_extra(tmp_path, monkeypatch, capsys, flags,
                                                                          asked, instead):
    from eqsat.app.cli import main

    monkeypatch.setitem(sys.modules, "torch", None)  # in this process: torch not installed
    out = tmp_path / "o.onnx"
    code = main(["optimize-model", "--model", "encoder", "--small", "--scheduler", "none", "-q", *flags, "-o", str(out)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("eqsat: error:")]
    assert code == 2 and len(errors) == 1, err
    assert f"{asked} needs torch" in errors[0] and TORCH_EXTRA in errors[0] and instead in errors[0]
    assert "Traceback" not in err and not out.exists()


def test_cost_profile_with_a_torch_cost_without_torch_is_exit_2(tmp_path):
    proc = _eqsat(["cost", "profile", "--model", "encoder", "--cost", "cpu", "--cache", str(tmp_path / "c.sqlite")],
                  tmp_path, _without_torch(tmp_path))
    assert proc.returncode == 2 and TORCH_EXTRA in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_require_torch_names_the_extra_and_the_alternative(monkeypatch):
    from eqsat.errors import InputError
    from eqsat.measurement.torch_run import TorchMissing, check_torch, require_torch

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(TorchMissing, match=r"--runtime torch-cpu needs torch, .*pip install 'eqsat\[torch\]', "
                                           r"or use --runtime ort-cpu$") as caught:
        require_torch("--runtime torch-cpu", "use --runtime ort-cpu")
    assert isinstance(caught.value, InputError) and caught.value.exit_code == 2
    with pytest.raises(TorchMissing, match=r"\[torch\]'$"):
        check_torch("--cost cpu")


def test_pyproject_torch_is_an_extra_and_no_dependency_is_pinned_exactly():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip() == "torch"
                   for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(d.startswith("torch") for d in extras["torch"])
    assert any(d.startswith("torch") for d in extras["test"])  # CI still tests the torch paths
    for line in [*project["dependencies"], *(d for ds in extras.values() for d in ds)]:
        assert "==" not in line and "===" not in line, f"an exact pin: {line}"
    assert f"pip install '{project['name']}[torch]'" == TORCH_EXTRA
