"""Match-counting twins (rules/engine.py): a single-pattern rule's twin lives only inside the push of the probe that
runs it, so egglog does not copy it on every push. The oracle is a twin registered for good under another name
and run inside a push, the way every twin was run before: the counts must be the same, probe after probe."""

from __future__ import annotations

import pytest

from eqsat.egglog.egraph import EGraph
from eqsat.errors import EgglogError, EGraphError
from eqsat.models import MODELS, build
from eqsat.rules import rule_set
from eqsat.rules.reach import ReachEngine


def _oracle(egraph: EGraph, engine: ReachEngine) -> dict[str, list]:
    """For every registered rule, a permanently registered twin ``oracle_<rule>`` and the command that runs it."""
    runs = {}
    for name, rule in engine.registered.items():
        egraph.run_program(f"(ruleset oracle_{name})")
        for i, (query, _actions) in enumerate(rule.bodies):
            egraph.run_program(f'(rule ({query}) () :ruleset oracle_{name} :name "oracle_{name}#{i}")')
        runs[name] = egraph.parse(f"(run oracle_{name} 1)")
    return runs


def _count(egraph: EGraph, command: list) -> int:
    egraph.push()
    try:
        out = egraph.run_commands(command)
    finally:
        egraph.pop()
    return sum(out[-1].report.num_matches_per_rule.values())


@pytest.mark.parametrize("model", ["squeezenet", "nasneta", "bert"])
def test_probe_counts_equal_registered_twins_as_the_egraph_grows(model):
    egraph = EGraph.from_graph(build(model, small=True))
    engine = ReachEngine(egraph, rule_set(MODELS[model].rule_set))
    oracle = _oracle(egraph, engine)
    kinds = {r.kind for r in engine.registered.values()}
    assert kinds == {"single", "multi"}, kinds  # both paths are exercised
    size = egraph.size().enodes
    for target in (size, 2 * size, 4 * size):
        engine.grow_randomly(list(engine.registered), target, seed=target)
        expected = {name: _count(egraph, run) for name, run in oracle.items()}
        assert any(expected.values())
        for _again in range(2):  # a probe leaves nothing behind that changes the next one's count
            counts = engine.probe_all()
            assert {n: counts[n] for n in expected} == expected
            assert all(counts[n] == 0 for n in engine.rules if n not in expected)
        matching = [n for n, c in expected.items() if c][:6]
        assert all(engine.probe(n) == expected[n] for n in matching)
        egraph.push()
        try:  # inside a push (an MCTS simulation's) the multi-pattern twins run without a push of their own
            assert {n: engine.probe_in_push(n) for n in expected if engine.rules[n].kind == "multi"} == {
                n: c for n, c in expected.items() if engine.rules[n].kind == "multi"}
        finally:
            egraph.pop()
    assert egraph.size().enodes > 2 * size  # the e-graph grew between the checks


def test_single_pattern_twins_are_gone_after_the_probe():
    """Outside a probe egglog knows the multi-pattern twins (simulations run them inside their own push) but no
    single-pattern twin: a push does not copy it. The probes count what the permanent oracle twins count."""
    egraph = EGraph.from_graph(build("nasneta", small=True))
    engine = ReachEngine(egraph, rule_set("default"))
    oracle = _oracle(egraph, engine)
    expected = {name: _count(egraph, run) for name, run in oracle.items()}
    single = next(n for n, r in engine.registered.items() if r.kind == "single" and expected[n])
    multi = next(n for n, r in engine.registered.items() if r.kind == "multi" and expected[n])
    before = egraph.snapshot()
    assert engine.probe_all()[single] == engine.probe(single) == expected[single] > 0
    assert egraph.snapshot() == before and egraph.depth == 0
    egraph.push()
    try:
        assert engine.probe_in_push(multi) == expected[multi] > 0  # its registered twin, run in this push
        assert engine.probe_in_push(single) == expected[single]  # counted in a push of the probe's own
        assert egraph.depth == 1
        with pytest.raises(EgglogError):
            egraph.run_program(f"(run probe_{single} 1)")  # the twin the probe defined is gone with its pop
    finally:
        egraph.pop()
    with pytest.raises(EGraphError):
        engine.probe_in_push(multi)  # outside a push the probe would leave its traces


def test_cached_size_follows_every_command():
    """``EGraph.size`` is cached until the next command: after rule runs, pushes and pops it equals the rows egglog
    itself counts (the oracle: a snapshot's e-nodes, read from egglog's tables)."""
    egraph = EGraph.from_graph(build("squeezenet", small=True))
    engine = ReachEngine(egraph, rule_set("default"))
    live = [n for n, c in engine.probe_all().items() if c]
    sizes = [egraph.size().enodes]
    for name in live[:8]:
        egraph.push()
        engine.apply(name)
        assert egraph.size().enodes == len(egraph.snapshot().nodes)
        sizes.append(egraph.size().enodes)
        egraph.pop()
        assert egraph.size().enodes == sizes[0] == len(egraph.snapshot().nodes)
    assert max(sizes) > sizes[0]  # some rule grew it inside its push
