"""Bad input gives a one-line message, exit code 2 (or 3), and leaves the output path untouched."""

from __future__ import annotations

import functools
import subprocess
import sys

import onnx
import onnx_builders as ob
import pytest
import torch
import torch_modules as tm
from ort_check import outputs_match

from eqsat.app import cli
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.errors import VerificationError
from eqsat.rules.rule import Rule
from eqsat.verification import Verifier

UNSOUND = Rule("unsound_relu_drop", "single", "ours", "relu(x) -> x", (("(= root (Relu x))", "(Pend root x)"),))
"""a deliberately wrong rule: relu(x) = x; every program it reaches differs from the original"""
UNSOUND_RUN = ["--scheduler", "tensat", "--k-multi", "0", "--cost", "analytic", "--final-extractor", "greedy-dag",
               "--no-measure", "-q"]


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "eqsat", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture()
def good(tmp_path):
    path = tmp_path / "good.onnx"
    onnx.save(ob.residual_block(), path)
    return path


def _one_error_line(err):
    lines = [line for line in err.splitlines() if line.startswith("eqsat: error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_missing_file(tmp_path):
    rc, _, err = run("optimize-model", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "out.onnx"))
    assert rc == 2 and "no such file" in _one_error_line(err)
    assert not (tmp_path / "out.onnx").exists()


def test_non_onnx_bytes(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"this is not a protobuf \x00\xff\xfe" * 10)
    rc, _, err = run("optimize-model", str(p), "-o", str(tmp_path / "out.onnx"))
    assert rc == 2 and "ONNX" in _one_error_line(err)


def test_truncated_onnx(tmp_path, good):
    data = good.read_bytes()
    p = tmp_path / "trunc.onnx"
    p.write_bytes(data[: len(data) // 2])
    rc, _, err = run("optimize-model", str(p), "-o", str(tmp_path / "out.onnx"))
    assert rc == 2 and "trunc.onnx" in _one_error_line(err)


def test_dynamic_batch_without_input_shape(tmp_path):
    """A dynamic batch needs no --input-shape (tuned at batch 1), and the written model keeps it."""
    ob.torch_export(tm.seeded(tm.ResNet18), torch.randn(1, 3, 32, 32), str(tmp_path / "d.onnx"), dynamic_batch=True)
    fast = ("--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower")
    rc, _, err = run("optimize-model", str(tmp_path / "d.onnx"), "-o", str(tmp_path / "out.onnx"), *fast)
    assert rc == 0, err
    dims = [d.dim_value or d.dim_param for d in onnx.load(tmp_path / "out.onnx").graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, 32, 32]
    rc, _, err = run("optimize-model", str(tmp_path / "d.onnx"), "-o", str(tmp_path / "out.onnx"),
                     "--input-shape", "x=2,3,32,32", *fast)
    assert rc == 0, err
    assert (tmp_path / "out.onnx").exists()


def test_output_directory_missing(tmp_path, good):
    rc, _, err = run("optimize-model", str(good), "-o", str(tmp_path / "no" / "dir" / "out.onnx"))
    assert rc == 2 and "does not exist" in _one_error_line(err)


def test_existing_output_survives_failed_run(tmp_path):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"precious")
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"garbage")
    rc, _, _ = run("optimize-model", str(p), "-o", str(out))
    assert rc == 2
    assert out.read_bytes() == b"precious"


def test_impossible_node_limit(tmp_path, good):
    rc, _, err = run("optimize-model", str(good), "-o", str(tmp_path / "o.onnx"), "--node-limit", "3",
                     "--scheduler", "none", "--cost", "analytic")
    assert rc == 2 and "--node-limit" in _one_error_line(err)
    assert not (tmp_path / "o.onnx").exists()


def test_success_writes_model_and_report(tmp_path, good):
    import json

    rc, _, err = run("optimize-model", str(good), "-o", str(tmp_path / "o.onnx"), "--scheduler", "none",
                     "--cost", "analytic", "--report", str(tmp_path / "r.json"), "--seed", "3")
    assert rc == 0, err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["seed"] == 3 and r["config"]["search"]["seed"] == 3
    assert outputs_match(str(good), str(tmp_path / "o.onnx"))
    for key in ("max_abs_error", "max_rel_error", "config", "times", "egraph", "input", "output"):
        assert key in r
    assert r["egraph"]["enodes"] > 0 and r["egraph"]["eclasses"] > 0
    onnx.checker.check_model(onnx.load(tmp_path / "o.onnx"), full_check=True)


def test_info(good):
    rc, out, _ = run("info", str(good))
    assert rc == 0 and "conv2d 2" in out and "opaque (no rules): none" in out


def test_unsound_rule_fails_verification_in_the_api(good, monkeypatch):
    config = OptimizeConfig.of(scheduler="tensat", k_multi=0, cost="analytic", final_extractor="greedy-dag",
                               measure=False)
    closed: list[Verifier] = []  # the verifier's sessions let go though the check raised
    monkeypatch.setattr(Verifier, "close", lambda self: closed.append(self))
    with pytest.raises(VerificationError, match="does not match the original"):
        optimize(str(good), config, extra_rules=[UNSOUND])
    assert len(closed) == 1
    monkeypatch.undo()
    assert outputs_match(str(good), optimize(str(good), config).optimized)  # without the rule, the run verifies


def _quantized_block() -> onnx.ModelProto:
    """The residual block with its input rounded through onnxruntime's run-time quantizer first (as
    ``quantize_dynamic`` writes it before each MatMulInteger)."""
    from onnx import helper

    m = ob.residual_block()
    g = m.graph
    for node in g.node:
        node.input[:] = ["xq" if name == "x" else name for name in node.input]
    g.node.insert(0, helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["xq"]))
    g.node.insert(0, helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zero"]))
    onnx.checker.check_model(m)
    return m


def test_a_program_that_misses_in_a_quantized_model_is_left_out_not_an_error():
    """A model that rounds through a quantizer: a program that differs on the random draws is left out (a legitimate
    reorder before the quantizer moves a value a whole step), the original comes back, saying why; the same
    program of the float32 model raises (test_unsound_rule_fails_verification_in_the_api)."""
    config = OptimizeConfig.of(scheduler="tensat", k_multi=0, cost="analytic", final_extractor="greedy-dag",
                               measure=False)
    model = _quantized_block()
    result = optimize(model, config, extra_rules=[UNSOUND])
    assert result.report.returned.program == "original"
    assert "DynamicQuantizeLinear" in (result.report.returned.fallback or "")
    assert result.optimized.SerializeToString() == model.SerializeToString()
    (extracted,) = [c for c in result.report.candidates if c.name == "extracted"]
    assert not extracted.verified and "rounds through DynamicQuantizeLinear" in extracted.note


def test_unsound_rule_exits_3_and_writes_nothing(tmp_path, good, monkeypatch, capsys):
    monkeypatch.setattr(cli, "optimize", functools.partial(optimize, extra_rules=[UNSOUND]))
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = cli.main(["optimize-model", str(good), "-o", str(out), "--report", str(rep), *UNSOUND_RUN])
    err = capsys.readouterr().err
    assert rc == 3 and "does not match the original" in _one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no report, no .eqsat-* leftovers


def _subcommands(parser, prefix=()):
    """Every command path of the CLI (``optimize-model``, ``rules verify``, ...), read off the parser."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subcommands(sub, (*prefix, name))


def test_every_help_prints_every_flag():
    """``--help`` of every (sub)command exits 0 and lists each of its options (a help text with a bare ``%``
    once made ``eqsat optimize-model --help`` crash in argparse)."""
    paths = list(_subcommands(cli.build_parser()))
    assert ("optimize-model",) in [p for p, _ in paths]
    for path, sub in paths:
        code, out, err = run(*path, "--help")
        assert code == 0, (path, err[-500:])
        flags = [o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
        missing = [f for f in flags if f not in out]
        assert not missing, (path, missing)
