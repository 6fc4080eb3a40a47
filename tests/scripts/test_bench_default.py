"""scripts/bench_default.py at its smallest: a zoo family rebuilt at another depth (the optimizer finds that many
repeated copies), optimized in its own process, its record with the report's seconds per phase."""

from __future__ import annotations

import json
import sys

from paths import SCRIPTS


def test_bench_default_rebuilds_the_family_at_the_depth_asked_and_records_each_run(tmp_path, capsys):
    sys.path.insert(0, str(SCRIPTS))
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
    import zoo

    assert record["nodes"] > len(zoo.build("gpt2", "torchscript", 18).graph.node)
    assert {"import", "search", "extract", "verify"} <= set(record["times"]) and "measure" not in record["times"]
    assert 0 < sum(record["times"].values()) <= record["wall_s"]
    assert "gpt2/torchscript" in capsys.readouterr().out


def test_resized_widens_each_familys_config_and_keeps_its_heads():
    """``resized(hidden=96)`` (bench_interface's ``--hidden``): GPT-2, T5, DistilBERT and LLaMA rebuilt 96 wide,
    1 layer, their heads kept (each wider); each runs, and its hidden state is 96 wide; the zoo's own config is
    back once the context closes."""
    import torch
    import zoo

    sys.path.insert(0, str(SCRIPTS))
    from bench_default import resized

    for name in ("gpt2", "t5_encoder", "distilbert", "llama"):
        with resized(1, 96):
            module = zoo.module(name, 0)
        config = module.model.config
        assert config.hidden_size == 96 and config.num_hidden_layers == 1, name
        args = zoo.example_args(name, 0)
        with torch.no_grad():
            out = module(*args)[0]
        assert out.shape[-1] == 96, (name, out.shape)
        assert zoo.module(name, 0).model.config.hidden_size != 96
