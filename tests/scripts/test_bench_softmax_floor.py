"""scripts/bench_softmax_floor.py end to end on a small Softmax: every kind of scores timed in both forms, the
figures printed and written as JSON (no figure is asserted: a timing on a shared machine)."""

from __future__ import annotations

import json
import subprocess
import sys

from paths import SCRIPTS


def test_the_script_times_both_forms_on_every_kind_of_scores(tmp_path):
    out = tmp_path / "floor.json"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_softmax_floor.py"), "--shape", "1,2,8,8",
                           "--rounds", "2", "--calls", "1", "--json", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["scores"] for r in rows] == ["unmasked", "causal, lowest float", "causal, -inf", "causal, -10000",
                                          "padded 40%, -10000"]
    for r in rows:
        assert r["written_us"] > 0 and r["floored_us"] > 0 and r["ci_low"] <= r["speedup"] <= r["ci_high"]
        assert r["scores"] in proc.stdout
