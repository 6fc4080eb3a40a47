"""Rule schedulers: MCTS (the paper's agent), and the TENSAT and random baselines, behind one interface
``run_scheduler(name, egraph, config, cost_model, progress, extra_rules) -> SearchReport``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from eqsat.egglog.egraph import EGraph
from eqsat.errors import InputError
from eqsat.rules import rule_set
from eqsat.rules.rule import Rule

from .baselines import random_order, tensat
from .config import DEFAULT_NODE_LIMIT, MAIN_EXTRACTOR_SECONDS, NODE_LIMIT_FACTOR, SearchConfig, option
from .env import Env
from .report import PathState, SearchReport, Step, StopReason
from .search import MCTS

Progress = Callable[[str], None]
Scheduler = Callable[[Env, SearchConfig, "Progress | None"], SearchReport]


def _mcts(env: Env, config: SearchConfig, progress: Progress | None) -> SearchReport:
    return MCTS(env, config, progress).run()


SCHEDULERS: dict[str, Scheduler] = {"mcts": _mcts, "tensat": tensat, "random": random_order}
NO_SEARCH = "none"
"""the scheduler name that runs no search (``--scheduler none``)"""


def scheduler_names() -> list[str]:
    """Every accepted ``--scheduler`` value."""
    return [*SCHEDULERS, NO_SEARCH]


def run_scheduler(name: str, egraph: EGraph, config: SearchConfig, cost_model: object,
                  progress: Progress | None = None, extra_rules: Sequence[Rule] = (),
                  keep_states: int = 0) -> SearchReport:
    """Grow ``egraph`` with the scheduler ``name`` over the rules of ``config.rule_set`` plus ``extra_rules``
    (tests inject rules this way); ``none`` runs no search. ``keep_states``: how many of the cheapest states along
    the path (before the final one) the report keeps with their programs (``SearchReport.states``), as candidates
    for measured selection.

    >>> run_scheduler(NO_SEARCH, EGraph.__new__(EGraph), SearchConfig(), None).stop_reason.value
    'no_search'
    """
    if name == NO_SEARCH:
        return SearchReport(StopReason.NO_SEARCH)
    try:
        fn = SCHEDULERS[name]
    except KeyError:
        raise InputError(f"--scheduler {name!r}: choose one of {', '.join(scheduler_names())}") from None
    env = Env(egraph, [*rule_set(config.rule_set, config.portable), *extra_rules], cost_model, config, keep_states)
    report = fn(env, env.config, progress)
    report.extractions, report.extraction_seconds = env.extractions, env.extract_seconds
    report.states = env.path_states()
    return report


__all__ = ["DEFAULT_NODE_LIMIT", "Env", "MAIN_EXTRACTOR_SECONDS", "MCTS", "NODE_LIMIT_FACTOR", "NO_SEARCH", "PathState", "SCHEDULERS", "SearchConfig",
           "SearchReport", "Step", "StopReason", "option", "run_scheduler", "scheduler_names"]
