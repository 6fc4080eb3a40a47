"""Subgraph attributes of ONNX nodes (If, Loop, Scan, custom operators): the outer-scope values they
read (a node's implicit inputs), the names they define, and renaming outer values inside them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx
from onnx import AttributeProto


def subgraphs(node: onnx.NodeProto, leaving: str = "") -> Iterator[onnx.GraphProto]:
    """The graphs held in ``node``'s attributes (but the attribute named ``leaving``)."""
    for attr in node.attribute:
        if attr.name == leaving:
            continue
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def _own_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    return names | {t.values.name for t in graph.sparse_initializer}


def free_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (or a graph nested in it) reads without defining them, in first-use order."""
    local = _own_names(graph)
    free: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                free[name] = None
        for sub in subgraphs(node):
            for name in free_names(sub):
                if name not in local:
                    free[name] = None
        local.update(o for o in node.output if o)
    for out in graph.output:
        if out.name not in local:
            free[out.name] = None
    return list(free)


def implicit_inputs(node: onnx.NodeProto) -> list[str]:
    """Outer-scope values that ``node``'s subgraphs read (its implicit inputs), in first-use order."""
    found: dict[str, None] = {}
    for sub in subgraphs(node):
        found.update(dict.fromkeys(free_names(sub)))
    return list(found)


def defined_names(node: onnx.NodeProto, leaving: str = "") -> set[str]:
    """Every value name defined inside ``node``'s subgraphs (but the attribute ``leaving``'s), at any depth."""
    names: set[str] = set()
    for sub in subgraphs(node, leaving):
        names |= _own_names(sub)
        for inner in sub.node:
            names.update(o for o in inner.output if o)
            names |= defined_names(inner)
    return names


def rename_outer(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename, in place, the outer-scope values ``graph`` reads (at any depth); local names shadow."""
    live = {k: v for k, v in mapping.items() if k not in _own_names(graph)}
    for node in graph.node:
        if not live:
            return
        for k, name in enumerate(node.input):
            if name in live:
                node.input[k] = live[name]
        for sub in subgraphs(node):
            rename_outer(sub, live)
        for o in node.output:
            live.pop(o, None)
    for out in graph.output:
        if out.name in live:
            out.name = live[out.name]
