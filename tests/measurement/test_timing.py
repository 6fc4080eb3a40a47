"""The end-to-end timing protocol (eqsat.measurement.timing) and the rule it feeds: ship only if faster with confidence,
otherwise hand back the user's model untouched."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import onnx_builders as ob
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.measurement.clock import runtime_info
from eqsat.measurement.timing import Comparison, Protocol, compare, compare_many, decide, session_count, speedup_ci


def synthetic_rounds(rng: np.random.Generator, ratio: float, n: int, noise: float = 0.1):
    """Round medians of two programs whose true latency ratio is ``ratio``, under a drifting machine load
    (shared by both programs of a round) and independent lognormal noise (median 1)."""
    load = np.exp(np.cumsum(rng.normal(0, 0.1, n)))
    a = ratio * load * np.exp(rng.normal(0, noise, n))
    b = load * np.exp(rng.normal(0, noise, n))
    return a, b


@pytest.mark.parametrize("ratio", [1.0, 1.3])
def test_bootstrap_interval_covers_the_true_ratio_about_as_often_as_its_confidence(ratio):
    trials, covered, estimates = 300, 0, []
    for t in range(trials):
        a, b = synthetic_rounds(np.random.default_rng(t), ratio, 20)
        est = speedup_ci(a, b, confidence=0.95, resamples=1000, seed=t)
        covered += est.ci_low <= ratio <= est.ci_high
        estimates.append(est.speedup)
    assert 0.90 <= covered / trials <= 0.99
    assert np.median(estimates) == pytest.approx(ratio, rel=0.01)


def test_clustered_bootstrap_covers_when_rounds_share_a_session_pair_effect():
    """10 session pairs of 3 rounds each; every pair adds its own offset (sessions of one program differ):
    the plain bootstrap over rounds is too narrow, resampling the pairs restores the coverage."""
    trials, plain, clustered = 300, 0, 0
    labels = np.arange(30) % 10
    for t in range(trials):
        rng = np.random.default_rng(t)
        a, b = synthetic_rounds(rng, 1.0, 30, noise=0.01)
        a = a * np.exp(rng.normal(0, 0.03, 10))[labels]
        e = speedup_ci(a, b, resamples=1000, seed=t)
        c = speedup_ci(a, b, resamples=1000, seed=t, clusters=labels)
        plain += e.ci_low <= 1.0 <= e.ci_high
        clustered += c.ci_low <= 1.0 <= c.ci_high
    assert clustered / trials >= 0.88 and plain / trials < 0.85


def test_bootstrap_interval_is_seeded_and_narrows_with_more_rounds():
    rng = np.random.default_rng(7)
    a, b = synthetic_rounds(rng, 1.1, 40)
    assert speedup_ci(a, b, seed=3) == speedup_ci(a, b, seed=3)
    short, long_ = speedup_ci(a[:8], b[:8], seed=0), speedup_ci(a, b, seed=0)
    assert long_.ci_high - long_.ci_low < short.ci_high - short.ci_low
    with pytest.raises(ValueError, match="paired rounds"):
        speedup_ci(a[:5], b[:4])


def comparison(low: float, high: float) -> Comparison:
    mid = (low + high) / 2
    return Comparison(mid, 1.0, mid, low, high, 0.95, 20, 5, 1.0, runtime_info(1))


def test_decision_ships_only_when_the_whole_interval_is_above_one():
    assert decide(comparison(1.02, 1.2)).ship
    unsure, slower = decide(comparison(0.97, 1.05)), decide(comparison(0.8, 0.95))
    assert not unsure.ship and "not faster with confidence" in unsure.reason and "--allow-slower" in unsure.reason
    assert not slower.ship and "slower" in slower.reason
    assert decide(comparison(0.8, 0.95), allow_slower=True).ship


def chain_model(adds: int, size: int = 256) -> onnx.ModelProto:
    """x -> ``adds`` Adds of distinct non-zero constants -> Relu: the Adds are real work onnxruntime keeps."""
    rng = np.random.default_rng(adds)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])
    nodes, inits, prev = [], [], "x"
    for i in range(adds):
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, (size, size)).astype(np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [f"a{i}"]))
        prev = f"a{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    return ob.model(nodes, [x], [y], inits)


@pytest.mark.timing
def test_same_model_against_itself_is_not_called_faster():
    """A/A on a real model: two sessions of one program; at 99% confidence the interval holds 1.0. A bias of the
    protocol fails every try; a spike of this shared host's own during a 0.5 s run may move two of three intervals
    off 1 once (CI, 2026-12-02: (1.003, 1.187) and (0.829, 0.999)): up to three tries, each of three new seeds."""
    model = ob.residual_block()
    for attempt in range(3):
        results = [compare(model, model, Protocol(budget_s=0.5, seed=3 * attempt + s, confidence=0.99))
                   for s in range(3)]
        contains = sum(r.ci_low <= 1.0 <= r.ci_high for r in results)
        if contains >= 2 and sum(decide(r).ship for r in results) <= 1:
            break
    assert contains >= 2, [(r.ci_low, r.ci_high) for r in results]
    assert sum(decide(r).ship for r in results) <= 1
    r = results[0]
    assert r.rounds >= Protocol().min_rounds and r.runtime["intra_op_threads"] == 1
    assert r.runtime["graph_optimization_level"] == "ORT_ENABLE_ALL" and r.runtime["sessions_per_program"] >= 1


def test_warm_up_calls_every_session_but_a_slow_programs_first_alone_after_its_allocating_call():
    """Three instances (sessions) of each of two programs, two timed rounds (they call instances 0 and 1): a
    program of no work is warmed five passes over every instance; one whose first pass costs more than a tenth of
    the budget (30 ms calls, a 0.5 s budget) calls every instance once (its first call allocates), then the first
    instance of each program once more, for the per-call estimate."""
    def counted(sleep_s: float) -> list[list[int]]:
        calls = [[0] * 3 for _ in range(2)]

        def make(prog: int, inst: int):
            def call():
                calls[prog][inst] += 1
                time.sleep(sleep_s)
            return call
        compare_many([[make(p, i) for i in range(3)] for p in range(2)],
                     Protocol(budget_s=10.0 if sleep_s == 0 else 0.5, min_rounds=2, max_rounds=2, warmup=5,
                              max_repeats=1))
        return calls

    assert counted(0.0) == [[6, 6, 5]] * 2  # 5 warm-up passes, then rounds 0 and 1
    assert counted(0.03) == [[3, 2, 1]] * 2  # 1 allocating pass, instance 0 once more, then the two rounds


def test_session_count_is_bounded_by_the_budget_and_by_weight_memory():
    small = ob.mlp()
    assert session_count([small], 10, build_s=0.01, budget_s=10) == 10
    assert session_count([small], 10, build_s=0.5, budget_s=10) == 6
    assert session_count([small], 10, build_s=1.0, budget_s=1) == 3  # never fewer than 3 for the time
    heavy = chain_model(0)
    heavy.graph.initializer.append(numpy_helper.from_array(np.zeros(40 * 2**20, np.float32), "unused"))  # 160 MiB
    assert session_count([small, heavy], 10, build_s=0.01, budget_s=10) == 3


def test_session_count_is_bounded_by_the_values_the_sessions_keep():
    """A program whose run holds a large value (an Expand of its input to rows x 2**20 floats): its sessions keep
    it in their arenas, so fewer are built at many rows; at few rows, as many as wanted."""
    expand = helper.make_node("Expand", ["x", "wide"], ["y"])
    graph = helper.make_graph([expand], "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 2**20])],
                              [numpy_helper.from_array(np.array([1, 2**20], np.int64), "wide")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    few, many, most = {"x": (2, 1)}, {"x": (60, 1)}, {"x": (300, 1)}  # 8, 240 and 1,200 MiB a run
    assert session_count([model, model], 10, build_s=0.01, budget_s=10, shapes=few) == 10
    assert session_count([model, model], 10, build_s=0.01, budget_s=10, shapes=many) == 2  # 2 x 2 x 240 MiB < 1 GiB
    assert session_count([model, model], 10, build_s=0.01, budget_s=10, shapes=most) == 1  # never none
    assert session_count([model, model], 10, build_s=0.01, budget_s=10) == 10  # no shapes: not bounded so


@pytest.mark.timing
def test_clearly_faster_program_is_detected_and_shipped_and_the_reverse_is_not():
    slow, fast = chain_model(50), chain_model(0)
    ab = compare(slow, fast, Protocol(budget_s=0.5, seed=0))
    assert ab.ci_low > 2 and ab.speedup > 2 and decide(ab).ship
    ba = compare(fast, slow, Protocol(budget_s=0.5, seed=0))
    assert ba.ci_high < 0.5 and ba.slower and not decide(ba).ship


def test_programs_with_different_inputs_are_refused():
    with pytest.raises(ValueError, match="different inputs"):
        compare(ob.mlp(), ob.residual_block(), Protocol(budget_s=0.1))


def test_nothing_found_writes_the_input_file_byte_for_byte(tmp_path):
    model = ob.residual_block()
    model.producer_name, model.doc_string = "someone's exporter", "kept as it was"
    onnx.helper.set_model_props(model, {"owner": "user", "version": "7"})
    src, out, rep = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    onnx.save(model, str(src))
    code = main(["optimize-model", str(src), "-o", str(out), "--report", str(rep), "--scheduler", "none", "--cost", "analytic", "-q"])
    assert code == 0
    assert out.read_bytes() == src.read_bytes()
    report = json.loads(rep.read_text())
    assert report["returned"] == "original" and "no program other than the original" in report["fallback"]


def test_model_given_in_memory_comes_back_untouched_when_nothing_beats_it():
    model = ob.mlp()
    before = model.SerializeToString()
    result = optimize(model, OptimizeConfig(scheduler="none", cost="analytic", measure=True))
    assert result.optimized is model and model.SerializeToString() == before
    assert result.report.returned.program == "original" and result.report.measured is None


def test_allow_slower_keeps_the_searched_program_and_reports_the_measurement():
    model = ob.mlp()
    cfg = OptimizeConfig(scheduler="none", cost="analytic", measure=True, allow_slower=True, measure_budget=0.3)
    r = optimize(model, cfg)
    m = r.report.to_json()["measured"]
    assert r.report.returned.program == "optimized" and r.report.returned.fallback is None and r.optimized is not model
    # the pipeline's measurement is gated: it may stop at any look, so fewer than Protocol.min_rounds is allowed
    assert m["ci_low"] <= m["speedup"] <= m["ci_high"] and m["rounds"] >= 2 and m["looks"] >= 1
    assert m["runtime"]["name"] == "ort-cpu" and m["decision"] == "ship"
    assert m["original_ms"] > 0 and m["optimized_ms"] > 0
