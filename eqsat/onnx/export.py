"""IR -> ONNX.

Weight-only subgraphs (the concatenated, merged or enlarged weights that rules create, transposed
weights, ...) are folded into initializers with the numpy semantics of :mod:`eqsat.evaluate`, so the
exported model computes them once, at export, not at every inference. Every other operator is written by
its ONNX emitter in :mod:`eqsat.ops` (opaque ones as they were imported), except:

- the user's own ONNX nodes (:mod:`eqsat.onnx.origins`) whose IR expansion the program kept unchanged are written
  back verbatim (op type, attributes, domain, original value and node names where free, constant inputs as the
  original constants), so that a round trip with no rewrite is the user's graph and onnxruntime fuses it alike;
- IR patterns that onnxruntime fuses only in another spelling are written in that one (:mod:`eqsat.onnx.forms`);
- the node that computes a graph output writes it under the output's name (no Identity);
- a runtime kernel of an opset newer than the model's (``sdpa``: opset 23's ``Attention``) is written for an
  opset upgrade of the whole model, or, where the upgrade fails, as its decomposition (:mod:`eqsat.onnx.kernels`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from .. import ops
from ..errors import EqsatError
from ..evaluate import NotEvaluable, apply_op
from ..ir import Graph, Node, Origin, leaf_name, topo_order
from ..ops.attention import write_grouped
from ..ops.base import UPGRADE_DOMAIN, emit_activation, newer_allowed
from . import pool
from .forms import Form, SplitGroup, plan
from .fusions import WINDOWED, valid_as_pads
from .kernels import UpgradeError, pending, upgrade
from .neutral import without_neutral
from .subgraphs import defined_names, rename_outer, subgraphs


def fold_weights(graph: Graph, pooled: bool = False) -> tuple[list[Node], dict[int, np.ndarray]]:
    """Values of every non-leaf node computable from weights alone (numpy semantics). ``pooled``: where a weight
    pool is current, each large value goes to the pool as it is computed (:meth:`eqsat.onnx.pool.WeightPool.put`):
    the values are then its mapped arrays, not a heap copy each for the whole export (issue 28: a candidate that
    folds most of its weights held them in the heap, in its model and in the pool)."""
    order = topo_order(graph.outputs)
    consts: dict[int, np.ndarray] = {}
    weights = pool.current() if pooled else None
    for n in order:
        if n.op == "weight":
            consts[id(n)] = graph.weights[leaf_name(n)]
        elif ops.OPS[n.op].numpy is not None and n.inputs and all(id(i) in consts for i in n.inputs):
            try:
                # IEEE arithmetic, as the runtime's: an overflow is an infinity in the weight (the verification
                # then compares it), not a RuntimeWarning pointing at eqsat's source
                with np.errstate(all="ignore"):
                    value = apply_op(n, [consts[id(i)] for i in n.inputs]).astype(n.dtype, copy=False)
            except NotEvaluable:
                continue
            consts[id(n)] = weights.put(value) if weights is not None else value
    return order, consts


class _Exporter:
    def __init__(self, graph: Graph, upgrade: bool = True):
        self.graph = graph
        self.opset = graph.opset
        self.upgrade = upgrade
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.names: dict[int, str] = {}
        self.counter = 0
        self.used_names: set[str] = {leaf_name(i) for i in graph.inputs} | set(graph.output_names)
        inputs = {i.name for i in graph.inputs}
        self.output_names: dict[str, int] = {}
        """graph output name -> id of its node, while no node has been written under that name"""
        self.adopt: dict[int, str] = {}
        for node, name in zip(graph.outputs, graph.output_names):
            if name not in inputs and name not in self.output_names:
                self.output_names[name] = id(node)
                self.adopt.setdefault(id(node), name)
        self.shared: dict[tuple[str, str], str] = {}
        self.written: list[Origin] = []
        for n in topo_order(graph.outputs):  # names inside subgraphs must not be shadowed by ours
            if n.op == "opaque" and n.attrs[2]:
                self.used_names |= defined_names(_proto_node(n))

    def fresh(self, base: str) -> str:
        self.counter += 1
        name = f"{base}_{self.counter}"
        while name in self.used_names:
            self.counter += 1
            name = f"{base}_{self.counter}"
        self.used_names.add(name)
        return name

    def const(self, array: np.ndarray, base: str) -> str:
        name = self.fresh(base)
        self.inits.append(_initializer(array, name))  # a reference where the value is pooled (fold_weights)
        return name

    def emit(self, op_type: str, inputs: list[str], base: str, **attrs) -> str:
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def run(self) -> onnx.ModelProto:
        g = self.graph
        order, consts = fold_weights(g, pooled=True)
        regions = self._regions(consts)
        forms = _claim_splits(plan(g.outputs, consts, newer_allowed(self)), regions)
        forms = {k: f for k, f in forms.items() if k not in regions}
        opaque_groups: dict[tuple, list[str]] = {}
        for n in self._order(consts, regions, forms):
            if id(n) in self.names:  # an output of a region already written
                continue
            if n.op == "input":
                self.names[id(n)] = leaf_name(n)
            elif id(n) in consts:
                if n.op == "weight":
                    self.names[id(n)] = self._shared(("leaf", str(n.name)), consts[id(n)], str(n.name))
                else:
                    self.names[id(n)] = self.const(consts[id(n)], "w")
            elif id(n) in regions:
                self._region(regions[id(n)])
            elif id(n) in forms:
                self.names[id(n)] = self._form(n, forms[id(n)])
            elif n.op == "opaque":
                self._opaque(n, opaque_groups)
            else:
                self.names[id(n)] = self._op(n)
            self._adopt_output_name(n, opaque_groups)
        outputs = []
        for node, name in zip(g.outputs, g.output_names):
            src = self.names[id(node)]
            if src != name:  # an output that is directly a graph input keeps its name, and needs no node
                self.nodes.append(helper.make_node("Identity", [src], [name], name=self.fresh(f"out_{name}")))
            outputs.append(self._value_info(name, node))
        inputs = [self._value_info(leaf_name(i), i) for i in g.inputs]
        self.inits += [numpy_helper.from_array(np.asarray(v, order="C"), k) for k, v in g.input_defaults.items()]
        graph = helper.make_graph(self.nodes, g.name, inputs, outputs, initializer=self.inits)
        opsets = [helper.make_opsetid("", g.opset)]
        domains = {n.attrs[1] for n in order if n.op == "opaque" and n.attrs[1] not in ("", "ai.onnx")}
        domains |= {d for o in self.written for d in o.domains}
        domains |= {n.domain for n in self.nodes if n.domain == UPGRADE_DOMAIN}
        domains |= {d for d in _inner_domains(self.nodes) if d in g.domains}  # an opaque If's branches' own
        opsets += [helper.make_opsetid(d, g.domains.get(d, 1)) for d in sorted(domains)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="eqsat")
        model.ir_version = min(model.ir_version, 10)
        return model

    def _form(self, n: Node, form: Form) -> str:
        """Write ``n`` in its :mod:`eqsat.onnx.forms` form."""
        if form.kind == "matmul":
            a, b = (self.names[id(d)] for d in form.deps)
            if form.shape is not None:
                a = self.emit("Reshape", [a, self.const(np.array(form.shape, np.int64), "shape")], "reshape")
            return self.emit("MatMul", [a, b], "matmul")
        if form.kind == "split":
            assert form.group is not None
            self._split(form.group)
            return self.names[id(n)]
        if form.kind == "grouped":
            q_name, k_name, v_name = (self.names[id(d)] for d in form.deps)
            return write_grouped(self, n.attrs, q_name, k_name, v_name)
        if form.kind == "gemm":
            gemm = self.emit("Gemm", [self.names[id(d)] for d in form.deps], "gemm")
            return emit_activation(self, gemm, n.attrs[0])
        if form.kind == "conv_bias":
            assert form.of is not None
            bias = self._shared(("bias", str(id(n))), form.constants[2], "bias")
            conv = ops.OPS["conv2d"].onnx
            assert conv is not None
            x, w = form.of.inputs
            out = conv(self, form.of.attrs, [self.names[id(x)], self.names[id(w)], bias], [x.shape, w.shape])
            residual = form.deps[2:]
            return self.emit("Add", [out, self.names[id(residual[0])]], "ewadd") if residual else out
        ins = []
        for k, i in enumerate(n.inputs):
            if k in form.constants:
                key = ("stripped", i.name if i.op == "weight" and i.name else str(id(i)))
                ins.append(self._shared(key, form.constants[k], i.name if i.op == "weight" and i.name else "c"))
            else:
                ins.append(self.names[id(i)])
        emitter = ops.OPS[n.op].onnx
        assert emitter is not None
        return emitter(self, n.attrs, ins, [i.shape for i in n.inputs])

    def _split(self, g: SplitGroup) -> None:
        """Write a :class:`~eqsat.onnx.forms.SplitGroup`: (MatMul), (Add of the biases), one Split, and each part
        reshaped to the shape of the node it is."""
        if g.operand is not None:
            x = self.emit("MatMul", [self.names[id(d)] for d in g.deps], "matmul")
        else:
            x = self.names[id(g.source)]
        if g.bias is not None:
            x = self.emit("Add", [x, self.const(g.bias, "bias")], "ewadd")
        parts = [self.fresh("split") for _ in g.sizes]
        sizes = np.array(g.sizes, np.int64)
        if self.opset >= 13:
            split = helper.make_node("Split", [x, self.const(sizes, "sizes")], parts, name=self.fresh("split_node"),
                                     axis=g.axis)
        else:
            split = helper.make_node("Split", [x], parts, name=self.fresh("split_node"), axis=g.axis,
                                     split=list(g.sizes))
        self.nodes.append(split)
        for top, part, shape in zip(g.tops, parts, g.part_shapes):
            if tuple(top.shape) != shape:
                part = self.emit("Reshape", [part, self.const(np.array(top.shape, np.int64), "shape")], "reshape")
            self.names[id(top)] = part

    # -- the user's own nodes (eqsat.onnx.origins) ----------------------------------------------------
    def _regions(self, consts: dict[int, np.ndarray]) -> dict[int, Origin]:
        """Output node -> the origin that writes it: each origin of the graph none of whose outputs is folded
        into a constant or claimed by an earlier origin."""
        regions: dict[int, Origin] = {}
        for o in self.graph.origins:
            ids = [id(n) for _, n in o.outputs]
            if ids and not any(i in consts or i in regions for i in ids):
                regions.update(dict.fromkeys(ids, o))
        return regions

    def _order(self, consts: dict[int, np.ndarray], regions: dict[int, Origin],
               forms: dict[int, Form]) -> list[Node]:
        """The nodes to write, each after the values it reads: a folded constant reads nothing, a region's
        output reads the region's inputs (not the IR nodes of its expansion), a form its own."""

        def deps(n: Node) -> tuple[Node, ...]:
            if id(n) in consts:
                return ()
            if id(n) in forms:
                return forms[id(n)].deps
            o = regions.get(id(n))
            if o is None:
                return n.inputs
            return tuple(m for name, m in o.inputs if m is not None and name not in o.constants)

        order: list[Node] = []
        seen: set[int] = set()
        for out in self.graph.outputs:
            if id(out) in seen:
                continue
            seen.add(id(out))
            stack: list[tuple[Node, tuple[Node, ...], int]] = [(out, deps(out), 0)]
            while stack:
                n, ds, i = stack[-1]
                if i < len(ds):
                    stack[-1] = (n, ds, i + 1)
                    if id(ds[i]) not in seen:
                        seen.add(id(ds[i]))
                        stack.append((ds[i], deps(ds[i]), 0))
                else:
                    stack.pop()
                    order.append(n)
        return order

    def _region(self, o: Origin) -> None:
        """Write an origin's ONNX nodes verbatim: inputs renamed to our names for their values, constant inputs
        as the original constants, original value and node names where they do not clash."""
        rename: dict[str, str] = {}
        for name, node in o.inputs:
            if name in o.constants:
                key = ("leaf", str(node.name)) if node is not None and node.op == "weight" else ("const", name)
                rename[name] = self._shared(key, o.constants[name], name)
            else:
                assert node is not None
                rename[name] = self.names[id(node)]
        for name, node in o.outputs:
            rename[name] = self.names[id(node)] = self._claim(name, node)
        for proto in o.nodes:
            node = onnx.NodeProto()
            node.CopyFrom(proto)
            _pads_explicit(node, o.constants)
            for k, name in enumerate(node.output):
                if name and name not in rename:  # a value inside the region
                    rename[name] = self._claim(name)
                node.output[k] = rename.get(name, name)
            for k, name in enumerate(node.input):
                node.input[k] = rename.get(name, name)
            node.name = self._claim(node.name) if node.name else self.fresh(f"{node.op_type}_node")
            self.nodes.append(node)
        self.written.append(o)

    def _claim(self, name: str, node: Node | None = None) -> str:
        """``name`` if free (or the graph output ``node`` is written as), else a fresh variant of it."""
        if node is not None and self.output_names.get(name) == id(node):
            del self.output_names[name]
            return name
        if name not in self.used_names:
            self.used_names.add(name)
            return name
        return self.fresh(name)

    def _shared(self, key: tuple[str, str], array: np.ndarray, name: str) -> str:
        """One initializer per weight leaf or original constant (``key``), named ``name`` where free."""
        if key not in self.shared:
            self.shared[key] = self._claim(name)
            self.inits.append(_initializer(array, self.shared[key]))
        return self.shared[key]

    def _adopt_output_name(self, n: Node, groups: dict[tuple, list[str]]) -> None:
        """Give the node just written for graph output ``n`` the output's name (no Identity needed). Only the
        nodes written with it can read the value yet (every other reader comes later): they are renamed too."""
        name = self.adopt.get(id(n))
        src = self.names.get(id(n))
        if name is None or src is None or src == name or self.output_names.get(name) != id(n) \
                or not any(src in proto.output for proto in self.nodes):
            return  # an input or an initializer: the Identity stays
        for proto in self.nodes:
            for field in (proto.input, proto.output):
                for k, v in enumerate(field):
                    if v == src:
                        field[k] = name
        del self.output_names[name]
        for outs in groups.values():
            if src in outs:
                outs[outs.index(src)] = name
        for k, v in self.names.items():
            if v == src:
                self.names[k] = name

    def _value_info(self, name: str, node: Node) -> onnx.ValueInfoProto:
        """The declared type of an input or output: the original model's where it has one."""
        declared = self.graph.interface_types.get(name)
        if declared is not None:
            info = onnx.ValueInfoProto(name=name)
            info.type.ParseFromString(declared)
            return info
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(node.dtype)),
                                             list(node.shape))

    def _op(self, n: Node) -> str:
        entry = ops.OPS.get(n.op)
        if entry is None or entry.onnx is None:
            raise EqsatError(f"cannot export {n!r}: its operand is not a weight, so it cannot be folded")
        return entry.onnx(self, n.attrs, [self.names[id(i)] for i in n.inputs], [i.shape for i in n.inputs])

    def _opaque(self, n: Node, groups: dict[tuple, list[str]]) -> None:
        op_type, domain, attr_bytes, out_index, n_out, slots, implicit = n.attrs
        key = (op_type, domain, attr_bytes, n_out, slots, implicit, tuple(id(i) for i in n.inputs))
        if key not in groups:
            names = [self.names[id(i)] for i in n.inputs]
            outer = dict(zip(implicit, names[len(names) - len(implicit):]))
            node = _proto_node(n, [names[k] if k >= 0 else "" for k in slots],
                               [self.fresh(op_type.lower()) for _ in range(n_out)], self.fresh(f"{op_type}_node"))
            for attr in node.attribute:  # the outer values the subgraphs read now have our names
                for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs):
                    rename_outer(sub, {k: v for k, v in outer.items() if k != v})
            self.nodes.append(node)
            groups[key] = list(node.output)
        self.names[id(n)] = groups[key][out_index]


def _claim_splits(forms: dict[int, Form], regions: dict[int, Origin]) -> dict[int, Form]:
    """``forms`` without the split groups that would write a node of the user's regions (``regions``) other than
    whole regions of a part's node (a bias Add): those regions are dropped from ``regions``, the group writes them."""
    groups = {id(f.group): f.group for f in forms.values() if f.group is not None}
    for key, group in groups.items():
        tops = {id(t) for t in group.tops}
        owned = [regions[i] for i in tops if i in regions]
        if any(id(n) in regions for n in group.inner) \
                or any(id(n) not in tops for o in owned for _, n in o.outputs):
            forms = {k: f for k, f in forms.items() if id(f.group) != key}
            continue
        for i in tops:
            regions.pop(i, None)
    return forms


def _pads_explicit(node: onnx.NodeProto, constants: Mapping[str, np.ndarray]) -> None:
    """A user's Conv or pooling node with ``auto_pad`` VALID written with explicit zero pads instead (the same
    computation), so that onnxruntime folds a Pad before it into it (:data:`eqsat.onnx.fusions.PAD_CONV`)."""
    if node.op_type not in WINDOWED or node.domain not in ("", "ai.onnx"):
        return
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    kernel = attrs.get("kernel_shape")
    weight = constants.get(node.input[1]) if node.op_type == "Conv" and len(node.input) > 1 else None
    spatial = len(kernel) if isinstance(kernel, list) else (weight.ndim - 2 if weight is not None else 0)
    written = valid_as_pads(node.op_type, attrs, spatial) if spatial > 0 else None
    if written is not None:
        del node.attribute[:]
        node.attribute.extend(helper.make_attribute(k, v) for k, v in written.items())


def _initializer(array: np.ndarray, name: str) -> TensorProto:
    """The initializer of a weight: a reference into the run's weight pool where ``array`` is one of its arrays
    (:meth:`eqsat.onnx.pool.WeightPool.reference_to`: no copy of the weights per exported program), else a copy."""
    weights = pool.current()
    ref = weights.reference_to(array, name) if weights is not None else None
    return ref if ref is not None else numpy_helper.from_array(np.asarray(array, order="C"), name)


def _proto_node(n: Node, inputs: list[str] | None = None, outputs: list[str] | None = None,
                name: str | None = None) -> onnx.NodeProto:
    """The ONNX node an opaque IR node carries (attributes and subgraphs as imported)."""
    op_type, domain, attr_bytes = n.attrs[:3]
    node = helper.make_node(op_type, inputs or [], outputs or [], name=name, domain=domain or None)
    for b in attr_bytes:
        ap = AttributeProto()
        ap.ParseFromString(b)
        node.attribute.append(ap)
    return node


def export_model(graph: Graph) -> onnx.ModelProto:
    """Export the IR graph as an ONNX model (weight-only subgraphs folded); one that holds a kernel of a newer
    opset is upgraded to it, or, where the upgrade fails, written again with the kernel decomposed. A dense layer's
    all-zero bias is not written (:func:`~eqsat.onnx.neutral.without_neutral`)."""
    model = _Exporter(graph).run()
    if pending(model):
        try:
            model = upgrade(model)
        except UpgradeError:
            model = _Exporter(graph, upgrade=False).run()
    return without_neutral(model)


def _inner_domains(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """The domains of the nodes inside ``nodes``' subgraphs, at any depth."""
    return {d for n in nodes for sub in subgraphs(n) for d in {m.domain for m in sub.node} | _inner_domains(sub.node)}
