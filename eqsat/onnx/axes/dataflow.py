"""Two analyses of a model's main graph: which values are computed from the inputs' shapes alone
(:func:`shape_only`), and the nodes no output reads (:func:`prune`). Read by the shape-generic writer
(:mod:`eqsat.generic`), and below it by the runs that fit sizes (:mod:`.fitting`) and the guards' branches
(:mod:`.branches`).

>>> from onnx import helper
>>> g = helper.make_graph([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Neg", ["s"], ["n"]),
...                        helper.make_node("Relu", ["x"], ["y"])], "g",
...                       [helper.make_tensor_value_info("x", 1, ["b"])], [helper.make_tensor_value_info("y", 1, ["b"])])
>>> sorted(shape_only(helper.make_model(g)))
['n', 's']
>>> [n.op_type for n in prune(helper.make_model(g)).graph.node]
['Relu']
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from eqsat.onnx.subgraphs import implicit_inputs, subgraphs

SHAPE_READERS = frozenset({"Shape", "Size"})
"""operators that read only their input's shape"""

UNFOLDABLE = frozenset({"RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "RandomNormal",
                        "RandomUniform"})
"""operators whose output is not a function of their inputs"""


def shape_only(model: onnx.ModelProto, branches: bool = False) -> set[str]:
    """The main graph's values computed from the shapes of other values (``Shape``, ``Size``) and constants (or values
    computed from constants alone) only, never from the data: their values at every size are functions of the
    sizes. Only the standard domain's operators count; ``branches``: those with subgraphs too (an ``If`` on a
    size, whose branches read such values only, and hold no random or custom operator), else none with a subgraph."""
    return _without_data(model, branches)[0]


def data_free(model: onnx.ModelProto) -> set[str]:
    """The main graph's values that no node computes from the data: :func:`shape_only`'s (its ``branches``
    included) and the constants, those computed from constants alone among them."""
    sized, constant = _without_data(model, True)
    return sized | constant


def _plain(node: onnx.NodeProto) -> bool:
    """Whether ``node`` and every node of its subgraphs, at any depth, is of the standard domain and a function of
    its inputs (none of :data:`UNFOLDABLE`)."""
    return node.domain in ("", "ai.onnx") and node.op_type not in UNFOLDABLE \
        and all(_plain(inner) for sub in subgraphs(node) for inner in sub.node)


def _without_data(model: onnx.ModelProto, branches: bool) -> tuple[set[str], set[str]]:
    """(:func:`shape_only`'s values, the constants and the values computed from constants alone)."""
    g = model.graph
    constant = {t.name for t in g.initializer} - {vi.name for vi in g.input}
    out: set[str] = set()
    for node in g.node:
        nested = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
        standard = _plain(node) and (branches or not nested)
        inputs = [i for i in [*node.input, *(implicit_inputs(node) if nested else [])] if i]
        if standard and node.op_type in SHAPE_READERS:
            out.update(o for o in node.output if o)
        elif standard and inputs and all(i in out or i in constant for i in inputs) and any(i in out for i in inputs):
            out.update(o for o in node.output if o)
        elif standard and ((not inputs and node.op_type == "Constant") or (inputs and all(i in constant for i in inputs))):
            constant.update(o for o in node.output if o)  # a constant, or computed from constants alone
    return out, constant


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the main graph's nodes that no graph output depends on, and without the initializers
    nothing reads (in place; returned)."""
    g = model.graph
    kept, used = needed(g.node, [o.name for o in g.output])
    inputs = {vi.name for vi in g.input}
    initializers = [t for t in g.initializer if t.name in used or t.name in inputs]
    del g.node[:]
    g.node.extend(kept)
    del g.initializer[:]
    g.initializer.extend(initializers)
    return model


def needed(nodes: Iterable[onnx.NodeProto], outputs: Iterable[str]) -> tuple[list[onnx.NodeProto], set[str]]:
    """The nodes (in their order) that the values ``outputs`` depend on, and every name those nodes read (their
    subgraphs' included) with ``outputs``: the initializers and inputs to keep are among them."""
    used = set(outputs)
    kept: list[onnx.NodeProto] = []
    for node in reversed(list(nodes)):
        if any(o in used for o in node.output if o):
            kept.append(node)
            used.update(i for i in node.input if i)
            used.update(_captured(node))
    return kept[::-1], used


def _captured(node: onnx.NodeProto) -> set[str]:
    """The outer values a node's subgraphs read (any name its subgraphs' nodes read: a superset is harmless)."""
    out: set[str] = set()
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in sub.node:
                out.update(n.input)
                out.update(_captured(n))
    return out


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_K`` with the least K that is not in ``taken``; added to ``taken``.

    >>> taken = {"a", "a_1"}
    >>> unique_name("a", taken), unique_name("b", taken), sorted(taken)
    ('a_2', 'b', ['a', 'a_1', 'a_2', 'b'])
    """
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


__all__ = ["unique_name", "SHAPE_READERS", "UNFOLDABLE", "needed", "prune", "data_free", "shape_only"]
