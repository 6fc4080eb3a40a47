"""Monte Carlo tree search over rule applications (the MCTS paper's agent, SPEC section 6).

A tree node is the e-graph after its path of rules from the current real e-graph. Each simulation
pushes the e-graph, replays the selected path (selection with the 50% stop rule and UCB1), expands one
untried unpruned action, runs a random rollout of up to ``depth + 1`` steps, backs the discounted
return up the path, and pops. After ``budget`` simulations the root child with the best mean value is
applied for real; if every root child tried so far changed nothing, the untried root actions are tried
too, so that the search stops as saturated only when no action changes the e-graph. The node limit is
checked on the e-graph after every step, simulated (the simulation ends there, its pop discards the
state, and the action is never chosen again from that state) or real (rolled back: ``Env.apply``).
Rewards are decreases of the main extractor's cost, never negative; costs are cached by rule path (the
e-graph is a deterministic function of it), and every random choice comes from one seeded generator, so
the same seed gives the same search.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .env import Env, SearchConfig, SearchReport, Step, StopReason


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
        out, node = [], self
        while node.parent is not None:
            out.append(node.action)  # type: ignore[arg-type]
            node = node.parent
        return out[::-1]


class MCTS:
    def __init__(self, env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None):
        self.env = env
        self.config = config.resolved(env.size())
        self.rng = random.Random(config.seed)
        self.say = progress or (lambda _m: None)
        self.real_path: list[str] = []
        self.simulations = 0
        self.unit = 1.0

    # -- one simulation ------------------------------------------------------------------------------
    def _apply(self, node_path: list[str], action: str) -> tuple[bool, float, bool, bool]:
        """Apply ``action`` on top of the current (replayed) state, inside the simulation's push:
        (changed, cost, full, refused by the node limit; the simulation then ends and pops)."""
        state = tuple(self.real_path + node_path)
        report = self.env.apply_simulated(action, state)
        if not report.changed or report.enodes > self.config.limit:
            return False, math.nan, self.env.full(), report.changed or report.refused
        key = tuple(self.real_path + node_path + [action])
        return True, self.env.cost(key), self.env.full(), False

    def _expand_actions(self, node: TreeNode, path: list[str]) -> None:
        if node.untried is None:
            node.untried = [] if node.terminal else self.env.live_actions(tuple(self.real_path + path))

    def simulate(self, root: TreeNode) -> bool:
        """One simulation; False if every action from the root is saturated (nothing left to plan)."""
        env, cfg, rng = self.env, self.config, self.rng
        env.egraph.push()
        try:
            node, path = root, []
            while True:
                self._expand_actions(node, path)
                if node.terminal:
                    break
                open_children = [c for c in node.children.values() if not c.saturated]
                can_expand = bool(node.untried)
                if can_expand and (not open_children or node is root or rng.random() < cfg.stop_probability):
                    action = node.untried.pop(rng.randrange(len(node.untried)))  # type: ignore[union-attr]
                    changed, cost, full, refused = self._apply(path, action)
                    child = TreeNode(action, node)
                    node.children[action] = child
                    if not changed:
                        child.saturated, child.refused = True, refused
                        child.cost = node.cost
                        self._backup(child, 0.0)
                        return True
                    child.cost = cost
                    child.reward = self._gain(node.cost, cost)
                    child.terminal = full
                    child.enodes = env.size()
                    path.append(action)
                    node = child
                    break
                if not open_children:
                    if node is root:
                        return False
                    break
                node = self._ucb(node, open_children)
                changed, _cost, _full, refused = self._apply(path, node.action)  # type: ignore[arg-type]
                if not changed:  # a replay that no longer fits (the e-graph is a function of the path: never)
                    node.saturated, node.refused = True, refused
                    return True
                path.append(node.action)  # type: ignore[arg-type]
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
        """Random rule applications from ``node``; the discounted sum of their (non-negative) cost decreases.

        Actions are drawn uniformly from all rules, as in the paper; the node limit is checked on the e-graph
        after each step, and the rollout ends at the first step whose result passes it (that state earns
        nothing; the simulation's pop discards it)."""
        env, cfg = self.env, self.config
        last, ret, discount = node.cost, 0.0, 1.0
        rollout_path = self.real_path + list(path)
        for _ in range(cfg.depth + 1):
            action = self.rng.choice(env.actions)
            report = env.apply_simulated(action, tuple(rollout_path), remember=False)
            if report.refused or report.enodes > cfg.limit:
                break
            if report.changed:
                rollout_path.append(action)
                cost = env.cost(tuple(rollout_path))
                ret += discount * self._gain(last, cost)
                last = cost
            discount *= cfg.gamma
            if env.full():
                break
        return ret

    def _gain(self, before: float, after: float) -> float:
        """A step's reward: the cost decrease (never negative) as a fraction of the initial cost, so that
        the UCB1 constant weighs exploration alike on every model (the paper's costs were in ms, with
        rewards of the same order as c; ours are in us)."""
        return max(before - after, 0.0) / self.unit

    def _backup(self, node: TreeNode, ret: float) -> None:
        """Q(node) accumulates the discounted return from its parent: the reward of the edge into it plus
        gamma times what followed."""
        acc = ret
        while node is not None:
            acc = node.reward + self.config.gamma * acc
            node.visits += 1
            node.value += acc
            node = node.parent  # type: ignore[assignment]

    # -- the outer loop ----------------------------------------------------------------------------
    def run(self) -> SearchReport:
        env, cfg = self.env, self.config
        start = time.perf_counter()
        deadline = start + cfg.time_limit
        cost = env.cost(tuple())
        self.unit = cost if cost > 0 else 1.0
        report = SearchReport(StopReason.STEP_LIMIT, initial_cost_us=cost, best_cost_us=cost)
        root = TreeNode(None, None, cost=cost)
        while len(report.steps) < cfg.max_iterations:
            if cfg.budget <= 0:
                report.stop_reason = StopReason.BUDGET
                break
            if env.full():
                report.stop_reason = StopReason.NODE_LIMIT
                break
            t = time.perf_counter()
            planned = self._plan(root, deadline)
            candidates = self._candidates(root)
            if not candidates:
                report.stop_reason = self._why_no_candidate(root)
                break
            # ties (common: many rules change nothing the extractor sees) go to the larger immediate
            # reward, then to the rule that spent fewer e-nodes of the limit
            best = max(candidates, key=lambda c: (round(c.value / c.visits, 9), c.reward, -c.enodes,
                                                  -self.env.actions.index(c.action)))
            step = env.apply(best.action, tuple(self.real_path))  # type: ignore[arg-type]
            if not step.changed:  # the real e-graph refused what the simulation kept: plan again without it
                best.saturated, best.refused = True, step.refused
                continue
            self.real_path.append(best.action)  # type: ignore[arg-type]
            new_cost = env.cost(tuple(self.real_path))
            reward = max(cost - new_cost, 0.0)
            cost = new_cost
            report.steps.append(Step(best.action, reward, cost, step.enodes, time.perf_counter() - t, planned))  # type: ignore[arg-type]
            report.best_cost_us = min(report.best_cost_us, cost)
            self.say(f"step {len(report.steps)}: {best.action} -> {step.enodes} e-nodes, "
                     f"estimated {cost:.1f} us ({planned} simulations)")
            if cfg.reuse_subtree:
                root = best
                root.parent, root.action, root.reward = None, None, 0.0
            else:
                root = TreeNode(None, None, cost=cost)
            if time.perf_counter() > deadline:
                report.stop_reason = StopReason.TIME_LIMIT
                break
        report.seconds = time.perf_counter() - start
        report.simulations = self.simulations
        return report

    def _plan(self, root: TreeNode, deadline: float) -> int:
        """Run ``budget`` simulations from ``root``; then, while no root child changes the e-graph and
        actions remain untried, one more each (they end at the expansion, cheaply): the search may stop
        as saturated only when no action changes the e-graph. Returns the number of simulations."""
        planned = 0
        for _ in range(self.config.budget):
            if time.perf_counter() > deadline or not self.simulate(root):
                return planned
            planned += 1
        while not self._candidates(root) and root.untried and time.perf_counter() <= deadline:
            self.simulate(root)
            planned += 1
        return planned

    @staticmethod
    def _candidates(root: TreeNode) -> list[TreeNode]:
        return [c for c in root.children.values() if not c.saturated and c.visits > 0]

    @staticmethod
    def _why_no_candidate(root: TreeNode) -> StopReason:
        if root.untried is None or root.untried:  # planning was cut short with actions untried: the deadline
            return StopReason.TIME_LIMIT
        if any(c.refused for c in root.children.values()):
            return StopReason.NODE_LIMIT
        return StopReason.SATURATED
