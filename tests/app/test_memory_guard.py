"""The stop before the machine runs out of memory (eqsat.app.memory_guard): a process whose memory runs low while it
holds most of it ends itself with exit code 4 and a message saying what to do, nothing written, instead of being
killed without a word by the system's out-of-memory killer; a process with memory to spare, or one that holds little
of what is used, goes on. The oracle: a real process, its exit code, its stderr and the files it leaves."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from eqsat.app import memory_guard
from eqsat.app.memory_guard import Reading, too_low

GIB = 1 << 30


def _process(tmp_path, **arm) -> subprocess.CompletedProcess:
    target = tmp_path / "result.onnx"
    code = textwrap.dedent(f"""
        import time
        from eqsat.app import memory_guard
        memory_guard.arm(**{arm!r})
        time.sleep(3.0)
        open({str(target)!r}, "w").write("written")
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_process_short_of_memory_stops_itself_with_a_message_and_writes_nothing(tmp_path):
    # every reading below the thresholds: less than the whole machine left, the process holding at least nothing
    done = _process(tmp_path, low_share=1.0, own_share=0.0, every_s=0.05)
    assert done.returncode == memory_guard.EXIT_CODE == 4
    assert "stopped before the machine ran out of memory" in done.stderr and "--input-shape" in done.stderr
    assert "no output was written" in done.stderr
    assert not (tmp_path / "result.onnx").exists()  # the file is written 3 s after arming: the stop came first


def test_a_process_with_memory_to_spare_goes_on(tmp_path):
    done = _process(tmp_path, every_s=0.05)  # the defaults: this machine is not short of memory
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "result.onnx").read_text() == "written"


def test_the_stop_is_for_memory_this_process_holds():
    machine = 24 * GIB
    assert too_low(Reading(machine, available=GIB // 2, own=20 * GIB))  # nearly full, of this run's own
    assert not too_low(Reading(machine, available=GIB // 2, own=2 * GIB))  # full of another program's
    assert not too_low(Reading(machine, available=6 * GIB, own=18 * GIB))  # a quarter left
    assert too_low(Reading(machine, available=400 << 20, own=10 * GIB))  # under 512 MiB however large the machine
    assert not too_low(Reading(GIB, available=424 << 20, own=600 << 20))  # a 1 GiB cgroup: not at half of it
    assert too_low(Reading(GIB, available=100 << 20, own=900 << 20))  # ... under an eighth of it
    assert not too_low(Reading(256 * GIB, available=30 * GIB, own=200 * GIB))  # 30 GiB left of 256: not low


def test_the_memory_is_read_on_this_machine():
    r = memory_guard.read()
    assert r is not None and 0 < r.available <= r.total and 0 < r.own < r.total


def test_once_the_results_are_being_put_in_place_the_run_is_let_finish(tmp_path):
    """Memory low only while the results are renamed into place (the run's last step): no stop then, since a stop
    would leave them written while saying nothing was; the write completes and the process exits 0."""
    target, report = tmp_path / "out.onnx", tmp_path / "out.json"
    code = textwrap.dedent(f"""
        import os, time
        import onnx.helper as h
        from eqsat.app import memory_guard
        from eqsat.onnx import io
        real_replace = os.replace
        def slow_replace(a, b):
            time.sleep(0.3)
            return real_replace(a, b)
        os.replace = slow_replace
        real_too_low = memory_guard.too_low
        memory_guard.too_low = lambda r, *a: io.signals_held() or real_too_low(r, *a)  # low while renaming
        memory_guard.arm(every_s=0.02)
        model = h.make_model(h.make_graph([h.make_node("Identity", ["x"], ["y"])], "g",
                                          [h.make_tensor_value_info("x", 1, [1])], [h.make_tensor_value_info("y", 1, [1])]))
        io.write_together(model, {str(target)!r}, {{{str(report)!r}: b"written"}})
        time.sleep(0.5)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert report.read_bytes() == b"written" and target.exists() and "stopped before" not in done.stderr
