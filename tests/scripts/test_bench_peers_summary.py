"""scripts/bench_peers.py's summary of the peers targets (scripts/peers_report.py) on hand-made timings, against
values worked out by hand; and the timing phase's rounds, sized to the variance seen (scripts/peers_timing.py),
on a fake clock whose noise is known."""

from __future__ import annotations

import doctest
import importlib
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from paths import SCRIPTS


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(SCRIPTS)
    for name in ("peers_report", "peers_timing", "peers_workdir"):
        sys.modules.pop(name, None)
    return importlib.import_module("peers_report"), importlib.import_module("peers_timing")


def _t(speedup, half=0.004):
    return {"speedup": speedup, "ci_low": speedup - half, "ci_high": speedup + half}


def _row(model, eqsat, peers, aa_half=0.004, eqsat_status="verified", eqsat2=None):
    """A timed row: eqsat's speedup (None: not timed), the peers' (name -> (status, speedup)), the A/A control's
    interval half-width; at 1 thread, and at 2 threads eqsat2 (else eqsat) with the peers unchanged."""
    tools = {"original-copy": {"status": "control", "timed": {"1": _t(1.0, aa_half), "2": _t(1.0, aa_half)}}}
    eq: dict = {"status": eqsat_status}
    if eqsat is not None:
        eq["timed"] = {"1": _t(eqsat), "2": _t(eqsat2 if eqsat2 is not None else eqsat)}
    tools["eqsat"] = eq
    for name, (status, speedup) in peers.items():
        tools[name] = {"status": status, "timed": {"1": _t(speedup), "2": _t(speedup)}}
    return {"model": model, "tools": tools}


def test_targets_on_hand_made_numbers(scripts):
    report, _ = scripts
    rows = [
        _row("bert/torchscript", 1.20, {"onnxsim": ("verified", 1.10), "onnxscript": ("verified", 1.04)}),
        # within the 0.01 margin of the best peer (1.045 >= 1.05 - 0.01): met
        _row("bert_s128/dynamo", 1.045, {"onnxsim": ("verified", 1.05)}, eqsat2=1.02),
        # 0.015 behind the best peer: not met; a 'wrong' peer's speedup does not count
        _row("distilbert/dynamo", 1.135, {"onnxscript": ("verified", 1.15), "onnxslim": ("wrong", 1.9)}),
        # no peer timed, below the 0.99 floor: not met; the A/A interval 2.4% wide: unresolved
        _row("gpt2/dynamo", 0.985, {"ort-transformers": ("invalid", 1.2)}, aa_half=0.012),
        _row("vit/torchscript", 1.02, {"onnxsim": ("verified", 1.02)}),
        # a CNN: in no median
        _row("resnet50/dynamo", 1.30, {"onnxsim": ("verified", 1.0)}),
        # eqsat's program did not verify: not met, missing from the medians, not every output verified
        _row("qwen2/torchscript", None, {"onnxsim": ("verified", 1.0)}, eqsat_status="wrong"),
        # a model that failed to export or time: missing too
        {"model": "convnext/dynamo", "error": "RuntimeError: cannot export"},
    ]
    s = report.summarize(rows, [1, 2])
    by = {m["model"]: m for m in s["models"]}
    met = {name: m["at"]["1"]["met"] for name, m in by.items()}
    assert met == {"bert/torchscript": True, "bert_s128/dynamo": True, "distilbert/dynamo": False,
                   "gpt2/dynamo": False, "vit/torchscript": True, "resnet50/dynamo": True, "qwen2/torchscript": False,
                   "convnext/dynamo": False}
    assert by["distilbert/dynamo"]["at"]["1"]["best_peer"] == "onnxscript"
    assert by["distilbert/dynamo"]["at"]["1"]["beats_peers"] is False
    assert by["gpt2/dynamo"]["at"]["1"]["best_peer"] is None and by["gpt2/dynamo"]["at"]["1"]["beats_peers"]
    assert by["gpt2/dynamo"]["at"]["1"]["above_floor"] is False
    at1 = s["at"]["1"]
    # transformers timed: 1.20, 1.045, 1.135, 0.985, 1.02 -> sorted 0.985 1.02 1.045 1.135 1.20: median 1.045
    assert at1["transformer_models"] == 5 and at1["transformer_median"] == pytest.approx(1.045)
    assert at1["transformer_met"] is False
    # BERT family: 1.20, 1.045, 1.135 -> 1.135
    assert at1["bert_models"] == 3 and at1["bert_median"] == pytest.approx(1.135) and at1["bert_met"] is True
    assert at1["unresolved"] == ["gpt2/dynamo", "convnext/dynamo"]  # no A/A interval: not resolved either
    assert at1["missing"] == ["qwen2/torchscript", "convnext/dynamo"]
    assert at1["models_met"] == 4 and at1["models"] == 8
    assert s["all_verified"] is False
    # 2 threads: bert_s128 at 1.02 is 0.03 behind onnxsim; the BERT median is 1.135 of 1.20, 1.02, 1.135
    assert by["bert_s128/dynamo"]["at"]["2"]["met"] is False
    assert s["at"]["2"]["bert_median"] == pytest.approx(1.135) and s["at"]["2"]["models_met"] == 3
    text = report.summary_table(s, [1, 2])
    assert "gpt2/dynamo" in text and "(unresolved)" in text and "BERT family median 1.135" in text
    assert "every eqsat output verified: NO" in text


def test_all_met_and_all_verified(scripts):
    report, _ = scripts
    rows = [_row("bert/dynamo", 1.12, {"onnxsim": ("verified", 1.05)}),
            _row("llama/dynamo", 1.06, {"onnxsim": ("verified", 1.0)})]
    rows[0]["tools"]["eqsat"].update(measured={"speedup": 1.11}, kernels={"Attention (opset 23)": 2},
                                     returned="optimized")
    s = report.summarize(rows, [1])
    a = s["at"]["1"]
    assert s["all_verified"] and a["models_met"] == 2 and a["bert_met"] and a["transformer_met"]
    assert a["transformer_median"] == pytest.approx(1.09) and not a["unresolved"]
    bert = s["models"][0]
    assert bert["own_speedup"] == 1.11 and bert["returned"] == "optimized" and s["models"][1]["own_speedup"] is None
    text = report.summary_table(s, [1])
    assert "Attention (opset 23) x2" in text and "1.110" in text and "every eqsat output verified: yes" in text


def test_the_scripts_doctests(scripts):
    for module in (*scripts, importlib.import_module("peers_workdir")):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


def _tiny():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class _FakeClock:
    """A block clock (eqsat.measurement.timing.BlockClock) whose round times are 1 ms times lognormal noise of a known sigma,
    the program's call ``speedup`` times faster; calls are counted instead of run."""

    def __init__(self, sigma, speedups, seed=0):
        self.sigma, self.speedups, self.rng = sigma, speedups, np.random.default_rng(seed)

    def __call__(self, call, repeats):
        return float(np.exp(self.rng.normal(0, self.sigma))) / self.speedups.get(call.program, 1.0)


@pytest.mark.parametrize("sigma", [0.002, 0.03])
def test_rounds_are_sized_to_the_noise(scripts, monkeypatch, sigma):
    _, timing_mod = scripts
    import eqsat.measurement.timing as timing

    clock = _FakeClock(sigma, {"fast": 1.1})
    real = timing.compare_many

    def compare_many(programs, protocol, runtime=None, clock_=None):
        for name, side in zip(["original", "original-copy", "fast"], programs):
            for call in side:
                call.program = name
        return real(programs, protocol, runtime, clock)

    monkeypatch.setattr(timing, "compare_many", compare_many)
    model = _tiny()
    budget = timing_mod.Budget(resolution=0.01, budget_s=5.0, pilot_rounds=10, max_rounds=300)
    out = timing_mod.time_all(model, {"fast": onnx.ModelProto.FromString(model.SerializeToString())}, 1, budget)
    fast, aa = out["fast"], out["original-copy"]
    assert fast["speedup"] == pytest.approx(1.1, rel=0.02) and aa["speedup"] == pytest.approx(1.0, abs=0.02)
    assert fast["rounds"] == aa["rounds"]
    if sigma == 0.002:  # quiet: the pilot already resolves 1%
        assert fast["rounds"] == 10 and fast["stages"] == 1
        assert max(t["ci_high"] - t["ci_low"] for t in out.values()) <= 0.01
    else:  # noisy: more rounds, sized by the pilot's width, until 1% or the round limit
        assert fast["rounds"] > 10 and fast["stages"] >= 2
        width = max(t["ci_high"] - t["ci_low"] for t in out.values())
        assert width <= 0.01 or fast["rounds"] == 300


def test_a_dynamic_model_is_timed_at_the_sizes_given(scripts, monkeypatch):
    """bench_peers times a workdir's dynamic model at the sizes eqsat tuned it for: each timed call's feed has the
    given shape (with none given, every dynamic dimension is 1: a prefill of one token)."""
    _, timing_mod = scripts
    import eqsat.measurement.timing as timing

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "dyn", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    fed: list[tuple[int, ...]] = []
    real = timing.timing_feeds

    def timing_feeds(*args, **kwargs):
        feeds = real(*args, **kwargs)
        fed.append(feeds["x"].shape)
        return feeds

    monkeypatch.setattr(timing, "timing_feeds", timing_feeds)
    budget = timing_mod.Budget(budget_s=0.2, pilot_rounds=2, max_rounds=4)
    out = timing_mod.time_all(model, {"same": model}, 1, budget, input_shapes={"x": (2, 128, 4)})
    assert fed == [(2, 128, 4)] and out["same"]["rounds"] >= 2
    timing_mod.time_all(model, {"same": model}, 1, budget)
    assert fed[-1] == (1, 1, 4)
