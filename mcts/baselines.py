"""Baseline schedulers behind the same interface as MCTS.

* ``tensat``: every single-pattern rule each iteration, the multi-pattern rules only in the first
  ``k_multi`` iterations (TENSAT's schedule, SPEC section 9), until nothing changes, the node limit is
  reached, or the iteration/time limit.
* ``random``: uniformly random rules (seeded) until the node limit, saturation, or the time limit.

Every step goes through ``Env.apply``: the node limit is checked on the e-graph it gives, rolled back
when passed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from .config import SearchConfig
from .env import Env
from .report import SearchReport, Step, StopReason


def iteration(env: Env, names: list[str], report: SearchReport, over: Callable[[], bool]) -> tuple[bool, bool, bool]:
    """Apply each of ``names`` once, in order (TENSAT's iteration), appending the steps that changed the e-graph to
    ``report`` unpriced. Returns (something changed, the node limit refused something, ``over()`` cut it short)."""
    changed = refused = False
    for name in names:
        step = env.apply(name)
        refused |= step.refused
        if step.changed:
            changed = True
            report.steps.append(Step(name, 0.0, None, step.enodes, step.seconds))  # priced after the iteration
        if over():
            return changed, refused, True
    return changed, refused, False


def price_iteration(env: Env, report: SearchReport, cost: float, key: tuple, label: str) -> float:
    """Price the e-graph after an iteration; its last step gets the cost and the decrease. Returns the cost."""
    new_cost = env.cost(key)
    if report.steps:
        report.steps[-1].reward_us = max(cost - new_cost, 0.0)
        report.steps[-1].cost_us = new_cost
    report.best_cost_us = min(report.best_cost_us, new_cost)
    env.remember(label, new_cost)
    return new_cost


def tensat(env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None) -> SearchReport:
    say = progress or (lambda _m: None)
    start = time.perf_counter()
    cost = env.cost(("tensat", 0))
    env.remember("start", cost)
    report = SearchReport(StopReason.STEP_LIMIT, initial_cost_us=cost, best_cost_us=cost)
    rules = env.engine.rules
    singles = [a for a in env.actions if rules[a].kind == "single"]
    multis = [a for a in env.actions if rules[a].kind == "multi"]
    for it in range(config.max_iterations):
        t = time.perf_counter()
        changed, refused, timed_out = iteration(env, singles + (multis if it < config.k_multi else []), report,
                                                lambda: time.perf_counter() - start > config.time_limit)
        cost = price_iteration(env, report, cost, ("tensat", it + 1), f"iteration {it + 1}")
        say(f"iteration {it + 1}: {env.size()} e-nodes, estimated {cost:.1f} us ({time.perf_counter() - t:.2f}s)")
        if timed_out:
            report.stop_reason = StopReason.TIME_LIMIT
            break
        if env.full():
            report.stop_reason = StopReason.NODE_LIMIT
            break
        if not changed:  # of the rules this iteration's schedule runs
            report.stop_reason = StopReason.NODE_LIMIT if refused else StopReason.SATURATED
            break
    report.seconds = time.perf_counter() - start
    return report


def random_order(env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None) -> SearchReport:
    """Uniformly random live rules; a rule that changes nothing (or that the node limit refuses) leaves the
    live set until the next change. Stops when none is left: saturated, or the node limit if it refused one."""
    say = progress or (lambda _m: None)
    rng = random.Random(config.seed)
    start = time.perf_counter()
    cost = env.cost(("random", 0))
    env.remember("start", cost)
    report = SearchReport(StopReason.STEP_LIMIT, initial_cost_us=cost, best_cost_us=cost)
    path: tuple[str, ...] = ()
    live = env.live_actions(path)
    refused = False
    while len(report.steps) < config.max_iterations:
        if not live:
            report.stop_reason = StopReason.NODE_LIMIT if refused else StopReason.SATURATED
            break
        name = rng.choice(live)
        step = env.apply(name, path)
        if not step.changed:
            refused |= step.refused
            live.remove(name)
            continue
        path += (name,)
        refused = False
        new_cost = env.cost(("random", len(report.steps) + 1))
        report.steps.append(Step(name, max(cost - new_cost, 0.0), new_cost, step.enodes, step.seconds))
        cost = new_cost
        report.best_cost_us = min(report.best_cost_us, cost)
        env.remember(f"step {len(report.steps)}", cost)
        say(f"step {len(report.steps)}: {name} -> {step.enodes} e-nodes, estimated {cost:.1f} us")
        if env.full():
            report.stop_reason = StopReason.NODE_LIMIT
            break
        if time.perf_counter() - start > config.time_limit:
            report.stop_reason = StopReason.TIME_LIMIT
            break
        live = env.live_actions(path)
    report.seconds = time.perf_counter() - start
    return report
