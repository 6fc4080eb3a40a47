"""The typed report and the one config: serialization without NaN, config checks and CLI flags derived from
the config's fields, the returned program's cost equal to the extractor's DAG cost, rule sets chosen by flag."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import onnx_builders as ob
import pytest

from eqsat import ir
from eqsat.app.cli import build_parser, config_from_args
from eqsat.app.config import OptimizeConfig, options, validate
from eqsat.app.pipeline import optimize
from eqsat.app.report import PhaseTimer
from eqsat.cost import graph_cost, make
from eqsat.errors import InputError
from eqsat.extract import EXTRACTORS
from eqsat.mcts import SearchConfig, Step, StopReason

FAST = dict(cost="analytic", measure=False, budget=2, depth=1, final_extractor="greedy-dag")


def test_tensat_report_is_strict_json_with_unpriced_steps_as_null():
    result = optimize(ob.attention(), OptimizeConfig.of(scheduler="tensat", k_multi=1, **FAST))
    report = result.report
    steps = report.search.steps
    assert steps and any(s.cost_us is None for s in steps)  # TENSAT prices each iteration once
    data = json.loads(report.dumps())  # allow_nan=False: would raise on NaN or Infinity
    assert data["stop_reason"] == report.search.stop_reason.value in {s.value for s in StopReason}
    assert [s["rule"] for s in data["steps"]] == [s.rule for s in steps]
    assert any(s["cost_us"] is None for s in data["steps"]) and all("reward_us" in s for s in data["steps"])
    assert data["rules_applied"] == report.search.rules_applied() and sum(data["rules_applied"].values()) == len(steps)
    # the blocks phase looks for repeated blocks on every default run (none here: no rest phase)
    assert set(data["times"]) == {"import", "blocks", "encode", "search", "extract", "export", "verify"}
    assert data["config"]["search"]["k_multi"] == 1 and data["config"]["scheduler"] == "tensat"


def test_reported_cost_is_the_decoded_programs_cost():
    config = OptimizeConfig.of(scheduler="mcts", allow_slower=True, seed=0, **FAST)
    result = optimize(ob.attention(), config)
    r = result.report
    assert r.returned.program == "optimized"
    assert math.isclose(r.optimized_cost, graph_cost(result.graph, make("analytic")), rel_tol=1e-9)
    assert r.optimized_cost == r.extraction.dag_cost == r.extracted_cost
    assert r.original_cost == pytest.approx(graph_cost(build_graph_of(ob.attention()), make("analytic")))


def test_changes_say_where_the_estimate_moved_and_the_cli_prints_them(capsys):
    from eqsat.app.cli import _summary
    from eqsat.models import build

    graph = build("encoder", small=True)
    config = OptimizeConfig.of(scheduler="mcts", allow_slower=True, seed=0, **FAST)
    result = optimize(graph, config)
    r = result.report
    assert r.returned.program == "optimized"
    changes = r.changes()
    assert changes
    # the kinds' counts and costs are the two programs' own, recounted here from the IR
    before, after = graph.op_counts(), result.graph.op_counts()
    for c in changes:
        assert (c.original, c.optimized) == (before.get(c.op, 0), after.get(c.op, 0))
    # every kind not listed costs the same in both, so the listed savings add up to the estimated gain
    assert sum(c.saved_us for c in changes) == pytest.approx(r.original_cost - r.optimized_cost, rel=1e-9, abs=1e-6)
    assert json.loads(r.dumps())["changes"][0]["op"] == changes[0].op
    _summary(r)
    err = capsys.readouterr().err
    assert "where the gain came from" in err and all(c.op in err for c in changes)


def test_the_summary_of_a_run_returning_the_original_shows_the_originals_figures(capsys):
    """The file written is the input: its column says so and holds the input's latency, not the candidate's
    (a sweep's GLPN showed 67.825 ms beside the original's 68.904 for a model that was the original)."""
    from dataclasses import replace

    from eqsat.app.cli import _summary
    from eqsat.measurement.decision import Measurement, Returned

    r = optimize(ob.attention(), OptimizeConfig.of(scheduler="mcts", allow_slower=True, seed=0, **FAST)).report
    timed = Measurement(68.904, 67.825, 1.012, 0.992, 1.033, 0.995, 30, 1, 9.0, {"name": "ort-cpu"}, "original",
                        "not faster with confidence")
    _summary(replace(r, returned=Returned("original", "not faster with confidence"), measured=timed))
    err = capsys.readouterr().err
    assert "returned (the original)" in err and err.count("68.904") == 2 and "67.825" not in err, err
    assert "the original returned (the candidate timed: 1.012x in ort-cpu)" in " ".join(err.split())  # (wrapped)
    _summary(replace(r, measured=replace(timed, decision="ship")))
    err = capsys.readouterr().err
    assert "optimized" in err and "67.825" in err and "measured 1.012x (ort-cpu)" in " ".join(err.split())


def build_graph_of(model):
    from eqsat.onnx.importer import import_model

    return import_model(model)


def test_phase_timer_adds_up_repeated_phases():
    timer = PhaseTimer()
    for _ in range(3):
        with timer("a"):
            sum(range(1000))
    with pytest.raises(ZeroDivisionError):
        with timer("b"):
            _ = 1 / 0
    assert set(timer.seconds) == {"a", "b"} and timer.total("a", "b") == timer.seconds["a"] + timer.seconds["b"]


@pytest.mark.parametrize("options_, flag", [
    (dict(budget=0), "--budget"), (dict(depth=-1), "--depth"), (dict(time_limit=math.inf), "--time-limit"),
    (dict(ilp_time_limit=math.nan), "--ilp-time-limit"), (dict(main_extractor="ilpp"), "--main-extractor"),
    (dict(rule_set="nasrn"), "--rule-set"), (dict(cost="gpu"), "--cost"), (dict(verify_draws=0), "verify_draws"),
    (dict(measure_budget=-1.0), "--measure-budget"), (dict(seed=True), "--seed"),
])
def test_validate_names_the_bad_option(options_, flag):
    with pytest.raises(InputError, match=flag):
        validate(OptimizeConfig.of(**options_))


def test_every_option_is_documented_and_the_cli_defaults_are_the_configs():
    for _owner, f in options():
        assert f.metadata.get("doc"), f.name
    args = build_parser().parse_args(["optimize-model", "m.onnx", "-o", "o.onnx"])
    assert config_from_args(args) == OptimizeConfig()
    assert OptimizeConfig().cost == "auto"  # the CLI's documented default, for the API alike
    sub = build_parser()._subparsers._group_actions[0].choices["optimize-model"]  # type: ignore[union-attr]
    helps = {a.dest: a for a in sub._actions}
    assert set(EXTRACTORS) <= set(helps["final_extractor"].metavar.strip("{}").split(","))
    assert "(default: 128)" in helps["budget"].help and "(default: ilp)" in helps["final_extractor"].help
    flags = {f.metadata["flag"] for _o, f in options() if f.metadata.get("flag")}
    assert {"--budget", "--node-limit", "--rule-set", "--scheduler", "--cost"} <= flags
    assert {f.name for f in fields(SearchConfig)} >= {"budget", "depth", "rule_set", "k_multi"}


def test_cli_rule_set_defaults_to_the_models_and_never_to_a_graph_name():
    parse = build_parser().parse_args
    nasrnn = config_from_args(parse(["optimize-model", "--model", "nasrnn", "-o", "o.onnx"]), builtin="nasrnn")
    assert nasrnn.search.rule_set == "nasrnn" and nasrnn.search.k_multi == 3
    given = parse(["optimize-model", "--model", "nasrnn", "-o", "o.onnx", "--rule-set", "default"])
    assert config_from_args(given, builtin="nasrnn").search.rule_set == "default"
    # an imported graph that happens to be named nasrnn keeps the default rule set
    x = ir.input_("x", (2, 4))
    g = ir.Graph((x,), (ir.make("relu", [x]),), ("y",), {}, name="nasrnn")
    r = optimize(g, OptimizeConfig.of(scheduler="tensat", k_multi=1, **FAST)).report
    assert r.config.search.rule_set == "default"


def test_steps_say_their_units():
    names = {f.name for f in fields(Step)}
    assert {"reward_us", "cost_us"} <= names and "reward" not in names and "cost" not in names
