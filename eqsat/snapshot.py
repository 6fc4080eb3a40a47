"""The extracted e-graph as plain data: integer-indexed e-classes and e-nodes, the input of every extractor
and cost model. It imports no egglog: :meth:`eqsat.egglog.egraph.EGraph.snapshot` fills it from the runtime
(:func:`eqsat.egglog.codec.decode` reads egglog's tables).

>>> snap = Snapshot([ENode("input", ("i:x",), (), 0), ENode("relu", (), (0,), 1)], [[0], [1]],
...                 [(2,), (2,)], [False, False], [1])
>>> snap.num_classes, snap.reachable()
(2, [0, 1])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Node


@dataclass(frozen=True)
class ENode:
    op: str
    attrs: tuple
    children: tuple[int, ...]
    eclass: int


def new_enode(op: str, attrs: tuple, children: tuple[int, ...], eclass: int, _new=object.__new__) -> ENode:
    """``ENode(op, attrs, children, eclass)``, built without the frozen dataclass's ``__init__`` (which sets each
    field through ``object.__setattr__``; this takes half the time, and a snapshot builds thousands)."""
    node = _new(ENode)
    fields = node.__dict__
    fields["op"] = op
    fields["attrs"] = attrs
    fields["children"] = children
    fields["eclass"] = eclass
    return node


@dataclass
class Snapshot:
    """A frozen e-graph with integer-indexed e-classes, the input of every extractor."""

    nodes: list[ENode]
    classes: list[list[int]]
    """class index -> indices of its e-nodes"""
    shapes: list[tuple[int, ...] | None]
    all_weights: list[bool]
    roots: list[int]
    """class index of each program output"""
    leaves: dict[str, Node] = field(default_factory=dict)
    """egglog name of input/weight leaves -> IR node"""
    opaque: list[Node] = field(default_factory=list)
    """opaque table: id -> an IR node carrying the op's attributes, shape and dtype"""
    handle_classes: dict[str, int] = field(default_factory=dict)
    """handle of every encoded IR node (``(node "nK")``) -> its e-class"""
    node_handles: dict[int, str] = field(default_factory=dict)
    """id of every encoded IR node -> its handle (see :attr:`eqsat.egglog.codec.Encoding.handles`)"""
    _dtypes: list[str] | None = field(default=None, init=False, repr=False, compare=False)

    def class_of(self, node: Node) -> int | None:
        """The e-class of an IR node of the encoded program (None if it was not encoded or was dropped)."""
        h = self.node_handles.get(id(node))
        return self.handle_classes.get(h) if h is not None else None

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def reachable(self) -> list[int]:
        """Classes reachable from the roots (through any e-node)."""
        seen, stack = set(self.roots), list(self.roots)
        while stack:
            c = stack.pop()
            for n in self.classes[c]:
                for ch in self.nodes[n].children:
                    if ch not in seen:
                        seen.add(ch)
                        stack.append(ch)
        return sorted(seen)

    def dtypes(self) -> list[str]:
        """Each e-class's element type as the decoder writes it (:func:`eqsat.decode.build_program`): a leaf's and an
        opaque operator's their own, any other operator's its first operand's (:func:`eqsat.ir.make`); float32
        where no e-node of a class reaches a leaf (an unshaped proposal). Worked out once per snapshot, from the
        leaves up (each cost model's :func:`~eqsat.cost.base.node_costs` of one snapshot reads it)."""
        if self._dtypes is None:
            self._dtypes = self._element_types()
        return self._dtypes

    def _element_types(self) -> list[str]:
        out: list[str | None] = [None] * len(self.classes)
        firsts: dict[int, list[int]] = {}  # class -> the e-nodes whose first operand it is
        ready: list[tuple[int, str]] = []
        for e in self.nodes:
            if e.op in ("input", "weight"):
                ready.append((e.eclass, self.leaves[e.attrs[0]].dtype))
            elif e.op == "opaque":
                ready.append((e.eclass, self.opaque[e.attrs[0]].dtype))
            elif not e.children:
                ready.append((e.eclass, "float32"))
            else:
                firsts.setdefault(e.children[0], []).append(e.eclass)
        while ready:
            c, dtype = ready.pop()
            if out[c] is not None:
                continue
            out[c] = dtype
            ready.extend((parent, dtype) for parent in firsts.get(c, ()) if out[parent] is None)
        return [d or "float32" for d in out]

    def restrict(self) -> Snapshot:
        """The sub-e-graph reachable from the roots, re-indexed (drops unshaped proposals)."""
        keep = self.reachable()
        index = {c: i for i, c in enumerate(keep)}
        nodes: list[ENode] = []
        classes: list[list[int]] = []
        whole = len(keep) == len(self.classes)  # every class kept, every index unchanged: share the (frozen) e-nodes
        for c in keep:  # every child of a node of a reachable class is reachable: every node is kept
            start = len(nodes)
            if whole:
                nodes.extend([self.nodes[n] for n in self.classes[c]])
            else:
                for n in self.classes[c]:
                    e = self.nodes[n]
                    nodes.append(new_enode(e.op, e.attrs, tuple([index[ch] for ch in e.children]), index[c]))
            classes.append(list(range(start, len(nodes))))
        return Snapshot(nodes, classes, [self.shapes[c] for c in keep], [self.all_weights[c] for c in keep],
                        [index[r] for r in self.roots], self.leaves, self.opaque,
                        {h: index[c] for h, c in self.handle_classes.items() if c in index}, self.node_handles)
