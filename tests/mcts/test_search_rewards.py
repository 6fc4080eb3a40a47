"""The search's rewards see what TASO's multi-pattern rules make: greedy-dag's sharing pass against the ILP.

A multi-pattern rule merges two operators into one read by two slices. Alone, each slice of the merged operator is
dearer than the operator it replaces, so a greedy pass that prices e-classes one by one gives the rule no reward
and MCTS never took it (on NASNet-A and NASRNN it stayed below TENSAT, whose final ILP used the merges). The oracle is
SCIP's exact extraction of the same e-graphs.
"""

from __future__ import annotations

import pytest

from eqsat.cost import make, node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.extract import ExtractOptions, extract, greedy_dag
from eqsat.mcts import SearchConfig, run_scheduler
from eqsat.models import MODELS, build
from eqsat.rules import RuleEngine, rule_set


def prices(eg: EGraph, cost) -> tuple[float, float, float]:
    """(greedy pass alone, greedy-dag with its sharing pass, ILP) DAG costs of ``eg``."""
    snap = eg.snapshot().restrict()
    costs = node_costs(snap, cost)
    ilp = extract("ilp", snap, costs, ExtractOptions(time_limit=60.0))
    assert ilp.optimal
    return (greedy_dag.extract(snap, costs, ExtractOptions(share=False)).dag_cost, greedy_dag.extract(snap, costs).dag_cost,
            ilp.dag_cost)


@pytest.mark.parametrize("model,rule", [("nasneta", "merge_conv_shared_input"), ("nasneta", "taso_m14"),
                                        ("nasrnn", "merge_matmul_bias"), ("bert", "taso_m04")])
def test_a_merge_earns_the_ilps_reward(model, rule):
    cost = make("analytic")
    eg = EGraph.from_graph(build(model, small=True))
    engine = RuleEngine(eg, list(rule_set(MODELS[model].rule_set)))
    before = prices(eg, cost)
    assert before[0] == pytest.approx(before[1]) == pytest.approx(before[2])  # the initial program: nothing to share
    assert engine.apply(rule).changed
    after = prices(eg, cost)
    gains = [b - a for b, a in zip(before, after)]
    assert gains[0] == pytest.approx(0.0, abs=1e-9)  # the greedy pass alone sees nothing
    assert gains[2] > 0 and gains[1] == pytest.approx(gains[2])  # greedy-dag sees what the ILP sees


def test_mcts_takes_a_merge_on_nasneta():
    cfg = SearchConfig(budget=16, depth=4, max_iterations=3, time_limit=120.0, seed=0, finish=False)
    eg = EGraph.from_graph(build("nasneta", small=True))
    report = run_scheduler("mcts", eg, cfg, make("analytic"))
    merges = {"merge_conv_shared_input", "taso_m14"}
    assert merges & set(report.rules_applied())
    assert report.best_cost_us < report.initial_cost_us
