"""Measured selection among candidate programs (``--candidates K``): distinct, verified, measured, and the
decision rule (the fastest candidate faster with confidence ships, else the original)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_builders as ob
import pytest

from eqsat.app.cli import main
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import (
    build_candidates,
    candidates_phase,
    encode_phase,
    export_phase,
    extract_phase,
    import_phase,
    optimize,
    same_program,
    search_phase,
)
from eqsat.app.selection import choose, family_confidence
from eqsat.cost import make
from eqsat.inputs import random_inputs
from eqsat.models import build
from eqsat.timing import Comparison
from eqsat.torch_run import TorchProgram
from eqsat.verify import compare_outputs, session

FAST = ["--budget", "2", "--cost", "analytic", "--ilp-time-limit", "2", "--measure-budget", "0.5", "--seed", "1"]


def _strict_json(text: str) -> dict:
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in the report")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("candidates")
    out, rep = d / "o.onnx", d / "r.json"
    code = main(["optimize-model", "--model", "squeezenet", "--small", "-o", str(out), "--report", str(rep),
                 "--candidates", "3", "-q", *FAST])
    assert code == 0
    return out, _strict_json(rep.read_text())


def test_the_report_lists_every_candidate_measured_and_round_trips(cli_run):
    out, report = cli_run
    names = [c["name"] for c in report["candidates"]]
    assert names[0] == "original" and names[1] == "extracted" and len(names) == len(set(names))
    assert 2 <= len(names) <= 4  # the original and at most --candidates 3
    assert json.loads(json.dumps(report, allow_nan=False)) == report
    assert report["config"]["candidates"] == 3 and report["measured"]["runtime"]["name"] == "ort-cpu"
    for c in report["candidates"][1:]:
        assert c["verified"] is True and c["estimated_cost"] > 0
        if c["speedup"] is not None:  # measured: against the same original blocks, interval around the median
            assert c["ci_low"] <= c["speedup"] <= c["ci_high"] and c["measured_ms"] > 0
    assert onnx.load(str(out)).graph.node  # the returned program was written


def test_the_shipped_program_follows_the_decision_rule(cli_run):
    _, report = cli_run
    measured = [c for c in report["candidates"][1:] if c["speedup"] is not None]
    confident = [c for c in measured if c["ci_low"] > 1]
    assert [c["name"] for c in report["candidates"] if c["shipped"]] == [report["shipped"]]
    if confident:
        assert report["returned"] == "optimized"
        assert report["shipped"] == max(confident, key=lambda c: c["speedup"])["name"]
    else:
        assert report["returned"] == "original" and report["shipped"] == "original"
    m = report["measured"]
    assert m["candidate"] in {c["name"] for c in measured}
    assert m["confidence"] == pytest.approx(family_confidence(0.95, len(measured)))


def test_candidates_are_distinct_and_compute_what_the_original_does():
    """The phases by hand: every candidate differs from the others (by structure) and, run by the torch executor,
    matches the original model in onnxruntime (an evaluator independent of the verification's)."""
    config = OptimizeConfig.of(budget=2, cost="analytic", ilp_time_limit=2.0, candidates=4, seed=1)
    original, graph = import_phase(build("squeezenet", small=True), config)
    cost_model = make("analytic")
    egraph, search = encode_phase(graph, config)
    search_phase(egraph, config, search, cost_model, lambda _m: None)
    snap, ext = extract_phase(egraph, config, cost_model, 0.0)
    extracted = candidates_phase(snap, ext, config, cost_model, 0.0)
    assert [e.name for e in extracted][:2] == ["extracted", "greedy-dag"] and len(extracted) == 4
    built = build_candidates(snap, extracted, graph, original, config, cost_model,
                             export_phase(snap, ext, graph, cost_model))
    assert len(built) >= 2, "squeezenet's grown e-graph yields at least two distinct programs"
    for i, a in enumerate(built):
        assert not any(same_program(a.program, b.program) for b in built[i + 1:])
        assert i == 0 or not a.same_as_original
    s = session(original)
    feeds = random_inputs(s, np.random.default_rng(7))
    ref = s.run(None, feeds)
    for b in built:
        for want, got in zip(ref, TorchProgram(b.program).run_numpy(feeds)):
            assert compare_outputs(np.asarray(want), got)[0], b.entry.name


def test_one_candidate_and_no_measurement_keep_todays_behaviour():
    model = ob.residual_block()
    one = optimize(model, OptimizeConfig.of(cost="analytic", budget=2, candidates=1, allow_slower=True,
                                            measure_budget=0.2))
    assert [c.name for c in one.report.candidates] == ["original", "extracted"]
    unmeasured = optimize(model, OptimizeConfig.of(cost="analytic", budget=2, candidates=4, measure=False))
    assert [c.name for c in unmeasured.report.candidates] == ["original", "extracted"]
    assert unmeasured.report.measured is None


def _cmp(speedup: float, low: float, high: float) -> Comparison:
    return Comparison(1.0, 1.0 / speedup, speedup, low, high, 0.95, 10, 1, 0.1, {"name": "test"})


def test_choose_ships_the_fastest_confident_candidate_not_the_fastest_median():
    comps = [_cmp(1.5, 0.9, 2.0), _cmp(1.2, 1.1, 1.3), _cmp(1.1, 1.05, 1.2)]
    best, decision = choose(comps, ["a", "b", "c"], allow_slower=False)
    assert best == 1 and decision.ship and decision.reason.startswith("b: ")
    best, decision = choose([_cmp(1.5, 0.9, 2.0), _cmp(0.8, 0.7, 0.9)], ["a", "b"], allow_slower=False)
    assert best == 0 and not decision.ship and "original model is returned" in decision.reason
    best, decision = choose([_cmp(0.9, 0.8, 0.95), _cmp(0.95, 0.9, 1.01)], ["a", "b"], allow_slower=True)
    assert best == 1 and decision.ship
