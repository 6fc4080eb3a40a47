"""MCTS's prelude (SearchConfig.prelude): our rules saturated before the tree search, deterministic and cheap, so
that a short time limit already returns their program; checked against onnxruntime and against the search
without it."""

from __future__ import annotations

import onnx_builders as ob
from ort_check import outputs_match

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.mcts import SearchConfig
from eqsat.rules import rule_set

FAST = dict(cost="analytic", budget=8, depth=3, measure=False, ilp_time_limit=10)
OURS = {r.name for r in rule_set("default") if r.source == "ours"}


def test_the_prelude_runs_our_rules_first_and_its_program_computes_the_original():
    model = ob.attention()
    result = optimize(model, OptimizeConfig.of(scheduler="mcts", seed=0, **FAST))
    s = result.report.search
    assert s.prelude_steps > 0
    first = s.steps[:s.prelude_steps]
    assert {st.rule for st in first} <= OURS and "merge_linear_qkv" in {st.rule for st in first}
    assert first[-1].cost_us is not None and first[-1].cost_us < s.initial_cost_us  # priced once, at its end
    assert all(st.cost_us is None for st in first[:-1])
    assert outputs_match(model, result.optimized)
    assert result.report.optimized_cost <= first[-1].cost_us + 1e-9  # the search only adds to it


def test_the_prelude_is_the_same_for_every_seed_and_a_short_time_limit_keeps_it():
    model = ob.attention()
    runs = [optimize(model, OptimizeConfig.of(scheduler="mcts", seed=seed, **FAST)).report for seed in (0, 1)]
    preludes = [[(st.rule, st.enodes) for st in r.search.steps[:r.search.prelude_steps]] for r in runs]
    assert preludes[0] == preludes[1]
    short = optimize(model, OptimizeConfig.of(scheduler="mcts", seed=2, **{**FAST, "time_limit": 8.0})).report
    assert short.search.prelude_steps == runs[0].search.prelude_steps
    assert short.optimized_cost <= runs[0].search.steps[runs[0].search.prelude_steps - 1].cost_us + 1e-9


def test_no_prelude_leaves_it_out():
    model = ob.attention()
    r = optimize(model, OptimizeConfig.of(scheduler="mcts", seed=0, prelude=False, **FAST)).report
    assert r.search.prelude_steps == 0
    assert SearchConfig().prelude and SearchConfig().time_limit == 45.0
