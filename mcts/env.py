"""The search environment: an e-graph, its rules, and the main extractor's cost of the current state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from eqsat.cost import node_costs
from eqsat.egraph import EGraph
from eqsat.extract import extract
from eqsat.rules import RuleEngine, StepReport, actions
from eqsat.rules.rule import Rule


@dataclass
class SearchConfig:
    """Options shared by the schedulers (defaults are the paper's, SPEC section 6)."""

    budget: int = 128
    """MCTS simulations per real decision"""
    depth: int = 10
    """random rollout steps after expansion (the paper's max_sim_step; rollouts take depth + 1 steps)"""
    node_limit: int = 2000
    gamma: float = 0.99
    exploration: float = 2.0
    """UCB1 constant c in Q/n + c sqrt(2 ln N / n)"""
    stop_probability: float = 0.5
    """the 50% rule: below the root, expand an untried action only with this probability"""
    seed: int = 0
    time_limit: float = 600.0
    main_extractor: str = "greedy-dag"
    k_multi: int = 1
    max_iterations: int = 200
    reuse_subtree: bool = False


@dataclass
class Step:
    """One real step: a rule applied to the e-graph the final extraction sees."""

    rule: str
    reward: float
    cost: float
    enodes: int
    seconds: float
    simulations: int = 0


@dataclass
class SearchReport:
    stop_reason: str
    steps: list[Step] = field(default_factory=list)
    initial_cost: float = 0.0
    best_cost: float = 0.0
    seconds: float = 0.0
    simulations: int = 0

    def rules_applied(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.rule] = counts.get(s.rule, 0) + 1
        return counts

    def to_json(self) -> dict:
        return {"stop_reason": self.stop_reason, "rules_applied": self.rules_applied(),
                "steps": [s.__dict__ for s in self.steps], "search": {
                    "initial_cost": self.initial_cost, "best_cost": self.best_cost, "seconds": self.seconds,
                    "simulations": self.simulations}}


class Env:
    """Applies rules to one e-graph under a node limit and prices its states with the main extractor."""

    def __init__(self, egraph: EGraph, rules: list[Rule], cost_model, config: SearchConfig):
        self.egraph = egraph
        self.engine = RuleEngine(egraph, rules)
        self.actions = [r.name for r in actions(rules)]
        self.cost_model = cost_model
        self.config = config
        self._cost_cache: dict[tuple, float] = {}
        self._matches: dict[tuple, dict[str, int]] = {}
        self._fits: dict[tuple, bool] = {}
        self.extractions = 0
        self.extract_seconds = 0.0

    def size(self) -> int:
        return self.egraph.size().enodes

    def apply(self, rule: str, key: tuple | None = None) -> StepReport:
        """Apply ``rule`` under the node-limit guard; ``key`` (the rule path of the current state) lets
        match counts and the guard's verdict be remembered, so replaying a path neither probes nor tries
        the rule again."""
        known = self._matches.get(key) if key is not None else None
        matches = known.get(rule) if known is not None else None
        if matches is None and key is not None:
            matches = self.engine.probe(rule)
            self._matches.setdefault(key, {})[rule] = matches
        verdict = self._fits.get((key, rule)) if key is not None else None
        if verdict is False:
            return StepReport(rule, False, matches or 0, self.size(), 0.0, skipped="node limit (known)")
        limit = None if verdict else self.config.node_limit
        report = self.engine.apply(rule, node_limit=limit, matches=matches)
        if key is not None and (report.changed or report.skipped):
            self._fits[(key, rule)] = report.skipped is None
        return report

    def apply_in_rollout(self, rule: str, key: tuple) -> StepReport:
        """Apply ``rule`` inside a simulation's push, where an over-limit state is simply abandoned.

        Single-pattern rules (at most one match per e-node, so bounded growth) run without a probe or a
        trial; the caller ends the rollout when the result passes the limit. Multi-pattern rules, which can
        grow quadratically, keep the full guard."""
        if self.engine.rules[rule].kind == "multi":
            return self.apply(rule, key)
        return self.engine.apply(rule)

    def full(self) -> bool:
        return self.size() >= self.config.node_limit

    def live_actions(self, key: tuple | None = None) -> list[str]:
        """Actions with at least one match now (the others are pruned as saturated)."""
        counts = self.engine.probe_all()
        if key is not None:
            self._matches[key] = counts
        return [a for a in self.actions if counts.get(a, 0) > 0]

    def cost(self, key: tuple | None = None) -> float:
        """The main extractor's estimate for the current e-graph (cached by the rule path that made it)."""
        if key is not None and key in self._cost_cache:
            return self._cost_cache[key]
        t = time.perf_counter()
        snap = self.egraph.snapshot().restrict()
        costs = node_costs(snap, self.cost_model)
        result = extract(self.config.main_extractor, snap, costs, time_limit=10.0)
        value = result.estimate if result.estimate is not None else result.dag_cost
        self.extractions += 1
        self.extract_seconds += time.perf_counter() - t
        if key is not None:
            self._cost_cache[key] = value
        return value
