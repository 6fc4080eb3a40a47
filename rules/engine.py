"""Applying one named rule to an e-graph: one iteration, a match probe, and a node limit checked on the real
e-graph (a push, popped when the result passes the limit).

>>> from eqsat import ir
>>> from eqsat.egglog.egraph import EGraph
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

import random
import time
from collections.abc import Iterable
from dataclasses import dataclass

from eqsat.egglog import schema
from eqsat.egglog.egraph import EGraph
from eqsat.errors import EGraphError, InputError

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
    refused: bool = False
    """the node limit refused it: the rule matched and its result passed (or could pass) the limit"""


def named_constructors(rules: Iterable[Rule]) -> set[str]:
    """The tensor constructors the rules' queries and actions name (a superset of those they can create)."""
    return set().union(*(schema.constructors(f"{q} {a}") for r in rules for q, a in r.bodies))


class RuleEngine:
    """The rules of one e-graph: every rule it answers for (:attr:`rules`), and those of them registered in egglog
    (:attr:`registered`, by default all), each in its own ruleset with a match-counting twin. A rule that is not
    registered is *idle* (:meth:`idle`): probing or applying it reports no match at no cost (for a rule that can
    never fire, see :class:`~eqsat.rules.reach.ReachEngine`).

    Before registering them it ensures the analysis rules of every constructor they name, in one batch
    (:meth:`~eqsat.egglog.egraph.EGraph.ensure_analysis`; registering a rule would ensure its own anyway): a
    right-hand side a rule creates always gets its shape, and so can commit.

    egglog copies every registered rule and ruleset on each push, so a rule's twin is registered for good only
    where a simulation runs it inside its own push (the multi-pattern rules, whose matches guard the node
    limit before they run); a single-pattern rule's twin is defined inside the push of the probe that runs it,
    and the pop drops it (``_twins``). A twin defined afresh counts every match, as a registered twin run
    inside a push does: the counts are the same, and a push and pop of NASNet-A's e-graph costs about half
    of what it did with every twin registered."""

    def __init__(self, egraph: EGraph, rules: Iterable[Rule], registered: Iterable[str] | None = None):
        """``rules``: every rule the engine answers for, in order; ``registered``: the names of those to register
        in egglog (None: all of them)."""
        rules = list(rules)
        live = {r.name for r in rules} if registered is None else set(registered)
        egraph.ensure_analysis(named_constructors([r for r in rules if r.name in live]))
        self.egraph = egraph
        self.rules: dict[str, Rule] = {}
        """every rule of the engine, registered or idle, in the order given"""
        self.registered: dict[str, Rule] = {}
        """the rules registered in egglog (the others are idle)"""
        self._run: dict[str, list] = {}
        self._probe: dict[str, list] = {}
        """rule -> the command that runs its twin's ruleset"""
        self._twins: dict[str, list] = {}
        """single-pattern rule -> the commands that define its twin (run inside a push, before ``_probe``)"""
        self._probe_all: list = []
        self._probe_all_for = -1
        for rule in rules:
            if rule.name in live:
                self.add(rule)
            elif rule.name in self.rules:
                raise InputError(f"rule {rule.name!r} given twice")
            else:
                self.rules[rule.name] = rule
        self._build_probe_all()

    def _build_probe_all(self) -> None:
        """The commands of one probe of every rule, run inside a push: the single-pattern twins defined in one
        ruleset, combined with the registered twins of the multi-pattern rules (the two rulesets' names have a
        hyphen, which no rule name has, so they never clash with a rule's ``probe_<rule>``)."""
        eg, rules = self.egraph, self.registered
        singles = [r for r in rules.values() if r.kind != "multi"]
        commands = eg.parse("(ruleset probe-singles)")
        for rule in singles:
            for form in rule.probe_forms("probe-singles"):
                commands += eg.parse(form)
        multis = " ".join(f"probe_{r.name}" for r in rules.values() if r.kind == "multi")
        commands += eg.parse(f"(unstable-combined-ruleset probe-all probe-singles {multis})")
        self._probe_all = commands + eg.parse("(run probe-all 1)")
        self._probe_all_for = len(self.registered)

    def add(self, rule: Rule) -> None:
        """Register a rule (outside any push: a pop would drop it)."""
        if self.egraph.depth:
            raise InputError("rules must be registered on an e-graph that is not inside a push")
        if rule.name in self.rules:
            raise InputError(f"rule {rule.name!r} registered twice")
        eg = self.egraph
        eg.ensure_analysis(named_constructors([rule]))
        twin = [f"(ruleset probe_{rule.name})", *rule.probe_forms()]
        for form in (f"(ruleset {rule.name})", *rule.egglog_forms(), *(twin if rule.kind == "multi" else ())):
            eg.run_program(form)
        if rule.kind != "multi":
            self._twins[rule.name] = [c for form in twin for c in eg.parse(form)]
        self.rules[rule.name] = rule
        self.registered[rule.name] = rule
        self._run[rule.name] = eg.parse(f"(run {rule.name} 1)")
        self._probe[rule.name] = eg.parse(f"(run probe_{rule.name} 1)")

    def _get(self, name: str) -> Rule:
        try:
            return self.rules[name]
        except KeyError:
            raise InputError(f"unknown rule {name!r}; 'eqsat rules list' shows the names") from None

    def idle(self, name: str) -> bool:
        """True if ``name`` is a rule here that is not registered in egglog (it never matches)."""
        return name not in self.registered and name in self.rules

    def probe(self, name: str) -> int:
        """How many matches the rule has now (all of them, not only new ones); changes nothing.

        A cheap pre-filter only: egglog counts a query's matches projected on the variables its actions use,
        and the probe has no action, so its count can be below the matches the rule's run finds
        (``taso_s106`` on NASNet-A: 20 against 60); it never decides on its own that a rule fits the limit."""
        self._get(name)
        if self.idle(name):
            return 0
        eg = self.egraph
        eg.push()
        try:
            out = eg.run_commands(self._twins.get(name, []) + self._probe[name])
        finally:
            eg.pop()
        return sum(out[-1].report.num_matches_per_rule.values())

    def probe_in_push(self, name: str) -> int:
        """:meth:`probe`'s count without the engine's own push (which costs as much as the probe), for a caller
        inside a push of its own (an MCTS simulation), whose pop discards whatever the probe touched: a probe
        rule has no actions, so it adds nothing to the state the caller goes on from. A single-pattern rule's
        twin is defined only inside :meth:`probe`'s push, which counts it."""
        rule = self._get(name)
        if not self.egraph.depth:
            raise EGraphError("probe_in_push outside any push: the probe would leave its traces behind")
        if self.idle(name):
            return 0
        if rule.kind != "multi":
            return self.probe(name)
        out = self.egraph.run_commands(self._probe[name])
        return sum(out[0].report.num_matches_per_rule.values())

    def apply(self, name: str, node_limit: int | None = None, matches: int | None = None,
              rollback: bool = True) -> StepReport:
        """Apply the rule for one iteration, unless the e-graph it gives passes ``node_limit``.

        With a limit, the size is checked on the real e-graph after the run, whatever the probe said: the
        rule runs inside an egglog push, which is popped (rolled back) when the result passes the limit; a
        result that fits is kept (popped and run again: egglog is deterministic, and a push cannot be kept
        without its pop). ``rollback=False`` is for a caller that is inside a push of its own and abandons an
        over-limit state by popping it (MCTS simulations): the rule then runs directly, and a report with
        ``refused`` leaves the e-graph past the limit.

        The probe stays a cheap pre-filter: no match means nothing to do, and a multi-pattern rule whose
        match count times its growth passes ``TRIAL_FACTOR`` times the limit is refused untried, so that a
        blow-up never reaches memory. ``matches``, when the caller knows the rule's current match count,
        saves the probe."""
        rule = self._get(name)
        eg = self.egraph
        if self.idle(name):
            return StepReport(name, False, 0, eg.size().enodes, 0.0)
        t = time.perf_counter()
        if node_limit is None:
            return self._run_once(name, t)
        before = eg.size().enodes
        if matches is None and rule.kind == "multi":
            matches = self.probe(name)
        if matches == 0:
            return StepReport(name, False, 0, before, time.perf_counter() - t)
        if matches is not None and before + matches * rule.growth > self.TRIAL_FACTOR * node_limit:
            bound = before + matches * rule.growth
            return StepReport(name, False, matches, before, time.perf_counter() - t, refused=True,
                              skipped=f"node limit: up to {bound} e-nodes, too many to try (limit {node_limit})")
        if not rollback:
            step = self._run_once(name, t)
            return self._over(step, node_limit, matches) if step.changed and step.enodes > node_limit else step
        eg.push()
        try:
            trial = self._run_once(name, t)
        finally:
            eg.pop()
        if not trial.changed or trial.enodes > node_limit:
            out = self._over(trial, node_limit, matches) if trial.changed else trial
            out.enodes = before  # rolled back
            return out
        step = self._run_once(name, t)
        if step.enodes != trial.enodes:
            raise EGraphError(f"rule {name!r} gave {step.enodes} e-nodes, {trial.enodes} in its trial run: egglog was "
                              "expected to be deterministic; please report this with the model and seed")
        return step

    def _run_once(self, name: str, start: float) -> StepReport:
        eg = self.egraph
        out = eg.run_commands(self._run[name])
        matches = sum(out[0].report.num_matches_per_rule.values())
        changed = eg.commit() if matches else False
        # measured even when nothing changed: proposals whose right-hand side never got a shape stay as e-nodes
        return StepReport(name, changed, matches, eg.size().enodes, time.perf_counter() - start)

    @staticmethod
    def _over(step: StepReport, node_limit: int, probed: int | None) -> StepReport:
        """``step`` as refused by the node limit (its e-nodes: the size it reached)."""
        return StepReport(step.rule, False, step.matches if probed is None else probed, step.enodes, step.seconds,
                          refused=True, skipped=f"node limit: {step.enodes} e-nodes after it > {node_limit}")

    TRIAL_FACTOR = 25

    def probe_all(self) -> dict[str, int]:
        """Match counts of every rule (an idle one: 0), the registered ones in one run of a combined probe ruleset."""
        eg = self.egraph
        if self._probe_all_for != len(self.registered):
            self._build_probe_all()
        eg.push()
        try:
            out = eg.run_commands(self._probe_all)
        finally:
            eg.pop()
        counts = dict.fromkeys(self.rules, 0)
        for key, n in out[-1].report.num_matches_per_rule.items():
            rule = key[len("probe_"):].rsplit("#", 1)[0]
            counts[rule] += n
        return counts

    def grow_randomly(self, names: Iterable[str], target: int, seed: int) -> None:
        """Apply rules of ``names`` picked at random (seeded) until the e-graph holds ``target`` e-nodes or none
        of them changes it; each application may overshoot the target, never past 3x it."""
        allowed = set(names)
        rng = random.Random(seed)
        live = [n for n, c in self.probe_all().items() if c and n in allowed]
        while live and self.egraph.size().enodes < target:
            name = rng.choice(live)
            if not self.apply(name, node_limit=3 * target).changed:
                live.remove(name)

    def saturated(self, name: str) -> bool:
        """True if the rule has no match at all now (an MCTS action to prune)."""
        return self.probe(name) == 0
