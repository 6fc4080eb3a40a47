"""Rule schedulers: MCTS (the paper's agent), and the TENSAT and random baselines, behind one interface
``run_scheduler(egraph, graph, config, cost_model, progress) -> report dict``."""

from __future__ import annotations

from typing import Callable

from eqsat.egraph import EGraph
from eqsat.errors import InputError
from eqsat.rules import all_rules

from .baselines import random_order, tensat
from .env import Env, SearchConfig, SearchReport, Step, StopReason
from .search import MCTS


def _mcts(env: Env, config: SearchConfig, progress) -> SearchReport:
    return MCTS(env, config, progress).run()


SCHEDULERS: dict[str, Callable] = {"mcts": _mcts, "tensat": tensat, "random": random_order}


def search_config(config) -> SearchConfig:
    """The scheduler options of an OptimizeConfig."""
    return SearchConfig(budget=config.budget, depth=config.depth, node_limit=config.node_limit, seed=config.seed,
                        time_limit=config.time_limit, main_extractor=config.main_extractor, k_multi=config.k_multi)


def run_scheduler(egraph: EGraph, graph, config, cost_model, progress=None, nasrnn_rules: bool = False) -> dict:
    """Grow ``egraph`` with the scheduler named by ``config.scheduler``; returns the report's JSON."""
    try:
        fn = SCHEDULERS[config.scheduler]
    except KeyError:
        raise InputError(f"--scheduler {config.scheduler!r}: choose one of {', '.join(SCHEDULERS)} or none") from None
    rules = list(all_rules(nasrnn=nasrnn_rules or getattr(graph, "name", "") == "nasrnn"))
    env = Env(egraph, rules, cost_model, search_config(config))
    report = fn(env, search_config(config), progress)
    out = report.to_json()
    out["search"]["extractions"] = env.extractions
    out["search"]["extraction_seconds"] = env.extract_seconds
    return out


__all__ = ["Env", "MCTS", "SCHEDULERS", "SearchConfig", "SearchReport", "Step", "StopReason", "run_scheduler",
           "search_config"]
