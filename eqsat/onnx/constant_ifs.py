"""An ``If`` whose condition is the same at every size, replaced by the branch it takes.

TorchScript writes ``Tensor.repeat`` and ``tile`` of a value whose rank it does not track as ``If``\\ s on
``Size(Shape(x)) - len(repeats)``: the rank of ``x``, fixed by the model, so one branch is taken at every size
(DINOv3's rotary table over the patch grid). Kept, the ``If`` is an opaque operator: nothing sees through it, no
inference types what it computes, and the shape-generic writer fits its outputs from runs of each candidate.
:func:`inline_constant_ifs` writes the branch taken in its place, as onnx's and the peers' optimizers do.

A condition is constant where it is computed from constants (not an initializer the graph also lists as an input,
which the user may feed) and from sizes that are the same at every size: a value's rank (``Size`` of a ``Shape``,
``Shape`` of a ``Shape``), read off onnx's shape inference where no operator with subgraphs computes the value, and
an axis of a graph input the model declares as a number. Only integer and boolean operators of :data:`EXACT` are
evaluated (onnx's reference evaluator and onnxruntime agree on them; a float's last digit, a sort order or a random
draw may not). The verification of every written program at several sizes stays the check.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from .axes.dataflow import unique_name
from .external import infer_shapes_aside
from .pool import copy_fields
from .subgraphs import defined_names, rename_outer, subgraphs

__all__ = ["Constants", "constant_conditions", "inline_constant_ifs"]

_SMALL = 64
"""the most elements a value computed on the way to a condition may have"""
EXACT = frozenset({
    "Add", "Sub", "Mul", "Neg", "Abs", "Min", "Max", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual",
    "Not", "And", "Or", "Xor", "Where", "Concat", "Gather", "Slice", "Unsqueeze", "Squeeze", "Reshape", "Identity",
    "Cast", "Expand", "ConstantOfShape", "Sign", "Flatten", "Transpose", "Constant"})
"""the operators evaluated on integer and boolean values (their inputs and outputs)"""


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """value -> its rank, by onnx's shape inference from the interface's inputs and the operators alone: the shapes
    the model declares for its outputs and inner values are not read (an exporter may write them at the size it
    traced), nor the ranks of what an operator with subgraphs computes (its branches' declared shapes)."""
    bare = onnx.ModelProto()
    copy_fields(model, bare, skip={"graph"})
    copy_fields(model.graph, bare.graph, skip={"value_info", "output"})
    bare.graph.output.extend(helper.make_value_info(o.name, onnx.TypeProto()) for o in model.graph.output)
    try:
        inferred = infer_shapes_aside(bare, strict_mode=False)
    except Exception:  # noqa: BLE001 - no inference: nothing known
        return {}
    branched = {o for n in model.graph.node if any(True for _ in subgraphs(n)) for o in n.output}
    out: dict[str, int] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") and vi.name not in branched:
            out[vi.name] = len(tt.shape.dim)
    return out


def _declared(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """graph input -> its axes' sizes where the model declares a number (None for a symbol or unknown)."""
    out: dict[str, list[int | None]] = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return out


class Constants:
    """The values of the main graph computed from constants and fixed sizes alone (of at most :data:`_SMALL`
    elements), evaluated on demand (:meth:`value`)."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        fed = {vi.name for vi in g.input}  # (an initializer listed as an input too is the user's to feed)
        self.producer = {o: n for n in g.node for o in n.output if o}
        self.small = {t.name: numpy_helper.to_array(t) for t in g.initializer
                      if int(np.prod(t.dims)) <= _SMALL and not t.external_data and t.name not in fed}
        self.ranks = _ranks(model)
        self.declared = _declared(model)
        self.memo: dict[str, np.ndarray | None] = {}

    def value(self, name: str, depth: int = 0) -> np.ndarray | None:
        """``name``'s value at every size, where it is computed so; None otherwise."""
        if name in self.small:
            return self.small[name]
        if name in self.memo:
            return self.memo[name]
        node = self.producer.get(name)
        if node is None or depth > 256:
            return None  # (not kept: a shallower walk may reach it)
        got = self._of(node, name, depth)
        if got is not None and (got.size > _SMALL or not _exact(got)):
            got = None
        self.memo[name] = got
        return got

    def _of(self, node: onnx.NodeProto, name: str, depth: int) -> np.ndarray | None:
        if node.domain not in ("", "ai.onnx") or any(True for _ in subgraphs(node)):
            return None
        if node.op_type == "Shape":
            return self._shape(node)
        if node.op_type == "Size":
            dims = self._dims(node.input[0])
            known = [d for d in dims if d is not None] if dims is not None else []
            return None if dims is None or len(known) != len(dims) else np.array(int(np.prod(known)), dtype=np.int64)
        if node.op_type not in EXACT:
            return None
        if node.op_type in ("Gather", "Slice") and node.input[0] not in self.small:
            picked = self._picked(node, name, depth)
            if picked is not None:
                return picked
        ins: list[np.ndarray | None] = []
        for i in node.input:
            if not i:
                ins.append(None)
                continue
            v = self.value(i, depth + 1)
            if v is None or not _exact(v):
                return None
            ins.append(v)
        return _run(node, ins, name)

    def _picked(self, node: onnx.NodeProto, name: str, depth: int) -> np.ndarray | None:
        """A Gather or Slice of a ``Shape`` whose axes it picks are numbers (``Shape(x)[1]`` of ``[batch, 3, n]``):
        the node run on the axes' positions, each position then read as its size."""
        source = self.producer.get(node.input[0])
        if source is None or source.op_type != "Shape" or source.domain not in ("", "ai.onnx"):
            return None
        whole = self._dims(source.input[0])
        if whole is None:
            return None
        start, end = _range(source, len(whole))
        sizes = whole[start:end]
        rest = [self.value(i, depth + 1) if i else None for i in node.input[1:]]
        if any(v is None for i, v in zip(node.input[1:], rest) if i):
            return None
        positions = _run(node, [np.arange(len(sizes), dtype=np.int64), *rest], name)
        if positions is None or any(sizes[p] is None for p in positions.reshape(-1)):
            return None
        return np.array([sizes[p] for p in positions.reshape(-1)], np.int64).reshape(positions.shape)

    def _dims(self, name: str) -> list[int | None] | None:
        """``name``'s sizes where known at every size: a graph input's declared numbers, each other value's sizes
        unknown but its count (its rank), and a Shape's one size, its input's rank."""
        node = self.producer.get(name)
        if node is not None and node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            rank = self._rank(node.input[0])
            if rank is None:
                return None
            start, end = _range(node, rank)
            return [end - start]
        if name in self.declared:
            return self.declared[name]
        rank = self.ranks.get(name)
        return None if rank is None else [None] * rank

    def _rank(self, name: str) -> int | None:
        return len(self.declared[name]) if name in self.declared else self.ranks.get(name)

    def _shape(self, node: onnx.NodeProto) -> np.ndarray | None:
        dims = self._dims(node.input[0])
        if dims is None:
            return None
        start, end = _range(node, len(dims))
        part = dims[start:end]
        return None if None in part else np.array(part, dtype=np.int64)


def _exact(v: np.ndarray) -> bool:
    """Whether ``v`` holds integers or booleans (what :data:`EXACT`'s operators are evaluated on)."""
    return v.dtype == np.bool_ or np.issubdtype(v.dtype, np.integer)


def _range(node: onnx.NodeProto, rank: int) -> tuple[int, int]:
    """A ``Shape``'s ``start`` and ``end`` attributes, clamped to ``rank`` as onnx does."""
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


def _run(node: onnx.NodeProto, ins: list[np.ndarray | None], name: str) -> np.ndarray | None:
    """``node`` evaluated by onnx's reference evaluator on ``ins``; the output ``name``, None where it fails."""
    feeds = {f"in{k}": v for k, v in enumerate(ins) if v is not None}
    inputs = [f"in{k}" if v is not None else "" for k, v in enumerate(ins)]
    outputs = [f"out{k}" if o else "" for k, o in enumerate(node.output)]
    one = helper.make_node(node.op_type, inputs, outputs, domain=node.domain)
    one.attribute.extend(node.attribute)
    try:
        got = ReferenceEvaluator(one).run(None, feeds)
    except Exception:  # noqa: BLE001 - not evaluated: not known
        return None
    k = list(node.output).index(name)
    return np.asarray(list(got)[[o for o in outputs if o].index(outputs[k])])


def constant_conditions(model: onnx.ModelProto) -> dict[int, bool]:
    """The main graph's ``If`` nodes (by position) whose condition is the same at every size, and its value."""
    ifs = [(k, n) for k, n in enumerate(model.graph.node) if n.op_type == "If" and n.domain in ("", "ai.onnx")]
    if not ifs:
        return {}
    consts = Constants(model)
    out: dict[int, bool] = {}
    for k, node in ifs:
        v = consts.value(node.input[0])
        if v is not None and v.size == 1 and v.dtype == np.bool_:
            out[k] = bool(v.reshape(-1)[0])
    return out


def inline_constant_ifs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each ``If`` of the main graph whose condition is constant (:func:`constant_conditions`)
    replaced by the nodes of the branch it takes; ``model`` itself where there is none (never changed in place)."""
    taken = constant_conditions(model)
    if not taken:
        return model
    g = model.graph
    used = {o for n in g.node for o in n.output} | {t.name for t in g.initializer} | {v.name for v in g.input} \
        | {v.name for v in g.value_info} | {v.name for v in g.output}
    for n in g.node:
        used |= defined_names(n)  # (names are unique across the subgraphs too)
    named = {n.name for n in g.node if n.name}
    fresh = unique_name

    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for k, node in enumerate(g.node):
        branch = _branch(node, taken[k]) if k in taken else None
        if branch is None or branch.sparse_initializer:
            nodes.append(node)
            continue
        stem = node.name or node.output[0]
        mapping = {local: fresh(f"{stem}/{local}", used) for local in _local_names(branch)}
        body = onnx.GraphProto()
        body.CopyFrom(branch)
        for t in body.initializer:
            t.name = mapping[t.name]
            inits.append(t)
        for inner in body.node:
            inner.input[:] = [mapping.get(i, i) for i in inner.input]
            for sub in subgraphs(inner):
                rename_outer(sub, mapping)
            inner.output[:] = [mapping.get(o, o) for o in inner.output]
            if inner.name:
                inner.name = fresh(f"{stem}/{inner.name}", named)
            nodes.append(inner)
        for out, bout in zip(node.output, body.output):
            if out:
                nodes.append(helper.make_node("Identity", [mapping.get(bout.name, bout.name)], [out],
                                              name=fresh(f"{stem}/taken_{out}", named)))
    return _with_nodes(model, nodes, inits)


def _with_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph holds ``nodes`` and also ``inits``."""
    new = onnx.ModelProto()
    copy_fields(model, new, skip={"graph"})
    copy_fields(model.graph, new.graph, skip={"node"})
    new.graph.node.extend(nodes)
    new.graph.initializer.extend(inits)
    return new


def _branch(node: onnx.NodeProto, cond: bool) -> onnx.GraphProto | None:
    want = "then_branch" if cond else "else_branch"
    return next((a.g for a in node.attribute if a.name == want and a.type == onnx.AttributeProto.GRAPH), None)


def _local_names(branch: onnx.GraphProto) -> list[str]:
    """The names ``branch`` defines at its top level (its initializers and its nodes' outputs)."""
    names = [t.name for t in branch.initializer]
    names += [o for n in branch.node for o in n.output if o]
    return list(dict.fromkeys(names))
