"""Search speed-ups: root-parallel trees are deterministic, the reward cache agrees with a fresh extraction,
the no-gain stop fires where no rule can lower the cost, and the equal-time benchmark gives each scheduler the
other's wall time."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest
from paths import SCRIPTS

from eqsat import ir
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost import make, node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.errors import InputError
from eqsat.extract import extract
from eqsat.mcts import MCTS, Env, SearchConfig, StopReason, run_scheduler
from eqsat.mcts.parallel import Forest
from eqsat.mcts.stats import ChildStats, RootStats
from eqsat.models import build
from eqsat.rules import rule_set


def _search(model: str, **options):
    # the tree alone; a time limit never reached (the searches compared step by step end by their budget, not CI's load)
    cfg = SearchConfig(budget=4, depth=3, max_iterations=3, no_gain_steps=0, prelude=False, time_limit=3600, **options)
    return run_scheduler("mcts", EGraph.from_graph(build(model, small=True)), cfg, make("analytic"))


def test_same_seed_and_workers_same_search():
    a, b = _search("squeezenet", seed=5, workers=2), _search("squeezenet", seed=5, workers=2)
    assert a.steps and [s.rule for s in a.steps] == [s.rule for s in b.steps]
    assert [s.cost_us for s in a.steps] == [s.cost_us for s in b.steps]
    assert a.simulations == b.simulations and a.simulations_per_second > 0
    assert a.steps[0].simulations == 2 * 4  # both trees planned the first step with the whole budget


def test_merge_sums_visits_and_values_and_keeps_saturation():
    one = RootStats(3, False, False, {"r": ChildStats(2, 1.0, 0.5, 10, False, False),
                                      "s": ChildStats(1, 0.0, 0.0, 9, True, True)})
    two = RootStats(4, True, True, {"r": ChildStats(3, 0.5, 0.5, 10, False, False),
                                    "t": ChildStats(1, 2.0, 2.0, 12, False, False)})
    m = RootStats.merge([one, two])
    assert (m.planned, m.gained, m.open_actions) == (7, True, True)
    assert (m.children["r"].visits, m.children["r"].value) == (5, 1.5)
    assert m.children["s"].saturated and m.children["s"].refused and m.children["t"].value == 2.0
    assert one.children["r"].visits == 2  # the parts are left as they were


def test_cached_rewards_equal_a_fresh_extraction():
    """Every state the search priced (by its rule path) has the cost a fresh e-graph replaying that path gets."""
    g = build("bert", small=True)
    rules = rule_set("default")
    cost = make("analytic")
    env = Env(EGraph.from_graph(g), rules, cost, SearchConfig())
    mcts = MCTS(env, SearchConfig(budget=6, depth=3, max_iterations=2, seed=1, no_gain_steps=0, finish=False))
    report = mcts.run()
    assert report.steps
    paths = sorted(env._cost_cache, key=lambda k: (-len(k), k))[:4]
    assert any(len(p) > 1 for p in paths)
    for path in paths:
        fresh = Env(EGraph.from_graph(g), rules, cost, SearchConfig())
        for rule in path:
            assert fresh.engine.apply(rule).changed
        assert fresh.cost() == pytest.approx(env._cost_cache[path], rel=1e-12), path


@pytest.mark.parametrize("model", ["squeezenet", "nasneta"])
def test_every_reward_equals_a_from_scratch_extraction_of_the_egraph_it_prices(model):
    """Each cost the search reads (fresh, from the rule-path cache or from the content cache) equals the main
    extractor run from scratch on the e-graph as it is at that moment; some came from the content cache."""
    cost_model = make("analytic")
    env = Env(EGraph.from_graph(build(model, small=True)), rule_set("default"), cost_model, SearchConfig())
    priced = env.cost
    seen = {"content": 0, "calls": 0}

    def checked(key=None):
        new_path = key not in env._cost_cache
        before = env.extractions
        value = priced(key)
        snap = env.egraph.snapshot().restrict()
        fresh = extract("greedy-dag", snap, node_costs(snap, cost_model))
        assert value == fresh.estimate, key
        seen["calls"] += 1
        seen["content"] += new_path and env.extractions == before
        return value

    env.cost = checked  # type: ignore[method-assign]
    MCTS(env, SearchConfig(budget=8, depth=3, max_iterations=2, seed=2, no_gain_steps=0, prelude=False)).run()
    assert seen["calls"] > 10 and seen["content"] > 0, seen


def _adds_only() -> ir.Graph:
    """x + (y + (z + w)) on inputs: the rules only reorder the additions, which never lowers the cost."""
    xs = [ir.input_(n, (16, 16)) for n in "xyzw"]
    out = xs[0]
    for v in xs[1:]:
        out = ir.make("ewadd", [v, out])
    return ir.Graph(tuple(xs), (out,), ("out",), {}, name="adds")


def test_no_gain_stop_fires_where_no_rule_lowers_the_cost():
    base = dict(cost="analytic", budget=4, depth=2, measure=False, ilp_time_limit=5, seed=0)
    r = optimize(_adds_only(), OptimizeConfig.of(scheduler="mcts", no_gain_steps=2, **base)).report
    assert r.search.stop_reason == StopReason.NO_GAIN and r.to_json()["stop_reason"] == "no_gain"
    tree = r.search.steps[:len(r.search.steps) - r.search.finish_steps]  # the finishing phase's steps come last
    assert len(tree) == 1 and all(s.reward_us == 0 for s in r.search.steps)
    longer = optimize(_adds_only(), OptimizeConfig.of(scheduler="mcts", no_gain_steps=0, max_iterations=3,
                                                      **base)).report
    s = longer.search
    assert s.stop_reason == StopReason.STEP_LIMIT and len(s.steps) - s.finish_steps == 3


def test_equal_time_gives_each_scheduler_the_others_wall_time(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    sys.modules.pop("bench_search", None)
    import bench_search

    assert bench_search.main(["--equal-time", "--models", "nasrnn", "--small", "--budget", "2", "--depth", "2",
                              "--final-extractor", "greedy-dag", "--time-limit", "3", "--out", str(tmp_path)]) == 0
    recs = {f: json.loads((tmp_path / f).read_text()) for f in os.listdir(tmp_path)}
    assert len(recs) == 4 and not any("error" in r for r in recs.values())
    firsts = {r["spec"]["config"]["scheduler"]: r for r in recs.values() if "equal_time" not in r}
    for r in recs.values():
        if "equal_time" not in r:
            continue
        given = r["spec"]["config"]["search"]["time_limit"]
        other = firsts[{"mcts": "tensat", "tensat": "mcts"}[r["spec"]["config"]["scheduler"]]]
        assert r["equal_time"]["of"] == other["key"] and r["equal_time"]["time_limit"] == given
        assert given == pytest.approx(max(bench_search.wall_time(other), 0.01))
        # the search's own limit the run recorded: what the limit left after its import (greedy-dag's extraction
        # takes none of it)
        took = r["report"]["times"]["import"]
        assert r["report"]["config"]["search"]["time_limit"] == pytest.approx(max(given / 2, given - took))


def test_workers_refuse_a_cost_model_they_cannot_share():
    class Timed:  # a timed cost model holds sessions and locks: no pickle
        def __init__(self):
            self.lock = threading.Lock()

    egraph = EGraph.from_graph(build("squeezenet", small=True))
    env = Env(egraph, rule_set("default"), Timed(), SearchConfig())
    with pytest.raises(InputError, match="--workers 1"):
        Forest(MCTS(env, SearchConfig(workers=2)), 2)


def test_workers_refuse_rules_outside_the_rule_set():
    from eqsat.rules.registry import taso_rules

    extra = next(r for r in taso_rules() if r.name == "taso_s000")
    renamed = type(extra)(**{**extra.__dict__, "name": "injected_rule"})
    with pytest.raises(InputError, match="injected_rule"):
        run_scheduler("mcts", EGraph.from_graph(build("squeezenet", small=True)),
                      SearchConfig(budget=2, workers=2), make("analytic"), extra_rules=[renamed])


def test_profile_search_reports_the_rate_and_the_decisions(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    sys.modules.pop("profile_search", None)
    import profile_search

    assert profile_search.main(["bert", "--small", "--steps", "1", "--budget", "3", "--cost", "analytic"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[0])
    assert out["simulations"] == 3 and out["simulations_per_second"] > 0 and out["cpu_ms_per_sim"] > 0
    assert len(out["rules"]) == len(out["costs"]) >= 1 and out["stop_reason"] == "step_limit"  # 1 step, then finish
    assert profile_search.main(["bert", "--small", "--steps", "1", "--budget", "3", "--cost", "analytic",
                                "--no-finish"]) == 0
    bare = json.loads(capsys.readouterr().out.splitlines()[0])
    assert len(bare["rules"]) == 1 < len(out["rules"])  # the finishing phase's steps are left out


def _tree_steps(plan_share: float, time_limit: float, no_gain_steps: int = 0) -> list[int]:
    """Simulations of each real decision of a search whose budget is never reached in ``time_limit`` (no stop for
    decisions cut short without a gain: ``no_gain_short`` 0)."""
    cfg = SearchConfig(budget=10**6, depth=3, seed=0, no_gain_steps=no_gain_steps, time_limit=time_limit,
                       finish=False, plan_share=plan_share, prelude=False, no_gain_short=0)
    report = run_scheduler("mcts", EGraph.from_graph(build("squeezenet", small=True)), cfg, make("analytic"))
    assert report.stop_reason == StopReason.TIME_LIMIT
    return [s.simulations for s in report.steps]


@pytest.mark.timing
def test_a_short_time_limit_still_takes_several_decisions():
    """With the whole time for one decision (share 1: every decision plans to the search's deadline) a budget
    that cannot be spent leaves one step; a quarter of what is left per decision takes several, each planned
    with at least one simulation and no more than the decision before it had time for."""
    assert len(_tree_steps(1.0, 3.0)) == 1
    sims = _tree_steps(0.25, 3.0)
    assert len(sims) >= 3 and all(n >= 1 for n in sims), sims


@pytest.mark.timing
def test_decisions_cut_short_by_their_share_do_not_stop_the_search_as_no_gain():
    """A decision that its share of the time ended after a few simulations is no evidence that no rule pays: with
    a no-gain stop after one idle decision, the search still runs to its time limit."""
    sims = _tree_steps(0.25, 3.0, no_gain_steps=1)
    assert len(sims) >= 3, sims


@pytest.mark.timing
def test_decisions_cut_short_without_a_gain_stop_the_search_after_no_gain_short_of_them():
    """Where no rule lowers the cost (a chain of adds) and every decision is cut short by its share (a budget never
    spent), ``no_gain_short`` such decisions in a row end the search as no_gain; with 0 it goes on (to saturation
    or the time limit), and ``no_gain_steps``, which counts only decisions that spent their budget, never fires."""
    def search(short: int):
        cfg = SearchConfig(budget=10**6, depth=3, seed=0, no_gain_steps=1, no_gain_short=short, time_limit=3.0,
                           finish=False, plan_share=0.25, prelude=False)
        return run_scheduler("mcts", EGraph.from_graph(_adds_only()), cfg, make("analytic"))

    stopped = search(2)
    assert stopped.stop_reason == StopReason.NO_GAIN and len(stopped.steps) == 1, stopped.stop_reason
    assert all(s.reward_us == 0 for s in stopped.steps)
    going = search(0)
    assert going.stop_reason != StopReason.NO_GAIN and len(going.steps) > 2, (going.stop_reason, going.steps)


@pytest.mark.timing
def test_after_a_no_gain_short_stop_the_finishing_phase_gets_a_tenth_of_the_limit(monkeypatch):
    """The tree search that stopped because its cut-short decisions found nothing leaves the finishing phase a tenth
    of the time limit, not the rest of it (here more than a tenth was left)."""
    limit, seen = 20.0, []
    real = MCTS._finish

    def spy(self, report, cost, end):
        seen.append((end - time.perf_counter(), time.perf_counter()))
        return real(self, report, cost, end)

    monkeypatch.setattr(MCTS, "_finish", spy)
    cfg = SearchConfig(budget=10**6, depth=3, seed=0, no_gain_steps=0, no_gain_short=2, time_limit=limit,
                       finish=True, plan_share=0.25, prelude=False)
    start = time.perf_counter()
    report = run_scheduler("mcts", EGraph.from_graph(_adds_only()), cfg, make("analytic"))
    assert report.stop_reason == StopReason.NO_GAIN and len(seen) == 1
    given, at = seen[0]
    assert given <= 0.1 * limit + 1e-6
    assert start + limit - at > 0.1 * limit  # what the time limit had left: more than the finish was given


@pytest.mark.timing
def test_planning_past_its_share_goes_on_until_a_step_is_found():
    """A decision whose share of the time has passed still plans until some root child changes the e-graph (or
    the search's own deadline): the search never stops for want of time while time is left."""
    env = Env(EGraph.from_graph(build("squeezenet", small=True)), rule_set("default"), make("analytic"),
              SearchConfig())
    mcts = MCTS(env, SearchConfig(budget=64, depth=2, seed=0))
    mcts.start()
    now = time.perf_counter()
    planned = mcts._plan(mcts.root, deadline=now + 60, soft=now - 1)
    assert planned >= 1 and MCTS._candidates(mcts.root)
    assert planned < 64  # the budget was not what ended it
