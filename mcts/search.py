"""Monte Carlo tree search over rule applications (the MCTS paper's agent, SPEC section 6).

A tree node is the e-graph after its path of rules from the current real e-graph. Each simulation
pushes the e-graph, replays the selected path (selection with the 50% stop rule and UCB1), expands one
untried action that changes the e-graph (the root probes every rule's matches; deeper nodes try their
actions lazily, those known to match in this search first), runs a random rollout of up to ``depth + 1``
steps (priced once, at its end), backs the discounted return up the path, and pops. ``parallel.Forest``
runs ``workers`` such trees and merges their roots before each real step; ``no_gain_steps`` decisions in a
row that spent their budget without a cost decrease in any simulation end the search (``StopReason.NO_GAIN``), as
do ``no_gain_short`` such decisions that their share of the time cut short (the finishing phase then gets a tenth of
the time limit, not the rest of it). After ``budget`` simulations the root child with the best mean value is
applied for real; if every root child tried so far changed nothing, the untried root actions are tried
too, so that the search stops as saturated only when no action changes the e-graph. The node limit is
checked on the e-graph after every step, simulated (the simulation ends there, its pop discards the
state, and the action is never chosen again from that state) or real (rolled back: ``Env.apply``).
Rewards are decreases of the main extractor's cost, never negative; costs are cached by rule path (the
e-graph is a deterministic function of it) and by the content the extractor reads (``Env.cost``), and every
random choice comes from one seeded generator, so the same seed gives the same search. Rules that can never
fire on the model are actions like the others but cost nothing to try (``eqsat.rules.reach``).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eqsat.errors import EGraphError

from .baselines import iteration, price_iteration
from .config import SearchConfig
from .env import Env
from .parallel import Forest
from .report import SearchReport, Step, StopReason
from .stats import ChildStats, RootStats

FINISH_SHARE = 0.1
"""the share of the time limit the tree search leaves to the finishing phase (``SearchConfig.finish``)"""
PRELUDE_SOURCE = "ours"
"""the prelude saturates the rules of this source (eqsat.rules.ours: fusions, cancellations, merges, spellings)"""


@dataclass(eq=False)
class TreeNode:
    action: str | None
    parent: TreeNode | None
    reward: float = 0.0
    cost: float = 0.0
    visits: int = 0
    value: float = 0.0
    saturated: bool = False
    """the action changed nothing (or the node limit refused it): never selected again"""
    refused: bool = False
    """the node limit refused the action here: it would change the e-graph past the limit"""
    terminal: bool = False
    """the e-graph reached the node limit here"""
    enodes: int = 0
    """the e-graph's size here"""
    untried: list[str] | None = None
    children: dict[str, TreeNode] = field(default_factory=dict)

    def path(self) -> list[str]:
        out: list[str] = []
        node = self
        while node.parent is not None and node.action is not None:
            out.append(node.action)
            node = node.parent
        return out[::-1]


class MCTS:
    def __init__(self, env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None,
                 tree: int = 0):
        self.env = env
        self.config = config.resolved(env.size())
        self.rng = random.Random(config.seed if tree == 0 else f"{config.seed}/{tree}")
        """tree 0 (the only one unless ``workers`` > 1) draws from ``seed``; a parallel tree i from (seed, i)"""
        self.root = TreeNode(None, None)
        self.gained = False
        """a simulation of the current plan found a cost decrease"""
        self.enodes = 0
        """the e-graph's size after the last simulated step"""
        self.say = progress or (lambda _m: None)
        self.real_path: list[str] = []
        self.simulations = 0
        self.unit = 1.0
        self.known: dict[str, None] = {}
        """actions seen to match (at a root probe) or to change the e-graph in this search, in first-seen order:
        the online prior that expansions try first and rollouts draw from (see ``_pick``)"""

    # -- one simulation ------------------------------------------------------------------------------
    def _apply(self, node_path: list[str], action: str) -> tuple[bool, float, bool, bool]:
        """Apply ``action`` on top of the current (replayed) state, inside the simulation's push:
        (changed, cost, full, refused by the node limit; the simulation then ends and pops)."""
        state = tuple(self.real_path + node_path)
        report = self.env.apply_simulated(action, state)
        self.enodes = report.enodes
        full = report.enodes >= self.config.limit
        if not report.changed or report.enodes > self.config.limit:
            return False, math.nan, full, report.changed or report.refused
        key = tuple(self.real_path + node_path + [action])
        self.known[action] = None
        return True, self.env.cost(key), full, False

    def _expand_actions(self, node: TreeNode, path: list[str]) -> None:
        """The root probes every rule's matches once (it expands many); a node below it tries its actions
        lazily (``_expand``): a probe of every rule costs as much as dozens of rule runs."""
        if node.untried is None:
            if node.terminal:
                node.untried = []
            elif node.parent is None:
                node.untried = self.env.live_actions(tuple(self.real_path + path))
                self.known.update(dict.fromkeys(node.untried))
            else:
                node.untried = list(self.env.actions)

    def _expand(self, node: TreeNode, path: list[str]) -> TreeNode | None:
        """Try untried actions of ``node`` in random order until one changes the e-graph: its new child (None if
        none did, or if the node limit refused one, which may leave the e-graph past the limit). Each action
        tried becomes a child; one that changed nothing is saturated there."""
        rng = self.rng
        while node.untried:
            known = [i for i, a in enumerate(node.untried) if a in self.known]
            action = node.untried.pop(known[rng.randrange(len(known))] if known else rng.randrange(len(node.untried)))
            changed, cost, full, refused = self._apply(path, action)
            child = TreeNode(action, node, cost=node.cost)
            node.children[action] = child
            if not changed:
                child.saturated, child.refused = True, refused
                if refused:
                    return None
                continue
            child.cost = cost
            child.reward = self._gain(node.cost, cost)
            child.terminal = full
            child.enodes = self.enodes
            return child
        return None

    def simulate(self, root: TreeNode) -> bool:
        """One simulation; False if every action from the root is saturated (nothing left to plan)."""
        env, cfg, rng = self.env, self.config, self.rng
        env.egraph.push()
        try:
            node, path = root, list[str]()
            while True:
                self._expand_actions(node, path)
                if node.terminal:
                    break
                open_children = [c for c in node.children.values() if not c.saturated]
                can_expand = bool(node.untried)
                if can_expand and (not open_children or node is root or rng.random() < cfg.stop_probability):
                    child = self._expand(node, path)
                    if child is None:  # nothing untried changed the e-graph (or the limit refused one): it ends
                        self._backup(node, 0.0)
                        return True
                    path.append(child.action or "")
                    node = child
                    break
                if not open_children:
                    if node is root:
                        return False
                    break
                node = self._ucb(node, open_children)
                action = node.action or ""
                changed, _cost, _full, refused = self._apply(path, action)
                if not changed:  # a replay that no longer fits (the e-graph is a function of the path: never)
                    node.saturated, node.refused = True, refused
                    return True
                path.append(action)
            ret = 0.0 if node.terminal else self._rollout(node, path)
            self._backup(node, ret)
            return True
        finally:
            env.egraph.pop()
            self.simulations += 1

    def _ucb(self, node: TreeNode, children: list[TreeNode]) -> TreeNode:
        c = self.config.exploration
        log_n = math.log(max(node.visits, 1))
        best, best_score = None, -math.inf
        for child in children:
            if child.visits == 0:
                return child
            score = child.value / child.visits + c * math.sqrt(2 * log_n / child.visits)
            if score > best_score:
                best, best_score = child, score
        return best  # type: ignore[return-value]

    def _rollout(self, node: TreeNode, path: list[str]) -> float:
        """Random rule applications from ``node``; the discounted cost decrease they reach (never negative).

        Actions come from ``_pick``; the node limit is checked on the e-graph after each step, and the rollout
        ends at the first step whose result passes it (that state earns nothing; the simulation's pop discards
        it). The state is priced once, at the end (the paper prices every step: an extraction per changing step,
        most of a simulation's time); its decrease counts at the discount of the last step that changed the
        e-graph. Near the limit (past ``PRICE_NEAR_LIMIT`` of it) changed states are priced as they come, so
        that a step the limit refuses does not lose what came before it."""
        env, cfg = self.env, self.config
        rollout_path = self.real_path + list(path)
        best, discount, pending, pending_discount = 0.0, 1.0, False, 1.0
        for _ in range(cfg.depth + 1):
            action = self._pick()
            report = env.apply_simulated(action, tuple(rollout_path), remember=False)
            if report.refused or report.enodes > cfg.limit:
                return best
            if report.changed:
                self.known[action] = None
                rollout_path.append(action)
                pending, pending_discount = True, discount
                if report.enodes > self.PRICE_NEAR_LIMIT * cfg.limit:
                    best = max(best, pending_discount * self._gain(node.cost, env.cost(tuple(rollout_path))))
                    pending = False
            discount *= cfg.gamma
            if report.enodes >= cfg.limit:
                break
        if pending:
            best = max(best, pending_discount * self._gain(node.cost, env.cost(tuple(rollout_path))))
        return best

    PRICE_NEAR_LIMIT = 0.75

    def _pick(self) -> str:
        """A rollout's action: with probability ``prior_explore`` (or while nothing is known) uniform over every
        rule, as in the paper; otherwise uniform over the rules known to match or change the e-graph, so that
        rollouts do not spend their steps on the many rules that match nothing in this model."""
        if not self.known or self.rng.random() < self.config.prior_explore:
            return self.rng.choice(self.env.actions)
        return self.rng.choice(list(self.known))

    def _gain(self, before: float, after: float) -> float:
        """A step's reward: the cost decrease (never negative) as a fraction of the initial cost, so that
        the UCB1 constant weighs exploration alike on every model (the paper's costs were in ms, with
        rewards of the same order as c; ours are in us)."""
        return max(before - after, 0.0) / self.unit

    def _backup(self, node: TreeNode, ret: float) -> None:
        """Q(node) accumulates the discounted return from its parent: the reward of the edge into it plus
        gamma times what followed."""
        acc = ret
        if ret > 0:
            self.gained = True
        while node is not None:
            self.gained |= node.reward > 0
            acc = node.reward + self.config.gamma * acc
            node.visits += 1
            node.value += acc
            node = node.parent  # type: ignore[assignment]

    # -- one tree's part of a real decision (parallel.py runs several trees and merges their roots) --------
    def start(self) -> float:
        """Price the initial e-graph and plant the root; returns its cost."""
        cost = self.env.cost(tuple())
        self.unit = cost if cost > 0 else 1.0
        self.root = TreeNode(None, None, cost=cost)
        return cost

    def plan(self, deadline: float, soft: float | None = None) -> RootStats:
        """Plan from the root (``_plan``) and summarise its children for the merge."""
        self.gained = False
        planned = self._plan(self.root, deadline, soft)
        root = self.root
        children = {a: ChildStats(c.visits, c.value, c.reward, c.enodes, c.saturated, c.refused)
                    for a, c in root.children.items()}
        return RootStats(planned, self.gained, root.untried is None or bool(root.untried), children)

    def advance(self, action: str, cost: float | None = None) -> None:
        """The real e-graph took ``action``: apply it here too (unless this tree's env is the real one and already
        did: ``cost`` given) and move the root to its child (``reuse_subtree``) or to a fresh node."""
        if cost is None:
            step = self.env.apply(action, tuple(self.real_path))
            if not step.changed:
                raise EGraphError(f"a search tree's replica refused {action!r}, which the real e-graph took: egglog "
                                  "was expected to be deterministic; please report this with the model and seed")
        self.real_path.append(action)
        if cost is None:
            cost = self.env.cost(tuple(self.real_path))
        child = self.root.children.get(action)
        if self.config.reuse_subtree and child is not None:
            self.root = child
            child.parent, child.action, child.reward, child.cost = None, None, 0.0, cost
        else:
            self.root = TreeNode(None, None, cost=cost)

    def refuse(self, action: str, refused: bool) -> None:
        """The real e-graph refused ``action``: never choose it from this root again."""
        child = self.root.children.get(action)
        if child is not None:
            child.saturated, child.refused = True, refused

    # -- the outer loop ----------------------------------------------------------------------------
    def run(self) -> SearchReport:
        """The search: ``workers`` trees (this one and spawned replicas, see parallel.py) plan each real decision;
        their root statistics are merged and the best merged child is applied to the real e-graph. The replicas
        start within the time limit: one not ready when a decision is taken is left out of it."""
        env, cfg = self.env, self.config
        start = time.perf_counter()
        end = start + cfg.time_limit
        deadline = start + cfg.time_limit * (1 - FINISH_SHARE) if cfg.finish else end
        cost = self.start()
        env.remember("start", cost)
        report = SearchReport(StopReason.STEP_LIMIT, initial_cost_us=cost, best_cost_us=cost)
        forest = Forest(self, cfg.workers)
        idle = idle_short = 0  # decisions in a row without a gain: that spent their budget, that were cut short
        try:
            if cfg.prelude:
                # the whole time limit if it needs it: its program is what a short time limit returns
                cost = self._prelude(report, cost, forest, end)
            while len(report.steps) < cfg.max_iterations:
                if cfg.budget <= 0:
                    report.stop_reason = StopReason.BUDGET
                    break
                if env.full():
                    report.stop_reason = StopReason.NODE_LIMIT
                    break
                t = time.perf_counter()
                merged = forest.plan(deadline, t + (deadline - t) * cfg.plan_share)
                candidates = {a: c for a, c in merged.children.items() if not c.saturated and c.visits > 0}
                if not candidates:
                    report.stop_reason = self._why_no_candidate(merged)
                    break
                # a decision its share of the time cut short (few simulations) is no evidence that nothing pays
                if merged.gained:
                    idle = idle_short = 0
                elif merged.planned >= cfg.budget * forest.answered:  # the trees that answered in time
                    idle += 1
                else:
                    idle_short += 1
                if cfg.no_gain_short and idle_short >= cfg.no_gain_short:
                    # decisions its share cut short found nothing: the finishing phase gets its own share (as
                    # after a search to the deadline), not the rest of a time limit that the tree search could not use
                    report.stop_reason = StopReason.NO_GAIN
                    end = min(end, time.perf_counter() + cfg.time_limit * FINISH_SHARE)
                    break
                if cfg.no_gain_steps and idle >= cfg.no_gain_steps:
                    report.stop_reason = StopReason.NO_GAIN
                    break
                # ties (common: many rules change nothing the extractor sees) go to the larger immediate
                # reward, then to the rule that spent fewer e-nodes of the limit
                action = max(candidates, key=lambda a: (round(candidates[a].value / candidates[a].visits, 9),
                                                        candidates[a].reward, -candidates[a].enodes,
                                                        -env.actions.index(a)))
                step = env.apply(action, tuple(self.real_path))
                if not step.changed:  # the real e-graph refused what the simulation kept: plan again without it
                    forest.refuse(action, step.refused)
                    continue
                new_cost = env.cost(tuple(self.real_path + [action]))
                forest.advance(action, new_cost)
                reward = max(cost - new_cost, 0.0)
                cost = new_cost
                report.steps.append(Step(action, reward, cost, step.enodes, time.perf_counter() - t, merged.planned))
                report.best_cost_us = min(report.best_cost_us, cost)
                env.remember(f"step {len(report.steps)}", cost)
                self.say(f"step {len(report.steps)}: {action} -> {step.enodes} e-nodes, "
                         f"estimated {cost:.1f} us ({merged.planned} simulations)")
                if time.perf_counter() > deadline:
                    report.stop_reason = StopReason.TIME_LIMIT
                    break
        finally:
            report.simulations, extractions, seconds = forest.close()
        env.extractions += extractions
        env.extract_seconds += seconds
        if cfg.finish and report.stop_reason != StopReason.BUDGET:
            self._finish(report, cost, end)
        report.seconds = time.perf_counter() - start
        return report

    def _prelude(self, report: SearchReport, cost: float, forest: Forest, end: float) -> float:
        """The first phase: TENSAT's iterations of our rules (:data:`PRELUDE_SOURCE`; the multi-pattern merges in the
        first iteration only) until none changes the e-graph, the node limit or ``end``, each change a real step of every tree, priced once at the end; the
        tree search starts from there. Deterministic: the same model and rules give the same steps. Returns the
        cost after it."""
        env = self.env
        ours = [a for a in env.actions if env.engine.rules[a].source == PRELUDE_SOURCE]
        singles = [a for a in ours if env.engine.rules[a].kind == "single"]
        rounds = 0
        while ours and not env.full() and time.perf_counter() < end:
            rounds += 1
            changed = False
            for name in ours if rounds == 1 else singles:  # the merges once (they grow fast), as TENSAT's k_multi
                t = time.perf_counter()
                step = env.apply(name, tuple(self.real_path))
                if step.changed:
                    changed = True
                    forest.advance(name, cost)  # priced after the phase, below
                    report.steps.append(Step(name, 0.0, None, step.enodes, time.perf_counter() - t))
                if time.perf_counter() >= end or env.full():
                    break
            if not changed:
                break
        report.prelude_steps = len(report.steps)
        if not report.steps:
            return cost
        cost = price_iteration(env, report, cost, tuple(self.real_path), "prelude")
        self.root.cost = cost
        self.say(f"prelude: {report.prelude_steps} steps of our rules in {rounds} iterations -> {env.size()} "
                 f"e-nodes, estimated {cost:.1f} us")
        return cost

    def _finish(self, report: SearchReport, cost: float, end: float) -> None:
        """The finishing phase: TENSAT's iterations of the single-pattern rules until none changes the e-graph, the
        node limit or ``end``, priced once. The tree search chose the multi-pattern steps, whose matches grow the
        e-graph fast; the single-pattern rules are cheap to saturate and their rewrites (fusions, layout
        cancellations) combine with any of those choices, where a search of one rule a step runs out of time.
        On NASRNN under load, 60 s: greedy-dag's estimate 1.759x without, 1.842x with it."""
        env = self.env
        singles = [a for a in env.actions if env.engine.rules[a].kind == "single"]
        before, rounds = len(report.steps), 0
        while not env.full() and time.perf_counter() < end:
            rounds += 1
            changed, _, timed_out = iteration(env, singles, report, lambda: time.perf_counter() > end)
            if not changed or timed_out:
                break
        report.finish_steps = len(report.steps) - before
        if report.finish_steps:
            price_iteration(env, report, cost, (*self.real_path, "finish"), "finish")
            self.say(f"finish: {report.finish_steps} single-pattern steps in {rounds} iterations -> {env.size()} "
                     f"e-nodes, estimated {report.steps[-1].cost_us:.1f} us")

    def _plan(self, root: TreeNode, deadline: float, soft: float | None = None) -> int:
        """Run ``budget`` simulations from ``root``, or fewer if ``soft`` (this decision's share of the time,
        default ``deadline``) passes; then, while no root child changes the e-graph and actions remain untried,
        one more each until ``deadline`` (they end at the expansion, cheaply): the search may stop as saturated
        only when no action changes the e-graph. Returns the number of simulations."""
        planned = 0
        soft = deadline if soft is None else min(soft, deadline)
        for _ in range(self.config.budget):
            if time.perf_counter() > soft:
                break
            if not self.simulate(root):
                return planned
            planned += 1
        while not self._candidates(root) and (root.untried is None or root.untried) and time.perf_counter() <= deadline:
            self.simulate(root)
            planned += 1
        return planned

    @staticmethod
    def _candidates(root: TreeNode) -> list[TreeNode]:
        return [c for c in root.children.values() if not c.saturated and c.visits > 0]

    @staticmethod
    def _why_no_candidate(merged: RootStats) -> StopReason:
        if merged.open_actions:  # planning was cut short with actions untried: the deadline
            return StopReason.TIME_LIMIT
        if any(c.refused for c in merged.children.values()):
            return StopReason.NODE_LIMIT
        return StopReason.SATURATED
