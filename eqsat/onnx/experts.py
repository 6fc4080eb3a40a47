"""Routed expert products, and their dense form.

A mixture of experts as transformers exports every MoE family (its traceable ``batched_mm`` experts) multiplies each
routed row by its expert's matrix, gathered from a constant stack by the router's index::

    MatMul(Gather(W[E, O, I], idx[S], axis=0), x[S, I, 1]) -> [S, O, 1]      (``left``)
    MatMul(x[S, 1, I], Gather(W[E, I, O], idx[S], axis=0)) -> [S, 1, O]      (``right``: transposed weights)

onnxruntime runs that as S matrix-vector products over S gathered copies of an expert's matrix (S * O * I values
copied, then read again: memory-bound; a 4-layer Qwen3-MoE at 128 tokens spends 300 of its 320 ms there). The dense
form computes every expert's product for every row in one GEMM over the stacked weights and keeps the routed one::

    GatherElements(Reshape(MatMul(x[S, I], Wd[I, E * O]), [0, E, O]), Expand(idx[S, 1, 1], [1, 1, O]), axis=1)

E times the multiplications at a GEMM's speed and no copy: faster where experts are few or rows many, slower for a
decode step over many experts (every expert's weights read for one token). Which one runs faster is timed per site
shape (:func:`eqsat.measurement.experts.dense_where_faster`); this module finds the sites (:func:`sites`), writes a
site's two forms as small models (:func:`site_model`) and rewrites a model's chosen sites (:func:`dense`).

The two forms compute each output element as the same dot product of x's row and the routed expert's row (the
summation order is the GEMM's, as any MatMul's), so values agree to rounding, NaN and infinities included (a NaN in
another expert's product is not the one kept); an index out of [-E, E) fails in both (Gather and GatherElements
check bounds), a negative one counts from the end in both. The rewrite is an ONNX pass rather than an e-graph rule:
the router's index is an integer operand, which the IR's rule verification and operator timing (float operands
drawn at random) do not model; the rewritten program is verified and measured end to end as every candidate is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from .external import set_weights_aside
from .pool import array_of
from .subgraphs import implicit_inputs, subgraphs

FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})


@dataclass(frozen=True)
class Site:
    """One routed product: the MatMul's output (its name: unique where node names need not be), which side reads the
    gathered weights, the Gather's output, the weight stack's name, and the sizes: E experts, O outputs, I inputs, S
    rows (None where inference leaves it unknown)."""

    matmul: str
    side: str  # "left": MatMul(Gather(W[E, O, I]), x[S, I, 1]); "right": MatMul(x[S, 1, I], Gather(W[E, I, O]))
    gather: str
    weight: str
    experts: int
    outputs: int
    inputs: int
    rows: int | None
    elem_type: int

    @property
    def key(self) -> tuple[str, int, int, int, int | None, int]:
        """What the timing of its two forms depends on."""
        return self.side, self.experts, self.outputs, self.inputs, self.rows, self.elem_type

    @property
    def like(self) -> tuple[str, int, int, int, int]:
        """Its weights' shape and type, and the side they are on: the sites of one mixture's layers share it."""
        return self.side, self.experts, self.outputs, self.inputs, self.elem_type


def int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    """``node``'s integer attribute ``name``, or ``default``."""
    for a in node.attribute:
        if a.name == name:
            return int(helper.get_attribute_value(a))
    return default


def _dims(vi: onnx.ValueInfoProto | None) -> tuple[int | None, ...] | None:
    if vi is None or not vi.type.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim)


def _inferred(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int | None, ...]]:
    """Each value's dimensions by onnx's shape inference, the inputs at ``input_shapes`` (unknown ones None; the
    weights set aside, not copied)."""
    skeleton, _ = set_weights_aside(model)
    for vi in skeleton.graph.input:
        shape = input_shapes.get(vi.name)
        if shape is not None and len(shape) == len(vi.type.tensor_type.shape.dim):
            for d, n in zip(vi.type.tensor_type.shape.dim, shape):
                d.Clear()
                d.dim_value = int(n)
    try:
        g = shape_inference.infer_shapes(skeleton, data_prop=True).graph
    except Exception:  # noqa: BLE001 -- inference that fails leaves every size unknown: no site is rewritten
        return {}
    out = {vi.name: _dims(vi) for vi in (*g.value_info, *g.input, *g.output)}
    return {k: v for k, v in out.items() if v is not None}


def sites(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> list[Site]:
    """The routed products of ``model``'s main graph: a MatMul of a Gather (axis 0, a rank-1 index) of a rank-3 float
    initializer and of a rank-3 operand whose routed axis is 1 (``left``: its last, ``right``: its middle)."""
    g = model.graph
    if next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0) < 13:
        return []  # the dense form's Squeeze and Unsqueeze take their axes as inputs (opset 13)
    overridable = {vi.name for vi in g.input}
    inits = {t.name: t for t in g.initializer if t.name not in overridable}  # a default the user may feed: not baked
    producer = {o: n for n in g.node for o in n.output}
    pairs = []
    for n in g.node:
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
            continue
        for k, side in ((0, "left"), (1, "right")):
            gather = producer.get(n.input[k])
            w = inits.get(gather.input[0]) if gather is not None and gather.op_type == "Gather" \
                and gather.domain in ("", "ai.onnx") else None
            if gather is not None and w is not None and int_attr(gather, "axis", 0) == 0 and len(w.dims) == 3 \
                    and w.data_type in FLOATS:
                pairs.append((n, k, side, gather, w))
    if not pairs:  # no shape inference for a model without a routed product
        return []
    shapes = _inferred(model, input_shapes or {})
    found = []
    for n, k, side, gather, w in pairs:
        idx, other = shapes.get(gather.input[1]), shapes.get(n.input[1 - k])
        if idx is None or len(idx) != 1 or other is None or len(other) != 3:
            continue
        e, a, b = (int(d) for d in w.dims)
        o, i = (a, b) if side == "left" else (b, a)
        unit, inner = (other[2], other[1]) if side == "left" else (other[1], other[2])
        if unit != 1 or inner not in (None, i) or None not in (other[0], idx[0]) and other[0] != idx[0]:
            continue  # (rows that differ broadcast in the MatMul: not the dense form's; unknown ones are checked)
        found.append(Site(n.output[0], side, gather.output[0], w.name, e, o, i, idx[0], w.data_type))
    return found


def as_gathers(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """``model`` with each ``GatherND(W, idx, batch_dims=0)`` of a rank-3 float initializer that a MatMul reads,
    ``idx``'s last axis 1, written as ``Gather(W, i, axis=0)``, ``i`` = ``idx`` without that axis (the input of the
    Unsqueeze that made it, else a Squeeze): the form :func:`sites` reads (torch's dynamo exporter writes the routed
    stacks' gather so). The same values (``W[i[...]]``); both check bounds and count a negative index from the end.
    ``model`` itself where there is none."""
    g = model.graph
    if next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0) < 13:
        return model  # (the Squeeze written takes its axes as an input; no site is read below 13 either)
    overridable = {vi.name for vi in g.input}
    consts = {t.name: t for t in g.initializer if t.name not in overridable}  # a default the user may feed: not read
    stacks = {name for name, t in consts.items() if len(t.dims) == 3 and t.data_type in FLOATS}
    read_by_matmul = {i for n in g.node if n.op_type == "MatMul" for i in n.input}
    found = [n for n in g.node if n.op_type == "GatherND" and n.domain in ("", "ai.onnx") and n.input[0] in stacks
             and int_attr(n, "batch_dims", 0) == 0 and n.output[0] in read_by_matmul]
    if not found:
        return model
    shapes = _inferred(model, input_shapes or {})
    producer = {o: n for n in g.node for o in n.output}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    taken = names(g)
    rewritten = {}
    for n in found:
        idx = shapes.get(n.input[1])
        if idx is None or len(idx) < 2 or idx[-1] != 1:
            continue
        made = producer.get(n.input[1])
        axes = consts.get(made.input[1]) if made is not None and made.op_type == "Unsqueeze" \
            and len(made.input) > 1 else None
        if made is not None and axes is not None and [int(a) for a in array_of(axes)] in ([-1], [len(idx) - 1]):
            rewritten[n.output[0]] = [helper.make_node("Gather", [n.input[0], made.input[0]], [n.output[0]],
                                                       name=n.name or n.output[0], axis=0)]
            continue
        axis, squeezed = (_unused(taken, f"{n.output[0]}_{base}") for base in ("index_axis", "index"))
        out.graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), axis))
        rewritten[n.output[0]] = [helper.make_node("Squeeze", [n.input[1], axis], [squeezed], name=squeezed),
                                  helper.make_node("Gather", [n.input[0], squeezed], [n.output[0]],
                                                   name=n.name or n.output[0], axis=0)]
    if not rewritten:
        return model
    nodes = [m for n in out.graph.node for m in rewritten.get(n.output[0] if n.output else "", [n])]
    used = _read(nodes) | {o.name for o in g.output}
    del out.graph.node[:]
    out.graph.node.extend(n for n in nodes if n.op_type != "Unsqueeze" or n.output[0] in used)
    return out


def _unused(taken: set[str], name: str) -> str:
    """``name``, lengthened until it is not in ``taken``; then taken."""
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _dense_weight(w: np.ndarray, side: str) -> np.ndarray:
    """W[E, O, I] (left) or W[E, I, O] (right) as Wd[I, E * O]: column e * O + o is expert e's output o."""
    stacked = np.transpose(w, (2, 0, 1)) if side == "left" else np.transpose(w, (1, 0, 2))
    return np.ascontiguousarray(stacked.reshape(stacked.shape[0], -1))


def dense(model: onnx.ModelProto, chosen: Sequence[Site], switched: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """``model`` (a copy) with each site in ``chosen`` written in its dense form, the output keeping the MatMul's
    name; a Gather, Unsqueeze or weight stack that nothing reads any more is dropped. A site in ``switched`` (its
    MatMul's output -> rows R) is written as ``If(rows >= R)``: the dense form from R rows on, the user's form below
    (a decode step's few rows read every expert's weights in the dense form)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    by_output = {s.matmul: s for s in chosen}
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    nodes: list[onnx.NodeProto] = []
    weights: dict[tuple[str, str], str] = {}
    left: set[str] = set()  # what the rewritten MatMuls read that may be left unread
    taken = names(g)
    for n in g.node:
        site = by_output.get(n.output[0]) if n.output else None
        if site is None or n.op_type != "MatMul":
            nodes.append(n)
            continue
        k = 0 if site.side == "left" else 1
        left.update(n.input)
        if (site.weight, site.side) not in weights:
            name = f"{site.weight}_dense_{site.side}"
            while name in taken:
                name += "_"
            g.initializer.append(numpy_helper.from_array(_dense_weight(array_of(inits[site.weight]), site.side), name))
            weights[site.weight, site.side] = name
            taken.add(name)
        idx = producer[n.input[k]].input[1]
        stem = _fresh(taken, n.output[0])
        made = _switch(g, n, site, idx, weights[site.weight, site.side], (switched or {})[site.matmul], stem) \
            if site.matmul in (switched or {}) else _dense_nodes(g, n, site, idx, weights[site.weight, site.side], stem)
        nodes.extend(made)
        taken |= names(onnx.GraphProto(node=made, initializer=g.initializer))
    del g.node[:]
    g.node.extend(_live(nodes, g, left))
    used = _read(g.node) | {o.name for o in g.output}
    stacks = {s.weight for s in chosen}
    kept = [t for t in g.initializer if t.name in used or t.name not in stacks]
    del g.initializer[:]
    g.initializer.extend(kept)
    return out


def _switch(g: onnx.GraphProto, matmul: onnx.NodeProto, site: Site, idx: str, weight: str,
            rows: int, stem: str) -> list[onnx.NodeProto]:
    """``If(Shape(idx) >= rows)``: ``matmul``'s dense form, else the user's Gather and MatMul; the If's output the
    MatMul's; the names it makes begin with ``stem``."""
    bound = f"{stem}_dense_from"
    g.initializer.append(numpy_helper.from_array(np.array([rows], dtype=np.int64), bound))
    count = helper.make_node("Shape", [idx], [f"{stem}_dense_count"], name=f"{stem}_dense_count")
    cond = helper.make_node("GreaterOrEqual", [count.output[0], bound], [f"{stem}_dense_cond"],
                            name=f"{stem}_dense_cond")
    then = _dense_nodes(g, matmul, site, idx, weight, stem, f"{stem}_dense_out")
    k = 0 if site.side == "left" else 1
    gathered = helper.make_node("Gather", [site.weight, idx], [f"{stem}_gathered_w"], name=f"{stem}_gathered_w", axis=0)
    operands = [gathered.output[0], matmul.input[1 - k]][:: 1 if k == 0 else -1]
    product = helper.make_node("MatMul", operands, [f"{stem}_gathered"], name=f"{stem}_gathered")
    branches = {name: helper.make_graph(nodes, f"{stem}_{name}", [],
                                        [helper.make_tensor_value_info(nodes[-1].output[0], site.elem_type, None)])
                for name, nodes in (("dense", then), ("gathered", [gathered, product]))}
    switch = helper.make_node("If", [cond.output[0]], [matmul.output[0]], name=f"{stem}_dense_switch",
                              then_branch=branches["dense"], else_branch=branches["gathered"])
    return [count, cond, switch]


def _dense_nodes(g: onnx.GraphProto, matmul: onnx.NodeProto, site: Site, idx: str, weight: str, stem: str,
                 output: str | None = None) -> list[onnx.NodeProto]:
    """The dense form of ``matmul`` (a site), reading the router's ``idx`` and the stacked ``weight`` [I, E * O], its
    output ``output`` (default: the MatMul's), the names it makes beginning with ``stem``; its constants added to
    ``g``."""
    output = output or matmul.output[0]
    nodes: list[onnx.NodeProto] = []

    def const(values: list[int], base: str) -> str:
        name = f"{stem}_dense_{base}"
        g.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def node(op: str, ins: list[str], base: str, output: str | None = None, axis: int | None = None) -> str:
        name = output or f"{stem}_dense_{base}"
        made = helper.make_node(op, ins, [name], name=f"{stem}_dense_{base}")
        if axis is not None:
            made.attribute.append(helper.make_attribute("axis", axis))
        nodes.append(made)
        return name

    rows = matmul.input[1] if site.side == "left" else matmul.input[0]
    x = node("Squeeze", [rows, const([2 if site.side == "left" else 1], "axes")], "rows")
    z = node("MatMul", [x, weight], "all")
    z = node("Reshape", [z, const([0, site.experts, site.outputs], "shape")], "experts")
    ix = node("Unsqueeze", [idx, const([1, 2], "index_axes")], "index")
    ix = node("Expand", [ix, const([1, 1, site.outputs], "index_shape")], "index_rows")
    if site.side == "right":
        node("GatherElements", [z, ix], "routed", output, axis=1)
    else:
        y = node("GatherElements", [z, ix], "routed", axis=1)
        node("Reshape", [y, const([0, site.outputs, 1], "column")], "column", output)
    return nodes


def names(g: onnx.GraphProto) -> set[str]:
    """Every name ``g`` holds (values, nodes, weights), its subgraphs' included."""
    out = {t.name for t in g.initializer} | {vi.name for vi in (*g.input, *g.output, *g.value_info)}
    for n in g.node:
        out.update([n.name, *n.input, *n.output])
        for sub in subgraphs(n):
            out |= names(sub)
    return out


def _fresh(taken: set[str], stem: str) -> str:
    """``stem``, lengthened until no name in ``taken`` begins with it and ``_dense`` or ``_gathered`` (the names the
    rewrite makes from it)."""
    while any(t.startswith((f"{stem}_dense", f"{stem}_gathered")) for t in taken):
        stem += "_"
    return stem


def _read(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """The names ``nodes`` read, those their subgraphs read of the outer graph (an If's branches) included."""
    return {i for n in nodes for i in (*n.input, *implicit_inputs(n)) if i}


def _live(nodes: list[onnx.NodeProto], g: onnx.GraphProto, left: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` without the Gathers and Unsqueezes the rewrite left behind (their outputs in ``left``: the sites'
    gathered stacks, their rows unsqueezed) that nothing reads any more, a subgraph included."""
    while True:
        used = _read(nodes) | {o.name for o in g.output}
        dead = [n for n in nodes if n.op_type in ("Gather", "Unsqueeze") and n.output and n.output[0] in left
                and n.output[0] not in used]
        if not dead:
            return nodes
        nodes = [n for n in nodes if n not in dead]


def site_model(site: Site, rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One site's routed product alone, at its sizes (S rows known), its weights and feeds drawn from ``rng``: the
    user's form; :func:`dense` of it (its one site from :func:`sites`) is the other."""
    assert site.rows is not None
    dtype = helper.tensor_dtype_to_np_dtype(site.elem_type)
    e, o, i, s = site.experts, site.outputs, site.inputs, site.rows
    drawn = dtype if dtype in (np.float32, np.float64) else np.float32  # no float64 copy of a float32 stack
    w = rng.standard_normal((e, o, i) if site.side == "left" else (e, i, o), dtype=drawn).astype(dtype, copy=False)
    x_shape = [s, i, 1] if site.side == "left" else [s, 1, i]
    out_shape = [s, o, 1] if site.side == "left" else [s, 1, o]
    gathered = helper.make_node("Gather", ["w", "idx"], ["g"], name="gather", axis=0)
    operands = ["g", "x"] if site.side == "left" else ["x", "g"]
    graph = helper.make_graph(
        [gathered, helper.make_node("MatMul", operands, ["y"], name="routed")], "routed",
        [helper.make_tensor_value_info("x", site.elem_type, x_shape),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [s])],
        [helper.make_tensor_value_info("y", site.elem_type, out_shape)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal(x_shape).astype(dtype), "idx": rng.integers(0, e, s, dtype=np.int64)}
    return model, feeds
