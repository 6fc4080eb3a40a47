"""Rules that can never fire are not registered (rules/reach.py): the oracle is egglog itself, every rule
registered and run on e-graphs grown from several models; and a search over the pruned engine takes the same
steps, at the same costs, as one over the engine with every rule registered."""

from __future__ import annotations

import pytest

from eqsat import ir
from eqsat.cost import make
from eqsat.egglog import schema
from eqsat.egglog.egraph import EGraph
from eqsat.mcts import MCTS, Env, SearchConfig
from eqsat.mcts import env as env_module
from eqsat.models import MODELS, build
from eqsat.rules import RuleEngine, rule_set, taso_rules
from eqsat.rules.reach import ReachEngine, constructors, fireable, present_constructors


def test_constructors_are_read_from_query_text():
    assert constructors("(= root (Relu (Conv2d sh sw ph pw 0 x w))) (= (S4 a b c d) (shape root))") == {"Relu",
                                                                                                      "Conv2d"}
    assert constructors("(= root_shape (shape root))") == set()


@pytest.mark.parametrize("model", ["squeezenet", "nasneta", "bert"])
def test_rules_outside_reach_never_match_on_grown_egraphs(model):
    """Every rule registered (the oracle): after each of two rounds that run every rule once, a rule that
    ``fireable`` left out has no match and changes nothing; and some rules were left out."""
    egraph = EGraph.from_graph(build(model, small=True))
    rules = rule_set(MODELS[model].rule_set)
    live = fireable(rules, present_constructors(egraph))
    idle = [r.name for r in rules if r.name not in live]
    assert idle and len(live) < len(rules)
    engine = RuleEngine(egraph, rules)
    limit = 3 * egraph.size().enodes
    for _round in range(2):
        for r in rules:
            if r.name in live:
                engine.apply(r.name, node_limit=limit)
        counts = engine.probe_all()
        assert all(counts[n] == 0 for n in idle), {n: counts[n] for n in idle if counts[n]}
        before = egraph.size().enodes
        for n in idle:
            step = engine.apply(n)
            assert not step.changed and step.matches == 0 and egraph.size().enodes == before, n
    assert egraph.size().enodes > limit // 3  # the rules grew it


def test_reach_engine_reports_idle_rules_as_no_match():
    egraph = EGraph.from_graph(build("bert", small=True))
    engine = ReachEngine(egraph, rule_set("default"))
    idle = [n for n in engine.rules if engine.idle(n)]
    assert idle and set(engine.registered) | set(idle) == set(engine.rules)
    counts = engine.probe_all()
    assert set(counts) == set(engine.rules) and all(counts[n] == 0 for n in idle)
    assert any(counts[n] > 0 for n in engine.registered)
    size = egraph.size().enodes
    step = engine.apply(idle[0], node_limit=10 * size)
    assert not step.changed and step.enodes == size and engine.probe(idle[0]) == 0


class _Unpruned(RuleEngine):
    """Every rule registered and run in egglog: the engine the search used before rules were pruned."""

    def __init__(self, egraph, rules):
        super().__init__(egraph, rules)
        self.registered = dict(self.rules)

    def idle(self, name: str) -> bool:
        return False


def _search(model: str, engine: type, monkeypatch) -> tuple:
    monkeypatch.setattr(env_module, "ReachEngine", engine)
    spec = MODELS[model]
    # a time limit no run reaches, even on a loaded machine: the budget, depth and iterations alone end both searches
    # (with the default 45 s the slower unpruned search was cut short under CI's load, so the two differed)
    cfg = SearchConfig(budget=6, depth=4, max_iterations=2, seed=3, no_gain_steps=0, rule_set=spec.rule_set,
                       time_limit=3600.0)
    env = Env(EGraph.from_graph(build(model, small=True)), rule_set(spec.rule_set), make("analytic"), cfg)
    report = MCTS(env, env.config).run()
    return ([(s.rule, s.cost_us, s.enodes, s.simulations) for s in report.steps], report.simulations,
            sorted(env._cost_cache.items()), env.size())


@pytest.mark.parametrize("model", ["squeezenet", "nasrnn"])
def test_pruned_search_equals_the_unpruned_one(model, monkeypatch):
    pruned = _search(model, ReachEngine, monkeypatch)
    assert pruned[0] and pruned[2]
    assert pruned == _search(model, _Unpruned, monkeypatch)


def test_an_engine_with_no_rule_that_can_fire():
    x, w = ir.input_("x", (4, 4)), ir.weight("w", (4, 4))
    egraph = EGraph.from_graph(ir.Graph((x,), (ir.make("matmul", [x, w], (0,)),), ("y",)))
    convs = [r for r in taso_rules() if all("Conv2d" in q for q, _a in r.bodies)]
    engine = ReachEngine(egraph, convs)
    assert convs and not engine.registered and all(engine.idle(r.name) for r in convs)
    assert engine.probe_all() == dict.fromkeys(engine.rules, 0)
    assert not engine.apply(convs[0].name, node_limit=100).changed


@pytest.mark.parametrize("model", ["squeezenet", "bert"])
def test_reach_engine_registers_the_analysis_rules_of_the_closure_only(model):
    """The constructors with analysis rules: those the program holds and those the fireable rules' actions
    create, no others (the schema declares them all)."""
    egraph = EGraph.from_graph(build(model, small=True))
    present = present_constructors(egraph)
    rules = rule_set(MODELS[model].rule_set)
    engine = ReachEngine(egraph, rules)
    made = {c for r in rules if r.name in engine.registered for _q, a in r.bodies for c in constructors(a)}
    assert egraph.analysed == present | made
    assert made - present and len(egraph.analysed) < len(schema.CONSTRUCTORS)
