"""The tensor IR: an immutable DAG of operators with static shapes and dtypes.

A :class:`Node` is one operator application; nodes compare by identity, so a DAG shares a node by
referring to the same object. A :class:`Graph` holds the inputs, the outputs, and the weight data.

Operators (TENSAT's language plus what ONNX models need) are defined, one entry each, in :mod:`eqsat.ops`:
attributes, shapes, egglog form, numpy semantics, ONNX form, costs. ``print(eqsat.ops.describe())`` lists
them; ``opaque`` carries any other ONNX operator exactly (see :func:`opaque`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import dims as _dims
from .shapes import Shape

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True, eq=False)
class Node:
    """One operator application. Immutable; identity is the node's identity."""

    op: str
    inputs: tuple[Node, ...]
    attrs: tuple
    shape: Shape
    dtype: str = "float32"
    name: str | None = None

    def __repr__(self) -> str:
        label = self.name if self.name else ",".join(map(str, self.attrs)) if self.op != "opaque" else self.attrs[0]
        return f"{self.op}[{label}]{list(self.shape)}"


def make(op: str, inputs: Iterable[Node], attrs: tuple = (), dtype: str | None = None) -> Node:
    """Build a node, inferring its shape (raises :class:`~eqsat.errors.ShapeError`); its symbolic dimensions where
    an operand's or an attribute's are (:func:`eqsat.dims.infer`)."""
    ins = tuple(inputs)
    shape = _dims.infer(op, tuple(attrs), [i.shape for i in ins])
    return Node(op, ins, tuple(attrs), shape, dtype or (ins[0].dtype if ins else "float32"))


def leaf_name(n: Node) -> str:
    """The name of an input or weight leaf (every leaf has one)."""
    if n.name is None:
        raise ValueError(f"{n!r}: a leaf without a name")
    return n.name


def _dims_of(shape: Iterable[int]) -> Shape:
    """A shape as plain sizes, its symbolic dimensions (:class:`eqsat.dims.Dim`) kept."""
    return tuple(d if isinstance(d, _dims.Dim) else int(d) for d in shape)


def input_(name: str, shape: Iterable[int], dtype: str = "float32") -> Node:
    return Node("input", (), (), _dims_of(shape), dtype, name)


def weight(name: str, shape: Iterable[int], dtype: str = "float32") -> Node:
    return Node("weight", (), (), tuple(int(d) for d in shape), dtype, name)


def opaque(op_type: str, inputs: Iterable[Node], shape: Iterable[int], dtype: str = "float32", *,
           domain: str = "", attr_bytes: tuple[bytes, ...] = (), out_index: int = 0,
           n_outputs: int = 1, slots: Iterable[int] | None = None, implicit: Iterable[str] = ()) -> Node:
    """An ONNX operator the optimizer has no rules for, carried unchanged.

    ``inputs`` are the present explicit inputs followed by one node per ``implicit`` name (the outer-scope
    values the operator's subgraphs read), so that the DAG orders the operator after them. ``slots`` maps
    each ONNX input position to an index into ``inputs`` (-1 for an omitted optional input); by default
    every explicit input is present."""
    ins, implicit = tuple(inputs), tuple(implicit)
    slots = tuple(range(len(ins) - len(implicit))) if slots is None else tuple(int(k) for k in slots)
    return Node("opaque", ins, (op_type, domain, attr_bytes, out_index, n_outputs, slots, implicit),
                _dims_of(shape), dtype)


def topo_order(outputs: Iterable[Node], enter: Callable[[Node], bool] | None = None) -> list[Node]:
    """Nodes reachable from ``outputs``, every node after its inputs (iterative DFS, children in order). With
    ``enter``, the walk reads the inputs only of the nodes it accepts (the others are listed, as leaves)."""
    order: list[Node] = []
    seen: set[int] = set()
    for out in outputs:
        if id(out) in seen:
            continue
        stack: list[tuple[Node, int]] = [(out, 0)]
        seen.add(id(out))
        while stack:
            node, i = stack[-1]
            inputs = node.inputs if enter is None or enter(node) else ()
            if i < len(inputs):
                stack[-1] = (node, i + 1)
                child = inputs[i]
                if id(child) not in seen:
                    seen.add(id(child))
                    stack.append((child, 0))
            else:
                stack.pop()
                order.append(node)
    return order


@dataclass(frozen=True, eq=False)
class Origin:
    """ONNX node(s) and the IR nodes they became: the provenance of imported operators (made, carried into
    extracted programs and kept alive by :mod:`eqsat.onnx.origins`)."""

    nodes: tuple[onnx.NodeProto, ...]
    """the region, in the original order (a single node for an operator mapped by the importer)"""
    inputs: tuple[tuple[str, Node | None], ...]
    """each external input's ONNX name and its IR node (None for a constant the IR never materialised)"""
    outputs: tuple[tuple[str, Node], ...]
    """each region output's ONNX name and its IR node"""
    expansion: tuple[Node, ...]
    """the IR nodes the importer created between the inputs and the outputs (outputs included), children first"""
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    """external inputs that are constants (initializers, Constant nodes, folded values): their original value"""

    @property
    def domains(self) -> set[str]:
        return {n.domain for n in self.nodes if n.domain not in ("", "ai.onnx")}


@dataclass
class Graph:
    """A model: named inputs, named outputs, and weight data keyed by weight-node name."""

    inputs: tuple[Node, ...]
    outputs: tuple[Node, ...]
    output_names: tuple[str, ...]
    weights: Mapping[str, np.ndarray] = field(default_factory=dict)
    """read-only here (built-in models generate theirs lazily, :class:`eqsat.models.builder.LazyWeights`)"""
    name: str = "model"
    opset: int = 17
    input_defaults: dict[str, np.ndarray] = field(default_factory=dict)
    """overridable initializers: default values of inputs that are also initializers"""
    interface_types: dict[str, bytes] = field(default_factory=dict)
    """declared types (serialized onnx TypeProto) of inputs and outputs, written back unchanged on export"""
    domains: dict[str, int] = field(default_factory=dict)
    """opset versions of the non-default operator domains (custom operators) the model imports"""
    origins: tuple[Origin, ...] = ()
    """the ONNX nodes the importer mapped to IR operators, each with the IR nodes it became
    (:mod:`eqsat.onnx.origins`): the exporter writes a node back verbatim while its expansion is intact"""

    def nodes(self) -> list[Node]:
        return topo_order(self.outputs)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    def op_counts(self) -> Counter:
        """Operator counts; opaque operators counted under their ONNX op type."""
        c: Counter = Counter()
        for n in self.nodes():
            c[n.attrs[0] if n.op == "opaque" else n.op] += 1
        return c

    def weight_nodes(self) -> list[Node]:
        return [n for n in self.nodes() if n.op == "weight"]

    def num_parameters(self) -> int:
        return int(sum(int(np.prod(n.shape)) for n in self.weight_nodes()))
