"""The branches of a shape-generic program's table guards, each as a model of its own, to check them apart.

:mod:`eqsat.generic` writes a Slice of a table that stops below the sizes the user's program accepts as an
``If`` on the sizes it reads being within the table (``Less(sizes, bound + 1)``): its then-branch is the Slice,
its else-branch the user's nodes that compute the value at any size. At the sizes a verification runs, every
guard takes its then-branch, so the else-branch would never run before a user's long input does.
:func:`taken` writes the part of a program that computes a guard's outputs with one branch in place of the
``If`` (its condition an output too), which :func:`eqsat.verification.verify_guards` runs on either side of the bound.
This module reads the written form and sits below the writer (the writer names its guards :data:`GUARD`), so that
the verification reads it without importing the writer.
"""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

from .dataflow import needed

__all__ = ["GUARD", "SHAPE_FED", "WITHIN", "guard_bounds", "shapes_fed", "table_guards", "taken", "within_spans"]


GUARD = "table_if"
"""the prefix of the names :mod:`eqsat.generic` gives the guards it writes"""


WITHIN = "span_if"
"""the prefix of the name :mod:`eqsat.generic` gives the If that keeps a program to the span of sizes it is written
for, the original beyond (:mod:`eqsat.generic.within`)"""


def within_spans(model: onnx.ModelProto) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    """The spans a program written for a span only is kept to (the If named :data:`WITHIN` of the main graph, its
    condition ``Not`` of an ``Or`` of ``Less(Shape(x)[axis], low)`` and ``Greater(Shape(x)[axis], high)``): (input,
    axis) -> (low, high), None where it is not bounded on that side; empty where the program has no such If."""
    g = model.graph
    made = {o: n for n in g.node for o in n.output if o}
    constants = {t.name: t for t in g.initializer}
    out: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    for guard in g.node:
        if guard.op_type != "If" or not guard.name.startswith(WITHIN) or guard.input[0] not in made:
            continue
        stack = [made[guard.input[0]].input[0]] if made[guard.input[0]].op_type == "Not" else []
        while stack:
            node = made.get(stack.pop())
            if node is None:
                continue
            if node.op_type == "Or":
                stack.extend(node.input)
                continue
            shape = made.get(node.input[0])
            if node.op_type not in ("Less", "Greater") or shape is None or shape.op_type != "Shape" \
                    or node.input[1] not in constants:
                continue
            axis = next((a.i for a in shape.attribute if a.name == "start"), 0)
            bound = int(numpy_helper.to_array(constants[node.input[1]]).reshape(-1)[0])
            low, high = out.get((shape.input[0], axis), (None, None))
            out[(shape.input[0], axis)] = (bound, high) if node.op_type == "Less" else (low, bound)
    return out


def table_guards(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The guards :mod:`eqsat.generic` wrote in the main graph (an ``If`` named ``table_if...`` whose condition
    is a ``Less`` of sizes against a constant bound; not an If of the user's own), in graph order."""
    return [n for n in model.graph.node if n.op_type == "If" and n.name.startswith(GUARD)
            and guard_bounds(model, n) is not None]


def guard_bounds(model: onnx.ModelProto, guard: onnx.NodeProto) -> list[int] | None:
    """The first sizes beyond the tables of a guard (the constant of its ``Less``: each bound + 1), or None where
    its condition is not such a ``Less`` (through the Casts and ReduceMin of several sizes)."""
    made = {o: n for n in model.graph.node for o in n.output if o}
    constants = {t.name: t for t in model.graph.initializer}
    constants.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant"
                      for a in n.attribute if a.name == "value"})
    node = made.get(guard.input[0])
    while node is not None and node.op_type in ("Cast", "ReduceMin"):
        node = made.get(node.input[0])
    if node is None or node.op_type != "Less" or node.input[1] not in constants:
        return None
    return [int(v) for v in numpy_helper.to_array(constants[node.input[1]]).reshape(-1)]


def taken(model: onnx.ModelProto, guard: onnx.NodeProto, branch: str) -> onnx.ModelProto:
    """A model computing only ``guard``'s outputs and condition (outputs named as in ``model``, the condition
    last), with the nodes of its ``branch`` (``then_branch`` or ``else_branch``) in place of the ``If``: only the
    inputs, nodes and initializers those values depend on (a model's weights are not copied whole, and an input the
    guard does not read is not fed)."""
    body = next(a.g for a in guard.attribute if a.name == branch)
    g = model.graph
    nodes: list[onnx.NodeProto] = []
    for node in g.node:
        if node.name == guard.name and node.op_type == "If" and list(node.output) == list(guard.output):
            nodes.extend(body.node)
            nodes += [helper.make_node("Identity", [inner.name], [outer], name=f"{outer}_{branch}")
                      for inner, outer in zip(body.output, guard.output)]
        else:
            nodes.append(node)
    known = {vi.name: vi.type.tensor_type.elem_type for vi in [*g.value_info, *g.output]}
    other = next(a.g for a in guard.attribute if a.name != branch and a.type == onnx.AttributeProto.GRAPH)
    outputs = [helper.make_tensor_value_info(outer, inner.type.tensor_type.elem_type
                                             or twin.type.tensor_type.elem_type or known.get(outer, 0), None)
               for inner, twin, outer in zip(body.output, other.output, guard.output)]  # a type either branch knows
    outputs.append(helper.make_tensor_value_info(guard.input[0], onnx.TensorProto.BOOL, None))
    kept, used = needed(nodes, [o.name for o in outputs])
    graph = helper.make_graph(kept, f"{g.name}_{branch}", [vi for vi in g.input if vi.name in used], outputs,
                              initializer=[t for t in [*g.initializer, *body.initializer] if t.name in used])
    out = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    out.functions.extend(model.functions)
    return out


SHAPE_FED = "__shape"
"""the suffix of the input :func:`shapes_fed` feeds an input's shape by"""


def shapes_fed(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` (a copy) with each input that only ``Shape`` nodes of its main graph read fed by its shape instead: a
    new int64 input (the input's name and :data:`SHAPE_FED`), each such Shape a Slice of it (its ``start`` and
    ``end`` read alike: both clamp and count from the back); and each such input -> its shape's input. A guard's
    branch that reads an image only for its batch is then run at a batch of 4097 without an image of that batch (a
    SigLIP's check drew 2.3 GiB for each branch at each size)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in g.node:
        for name in {*node.input, *(i for a in node.attribute if a.type == onnx.AttributeProto.GRAPH
                                    for i in _outer_reads(a.g))}:
            readers.setdefault(name, []).append(node)
    fed = {vi.name: vi.name + SHAPE_FED for vi in g.input if vi.name not in inits and readers.get(vi.name)
           and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
           and all(n.op_type == "Shape" and n.domain in ("", "ai.onnx") and list(n.input) == [vi.name]
                   for n in readers[vi.name])}
    if not fed:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    rank = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in g.input if vi.name in fed}
    nodes = []
    for node in g.node:
        if node.op_type != "Shape" or node.domain not in ("", "ai.onnx") or node.input[0] not in fed:
            nodes.append(node)
            continue
        attrs = {a.name: a.i for a in node.attribute}
        bounds = [helper.make_tensor(f"{node.output[0]}{SHAPE_FED}_{k}", onnx.TensorProto.INT64, [1], [v])
                  for k, v in (("start", attrs.get("start", 0)), ("end", attrs.get("end", 2**62)))]
        g.initializer.extend(bounds)
        nodes.append(helper.make_node("Slice", [fed[node.input[0]], *(t.name for t in bounds)], list(node.output),
                                      name=node.name))
    del g.node[:]
    g.node.extend(nodes)
    inputs = [helper.make_tensor_value_info(fed[vi.name], onnx.TensorProto.INT64, [rank[vi.name]])
              if vi.name in fed else vi for vi in g.input]
    del g.input[:]
    g.input.extend(inputs)
    return out, fed


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """The names a subgraph's nodes (at any depth) read, its own or not: a reader of an input there is no Shape."""
    out: set[str] = set()
    for node in graph.node:
        out.update(node.input)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out |= _outer_reads(a.g)
    return out
