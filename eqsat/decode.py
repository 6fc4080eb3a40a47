"""E-graph -> IR: rebuild a program from one chosen e-node per e-class."""

from __future__ import annotations

from collections.abc import Mapping

from . import ir
from .dims import is_symbolic, volume_fp
from .errors import EqsatError
from .ir import Graph, Node
from .onnx import origins
from .onnx.axes.dimensions import symbolic_target
from .snapshot import Snapshot


def imported_shapes(snap: Snapshot, template: Graph) -> dict[int, tuple[int, ...]]:
    """e-class -> the symbolic shape its value has in ``template`` (the imported program: what the import read off
    the model, or computed from an Unsqueeze's axes), for the classes of the template's values of symbolic shape."""
    out: dict[int, tuple[int, ...]] = {}
    for n in template.nodes():
        if is_symbolic(n.shape):
            cls = snap.class_of(n)
            if cls is not None:
                out.setdefault(cls, tuple(n.shape))
    return out


def reshape_dims(shape: tuple[int, ...], target: tuple[int, ...], imported: tuple[int, ...] | None) -> tuple[int, ...]:
    """A reshape's symbolic target from a value of symbolic ``shape``: its e-class's shape in the imported program
    where that is one (the same sizes, the same volume at every size of the symbols: a reshape merged from an
    Unsqueeze of a flattened ``[2*b*s]`` to ``[256, 1, 1]`` keeps ``b`` with ``s``, where reading the numbers at
    ``b = 1`` could hand it to an axis of 1), else read off the input's symbols (:func:`symbolic_target`)."""
    if imported is not None and [int(d) for d in imported] == [int(t) for t in target] \
            and volume_fp(imported) == volume_fp(shape):
        return imported
    return symbolic_target(shape, target)


def build_program(snap: Snapshot, choice: Mapping[int, int], template: Graph) -> Graph:
    """The IR program that ``choice`` (class -> e-node index) selects; inputs/weights/names from ``template``.
    The template's origins (:mod:`eqsat.onnx.origins`) whose expansion the choice keeps unchanged are carried over,
    so that the exporter writes those ONNX nodes back verbatim."""
    built: dict[int, Node] = {}
    imported = imported_shapes(snap, template)

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
                node = ir.make(e.op, args, reshape_dims(args[0].shape, e.attrs, imported.get(cls)))
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
