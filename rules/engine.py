"""Applying one named rule to an e-graph: one iteration, a match probe, and a node-limit guard.

>>> from eqsat import ir
>>> from eqsat.egraph import EGraph
>>> from eqsat.rules import registry
>>> x = ir.input_("x", (4, 4)); w = ir.weight("w", (4, 4)); v = ir.weight("v", (4, 4))
>>> y = ir.make("matmul", [ir.make("matmul", [x, w], (0,)), v], (0,))
>>> eg = EGraph.from_graph(ir.Graph((x,), (y,), ("y",)))
>>> engine = RuleEngine(eg, registry.taso_rules())
>>> engine.probe("taso_s000")
1
>>> engine.apply("taso_s000").changed
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from eqsat.egraph import EGraph
from eqsat.errors import InputError

from .rule import Rule


@dataclass
class StepReport:
    """What one rule application did."""

    rule: str
    changed: bool
    matches: int
    enodes: int
    seconds: float
    skipped: str | None = None
    """why the rule was not applied (e.g. the node-limit guard), None if it was"""


class RuleEngine:
    """The rules registered on one e-graph, each in its own ruleset with a match-counting twin."""

    def __init__(self, egraph: EGraph, rules: Iterable[Rule]):
        self.egraph = egraph
        self.rules: dict[str, Rule] = {}
        self._run: dict[str, list] = {}
        self._probe: dict[str, list] = {}
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> None:
        if rule.name in self.rules:
            raise InputError(f"rule {rule.name!r} registered twice")
        eg = self.egraph
        for form in (f"(ruleset {rule.name})", f"(ruleset probe_{rule.name})", *rule.egglog_forms(), *rule.probe_forms()):
            eg.run_program(form)
        self.rules[rule.name] = rule
        self._run[rule.name] = eg.parse(f"(run {rule.name} 1)")
        self._probe[rule.name] = eg.parse(f"(run probe_{rule.name} 1)")

    def _get(self, name: str) -> Rule:
        try:
            return self.rules[name]
        except KeyError:
            raise InputError(f"unknown rule {name!r}; 'eqsat rules list' shows the names") from None

    def probe(self, name: str) -> int:
        """How many matches the rule has now (all of them, not only new ones); changes nothing."""
        self._get(name)
        eg = self.egraph
        eg.push()
        try:
            out = eg.run_commands(self._probe[name])
        finally:
            eg.pop()
        return sum(out[0].report.num_matches_per_rule.values())

    def apply(self, name: str, node_limit: int | None = None) -> StepReport:
        """Apply the rule for one iteration; refuse if it is predicted to pass ``node_limit``."""
        rule = self._get(name)
        eg = self.egraph
        t = time.perf_counter()
        before = eg.size().enodes
        if node_limit is not None:
            matches = self.probe(name)
            if matches and before + matches * rule.growth > node_limit:
                return StepReport(name, False, matches, before, time.perf_counter() - t,
                                  skipped=f"node limit: {before} + {matches} matches x {rule.growth} > {node_limit}")
        out = eg.run_commands(self._run[name])
        matches = sum(out[0].report.num_matches_per_rule.values())
        changed = eg.commit() if matches else False
        return StepReport(name, changed, matches, eg.size().enodes, time.perf_counter() - t)

    def saturated(self, name: str) -> bool:
        """True if the rule has no match at all now (an MCTS action to prune)."""
        return self.probe(name) == 0
