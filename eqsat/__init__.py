"""eqsat: optimize tensor computation graphs with e-graphs (egglog), TASO rewrite rules, MCTS rule
scheduling and exact extraction, with every optimized model checked against the original.

This module is the public facade. ``optimize``, ``OptimizeConfig`` and ``Result`` live in the top floor
(:mod:`eqsat.app`) and are loaded on first use, so that importing the ground floor (``eqsat.ir``,
``eqsat.errors``, ...) never imports the pipeline above it.
"""

from __future__ import annotations

from typing import Any

from .errors import EqsatError, InputError, ShapeError, VerificationError
from .ir import Graph, Node

_APP = ("OptimizeConfig", "Result", "optimize")

__all__ = ["EqsatError", "Graph", "InputError", "Node", "OptimizeConfig", "Result", "ShapeError",
           "VerificationError", "optimize"]


def __getattr__(name: str) -> Any:
    if name in _APP:
        import eqsat.app  # the facade's one upward import, deferred (see the module docstring)

        return getattr(eqsat.app, name)
    raise AttributeError(f"module 'eqsat' has no attribute {name!r}")
