"""A mixture of experts' whole block as onnxruntime's ``MoE`` kernel (``com.microsoft``).

transformers exports a sparse MoE block as a router (``logits = h @ Wr``, a ``Softmax``, a ``TopK`` of k, the k
weights divided by their sum or not, or a ``TopK`` of the logits and a ``Softmax`` of the k) and the experts in their
``batched_mm`` form (every token repeated k times, its experts' matrices gathered from a stack, a gated activation,
the weighted rows summed over k: :mod:`eqsat.onnx.experts`). onnxruntime's CPU ``MoE`` kernel computes that block
from ``h`` and the logits alone: a softmax, the top k, each expert's rows as one GEMM over exactly its tokens (the
routed work only, where the dense form does every expert's), the same gated activation.

The block is found from its anchors (:func:`blocks`: a ``TopK`` over the logits of a product of ``h`` by a constant,
two routed products reading its indices, the first ``ReduceSum`` after the second), and what it computes is decided
by running it (:func:`eqsat.measurement.moe.form_of`): the region between ``h``, the logits and the sum, alone, against the kernel in each
form it could be (gate and up halves in either order or interleaved, SiLU-gated or a plain activation, the weights
normalized or not), on seeded rows that include tied logits, NaN and infinite logits and a fully negative-infinite
row; a form is taken only where every output agrees. Where they differ by construction the kernel is kept from the
inputs it would get wrong:

- ties: the kernel ranks equal probabilities by the higher expert index, ``TopK`` by the lower: the experts are
  written in reverse order (the logits reversed, the stacks reversed), so the same experts are chosen;
- a NaN or an infinite logit makes the user's row NaN and the kernel's finite, and a chosen weight of zero (a
  probability below float32's smallest) is skipped by the kernel where the user's ``0 * inf`` is NaN; and logits a
  few ulps apart can rank the other way in the kernel's softmax than in onnxruntime's: an ``If`` runs the kernel
  only where no logit is NaN, every row's k-th largest is within 50 of its largest and the k-th and the next are
  equal or clearly apart (:func:`_guard`), the user's block otherwise (reading the kernel's stacks at the reversed
  index: no weight held twice).

Which form runs faster is timed (:mod:`eqsat.measurement.moe`); the rewritten model is verified and measured end to
end as every candidate is. ``--portable`` leaves the block as exported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .experts import Site, int_attr, sites
from .pool import array_of
from .subgraphs import implicit_inputs

MS_DOMAIN = "com.microsoft"
SPAN = 50.0
"""the kernel runs only where every row's k-th largest logit is within this of its largest (every chosen probability
above e^-50 / E: far from float32's subnormals, where the kernel skips a weight of zero and the user's 0 * inf is NaN)"""
TIE_GAP = 2.0**-18
"""the k-th and the next logits closer than this share of their spread (and not equal): the user's block runs (the
kernel's softmax and onnxruntime's round differently: logits a few ulps apart can rank the other way)"""
GATED = ("halves", "halves-up-first", "interleaved", "interleaved-up-first")
PLAIN = ("silu", "relu", "identity")  # (the kernel's gelu is the tanh approximation: not torch's default)


@dataclass(frozen=True)
class Block:
    """One MoE block: the rows ``hidden`` [T, H] and the router's ``logits`` [T, E] it reads, the sum it gives
    (``output`` [T, H]), k, and its two routed products (``fc1`` reading the repeated rows, ``fc2`` the activation)."""

    hidden: str
    logits: str
    output: str
    k: int
    fc1: Site
    fc2: Site
    biases: tuple[str | None, str | None] = (None, None)  # the stacks of fc1's and fc2's biases [E, outputs]

    @property
    def experts(self) -> int:
        return self.fc1.experts

    @property
    def rows(self) -> int | None:
        """T, the tokens (None where inference leaves the routed rows unknown)."""
        return None if self.fc1.rows is None else self.fc1.rows // self.k

    @property
    def key(self) -> tuple[object, ...]:
        """What its timing depends on."""
        return self.fc1.key, self.fc2.key, self.k

    @property
    def width(self) -> int:
        return self.fc1.inputs

    @property
    def inner(self) -> int:
        return self.fc2.inputs


@dataclass(frozen=True)
class Form:
    """How the kernel computes a block: the layout of the first stack's rows (``GATED``: gate and up halves, or
    interleaved, in either order; ``PLAIN``: the activation of a block without a gate), whether the k weights are
    divided by their sum, and a gated activation's constants (GPT-OSS's: 1.702, 1, 7)."""

    layout: str
    normalize: int
    alpha: float = 1.0  # the gated activation's G * sigmoid(alpha G) * (clip(L) + beta), G = min(g, limit)
    beta: float = 0.0
    limit: float | None = None

    @property
    def activation(self) -> str:
        return "swiglu" if self.layout in GATED else self.layout


def _single(g: onnx.GraphProto, name: str) -> np.ndarray | None:
    """The one value of a constant (an initializer or a Constant node) ``name`` holds; None where it is no constant
    of one value."""
    for t in g.initializer:
        if t.name == name:
            v = numpy_helper.to_array(t)
            return v.reshape(-1) if v.size == 1 else None
    for n in g.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name and n.attribute[0].name == "value":
            c = numpy_helper.to_array(helper.get_attribute_value(n.attribute[0]))
            return c.reshape(-1) if c.size == 1 else None
    return None


def _scalar(g: onnx.GraphProto, name: str) -> float | None:
    """The float that constant ``name`` holds, or None."""
    v = _single(g, name)
    return float(v[0]) if v is not None and v.dtype.kind == "f" else None


def _descendants(g: onnx.GraphProto, start: str) -> set[str]:
    """The values computed from ``start`` (itself included)."""
    found = {start}
    for n in g.node:
        if any(i in found for i in (*n.input, *implicit_inputs(n))):
            found.update(o for o in n.output if o)
    return found


def region(g: onnx.GraphProto, block: Block) -> list[onnx.NodeProto] | None:
    """The nodes that compute ``block.output`` from its rows, its logits and constants, in graph order; None where
    it reads anything else (a graph input, a value computed before the rows)."""
    producer = {o: n for n in g.node for o in n.output}
    consts = {t.name for t in g.initializer} - {vi.name for vi in g.input}
    need, seen, stack = [], set[int](), [block.output]
    while stack:
        name = stack.pop()
        if name in (block.hidden, block.logits) or name in consts or not name:
            continue
        n = producer.get(name)
        if n is None:
            return None
        if id(n) in seen:
            continue
        seen.add(id(n))
        need.append(n)
        stack.extend([*n.input, *implicit_inputs(n)])
    inside = {id(n) for n in need}
    return [n for n in g.node if id(n) in inside]


def blocks(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> list[Block]:
    """The MoE blocks of ``model``'s main graph, found from their anchors (what each computes is not yet known:
    :func:`eqsat.measurement.moe.form_of`); their routed products' rows inferred at ``input_shapes``."""
    g = model.graph
    routed = sites(model, input_shapes)
    if not routed:
        return []
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    overridable = {vi.name for vi in g.input}
    weights = {t.name: tuple(t.dims) for t in g.initializer if t.name not in overridable}
    found = []
    topks = [n for n in g.node if n.op_type == "TopK" and n.domain in ("", "ai.onnx")]
    owner = {}  # each routed product's router: the last TopK its index is computed from (later layers' from all)
    for tk in topks:
        indexed = _descendants(g, tk.output[1])
        owner.update({s.matmul: tk.output[1] for s in routed if producer[s.gather].input[1] in indexed})
    for tk in topks:
        if int_attr(tk, "largest", 1) != 1:
            continue
        single = _single(g, tk.input[1]) if len(tk.input) > 1 else None
        k = int(single[0]) if single is not None else None
        soft = producer.get(tk.input[0])
        while soft is not None and soft.op_type == "Cast":  # Qwen3-MoE's softmax in float32, cast to the model's
            soft = producer.get(soft.input[0])
        logits = soft.input[0] if soft is not None and soft.op_type == "Softmax" else tk.input[0]
        product = producer.get(logits)
        while product is not None and product.op_type == "Cast":
            product = producer.get(product.input[0])
        if k is None or product is None or product.op_type not in ("MatMul", "Gemm") or product.input[1] not in weights:
            continue
        mine = [s for s in routed if owner.get(s.matmul) == tk.output[1]]
        if len(mine) != 2:
            continue
        first, second = mine if mine[1].matmul in _descendants(g, mine[0].matmul) else mine[::-1]
        if second.matmul not in _descendants(g, first.matmul) or first.inputs != second.outputs \
                or first.elem_type != TensorProto.FLOAT:  # (float32 only: the probes and the timing draw it)
            continue
        total = _sum_after(second.matmul, consumers)
        if total is None:
            continue
        for rows in _views(product.input[0], producer):  # the rows the experts read: the router's, or what it reshaped
            block = Block(rows, logits, total, k, first, second)
            body = region(g, block)
            if body is not None:
                found.append(replace(block, biases=_biases(body, block, weights, producer)))
                break
    return found


def _biases(body: Sequence[onnx.NodeProto], block: Block, weights: Mapping[str, tuple[int, ...]],
            producer: Mapping[str, onnx.NodeProto]) -> tuple[str | None, str | None]:
    """The stacks of biases [E, outputs] the block gathers by its experts' index, fc1's and fc2's (by their size)."""
    index = producer[block.fc1.gather].input[1]
    found: list[str | None] = [None, None]
    for n in body:
        if n.op_type == "Gather" and n.input[1] == index and n.input[0] in weights:
            for j, site in enumerate((block.fc1, block.fc2)):
                if found[j] is None and weights[n.input[0]] == (site.experts, site.outputs):
                    found[j] = n.input[0]
                    break
    return found[0], found[1]


def _views(name: str, producer: Mapping[str, onnx.NodeProto], steps: int = 4) -> list[str]:
    """``name`` and the values it is a reshape of, nearest first."""
    out = [name]
    for _ in range(steps):
        n = producer.get(out[-1])
        if n is None or n.op_type not in ("Reshape", "Flatten", "Identity"):
            break
        out.append(n.input[0])
    return out


def _sum_after(name: str, consumers: Mapping[str, list[onnx.NodeProto]], steps: int = 8) -> str | None:
    """The first ReduceSum along single readers from ``name``."""
    for _ in range(steps):
        readers = consumers.get(name, [])
        if len(readers) != 1:
            return None
        if readers[0].op_type == "ReduceSum":
            return readers[0].output[0]
        name = readers[0].output[0]
    return None


def _stack(model: onnx.ModelProto, site: Site) -> np.ndarray:
    """``site``'s weights as [E, outputs, inputs]."""
    w = array_of(next(t for t in model.graph.initializer if t.name == site.weight))
    return w if site.side == "left" else np.transpose(w, (0, 2, 1))


def kernel_stacks(model: onnx.ModelProto, block: Block, form: Form) -> list[np.ndarray | None]:
    """The kernel's fc1 [E, 2F or F, H] (gate and up interleaved, the gate first), its biases [E, 2F or F] (or
    None), fc2 [E, H, F] and its biases [E, H] (or None), the experts in reverse order."""
    inits = {t.name: t for t in model.graph.initializer}
    w1, w2 = _stack(model, block.fc1), _stack(model, block.fc2)
    b1, b2 = (None if b is None else array_of(inits[b]) for b in block.biases)
    if form.layout in GATED:
        w1 = _interleaved(w1, form.layout, block.inner)
        b1 = None if b1 is None else _interleaved(b1[:, :, None], form.layout, block.inner)[:, :, 0]
    return [None if x is None else np.ascontiguousarray(x[::-1]) for x in (w1, b1, w2, b2)]


def _interleaved(w: np.ndarray, layout: str, f: int) -> np.ndarray:
    """``w`` [E, 2F, X] (its rows in ``layout``) with the gate's and the up's rows interleaved, the gate first."""
    gate, up = {"halves": (w[:, :f], w[:, f:]), "halves-up-first": (w[:, f:], w[:, :f]),
                "interleaved": (w[:, 0::2], w[:, 1::2]), "interleaved-up-first": (w[:, 1::2], w[:, 0::2])}[layout]
    return np.stack([gate, up], axis=2).reshape(w.shape[0], 2 * f, w.shape[2])


def write(model: onnx.ModelProto, chosen: Sequence[tuple[Block, Form]], stem: str = "moe") -> onnx.ModelProto:
    """``model`` (a copy) with each block of ``chosen`` computed by the kernel in its form behind the ``If`` on its
    logits (module docstring), the user's block in the other branch; the names made begin with ``stem`` and the
    block's number."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    removable: set[str] = set()  # the blocks' nodes, by their first output (protobuf copies nodes on extend)
    stacks: set[str] = set()
    written: dict[tuple[object, ...], dict[str, str]] = {}  # a stack several blocks read, written for the kernel once
    for j, (block, form) in enumerate(chosen):
        body = region(g, block)
        assert body is not None
        removable |= {n.output[0] for n in body}
        stacks |= {block.fc1.weight, block.fc2.weight}
        made = _kernel(out, block, form, body, f"{stem}{j}", written)
        at = next(k for k, n in enumerate(g.node) if block.output in n.output)
        nodes = [*g.node[:at], *made, *g.node[at + 1:]]
        del g.node[:]
        g.node.extend(nodes)
    kept_nodes = _live(list(g.node), removable, {o.name for o in g.output})
    del g.node[:]
    g.node.extend(kept_nodes)
    made_here = {o for n in g.node for o in n.output}
    shapes = [vi for vi in g.value_info if vi.name in made_here]
    del g.value_info[:]
    g.value_info.extend(shapes)
    read = {i for n in g.node for i in (*n.input, *implicit_inputs(n))}
    kept = [t for t in g.initializer if t.name in read or t.name not in stacks]
    del g.initializer[:]
    g.initializer.extend(kept)
    if not any(o.domain == MS_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return out


def _kernel(model: onnx.ModelProto, block: Block, form: Form, body: Sequence[onnx.NodeProto],
            stem: str, written: dict[tuple[object, ...], dict[str, str]]) -> list[onnx.NodeProto]:
    """The nodes that compute ``block.output`` in its place (the guard and the ``If``), their weights (those of
    ``written``, by the user's stacks and the form, where another block's are the same) and constants added to
    ``model``."""
    g = model.graph
    key = (block.fc1.weight, block.fc1.side, block.fc2.weight, block.fc2.side, block.biases, form)
    if key not in written:
        written[key] = {}
        for part, values in zip(("fc1", "fc1_bias", "fc2", "fc2_bias"), kernel_stacks(model, block, form)):
            written[key][part] = "" if values is None else f"{stem}/{part}"
            if values is not None:
                g.initializer.append(numpy_helper.from_array(values, f"{stem}/{part}"))
    names = written[key]
    elem = block.fc1.elem_type

    consts: set[str] = set()

    def const(values: object, base: str, dtype: type = np.int64) -> str:
        if f"{stem}/{base}" not in consts:
            g.initializer.append(numpy_helper.from_array(np.array(values, dtype=dtype), f"{stem}/{base}"))
            consts.add(f"{stem}/{base}")
        return f"{stem}/{base}"

    made = _guard(block, stem, const)
    reverse = helper.make_node("Slice", [block.logits, const([-1], "last"), const([-(2**63)], "first"),
                                         const([-1], "axis"), const([-1], "back")], [f"{stem}/reversed"],
                               name=f"{stem}/reversed")
    kernel = helper.make_node("MoE", [block.hidden, f"{stem}/reversed", names["fc1"], names["fc1_bias"],
                                      names["fc2"], names["fc2_bias"]],
                              [f"{stem}/kernel"], name=f"{stem}/kernel", domain=MS_DOMAIN, k=block.k,
                              activation_type=form.activation, normalize_routing_weights=form.normalize)
    if form.layout in GATED:  # SiLU(gate) * up: the gate and up rows interleaved, the gate first
        kernel.attribute.extend([helper.make_attribute("swiglu_fusion", 1),
                                 helper.make_attribute("activation_alpha", form.alpha),
                                 helper.make_attribute("activation_beta", form.beta)])
        if form.limit is not None:
            kernel.attribute.append(helper.make_attribute("swiglu_limit", form.limit))
    user, user_out = _user_branch(body, block, form, names, f"{stem}/user", const)
    branch = {"kernel": helper.make_graph([reverse, kernel], f"{stem}_kernel", [],
                                          [helper.make_tensor_value_info(kernel.output[0], elem, None)]),
              "user": helper.make_graph(user, f"{stem}_user", [], [helper.make_tensor_value_info(user_out, elem, None)])}
    switch = helper.make_node("If", [f"{stem}/kernel_safe"], [block.output], name=f"{stem}/switch",
                              then_branch=branch["kernel"], else_branch=branch["user"])
    return [*made, switch]


def _user_branch(body: Sequence[onnx.NodeProto], block: Block, form: Form, names: Mapping[str, str], stem: str,
                 const: Callable[..., str]) -> tuple[list[onnx.NodeProto], str]:
    """The user's block, its names beginning with ``stem``, its two routed products reading the kernel's stacks
    (``names``) at the reversed index, the gate and up rows put back in the user's order after the product (an
    activation's rows moved, not a weight's), a right-hand product as its transpose: no stack copied back. Its
    nodes, and the name of its output."""
    renamed = {o: f"{stem}/{o}" for n in body for o in n.output if o}
    producer = {o: n for n in body for o in n.output}
    sites = {block.fc1.matmul: ("fc1", block.fc1), block.fc2.matmul: ("fc2", block.fc2)}
    out: list[onnx.NodeProto] = []

    def node(op: str, ins: list[str], name: str, output: str | None = None, **attrs: object) -> str:
        made = helper.make_node(op, ins, [output or f"{stem}/{name}"], name=f"{stem}/{name}")
        made.attribute.extend(helper.make_attribute(a, v) for a, v in attrs.items())
        out.append(made)
        return made.output[0]

    for n in body:
        if n.op_type == "Gather" and n.input[0] in (block.fc1.weight, block.fc2.weight):
            continue  # read below from the kernel's stack
        if n.output[0] not in sites:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = f"{stem}/{n.name}"
            c.input[:] = [renamed.get(i, i) for i in c.input]
            c.output[:] = [renamed.get(o, o) for o in c.output]
            out.append(c)
            continue
        part, site = sites[n.output[0]]
        k = 0 if site.side == "left" else 1
        index = renamed.get(producer[n.input[k]].input[1], producer[n.input[k]].input[1])
        back = node("Sub", [const(block.experts - 1, "last_expert"), index], f"{part}_index")
        w = node("Gather", [names[part], back], f"{part}_weights", axis=0)  # [S, O', I]
        x = renamed.get(n.input[1 - k], n.input[1 - k])
        if site.side == "right":  # x [S, 1, I]: the product as (W x^T)^T
            x = node("Transpose", [x], f"{part}_column", perm=[0, 2, 1])
        y = node("MatMul", [w, x], f"{part}_product")  # [S, O', 1], O' in the kernel's row order
        if part == "fc1" and form.layout in GATED:
            y = node("Reshape", [y, const([0, block.inner, 2], "pairs_shape")], "fc1_pairs")
            if form.layout.endswith("up-first"):
                y = node("Slice", [y, const([-1], "pair_last"), const([-(2**63)], "pair_first"),
                                   const([2], "pair_axis"), const([-1], "pair_back")], "fc1_swapped")
            if form.layout.startswith("halves"):
                y = node("Transpose", [y], "fc1_halves", perm=[0, 2, 1])
        shape = [0, site.outputs, 1] if site.side == "left" else [0, 1, site.outputs]
        node("Reshape", [y, const(shape, f"{part}_{site.side}_shape")], f"{part}_out", renamed[n.output[0]])
    return out, renamed[block.output]


def _live(nodes: list[onnx.NodeProto], removable: set[str], outputs: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` without those whose first output is in ``removable`` that nothing reads any more."""
    while True:
        read = {i for n in nodes for i in (*n.input, *implicit_inputs(n))} | outputs
        dead = {n.output[0] for n in nodes if n.output[0] in removable and not any(o in read for o in n.output if o)}
        if not dead:
            return nodes
        nodes = [n for n in nodes if n.output[0] not in dead]


def region_model(model: onnx.ModelProto, block: Block) -> onnx.ModelProto:
    """``block`` alone: inputs its rows [T, H] and its logits [T, E], output its sum."""
    g = model.graph
    body = region(g, block)
    assert body is not None
    read = {i for n in body for i in (*n.input, *implicit_inputs(n))}
    elem = block.fc1.elem_type
    graph = helper.make_graph(
        body, "moe_block",
        [helper.make_tensor_value_info(block.hidden, elem, ["rows", block.width]),
         helper.make_tensor_value_info(block.logits, elem, ["rows", block.experts])],
        [helper.make_tensor_value_info(block.output, elem, ["rows", block.width])],
        [t for t in g.initializer if t.name in read])
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    return out


def forms(block: Block, body: Sequence[onnx.NodeProto] = (), g: onnx.GraphProto | None = None) -> list[Form]:
    """The forms ``block`` could be in, by its stacks' sizes; a gated one's constants as SiLU's, and, where they
    differ, as read off its region ``body`` (of ``g``): a scalar multiplying a Sigmoid's input (alpha), added to a
    value (beta), a Clip's largest bound (limit)."""
    if block.fc1.outputs == block.inner:
        return [Form(layout, normalize) for layout in PLAIN for normalize in (1, 0)]
    if block.fc1.outputs != 2 * block.inner:
        return []
    constants: list[tuple[float, float, float | None]] = [(1.0, 0.0, None)]
    read = _gate_constants(body, g) if g is not None else None
    if read is not None and read != constants[0]:
        constants.append(read)
    return [Form(layout, normalize, *c) for c in constants for layout in GATED for normalize in (1, 0)]


def _gate_constants(body: Sequence[onnx.NodeProto], g: onnx.GraphProto) -> tuple[float, float, float | None] | None:
    """(alpha, beta, limit) as the region's scalars give them (module docstring of :func:`forms`)."""
    producer = {o: n for n in body for o in n.output}
    alpha, beta, limit = 1.0, 0.0, None
    for n in body:
        if n.op_type == "Sigmoid" and n.input[0] in producer and producer[n.input[0]].op_type == "Mul":
            scalars = [_scalar(g, i) for i in producer[n.input[0]].input]
            alpha = next((v for v in scalars if v is not None), alpha)
        elif n.op_type == "Add":
            scalars = [_scalar(g, i) for i in n.input]
            beta = next((v for v in scalars if v is not None), beta)
        elif n.op_type == "Clip" and len(n.input) > 2 and n.input[2]:
            bound = _scalar(g, n.input[2])
            limit = bound if bound is not None and (limit is None or bound > limit) else limit
    return alpha, beta, limit


def probe_rows(block: Block, rows: int, rng: np.random.Generator,
               edges: Sequence[str] = ("equal", "tied", "some -inf")) -> dict[str, np.ndarray]:
    """Seeded rows [rows, H] and logits [rows, E] for :func:`eqsat.measurement.moe.form_of`, the first logits rows the ``edges`` named:
    all equal (a zero row's), tied at the k-th, some -inf, a NaN, +inf, all -inf (the last three the kernel is
    kept from)."""
    h = rng.standard_normal((rows, block.width)).astype(np.float32)
    logits = rng.standard_normal((rows, block.experts)).astype(np.float32) * 2
    e, k = block.experts, block.k
    rest = np.zeros(max(e - 1, 0))
    made = {"equal": np.zeros(e), "tied": np.r_[np.full(k + 1, 1.5), np.zeros(max(e - k - 1, 0))][:e],
            "some -inf": np.r_[-np.inf, rest], "nan": np.r_[np.nan, rest], "inf": np.r_[np.inf, rest],
            "all -inf": np.full(e, -np.inf)}
    for j, name in enumerate(edges[:rows]):
        logits[j] = made[name]
    return {block.hidden: h, block.logits: logits}


def probes(block: Block, rng: np.random.Generator, sizes: Iterable[int] = (1, 7, 40)) -> list[dict[str, np.ndarray]]:
    """The feeds :func:`eqsat.measurement.moe.form_of` runs a block and its kernel on: :func:`probe_rows` at each of
    ``sizes`` rows, rows whose logits the kernel is kept from (NaN, +inf, all -inf) at 1 and 5 rows, and rows a
    hundred times larger (a gated activation's clip reached)."""
    out = [probe_rows(block, rows, rng) for rows in sizes]
    out += [probe_rows(block, rows, rng, (edge,)) for edge in ("nan", "inf", "all -inf") for rows in (1, 5)]
    for rows in (3, 20):
        large = probe_rows(block, rows, rng)
        out.append({**large, block.hidden: large[block.hidden] * 100})
    return out


def _guard(block: Block, stem: str, const: Callable[..., str]) -> list[onnx.NodeProto]:
    """The nodes whose output ``{stem}/kernel_safe`` says the kernel gives the user's block on these logits, in few
    nodes (a decode step pays for each): no NaN among them (their sum a number), the k-th largest within
    :data:`SPAN` of the largest in every row (no infinite logit, no vanishing weight: every chosen probability above
    e^-50 / E), and, where fewer than all experts are chosen, the k-th and the next logits of every row equal (the
    reversal chooses as TopK does) or apart by more than :data:`TIE_GAP` of their spread (the two softmaxes'
    rounding cannot close that: the kernel ranks them as the user's block does). With the top k + 1 logits less the
    largest, D, one product gives per row (D[k-1], D[k-1] - D[k], D[k-1] - (1 - TIE_GAP) D[k]); compared with
    (-SPAN, 0, TIE_GAP) they are (near, apart, far), and a row is safe where near - apart + far > 0.5 (near, and
    tied or far: D is sorted, so not apart is tied)."""
    k, e = block.k, block.experts
    top = min(k + 1, e)
    columns = np.zeros((top, 3 if top > k else 1), np.float32)
    columns[k - 1, 0] = 1.0
    if top > k:
        columns[k - 1, 1:] = 1.0
        columns[k, 1], columns[k, 2] = -1.0, -(1.0 - TIE_GAP)
    bounds = [-SPAN, 0.0, TIE_GAP][:columns.shape[1]]
    signs = np.array([[1.0], [-1.0], [1.0]][:columns.shape[1]], np.float32)

    def node(op: str, ins: list[str], out: str, **attrs: object) -> str:
        made.append(helper.make_node(op, ins, [f"{stem}/{out}"], name=f"{stem}/{out}"))
        made[-1].attribute.extend(helper.make_attribute(a, v) for a, v in attrs.items())
        return f"{stem}/{out}"

    made: list[onnx.NodeProto] = []
    number = node("Not", [node("IsNaN", [node("ReduceSum", [block.logits], "sum", keepdims=0)], "nan")], "number")
    made.append(helper.make_node("TopK", [block.logits, const([top], "top_k")], [f"{stem}/top", f"{stem}/top_i"],
                                 name=f"{stem}/top", axis=-1))
    d = node("Sub", [f"{stem}/top", node("Slice", [f"{stem}/top", const([0], "zero"), const([1], "one"),
                                                   const([1], "axis1")], "largest")], "below")
    checks = node("Greater", [node("MatMul", [d, const(columns, "columns", np.float32)], "measures"),
                              const(bounds, "bounds", np.float32)], "checks")
    safe = node("MatMul", [node("Cast", [checks], "checks_f", to=TensorProto.FLOAT), const(signs, "signs", np.float32)],
                "row_safe")
    rows = node("Greater", [node("ReduceMin", [safe], "least_safe", keepdims=0), const(0.5, "half", np.float32)],
                "rows_safe")
    node("And", [number, rows], "kernel_safe")
    return made
