"""Unusual environments a run meets (unwritable or immutable targets, a staging path over PATH_MAX, a full disk at
the write, an unusable or locked cost cache, stale staging folders of a killed run, a full stderr, output to a
stream): each problem found before the work is exit 2 with one line naming the cause and nothing changed; those the
run can go on past (the cache, stderr) it goes on past, saying so, and the written model is checked against the
original in onnxruntime."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_cases import FAST, PRECIOUS, cli, leftovers, read_only_folder, small_matmul
from unusual_cases import outputs

from eqsat.app.cli import main

# write failures found after the work ----------------------------------------------------------------------------------

@pytest.fixture()
def immutable(tmp_path):
    """make(path): ``path`` holding PRECIOUS, made immutable with chattr +i (root on a file system that has the
    attribute); the attribute is removed at the end."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        path.write_bytes(PRECIOUS)
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.parametrize("flag", ["-o", "--report", "-o's data"])
def test_an_immutable_target_is_found_up_front(capsys, tmp_path, immutable, flag):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    target = immutable({"-o": out, "--report": rep, "-o's data": tmp_path / "out.onnx.data"}[flag])
    with pytest.raises(PermissionError):  # the oracle: the file system refuses to replace it
        os.rename(_scratch(tmp_path), target)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and "immutable" in line and line.startswith(f"eqsat: error: {flag.split(chr(39))[0]} "), line
    assert target.read_bytes() == PRECIOUS and leftovers(tmp_path) == []


def _scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.write_bytes(b"x")
    return path


def test_a_staging_path_over_path_max_is_found_up_front(capsys, tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    folder = str(tmp_path)
    while len(folder) < 4096 - 250:
        folder = os.path.join(folder, "d" * min(200, 4096 - 250 - len(folder)))
    os.makedirs(folder)
    out = os.path.join(folder, "o" * (4090 - len(folder) - 1 - 5))  # the path itself fits, the staged one not
    assert len(out) < 4096
    rc, line = cli(capsys, "optimize-model", str(model), "-o", out, *FAST)
    assert rc == 2 and "limit of 4096" in line, line
    assert os.listdir(folder) == []


def test_a_disk_full_at_the_write_is_exit_2_with_the_cause(capsys, tmp_path, monkeypatch):
    from eqsat.onnx import io as onnx_io

    def full(model, path, external=False, weights=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(28, os.strerror(28), path)

    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out, rep = tmp_path / "out.onnx", tmp_path / "rep.json"
    out.write_bytes(PRECIOUS)
    monkeypatch.setattr(onnx_io, "save", full)
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(out), "--report", str(rep), *FAST)
    assert rc == 2 and "disk is full" in line and "nothing was changed" in line, line
    assert out.read_bytes() == PRECIOUS and not rep.exists() and leftovers(tmp_path) == []


# cost cache setup -----------------------------------------------------------------------------------------------------

def _cache_run(capsys, tmp_path: Path) -> tuple[int, str]:
    """A run that times operators (ort-cpu): (exit code, stderr); the output is checked against the input."""
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out = tmp_path / "out.onnx"
    rc = main(["optimize-model", str(model), "-o", str(out), "--scheduler", "none", "--cost", "ort-cpu",
               "--no-measure", "-q", "--allow-slower"])
    err = capsys.readouterr().err
    if rc == 0:
        x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
        np.testing.assert_allclose(outputs(out, {"x": x})[0], outputs(small_matmul(), {"x": x})[0], atol=1e-5)
    return rc, err


@pytest.mark.parametrize("case", ["dir-is-a-file", "read-only-folder", "read-only-home"])
def test_an_unusable_cache_folder_runs_without_the_cache_and_says_so(capsys, tmp_path, monkeypatch, case):
    if case == "dir-is-a-file":
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("x")
        monkeypatch.setenv("EQSAT_CACHE_DIR", str(blocker))
    elif case == "read-only-folder":
        monkeypatch.setenv("EQSAT_CACHE_DIR", str(read_only_folder(tmp_path)))
    else:
        monkeypatch.delenv("EQSAT_CACHE_DIR")
        monkeypatch.setenv("HOME", str(read_only_folder(tmp_path)))
    rc, err = _cache_run(capsys, tmp_path)
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if "cost cache" in line]
    assert len(warnings) == 1 and warnings[0].startswith("eqsat: warning:") and "running without it" in warnings[0]
    assert "Traceback" not in err and "--cache" not in err


@pytest.mark.timing
def test_a_locked_cache_is_left_alone_after_a_short_wait(capsys, tmp_path, monkeypatch):
    import time

    from eqsat.cost import cache

    path = tmp_path / "cache" / "costs.sqlite"
    path.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "c.execute('CREATE TABLE t (x)'); c.execute('BEGIN EXCLUSIVE'); c.execute('INSERT INTO t VALUES (1)')\n"
        "print('locked', flush=True); time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(cache, "SETUP_LOCK_SECONDS", 0.5)
        start = time.perf_counter()
        rc, err = _cache_run(capsys, tmp_path)
        assert rc == 0, err
        assert "locked" in err and "running without it" in err and "Traceback" not in err
        assert time.perf_counter() - start < 50  # not the 60 s lock wait
    finally:
        holder.kill()
        holder.wait()


def test_an_explicit_unusable_cache_is_exit_2_naming_the_right_flag(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["cost", "show", "--cache", str(blocker / "costs.sqlite")])
    err = capsys.readouterr().err
    assert rc == 2 and "--cache FILE" in err and "EQSAT_CACHE_DIR (or --cache)" not in err, err


# stale staging folders, a full stderr, output to a stream -------------------------------------------------------------

def test_staging_folders_of_a_killed_run_are_cleaned_and_live_ones_kept(capsys, tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a PID no process has now
    stale = tmp_path / f".eqsat-{gone.pid}-abcd1234"
    (stale / "model").mkdir(parents=True)
    (stale / "model" / "out.onnx").write_bytes(b"partial")
    live = tmp_path / f".eqsat-{os.getppid()}-efgh5678"  # a running process's (the one that started the tests)
    live.mkdir()
    foreign = tmp_path / ".eqsat-notapid"  # not named by eqsat's rule: never touched
    foreign.mkdir()
    rc, line = cli(capsys, "optimize-model", str(model), "-o", str(tmp_path / "out.onnx"), *FAST)
    assert rc == 0, line
    assert not stale.exists() and live.is_dir() and foreign.is_dir()
    assert sorted(leftovers(tmp_path)) == sorted([live.name, foreign.name])


def test_a_full_stderr_does_not_stop_the_run(tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    out = tmp_path / "out.onnx"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize-model", str(model), "-o", str(out),
                               "--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower"],
                              stderr=full, stdout=subprocess.PIPE, timeout=300)
    assert proc.returncode == 0
    x = np.random.default_rng(11).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(outputs(out, {"x": x})[0], outputs(small_matmul(), {"x": x})[0], atol=1e-5)


def test_output_to_a_pipe_names_the_stream(tmp_path):
    model = tmp_path / "in.onnx"
    onnx.save(small_matmul(), model)
    proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize-model", str(model), "-o", "/dev/stdout", *FAST],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is a stream" in proc.stderr and "/proc/" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
