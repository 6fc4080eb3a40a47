"""Program leaves (``input``, ``weight``: ``Node.name`` set, a weight's data in ``Graph.weights``) and ``noop``
(joins several outputs under one root, TENSAT's zero-cost node; never in an e-graph)."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Ctor, OpDef, Shape, fail


def _no_shape(op: str):
    def shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
        raise fail(op, f"no shape rule (operands {tuple(shapes)}, {len(shapes)} inputs)")
    return shape


def _empty(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    return ()


INPUT = OpDef("input", "model input (its shape set when built)", "()", _no_shape("input"), (Ctor("Input", "s"),),
              free=True, leaf=True)
WEIGHT = OpDef("weight", "constant tensor, data in Graph.weights", "()", _no_shape("weight"),
               (Ctor("Weight", "s"),), free=True, leaf=True)
NOOP = OpDef("noop", "joins outputs (TENSAT's root; not encoded)", "()", _empty, free=True)
