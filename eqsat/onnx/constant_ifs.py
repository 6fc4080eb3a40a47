"""An ``If`` whose condition is the same at every size, replaced by the branch it takes.

TorchScript writes ``Tensor.repeat`` and ``tile`` of a value whose rank it does not track as ``If``\\ s on
``Size(Shape(x)) - len(repeats)``: the rank of ``x``, fixed by the model, so one branch is taken at every size
(DINOv3's rotary table over the patch grid). Kept, the ``If`` is an opaque operator: nothing sees through it, no
inference types what it computes, and the shape-generic writer fits its outputs from runs of each candidate.
:func:`inline_constant_ifs` writes the branch taken in its place, as onnx's and the peers' optimizers do.

A condition is constant where it is computed, through operators without subgraphs, from constants and from sizes
onnx's shape inference fixes: a value's rank (``Size`` of a ``Shape``, ``Shape`` of a ``Shape``) and the axes of a
``Shape`` that hold a number rather than a symbol. The verification of every written program at several sizes
stays the check.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from .external import infer_shapes_aside
from .pool import copy_fields
from .subgraphs import rename_outer, subgraphs

__all__ = ["constant_conditions", "inline_constant_ifs"]

_SMALL = 64
"""the most elements a value computed on the way to a condition may have"""


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """value -> its axes' sizes where onnx's shape inference gives a number (None for a symbol or unknown), inferred
    from the interface and the operators alone: the shapes the model declares for its inner values are not read
    (an exporter may write them at the size it traced)."""
    bare = onnx.ModelProto()
    copy_fields(model, bare, skip={"graph"})
    copy_fields(model.graph, bare.graph, skip={"value_info"})
    try:
        inferred = infer_shapes_aside(bare, strict_mode=False)
    except Exception:  # noqa: BLE001 - no inference: nothing known
        return {}
    out: dict[str, list[int | None]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return out


class _Constants:
    """The values of the main graph computed from constants and fixed sizes alone, evaluated on demand."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.producer = {o: n for n in g.node for o in n.output if o}
        self.small = {t.name: numpy_helper.to_array(t) for t in g.initializer
                      if int(np.prod(t.dims)) <= _SMALL and not t.external_data}
        self.shapes = _static_shapes(model)
        self.memo: dict[str, np.ndarray | None] = {}

    def value(self, name: str, depth: int = 0) -> np.ndarray | None:
        if name in self.small:
            return self.small[name]
        if name in self.memo:
            return self.memo[name]
        node = self.producer.get(name)
        got = None if node is None or depth > 64 else self._of(node, name, depth)
        if got is not None and got.size > _SMALL:
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
        if node.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                            "Bernoulli"):
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
            if v is None:
                return None
            ins.append(v)
        return _run(node, ins, name)

    def _picked(self, node: onnx.NodeProto, name: str, depth: int) -> np.ndarray | None:
        """A Gather or Slice of a ``Shape`` whose axes it picks are numbers (``Shape(x)[1]`` of ``[batch, 3, n]``):
        the node run on the axes' positions, each position then read as its size."""
        source = self.producer.get(node.input[0])
        if source is None or source.op_type != "Shape" or source.domain not in ("", "ai.onnx"):
            return None
        dims = self._dims(node.input[0])  # ([rank]: the Shape's length)
        whole = self.shapes.get(source.input[0])
        if dims is None or None in dims or whole is None:
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
        """``name``'s sizes where known: a Shape's output has as many entries as its input has axes."""
        node = self.producer.get(name)
        if node is not None and node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            rank = self.shapes.get(node.input[0])
            if rank is None:
                return None
            start, end = _range(node, len(rank))
            return [end - start]
        return self.shapes.get(name)

    def _shape(self, node: onnx.NodeProto) -> np.ndarray | None:
        dims = self._dims(node.input[0])
        if dims is None:
            return None
        start, end = _range(node, len(dims))
        part = dims[start:end]
        return None if None in part else np.array(part, dtype=np.int64)


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
    consts = _Constants(model)
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
    used = {o for n in g.node for o in n.output} | {t.name for t in g.initializer} | {v.name for v in g.input}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    for k, node in enumerate(g.node):
        branch = _branch(node, taken[k]) if k in taken else None
        if branch is None or branch.sparse_initializer:
            nodes.append(node)
            continue
        names = _local_names(branch)
        stem = node.name or node.output[0]
        mapping = {}
        for local in names:
            fresh, n = f"{stem}/{local}", 0
            while fresh in used:
                n += 1
                fresh = f"{stem}/{local}_{n}"
            used.add(fresh)
            mapping[local] = fresh
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
                inner.name = f"{stem}/{inner.name}"
            nodes.append(inner)
        for out, bout in zip(node.output, body.output):
            if out:
                nodes.append(helper.make_node("Identity", [mapping.get(bout.name, bout.name)], [out],
                                              name=f"{stem}/taken_{out}"))
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
