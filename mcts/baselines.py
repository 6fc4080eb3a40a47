"""Baseline schedulers behind the same interface as MCTS.

* ``tensat``: every single-pattern rule each iteration, the multi-pattern rules only in the first
  ``k_multi`` iterations (TENSAT's schedule, SPEC section 9), until nothing changes, the node limit is
  reached, or the iteration/time limit.
* ``random``: uniformly random rules (seeded) until the node limit, saturation, or the time limit.
"""

from __future__ import annotations

import random
import time
from typing import Callable

from .env import Env, SearchConfig, SearchReport, Step


def tensat(env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None) -> SearchReport:
    say = progress or (lambda _m: None)
    start = time.perf_counter()
    cost = env.cost(("tensat", 0))
    report = SearchReport("saturated", initial_cost=cost, best_cost=cost)
    rules = env.engine.rules
    singles = [a for a in env.actions if rules[a].kind == "single"]
    multis = [a for a in env.actions if rules[a].kind == "multi"]
    for it in range(config.max_iterations):
        t = time.perf_counter()
        changed = False
        for name in singles + (multis if it < config.k_multi else []):
            step = env.apply(name)
            if step.changed:
                changed = True
                report.steps.append(Step(name, 0.0, float("nan"), step.enodes, step.seconds))
            if time.perf_counter() - start > config.time_limit:
                report.stop_reason = "time limit"
                break
        new_cost = env.cost(("tensat", it + 1))
        if report.steps:
            report.steps[-1].reward = max(cost - new_cost, 0.0)
            report.steps[-1].cost = new_cost
        cost = new_cost
        report.best_cost = min(report.best_cost, cost)
        say(f"iteration {it + 1}: {env.size()} e-nodes, estimated {cost:.1f} us ({time.perf_counter() - t:.2f}s)")
        if report.stop_reason == "time limit":
            break
        if env.full():
            report.stop_reason = "node limit"
            break
        if not changed:
            report.stop_reason = "saturated"
            break
    else:
        report.stop_reason = "iteration limit"
    report.seconds = time.perf_counter() - start
    return report


def random_order(env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None) -> SearchReport:
    say = progress or (lambda _m: None)
    rng = random.Random(config.seed)
    start = time.perf_counter()
    cost = env.cost(("random", 0))
    report = SearchReport("saturated", initial_cost=cost, best_cost=cost)
    live = env.live_actions()
    for _ in range(config.max_iterations):
        if not live:
            report.stop_reason = "saturated"
            break
        name = rng.choice(live)
        step = env.apply(name)
        if not step.changed:
            live.remove(name)
            continue
        new_cost = env.cost(("random", len(report.steps) + 1))
        report.steps.append(Step(name, max(cost - new_cost, 0.0), new_cost, step.enodes, step.seconds))
        cost = new_cost
        report.best_cost = min(report.best_cost, cost)
        say(f"step {len(report.steps)}: {name} -> {step.enodes} e-nodes, estimated {cost:.1f} us")
        live = env.live_actions()
        if env.full():
            report.stop_reason = "node limit"
            break
        if time.perf_counter() - start > config.time_limit:
            report.stop_reason = "time limit"
            break
    else:
        report.stop_reason = "iteration limit"
    report.seconds = time.perf_counter() - start
    return report
