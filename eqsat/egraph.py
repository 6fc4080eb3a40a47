"""The e-graph: an IR program encoded into egglog (low-level bindings), rule runs, push/pop, export.

>>> from eqsat import ir
>>> x = ir.input_("x", (2, 3)); g = ir.Graph((x,), (ir.make("relu", [x]),), ("y",))
>>> eg = EGraph.from_graph(g)
>>> eg.size().enodes
2
"""

from __future__ import annotations

from dataclasses import dataclass, field

import egglog.bindings as eb

from . import egglog_schema as schema
from .errors import EGraphError
from .ir import Graph, Node, topo_order


def _commands(egraph: eb.EGraph, text: str) -> list:
    try:
        return egraph.parse_program(text)
    except BaseException as exc:  # noqa: BLE001 - Rust panics are BaseException
        raise EGraphError(f"egglog rejected {text[:200]!r}: {exc}") from None


def _run(egraph: eb.EGraph, commands: list) -> list:
    try:
        return egraph.run_program(*commands)
    except BaseException as exc:  # noqa: BLE001 - Rust panics are BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise EGraphError(f"egglog failed: {exc}") from None


@dataclass(frozen=True)
class Size:
    enodes: int
    """Rows of tensor constructors (every e-node, including proposals that never got a shape)."""


@dataclass(frozen=True)
class ENode:
    op: str
    attrs: tuple
    children: tuple[int, ...]
    eclass: int


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

    def restrict(self) -> "Snapshot":
        """The sub-e-graph reachable from the roots, re-indexed (drops unshaped proposals)."""
        keep = self.reachable()
        index = {c: i for i, c in enumerate(keep)}
        nodes, classes = [], []
        for c in keep:
            members = []
            for n in self.classes[c]:
                e = self.nodes[n]
                if all(ch in index for ch in e.children):
                    members.append(len(nodes))
                    nodes.append(ENode(e.op, e.attrs, tuple(index[ch] for ch in e.children), index[c]))
            classes.append(members)
        return Snapshot(nodes, classes, [self.shapes[c] for c in keep], [self.all_weights[c] for c in keep],
                        [index[r] for r in self.roots], self.leaves, self.opaque)


class EGraph:
    """An egglog e-graph holding one program and the rules registered on it."""

    def __init__(self) -> None:
        self._eg = eb.EGraph()
        for form in schema.program():
            _run(self._eg, _commands(self._eg, form))
        self.leaves: dict[str, Node] = {}
        self.opaque: list[Node] = []
        self._opaque_ids: dict[tuple, int] = {}
        self.output_handles: list[str] = []
        self.rulesets: set[str] = set()
        self.depth = 0
        self._next_handle = 0
        self._ctor_names = set(schema.CONSTRUCTORS)
        self._analysis = _commands(self._eg, "(run-schedule (saturate (run analysis)))")
        self._commit = _commands(self._eg, "(run-schedule (saturate (run commit)))")
        self._size_cmd = _commands(self._eg, "(print-size)")

    # -- encoding ----------------------------------------------------------------------------------
    @classmethod
    def from_graph(cls, graph: Graph) -> "EGraph":
        eg = cls()
        eg.add_program(graph.outputs)
        return eg

    def _term(self, n: Node, handles: dict[int, str]) -> str:
        ref = lambda m: f'(node "{handles[id(m)]}")'  # noqa: E731
        if n.op in ("input", "weight"):
            key = f"{n.op[0]}:{n.name}"
            self.leaves[key] = n
            return f'({"Input" if n.op == "input" else "Weight"} "{key}")'
        if n.op == "opaque":
            k = (n.attrs, n.shape, n.dtype)
            if k not in self._opaque_ids:
                self._opaque_ids[k] = len(self.opaque)
                self.opaque.append(n)
            lst = "(TNil)"
            for m in reversed(n.inputs):
                lst = f"(TCons {ref(m)} {lst})"
            return f"(Opaque {self._opaque_ids[k]} {lst})"
        if n.op == "concat" and len(n.inputs) != 2:
            lst = "(TNil)"
            for m in reversed(n.inputs):
                lst = f"(TCons {ref(m)} {lst})"
            return f"(ConcatN {n.attrs[0]} {lst})"
        ctor = "Concat" if n.op == "concat" else schema.OP_TO_CONSTRUCTOR[n.op]
        kinds = schema.CONSTRUCTORS[ctor][1]
        ints = iter(n.attrs)
        tensors = iter(n.inputs)
        args = []
        for k in kinds:
            if k == "i":
                args.append(str(int(next(ints))))
            elif k == "h":
                args.append(schema.shape_term(n.attrs))
            else:
                args.append(ref(next(tensors)))
        return f"({ctor} {' '.join(args)})"

    def add_program(self, outputs: tuple[Node, ...] | list[Node]) -> list[str]:
        """Encode the program rooted at ``outputs``; returns the handle of each output."""
        handles: dict[int, str] = {}
        for n in topo_order(outputs):
            h = f"n{self._next_handle}"
            self._next_handle += 1
            handles[id(n)] = h
            cmds = [f'(set (node "{h}") {self._term(n, handles)})',
                    f'(set (shape (node "{h}")) {schema.shape_term(n.shape)})']
            if n.op == "weight":
                cmds.append(f'(AllW (node "{h}"))')
            for c in cmds:
                _run(self._eg, _commands(self._eg, c))
        outs = [handles[id(o)] for o in outputs]
        self.output_handles.extend(outs)
        self.saturate_analysis()
        return outs

    # -- running -----------------------------------------------------------------------------------
    def run_program(self, text: str) -> list:
        return _run(self._eg, _commands(self._eg, text))

    def run_commands(self, commands: list) -> list:
        return _run(self._eg, commands)

    def parse(self, text: str) -> list:
        return _commands(self._eg, text)

    def saturate_analysis(self) -> None:
        _run(self._eg, self._analysis)

    def commit(self) -> bool:
        """Union every pending right-hand side that got a valid shape; True if an e-class changed."""
        self.saturate_analysis()
        out = _run(self._eg, self._commit)
        return bool(out and out[0].report.updated)

    def push(self) -> None:
        _run(self._eg, [eb.Push(1)])
        self.depth += 1

    def pop(self) -> None:
        if self.depth == 0:
            raise EGraphError("pop without a matching push")
        _run(self._eg, _commands(self._eg, "(pop)"))
        self.depth -= 1

    def size(self) -> Size:
        out = _run(self._eg, self._size_cmd)[0]
        return Size(sum(n for name, n in out.sizes if name in self._ctor_names))

    # -- export ------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Freeze the e-graph into integer-indexed classes and nodes (tensor sort only)."""
        eg = self._eg
        frozen = eg.freeze()
        fns = frozen.functions
        shape_of: dict = {}
        for r in range(schema.MAX_RANK + 1):
            for row in fns[f"S{r}"].rows:
                shape_of[row.output] = tuple(eg.value_to_i64(v) for v in row.inputs)
        for row in fns["SN"].rows:
            shape_of[row.output] = tuple(int(x) for x in eg.value_to_string(row.inputs[0]).split("_"))
        lists: dict = {}
        for row in fns["TNil"].rows:
            lists[row.output] = ()
        cons = {row.output: (row.inputs[0], row.inputs[1]) for row in fns["TCons"].rows}

        def flatten(v) -> tuple:
            items = []
            while v in cons:
                head, v = cons[v]
                items.append(head)
            return tuple(items)

        class_index: dict = {}

        def cls(v) -> int:
            if v not in class_index:
                class_index[v] = len(class_index)
            return class_index[v]

        raw: list[tuple[str, tuple, tuple, int]] = []
        for ctor, (op, kinds) in schema.CONSTRUCTORS.items():
            for row in fns[ctor].rows:
                if row.subsumed:
                    continue
                attrs: list = []
                children: list[int] = []
                for k, v in zip(kinds, row.inputs):
                    if k == "i":
                        attrs.append(eg.value_to_i64(v))
                    elif k == "s":
                        attrs.append(eg.value_to_string(v))
                    elif k == "h":
                        attrs.extend(shape_of[v])
                    elif k == "t":
                        children.append(cls(v))
                    else:
                        children.extend(cls(x) for x in flatten(v))
                raw.append((op, tuple(attrs), tuple(children), cls(row.output)))
        classes: list[list[int]] = [[] for _ in range(len(class_index))]
        nodes = []
        for i, (op, attrs, children, c) in enumerate(raw):
            nodes.append(ENode(op, attrs, children, c))
            classes[c].append(i)
        shapes: list = [None] * len(classes)
        for row in fns["shape"].rows:
            if row.inputs[0] in class_index:
                shapes[class_index[row.inputs[0]]] = shape_of[row.output]
        allw = [False] * len(classes)
        for row in fns["AllW"].rows:
            if row.inputs[0] in class_index:
                allw[class_index[row.inputs[0]]] = True
        handles = {eg.value_to_string(row.inputs[0]): row.output for row in fns["node"].rows}
        roots = [class_index[handles[h]] for h in self.output_handles]
        return Snapshot(nodes, classes, shapes, allw, roots, dict(self.leaves), list(self.opaque))
