"""Reference semantics of the IR's operators in numpy (each operator's lives in its :mod:`eqsat.ops` entry).

Used to fold weight-only subgraphs at export, and by the rule verifier, which evaluates both sides of
a rule in float64 and, for multi-linear rules, in the integers modulo a prime (``modulus``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from . import ops
from .ir import Node, topo_order
from .ops import NotEvaluable, activation

__all__ = ["NotEvaluable", "activation", "apply_op", "evaluate"]


def apply_op(node: Node, args: list[np.ndarray], modulus: int | None = None) -> np.ndarray:
    """Evaluate one non-leaf node on its operands' values (raises NotEvaluable)."""
    return ops.evaluate(node.op, node.attrs, args, modulus)


def evaluate(outputs: list[Node], leaves: Mapping[str, np.ndarray] | Callable[[Node], np.ndarray],
             modulus: int | None = None) -> list[np.ndarray]:
    """Evaluate ``outputs``; leaf values come from a mapping by name or a callable on the leaf node."""
    values: dict[int, np.ndarray] = {}
    get = leaves if callable(leaves) else (lambda n: leaves[n.name])
    for node in topo_order(outputs):
        entry = ops.OPS.get(node.op)
        if entry is not None and entry.leaf:
            values[id(node)] = np.asarray(get(node))
        else:
            values[id(node)] = apply_op(node, [values[id(i)] for i in node.inputs], modulus)
    return [values[id(o)] for o in outputs]
