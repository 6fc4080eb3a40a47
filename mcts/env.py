"""The search environment: an e-graph, its rules, and the main extractor's cost of the current state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from eqsat.cost import node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.extract import Extraction, extract
from eqsat.rules import StepReport, actions
from eqsat.rules.reach import ReachEngine
from eqsat.rules.rule import Rule
from eqsat.snapshot import Snapshot

DEFAULT_NODE_LIMIT = 2000
"""the least e-node limit a search gets by default"""
NODE_LIMIT_FACTOR = 4
"""by default a search may grow the e-graph to this many times its initial e-nodes"""


def option(default: Any, doc: str, flag: str | None = None, *, least: int | None = None, seconds: bool = False,
           share: bool = False, choices: str | None = None) -> Any:
    """A config field with its documentation and the checks the CLI and the API apply to it (see
    ``eqsat.app.config``): ``flag`` names it on the command line (None: API only), ``least`` is an
    integer's minimum, ``seconds`` asks for a finite number > 0, ``share`` for a number in (0, 1], ``choices``
    names the registry of its values."""
    return field(default=default, metadata={"doc": doc, "flag": flag, "least": least, "seconds": seconds,
                                            "share": share, "choices": choices})


@dataclass
class SearchConfig:
    """Options of the schedulers (defaults are the paper's, SPEC section 6)."""

    budget: int = option(128, "MCTS simulations per real decision", "--budget", least=1)
    depth: int = option(10, "MCTS random rollout steps after expansion (the paper's max_sim_step; rollouts take "
                            "depth + 1 steps)", "--depth", least=0)
    node_limit: int | None = option(None, f"e-node limit of the search; None: max({DEFAULT_NODE_LIMIT}, "
                                          f"{NODE_LIMIT_FACTOR} x the initial e-graph's e-nodes)", "--node-limit",
                                    least=1)
    seed: int = option(0, "seed of every random choice (search, verification inputs, timing order)", "--seed",
                       least=0)
    time_limit: float = option(600.0, "seconds of search plus extraction (the search leaves a fifth of it, at most "
                                      "--ilp-time-limit, to the final ILP)",
                               "--time-limit", seconds=True)
    main_extractor: str = option("greedy-dag", "extractor that prices the states of the search", "--main-extractor",
                                 choices="extractors")
    k_multi: int = option(1, "TENSAT: iterations in which multi-pattern rules run (a built-in model's default "
                             "comes from eqsat.models.MODELS)", "--k-multi", least=0)
    rule_set: str = option("default", "rule-set variant (nasrnn: NASRNN's multi-pattern rules; a built-in "
                                      "model's default comes from eqsat.models.MODELS)", "--rule-set",
                           choices="rule_sets")
    gamma: float = option(0.99, "MCTS discount of rewards per step")
    exploration: float = option(2.0, "UCB1 constant c in Q/n + c sqrt(2 ln N / n)")
    stop_probability: float = option(0.5, "the 50% rule: below the root, expand an untried action only with this "
                                          "probability")
    prior_explore: float = option(1.0, "MCTS rollouts draw a step uniformly from every rule with this probability, "
                                       "else from the rules seen to match or change the e-graph in this search")
    no_gain_steps: int = option(8, "MCTS stops (stop reason no_gain) when no simulation found a cost decrease in "
                                   "this many consecutive real decisions that spent their budget; 0: never",
                                "--no-gain-steps", least=0)
    workers: int = option(1, "MCTS root-parallel trees (this process and N - 1 worker processes), merged before "
                             "every real decision", "--workers", least=1)
    plan_share: float = option(0.25, "MCTS plans a real decision with at most its budget of simulations and at most "
                                     "this share of the tree search's time left, so that a short time limit still "
                                     "takes several decisions (planning that has found no step yet goes on to the "
                                     "search's own deadline)", share=True)
    max_iterations: int = option(200, "at most this many real steps (TENSAT: iterations)", least=1)
    reuse_subtree: bool = option(False, "MCTS keeps the chosen child's subtree for the next decision")
    finish: bool = option(True, "MCTS ends with TENSAT's iterations of the single-pattern rules (no multi-pattern "
                                "rule) until they saturate, in what is left of --time-limit (at least a tenth)",
                          "--no-finish")

    def resolved(self, initial_enodes: int) -> SearchConfig:
        """This config with its node limit fixed: the one given, else max(2000, 4 x ``initial_enodes``)."""
        if self.node_limit is not None:
            return self
        return replace(self, node_limit=max(DEFAULT_NODE_LIMIT, NODE_LIMIT_FACTOR * initial_enodes))

    @property
    def limit(self) -> int:
        """The node limit of a resolved config (see :meth:`resolved`)."""
        if self.node_limit is None:
            raise ValueError("the node limit is not resolved yet; call SearchConfig.resolved(initial_enodes)")
        return self.node_limit


@dataclass
class Step:
    """One real step: a rule applied to the e-graph the final extraction sees."""

    rule: str
    reward_us: float
    """the main extractor's cost decrease of this step (never negative), microseconds"""
    cost_us: float | None
    """the main extractor's cost after this step, microseconds; None where the step was not priced (TENSAT prices
    each iteration once, after its last step)"""
    enodes: int
    seconds: float
    simulations: int = 0


class StopReason(StrEnum):
    """Why a search ended; reports carry the value (a plain string)."""

    SATURATED = "saturated"
    """no action changes the e-graph any more"""
    NODE_LIMIT = "node_limit"
    """the e-graph reached the node limit, or the limit refused every rule that still changes it"""
    TIME_LIMIT = "time_limit"
    STEP_LIMIT = "step_limit"
    """``max_iterations`` real steps (TENSAT: iterations) were taken"""
    BUDGET = "budget"
    """MCTS had no simulation budget (budget 0), so it could not plan a step"""
    NO_GAIN = "no_gain"
    """MCTS: no simulation found a cost decrease in ``no_gain_steps`` consecutive real decisions"""
    NO_SEARCH = "no_search"
    """no scheduler ran (``--scheduler none``)"""


@dataclass
class PathState:
    """A state the search stood in after a real step (MCTS: a step; TENSAT: an iteration), with the main
    extractor's program of it: a candidate for measured selection (a program with fewer rewrites than the final
    one, which the runtime may run faster than the estimate says)."""

    label: str
    """where on the path: ``step 3`` (MCTS, random) or ``iteration 2`` (TENSAT)"""
    cost_us: float
    snapshot: Snapshot
    extraction: Extraction


@dataclass
class SearchReport:
    """What a scheduler did; costs are the main extractor's estimates in microseconds."""

    stop_reason: StopReason
    steps: list[Step] = field(default_factory=list)
    initial_cost_us: float = 0.0
    best_cost_us: float = 0.0
    seconds: float = 0.0
    simulations: int = 0
    extractions: int = 0
    """main-extractor runs that priced states"""
    extraction_seconds: float = 0.0
    finish_steps: int = 0
    """of ``steps``, those of MCTS's finishing phase (the last ones)"""
    states: list[PathState] = field(default_factory=list, repr=False)
    """the cheapest states along the path before the final one, cheapest first (kept only when asked:
    ``run_scheduler(keep_states=)``); not part of the JSON report"""

    @property
    def simulations_per_second(self) -> float:
        """MCTS simulations per second of search (0 for the other schedulers)."""
        return self.simulations / self.seconds if self.seconds > 0 else 0.0

    def rules_applied(self) -> dict[str, int]:
        """How many real steps applied each rule."""
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.rule] = counts.get(s.rule, 0) + 1
        return counts


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
        """The main extractor's program of ``snap`` (a restricted snapshot of this e-graph)."""
        return extract(self.config.main_extractor, snap, node_costs(snap, self.cost_model), time_limit=10.0)

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
