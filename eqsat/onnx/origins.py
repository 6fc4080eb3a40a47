"""Provenance of imported operators: which ONNX node(s) each group of IR nodes came from, so that the exporter
can write the user's own nodes back where the optimized program kept them unchanged (issue 14, point 1).

The importer maps an ONNX node to IR operators between the IR nodes of its inputs and of its outputs; e.g. a
3-D MatMul by a weight becomes ``reshape -> matmul -> reshape``, a Conv with a bias ``conv2d`` then ``ewadd``
of the bias reshaped to rank 4. An :class:`~eqsat.ir.Origin` (a record of the IR's :class:`~eqsat.ir.Graph`) records that: the ONNX nodes (a region: one node, or the
several nodes a pattern recognizer matched), the IR node of each external input (or the constant value when
the input is an initializer or Constant), the IR node of each output, and the expansion (the IR nodes created
in between, outputs included).

An origin is *carried* into an extracted program (:func:`carry`) when the program contains its whole
expansion unchanged: for every expansion node, the chosen e-node of its e-class has the same operator and
attributes and its children are the e-classes of the expansion node's inputs. The exporter then writes the
original ONNX node(s) instead of the expansion.

>>> from eqsat import ir
>>> x = ir.input_("x", (2, 3)); y = ir.make("relu", [x])
>>> expansion([y], [x]) == (y,)
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import onnx

from ..ir import Node, Origin, topo_order

LEAVES = ("input", "weight")


def expansion(outputs: Sequence[Node], inputs: Iterable[Node]) -> tuple[Node, ...]:
    """The nodes reachable from ``outputs`` without entering ``inputs``, children first."""
    stop = {id(n) for n in inputs}
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(o, False) for o in outputs if id(o) not in stop]
    while stack:
        n, ready = stack.pop()
        if ready:
            order.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((i, False) for i in n.inputs if id(i) not in stop and id(i) not in seen)
    return tuple(order)


def make(nodes: Sequence[onnx.NodeProto], inputs: Sequence[tuple[str, Node | None]],
         outputs: Sequence[tuple[str, Node]], constants: Mapping[str, np.ndarray]) -> Origin | None:
    """An origin record, or None when the region created no IR node (it only forwards one of its inputs)."""
    inner = expansion([n for _, n in outputs], [n for _, n in inputs if n is not None])
    if not inner or any(name not in constants and node is None for name, node in inputs):
        return None
    return Origin(tuple(nodes), tuple(inputs), tuple(outputs), inner, dict(constants))


def live(origins: Iterable[Origin], outputs: Sequence[Node]) -> tuple[Origin, ...]:
    """The origins whose outputs are all part of the program rooted at ``outputs``."""
    reachable = {id(n) for n in topo_order(outputs)}
    return tuple(o for o in origins if all(id(n) in reachable for _, n in o.outputs))


def carry(origin: Origin, class_of: Callable[[Node], int | None], choice: Mapping[int, int],
          children: Callable[[int], tuple[int, ...]], built: Mapping[int, Node]) -> Origin | None:
    """``origin`` with its IR nodes replaced by the program's (``built``: e-class -> program node), when the
    extracted ``choice`` (e-class -> e-node; ``children`` gives an e-node's child classes) contains its whole
    expansion unchanged; None otherwise."""

    def built_of(n: Node) -> Node | None:
        c = class_of(n)
        return built.get(c) if c is not None else None

    for x in origin.expansion:
        c = class_of(x)
        b = built.get(c) if c is not None else None
        if c is None or b is None or b.op != x.op or tuple(b.attrs) != tuple(x.attrs):
            return None
        if x.op in LEAVES and b.name != x.name:
            return None
        kids = [class_of(i) for i in x.inputs]
        if any(k is None for k in kids) or children(choice[c]) != tuple(kids):
            return None
    inputs: list[tuple[str, Node | None]] = []
    for name, node in origin.inputs:
        if name in origin.constants:
            inputs.append((name, node))  # written as the original constant; the node only names a shared leaf
            continue
        b = built_of(node) if node is not None else None
        if b is None:
            return None
        inputs.append((name, b))
    outputs = []
    for name, node in origin.outputs:
        b = built_of(node)
        if b is None:
            return None
        outputs.append((name, b))
    inner = tuple(b for b in (built_of(x) for x in origin.expansion) if b is not None)
    return replace(origin, inputs=tuple(inputs), outputs=tuple(outputs), expansion=inner)


__all__ = ["carry", "expansion", "live", "make"]
