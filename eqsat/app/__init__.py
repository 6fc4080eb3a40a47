"""The top floor: the optimize-model pipeline, its configuration and report, and the ``eqsat`` command line.

Everything below (IR, e-graph, rules, extractors, cost models, search, models) is imported from here, never
the other way round.
"""

from __future__ import annotations

from .pipeline import OptimizeConfig, Result, optimize

__all__ = ["OptimizeConfig", "Result", "optimize"]
