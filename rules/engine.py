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
        self._probe_all: list = []
        self._probe_all_for = -1
        for rule in rules:
            self.add(rule)
        self._build_probe_all()

    def _build_probe_all(self) -> None:
        """A combined ruleset of every probe twin (declared outside any push, so it survives pops)."""
        name = f"probe_all_{len(self.rules)}"
        self.egraph.run_program(f"(unstable-combined-ruleset {name} " + " ".join(f"probe_{r}" for r in self.rules) + ")")
        self._probe_all = self.egraph.parse(f"(run {name} 1)")
        self._probe_all_for = len(self.rules)

    def add(self, rule: Rule) -> None:
        """Register a rule (outside any push: a pop would drop it)."""
        if self.egraph.depth:
            raise InputError("rules must be registered on an e-graph that is not inside a push")
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

    def apply(self, name: str, node_limit: int | None = None, matches: int | None = None) -> StepReport:
        """Apply the rule for one iteration, unless the result would pass ``node_limit``.

        The match count times the rule's growth bounds the new e-nodes; when that bound passes the limit,
        the rule is tried inside a push and kept only if the e-graph it gives fits (most matches usually
        rebuild e-nodes that exist already). A bound past ``TRIAL_FACTOR`` times the limit is refused
        untried, so memory stays bounded. ``matches``, when the caller knows the rule's current match count,
        saves the probe."""
        rule = self._get(name)
        eg = self.egraph
        t = time.perf_counter()
        before = eg.size().enodes
        if node_limit is not None:
            if matches is None:
                matches = self.probe(name)
            if matches == 0:
                return StepReport(name, False, 0, before, time.perf_counter() - t)
            bound = before + matches * rule.growth
            if bound > node_limit:
                why = self._refusal(name, bound, node_limit)
                if why is not None:
                    return StepReport(name, False, matches, before, time.perf_counter() - t, skipped=why)
        out = eg.run_commands(self._run[name])
        matches = sum(out[0].report.num_matches_per_rule.values())
        changed = eg.commit() if matches else False
        return StepReport(name, changed, matches, eg.size().enodes, time.perf_counter() - t)

    TRIAL_FACTOR = 25

    def _refusal(self, name: str, bound: int, node_limit: int) -> str | None:
        """Why the rule may not be applied under ``node_limit`` (None: it fits, as a trial shows)."""
        if bound > self.TRIAL_FACTOR * node_limit:
            return f"node limit: up to {bound} e-nodes, too many to try (limit {node_limit})"
        eg = self.egraph
        eg.push()
        try:
            eg.run_commands(self._run[name])
            eg.commit()
            after = eg.size().enodes
        finally:
            eg.pop()
        return f"node limit: {after} e-nodes after it > {node_limit}" if after > node_limit else None

    def probe_all(self) -> dict[str, int]:
        """Match counts of every registered rule, in one run of a combined probe ruleset."""
        eg = self.egraph
        if self._probe_all_for != len(self.rules):
            if eg.depth:
                return {name: self.probe(name) for name in self.rules}
            self._build_probe_all()
        eg.push()
        try:
            out = eg.run_commands(self._probe_all)
        finally:
            eg.pop()
        counts = dict.fromkeys(self.rules, 0)
        for key, n in out[0].report.num_matches_per_rule.items():
            rule = key[len("probe_"):].rsplit("#", 1)[0]
            counts[rule] += n
        return counts

    def saturated(self, name: str) -> bool:
        """True if the rule has no match at all now (an MCTS action to prune)."""
        return self.probe(name) == 0
