"""E-graph -> IR: rebuild a program from one chosen e-node per e-class."""

from __future__ import annotations

from collections.abc import Mapping

from . import ir
from .dims import is_symbolic
from .errors import EqsatError
from .ir import Graph, Node
from .onnx import origins
from .onnx.dimensions import symbolic_target
from .snapshot import Snapshot


def build_program(snap: Snapshot, choice: Mapping[int, int], template: Graph) -> Graph:
    """The IR program that ``choice`` (class -> e-node index) selects; inputs/weights/names from ``template``.
    The template's origins (:mod:`eqsat.onnx.origins`) whose expansion the choice keeps unchanged are carried over,
    so that the exporter writes those ONNX nodes back verbatim."""
    built: dict[int, Node] = {}

    def build(c: int) -> Node:
        stack = [(c, False)]
        while stack:
            cls, ready = stack.pop()
            if cls in built:
                continue
            if cls not in choice:
                raise EqsatError(f"extraction chose no e-node for e-class {cls}")
            e = snap.nodes[choice[cls]]
            if not ready:
                stack.append((cls, True))
                stack.extend((ch, False) for ch in e.children if ch not in built)
                continue
            args = [built[ch] for ch in e.children]
            if e.op in ("input", "weight"):
                node = snap.leaves[e.attrs[0]]
            elif e.op == "opaque":
                proto = snap.opaque[e.attrs[0]]
                node = Node("opaque", tuple(args), proto.attrs, proto.shape, proto.dtype)
            elif e.op == "reshape" and is_symbolic(args[0].shape):  # the e-graph holds its target as numbers
                node = ir.make(e.op, args, symbolic_target(args[0].shape, e.attrs))
            else:
                node = ir.make(e.op, args, e.attrs)
            want = snap.shapes[cls]
            if want is not None and tuple(node.shape) != tuple(want):
                raise EqsatError(f"e-class {cls}: rebuilt {node!r} but the e-graph says shape {want}")
            built[cls] = node
        return built[c]

    outputs = tuple(build(r) for r in snap.roots)
    carried = (origins.carry(o, snap.class_of, choice, lambda e: snap.nodes[e].children, built)
               for o in template.origins)
    return Graph(template.inputs, outputs, template.output_names, template.weights, template.name, template.opset,
                 template.input_defaults, template.interface_types, template.domains,
                 tuple(o for o in carried if o is not None))
