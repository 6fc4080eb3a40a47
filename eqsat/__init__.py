"""eqsat: optimize tensor computation graphs with e-graphs (egglog), TASO rewrite rules, MCTS rule
scheduling and exact extraction, with every optimized model checked against the original."""

from __future__ import annotations

from .errors import EqsatError, InputError, ShapeError, VerificationError
from .ir import Graph, Node
from .pipeline import OptimizeConfig, Result, optimize

__all__ = ["EqsatError", "Graph", "InputError", "Node", "OptimizeConfig", "Result", "ShapeError",
           "VerificationError", "optimize"]
