"""scripts/bench_default.py at its smallest: a zoo family rebuilt at another depth (the optimizer finds that many
repeated copies), optimized in its own process, its record with the report's seconds per phase."""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_default_rebuilds_the_family_at_the_depth_asked_and_records_each_run(tmp_path, capsys):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bench_default

    out = str(tmp_path / "default.json")
    code = bench_default.main(["--models", "gpt2", "--exporters", "torchscript", "--layers", "4", "--json", out,
                               "--", "--time-limit", "3", "--no-measure"])
    assert code == 0
    [record] = json.load(open(out))["records"]
    assert record["exit_code"] == 0 and record["model"] == "gpt2" and record["layers"] == 4
    # the zoo's 2 layers became 4: repeated copies found (the first may be cut elsewhere, outside them), and the
    # export is larger than the zoo's own
    assert record["blocks"]["found"]["copies"] in (3, 4)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import zoo

    assert record["nodes"] > len(zoo.build("gpt2", "torchscript", 18).graph.node)
    assert {"import", "search", "extract", "verify"} <= set(record["times"]) and "measure" not in record["times"]
    assert 0 < sum(record["times"].values()) <= record["wall_s"]
    assert "gpt2/torchscript" in capsys.readouterr().out
