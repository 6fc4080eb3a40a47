"""Models whose outputs are random: eqsat verifies every program against the original on the same inputs, which
says nothing where the original draws random numbers, and its e-graph would read two draws of one operator on one
value as one value (two unseeded ``RandomUniformLike`` of a tensor merged: noise made zero, a wrong model). Such a
model is refused at import (:func:`check_deterministic`, exit 2), naming the operators and what to do.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import numpy_helper

from ..errors import ModelRefused
from .folding import NONDETERMINISTIC


def _nodes(graph: onnx.GraphProto) -> Iterator[tuple[onnx.NodeProto, onnx.GraphProto]]:
    """Every node of ``graph`` and of its subgraphs (an If's branches, a Loop's body), with the graph holding it."""
    for node in graph.node:
        yield node, graph
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _nodes(g)


def _training(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    """Whether a Dropout may drop: its ``training_mode`` input is given and is not a constant false."""
    if len(node.input) < 3 or not node.input[2]:
        return False
    name = node.input[2]
    constants = [t for t in graph.initializer if t.name == name]
    constants += [a.t for n in graph.node if n.op_type == "Constant" and name in n.output
                  for a in n.attribute if a.name == "value" and a.HasField("t")]
    return not constants or bool(numpy_helper.to_array(constants[0]).any())


def random_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes of ``model`` (its subgraphs and local functions included) that draw random numbers: the
    :data:`~.folding.NONDETERMINISTIC` operators of the standard domain (a ``seed`` makes a session's first call
    repeat, not its next), and Dropouts in training mode."""
    graphs = [model.graph, *(onnx.helper.make_graph(f.node, f.name, [], []) for f in model.functions)]
    out = []
    for graph in graphs:
        for node, holder in _nodes(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type in NONDETERMINISTIC or (node.op_type == "Dropout" and _training(node, holder)):
                out.append(node)
    return out


def check_deterministic(model: onnx.ModelProto) -> None:
    """Refuse (:class:`~eqsat.errors.ModelRefused`, exit 2) a model that draws random numbers
    (:func:`random_nodes`)."""
    drawn = random_nodes(model)
    if not drawn:
        return
    named = ", ".join(f"{n.op_type} {n.name!r}" if n.name else n.op_type for n in drawn[:3])
    more = f" and {len(drawn) - 3} more" if len(drawn) > 3 else ""
    raise ModelRefused(f"the model draws random numbers ({named}{more}): its outputs differ from one run to the next on "
                     "the same input, so no optimized model can be verified against it; export it for inference "
                     "(in PyTorch, model.eval() before the export: no dropout), or feed the random values as an input")
