"""The search environment: an e-graph, its rules, and the main extractor's cost of the current state."""

from __future__ import annotations

import time

from eqsat.cost import node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.extract import Extraction, info
from eqsat.rules import StepReport, actions
from eqsat.rules.reach import ReachEngine
from eqsat.rules.rule import Rule
from eqsat.snapshot import Snapshot

from .config import MAIN_EXTRACTOR_SECONDS, SearchConfig
from .report import PathState


class Env:
    """Applies rules to one e-graph under a node limit and prices its states with the main extractor."""

    def __init__(self, egraph: EGraph, rules: list[Rule], cost_model, config: SearchConfig, keep_states: int = 0):
        self.egraph = egraph
        self.engine = ReachEngine(egraph, rules)
        """registers only the rules that can ever fire here; the others are actions that never change anything"""
        self.actions = [r.name for r in actions(rules)]
        self.cost_model = cost_model
        self.config = config.resolved(egraph.size().enodes)
        self._cost_cache: dict[tuple, float] = {}
        self._content_cost: dict[int, float] = {}
        """hash of a reachable e-graph's nodes, roots, shapes and weight flags -> its cost (see :meth:`cost`)"""
        self._matches: dict[tuple, dict[str, int]] = {}
        """rule path -> match counts of every rule there (probe_all)"""
        self._fits: dict[tuple, bool] = {}
        """(rule path, rule) -> whether the state the rule gives there fits the node limit"""
        self.extractions = 0
        self.extract_seconds = 0.0
        self.keep_states = keep_states
        """how many of the cheapest real states :meth:`remember` keeps (0: none)"""
        self._states: list[PathState] = []
        self._initial_cost: float | None = None
        self._last_cost: float | None = None

    def size(self) -> int:
        return self.egraph.size().enodes

    def apply(self, rule: str, key: tuple | None = None) -> StepReport:
        """A real step: apply ``rule`` to the e-graph the final extraction sees. The node limit is checked on
        the e-graph the rule gives, which is rolled back when it passes the limit (``report.refused``).
        ``key`` (the rule path of the current state) lets a known match count spare the probe."""
        known = self._matches.get(key) if key is not None else None
        matches = known.get(rule) if known is not None else None
        return self.engine.apply(rule, node_limit=self.config.limit, matches=matches)

    def apply_simulated(self, rule: str, key: tuple, remember: bool = True) -> StepReport:
        """Apply ``rule`` inside an MCTS simulation's push, which the caller pops when the result passes the
        node limit (``report.refused``, or ``report.enodes`` past the limit); no push of its own.

        ``key`` is the rule path of the current state: the limit's verdict on (state, rule) is remembered, so
        replaying a path neither probes nor tries a refused rule again (the e-graph is a function of the
        path), and known match counts spare the probe. Rollouts, whose states are never replayed, pass
        ``remember=False``."""
        if self.engine.idle(rule):
            return StepReport(rule, False, 0, self.size(), 0.0)
        verdict = self._fits.get((key, rule))
        if verdict is False:
            return StepReport(rule, False, 0, self.size(), 0.0, skipped="node limit (known)", refused=True)
        if verdict:
            return self.engine.apply(rule)
        known = self._matches.get(key)
        matches = known.get(rule) if known is not None else None
        if matches is None and self.engine.rules[rule].kind == "multi":
            matches = self._probe_here(rule)
        report = self.engine.apply(rule, node_limit=self.config.limit, matches=matches, rollback=False)
        if remember and (report.changed or report.refused):
            self._fits[(key, rule)] = not report.refused
        return report

    def _probe_here(self, rule: str) -> int:
        """The rule's match count, probed without the engine's own push (which costs as much as the probe): only
        inside a simulation's push, whose pop discards whatever the run touched; a probe rule has no actions,
        so it adds nothing to the state the simulation goes on from."""
        return self.engine.probe_in_push(rule)

    def full(self) -> bool:
        return self.size() >= self.config.limit

    def live_actions(self, key: tuple | None = None) -> list[str]:
        """Actions with at least one match now (the others are pruned as saturated)."""
        counts = self.engine.probe_all()
        if key is not None:
            self._matches[key] = counts
        return [a for a in self.actions if counts.get(a, 0) > 0]

    def cost(self, key: tuple | None = None) -> float:
        """The main extractor's estimate for the current e-graph, cached by the rule path that made it and by the
        content of the part the outputs reach, which is all the extractor reads (different paths often lead to
        the same one: on SqueezeNet a third of the new paths). The content is keyed by its 64-bit hash: two
        different e-graphs of one search share a key with odds of about n^2 / 2^65 for n priced states."""
        if key is not None and key in self._cost_cache:
            return self._cost_cache[key]
        t = time.perf_counter()
        snap = self.egraph.snapshot().restrict()
        content = hash((tuple(snap.nodes), tuple(snap.roots), tuple(snap.shapes), tuple(snap.all_weights)))
        value = self._content_cost.get(content)
        if value is None:
            result = self._extract(snap)
            value = result.estimate if result.estimate is not None else result.dag_cost
            self._content_cost[content] = value
            self.extractions += 1
        self.extract_seconds += time.perf_counter() - t
        if key is not None:
            self._cost_cache[key] = value
        return value

    def _extract(self, snap: Snapshot) -> Extraction:
        """The main extractor's program of ``snap`` (a restricted snapshot of this e-graph), within
        :data:`~eqsat.mcts.config.MAIN_EXTRACTOR_SECONDS` if it takes a time limit."""
        main = info(self.config.main_extractor)
        return main.fn(snap, node_costs(snap, self.cost_model), main.options(time_limit=MAIN_EXTRACTOR_SECONDS))

    def remember(self, label: str, cost: float) -> None:
        """The search stands in a real state priced ``cost`` (the first call: the initial state, never kept):
        keep its program if it is among the ``keep_states`` cheapest so far, cheaper than the initial one and priced
        unlike every state kept before.
        Costs one snapshot and one extraction per kept state (real steps are few)."""
        self._last_cost = cost
        if self._initial_cost is None:
            self._initial_cost = cost
            return
        if self.keep_states <= 0 or cost >= self._initial_cost or any(_same_cost(cost, s.cost_us) for s in self._states):
            return  # of states priced alike (most often one program) the first is kept
        if len(self._states) >= self.keep_states and cost >= self._states[-1].cost_us:
            return
        snap = self.egraph.snapshot().restrict()
        ext = self._extract(snap)
        self._states.append(PathState(label, cost, snap, ext))
        self._states.sort(key=lambda s: s.cost_us)  # stable: the earlier of equal-cost states first
        del self._states[self.keep_states:]

    def path_states(self) -> list[PathState]:
        """The kept states, cheapest first, without those priced as the last one remembered (the e-graph the final
        extraction reads, whose program is already a candidate)."""
        last = self._last_cost
        return [s for s in self._states if last is None or not _same_cost(s.cost_us, last)]


def _same_cost(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
