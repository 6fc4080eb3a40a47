"""Checks of an :class:`~eqsat.app.pipeline.OptimizeConfig` made before any work, shared by the API and the CLI.

Each problem raises :class:`~eqsat.errors.InputError` (exit 2) naming the flag and what to give instead.

>>> from eqsat.app.pipeline import OptimizeConfig
>>> validate(OptimizeConfig(budget=0))
Traceback (most recent call last):
...
eqsat.errors.InputError: --budget 0: give a whole number of simulations >= 1
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from eqsat.errors import InputError

if TYPE_CHECKING:
    from .pipeline import OptimizeConfig

COST_NAMES = ("analytic", "cpu", "cuda", "auto")
"""--cost values besides ``analytic-DEVICE`` (eqsat.cost.analytic.DEVICES)."""


def _int(flag: str, value: Any, least: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{flag} {value!r}: give {what} >= {least}")


def _seconds(flag: str, value: Any) -> None:
    """A time limit: a finite number of seconds > 0 (NaN and inf would silently remove the limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{flag} {value!r}: give a finite number of seconds > 0")


def _choice(flag: str, value: Any, names: list[str] | tuple[str, ...]) -> None:
    if value not in names:
        raise InputError(f"{flag} {value!r}: choose one of {', '.join(names)}")


def cost_names() -> list[str]:
    """Every accepted --cost value."""
    from eqsat.cost.analytic import DEVICES

    return [*COST_NAMES, *(f"analytic-{d}" for d in DEVICES)]


def scheduler_names() -> list[str]:
    from eqsat.mcts import SCHEDULERS

    return [*SCHEDULERS, "none"]


def extractor_names() -> list[str]:
    from eqsat.extract import EXTRACTORS

    return list(EXTRACTORS)


def validate(config: OptimizeConfig) -> None:
    """Raise :class:`InputError` naming the first bad option of ``config``; return None if all are usable."""
    _choice("--scheduler", config.scheduler, scheduler_names())
    _choice("--main-extractor", config.main_extractor, extractor_names())
    _choice("--final-extractor", config.final_extractor, extractor_names())
    _choice("--cost", config.cost, cost_names())
    _int("--seed", config.seed, 0, "a whole number")
    _int("--budget", config.budget, 1, "a whole number of simulations")
    _int("--depth", config.depth, 0, "a whole number of rollout steps")
    if config.node_limit is not None:
        _int("--node-limit", config.node_limit, 1, "a whole number of e-nodes")
    _int("--k-multi", config.k_multi, 0, "a whole number of iterations")
    _seconds("--time-limit", config.time_limit)
    _seconds("--ilp-time-limit", config.ilp_time_limit)
    _int("verify_draws", config.verify_draws, 1, "a whole number of random inputs")
    _seconds("measure_budget", config.measure_budget)
    _int("measure_threads", config.measure_threads, 1, "a whole number of onnxruntime intra-op threads")


__all__ = ["COST_NAMES", "cost_names", "extractor_names", "scheduler_names", "validate"]
