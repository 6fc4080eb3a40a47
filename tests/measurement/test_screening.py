"""Slow programs beside several candidates (eqsat.measurement.decision): where the budget affords every program
few rounds, the candidates are screened in a short run without the gate and only the fastest is gated, alone;
programs that afford many rounds are all gated together, as before."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.config import OptimizeConfig
from eqsat.measurement.decision import SCREEN_ROUNDS, SCREEN_SESSIONS, measure
from eqsat.measurement.runtimes import OrtRuntime, Program, call_ms, feeds_for
from eqsat.measurement.timing import Protocol

WIDTH = 512
WEIGHT = np.random.default_rng(1).standard_normal((WIDTH, WIDTH)).astype(np.float32) / WIDTH**0.5
CONFIG = OptimizeConfig.of(measure_budget=1.0, runtime="ort-cpu")
PROTOCOL = Protocol(budget_s=1.0)
SLOW_ROWS = 1024
"""rows of the slow programs: eight products take about 18 ms on this kind of machine, so that a budget of 1 s
affords four of them fewer than SCREEN_ROUNDS rounds with a margin of three (at 256 rows, 4.4 ms on an idle host,
the margin was under 1.2 and a fast host did not screen)"""


def chain(rows: int, products: int) -> onnx.ModelProto:
    """y = x @ W after ``products - 1`` products whose result is added and taken away again: what onnxruntime runs
    costs ``products`` MatMuls of [rows, WIDTH] x [WIDTH, WIDTH], while y is x @ W up to rounding."""
    nodes, last = [helper.make_node("MatMul", ["x", "w"], ["y0"])], "x"
    for i in range(products - 1):
        nodes += [helper.make_node("MatMul", [last, "w"], [f"m{i}"]), helper.make_node("Sin", [f"m{i}"], [f"s{i}"])]
        last = f"s{i}"
    if products > 1:
        nodes += [helper.make_node("Add", ["y0", last], ["t"]), helper.make_node("Sub", ["t", last], ["y"])]
    else:
        nodes[0].output[0] = "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, WIDTH])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, WIDTH])],
                          [numpy_helper.from_array(WEIGHT, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x})[0])


def test_the_chains_compute_the_same_function():
    x = np.random.default_rng(2).standard_normal((64, WIDTH)).astype(np.float32)
    np.testing.assert_allclose(_run(chain(64, 8), x), x @ WEIGHT, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_run(chain(64, 1), x), x @ WEIGHT, rtol=1e-5, atol=1e-5)


@pytest.mark.timing
def test_one_call_is_timed_before_the_rounds_are_planned():
    slow, fast = Program(chain(256, 8)), Program(chain(256, 1))
    feeds = feeds_for(slow, fast, seed=0)
    assert set(feeds) == {"x"} and feeds["x"].shape == (256, WIDTH)
    a, b = call_ms(slow, OrtRuntime(), feeds, PROTOCOL), call_ms(fast, OrtRuntime(), feeds, PROTOCOL)
    assert a > 3 * b > 0  # eight products against one


@pytest.mark.timing
def test_slow_programs_are_screened_and_the_fastest_candidate_is_gated_alone():
    original = chain(SLOW_ROWS, 8)
    candidates = [Program(chain(SLOW_ROWS, 8)), Program(chain(SLOW_ROWS, 1)), Program(chain(SLOW_ROWS, 8))]
    said: list[str] = []
    measurement, measured = measure(original, candidates, CONFIG, names=["same", "fast", "same-too"], say=said.append)
    per_call = call_ms(Program(original), OrtRuntime(), measured.feeds, PROTOCOL) / 1e3
    assert CONFIG.measure_budget / (4 * per_call) < SCREEN_ROUNDS  # the condition, timed independently
    assert any("screening 3 candidates" in s for s in said)
    assert measured.screened == [0, 2]
    assert measurement.candidate == "fast" and measurement.decision == "ship"
    gated = measured.comparisons[1]
    assert gated.planned > 0 and gated.runtime["sessions_per_program"] >= 1  # the gate's rounds
    assert all(measured.comparisons[k].planned == 0 for k in (0, 2))  # the screening's figures, no gate's
    assert all(measured.comparisons[k].runtime["sessions_per_program"] == SCREEN_SESSIONS for k in (0, 2))
    assert "screening run" in measurement.reason and "same" in measurement.reason
    x = measured.feeds["x"]
    np.testing.assert_allclose(_run(chain(SLOW_ROWS, 1), x), _run(original, x), rtol=1e-4, atol=1e-4)


@pytest.mark.timing
def test_an_a_a_of_slow_programs_is_screened_and_the_original_returned():
    """The gate's designed false-ship rate is 1%: one of two seeded runs may ship, both at most 1e-4 of the time."""
    decisions = []
    for seed in (0, 1):
        measurement, measured = measure(chain(SLOW_ROWS, 8), [Program(chain(SLOW_ROWS, 8)), Program(chain(SLOW_ROWS, 8))],
                                        CONFIG.updated(seed=seed))
        assert len(measured.screened) == 1
        decisions.append(measurement.decision)
    assert "original" in decisions, decisions


@pytest.mark.timing
def test_programs_that_afford_many_rounds_are_all_gated_together():
    measurement, measured = measure(chain(4, 2), [Program(chain(4, 1)), Program(chain(4, 2))], CONFIG,
                                    names=["fast", "same"])
    assert measured.screened == [] and all(c.planned > 0 for c in measured.comparisons)
    assert measurement.candidate == "fast"


@pytest.mark.timing
def test_the_report_and_the_summary_name_the_candidates_a_screening_run_timed(tmp_path, monkeypatch, capsys):
    """Screening forced (every program counted slow): the report's candidates other than the one gated carry the
    screening note, and the printed summary marks their figures as the screening run's."""
    from eqsat.app.cli import main
    from eqsat.measurement import decision

    monkeypatch.setattr(decision, "SCREEN_ROUNDS", 10**9)
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal: a candidate's line is not wrapped, whatever its figures
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    code = main(["optimize-model", "--model", "squeezenet", "--small", "-o", str(out), "--report", str(rep),
                 "--candidates", "3", "--budget", "2", "--cost", "analytic", "--ilp-time-limit", "2",
                 "--measure-budget", "0.5", "--seed", "1"])
    assert code == 0
    report = json.loads(rep.read_text())
    measured = [c for c in report["candidates"][1:] if c["speedup"] is not None]
    screened = [c for c in measured if c["note"].startswith("screened out")]
    assert len(measured) >= 2 and len(screened) == len(measured) - 1
    assert "screening run" in report["measured"]["reason"]
    err = capsys.readouterr().err
    assert sum("(screening run)" in line for line in err.splitlines()) == len(screened)
    for c in screened:  # the name and its mark on one line
        assert any(f"{c['name']}:" in line and line.endswith("(screening run)") for line in err.splitlines())
