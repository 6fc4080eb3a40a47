"""IR -> ONNX.

Weight-only subgraphs (the concatenated, merged or enlarged weights that rules create, transposed
weights, ...) are folded into initializers with the numpy semantics of :mod:`eqsat.evaluate`, so the
exported model computes them once, at export, not at every inference. Every other operator is written by
its ONNX emitter in :mod:`eqsat.ops` (opaque ones as they were imported).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from . import ops
from .errors import EqsatError
from .evaluate import NotEvaluable, apply_op
from .ir import Graph, Node, topo_order
from .onnx_subgraphs import defined_names, rename_outer


def fold_weights(graph: Graph) -> tuple[list[Node], dict[int, np.ndarray]]:
    """Values of every non-leaf node computable from weights alone (numpy semantics)."""
    order = topo_order(graph.outputs)
    consts: dict[int, np.ndarray] = {}
    for n in order:
        if n.op == "weight":
            consts[id(n)] = graph.weights[n.name]
        elif ops.OPS[n.op].numpy is not None and n.inputs and all(id(i) in consts for i in n.inputs):
            try:
                consts[id(n)] = apply_op(n, [consts[id(i)] for i in n.inputs]).astype(n.dtype, copy=False)
            except NotEvaluable:
                pass
    return order, consts


class _Exporter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.names: dict[int, str] = {}
        self.counter = 0
        self.used_names: set[str] = {i.name for i in graph.inputs} | set(graph.output_names)
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
        self.inits.append(numpy_helper.from_array(np.asarray(array, order="C"), name))
        return name

    def emit(self, op_type: str, inputs: list[str], base: str, **attrs) -> str:
        out = self.fresh(base)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def run(self) -> onnx.ModelProto:
        g = self.graph
        order, consts = fold_weights(g)
        needed = self._needed(order, consts)
        opaque_groups: dict[tuple, list[str]] = {}
        for n in order:
            if id(n) not in needed:
                continue
            if n.op == "input":
                self.names[id(n)] = n.name
            elif id(n) in consts:
                base = n.name if n.op == "weight" and n.name not in self.used_names else "w"
                self.names[id(n)] = self.const(consts[id(n)], base)
            elif n.op == "opaque":
                self._opaque(n, opaque_groups)
            else:
                self.names[id(n)] = self._op(n)
        outputs = []
        for node, name in zip(g.outputs, g.output_names):
            src = self.names[id(node)]
            if src != name:  # an output that is directly a graph input keeps its name, and needs no node
                self.nodes.append(helper.make_node("Identity", [src], [name], name=self.fresh(f"out_{name}")))
            outputs.append(self._value_info(name, node))
        inputs = [self._value_info(i.name, i) for i in g.inputs]
        self.inits += [numpy_helper.from_array(np.asarray(v, order="C"), k) for k, v in g.input_defaults.items()]
        graph = helper.make_graph(self.nodes, g.name, inputs, outputs, initializer=self.inits)
        opsets = [helper.make_opsetid("", g.opset)]
        domains = {n.attrs[1] for n in order if n.op == "opaque" and n.attrs[1] not in ("", "ai.onnx")}
        opsets += [helper.make_opsetid(d, g.domains.get(d, 1)) for d in sorted(domains)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="eqsat")
        model.ir_version = min(model.ir_version, 10)
        return model

    def _value_info(self, name: str, node: Node) -> onnx.ValueInfoProto:
        """The declared type of an input or output: the original model's where it has one."""
        declared = self.graph.interface_types.get(name)
        if declared is not None:
            info = onnx.ValueInfoProto(name=name)
            info.type.ParseFromString(declared)
            return info
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(node.dtype)),
                                             list(node.shape))

    def _needed(self, order: list[Node], consts: dict[int, np.ndarray]) -> set[int]:
        """Nodes the exported graph needs: reachable from the outputs without entering folded constants."""
        needed: set[int] = set()
        stack = list(self.graph.outputs)
        while stack:
            n = stack.pop()
            if id(n) in needed:
                continue
            needed.add(id(n))
            if id(n) not in consts:
                stack.extend(n.inputs)
        return needed

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
    """Export the IR graph as an ONNX model (weight-only subgraphs folded)."""
    return _Exporter(graph).run()


def save_model(model: onnx.ModelProto, path: str) -> None:
    onnx.save(model, path)
