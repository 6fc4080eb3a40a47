"""The one egglog codec: IR terms written as egglog text, and egglog's tables read back as e-nodes.

* :func:`term`: the egglog term of an operator over operand terms, the single term writer (the rule compiler
  :mod:`eqsat.rules.rule` writes its patterns with it, the encoder its program).
* :class:`Encoding`: IR -> e-graph, the egglog commands that add a program, as text (no egglog runtime here;
  the wrapper :class:`eqsat.egglog.egraph.EGraph` runs them). Every IR node gets a named handle
  (``(node "n7")``) set to its constructor term and its shape; input and weight leaves are named
  ``i:NAME`` / ``w:NAME``; opaque operators are numbered in an opaque table.
* :func:`decode`: e-graph -> :class:`~eqsat.snapshot.Snapshot`, egglog's frozen tables read back (the
  inverse of :func:`term`: the same constructor table, :data:`eqsat.egglog.schema.CONSTRUCTORS`, both ways).
* :func:`tensor_terms`: the distinct tensor terms that egglog text builds (a rule's growth).

>>> term("concat", (1,), ["a", "b", "c"])
'(ConcatN 1 (TCons a (TCons b (TCons c (TNil)))))'
>>> from eqsat import ir
>>> x = ir.input_("x", (2, 3))
>>> commands, outputs = Encoding().program([ir.make("relu", [x])])
>>> commands[2], outputs
('(set (node "n1") (Relu (node "n0")))', ['n1'])
>>> sorted(tensor_terms("(Pend r (Relu (Relu x))) (Pend q (Relu x))"))
['(Relu (Relu x))', '(Relu x)']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import ops
from ..dims import fingerprint
from ..ir import Node, topo_order
from ..ops.egglog_text import attr_text, shape_term
from ..snapshot import ENode, Snapshot, new_enode
from . import schema

if TYPE_CHECKING:
    import egglog.bindings as eb

__all__ = ["Encoding", "decode", "handle_shapes", "tensor_list", "tensor_terms", "term"]


def tensor_list(items: Sequence[str]) -> str:
    """egglog list of tensor terms (``TCons`` cells ending in ``TNil``)."""
    lst = "(TNil)"
    for item in reversed(items):
        lst = f"(TCons {item} {lst})"
    return lst


def term(op: str, attrs: Sequence[object], operands: Sequence[str]) -> str:
    """The egglog term of ``op`` over operand terms: the first constructor that fits the operand count (concat:
    ``Concat`` for two, ``ConcatN`` otherwise; attention: with or without a mask). An ``i`` attribute is an int
    or (in rule patterns) egglog text; ``s`` a string (a leaf's name); ``h`` holds all attributes as a Shape."""
    ctor = next((c for c in ops.get(op).ctors if c.fits(len(operands))), None)
    if ctor is None:
        raise ValueError(f"{op} has no egglog constructor for {len(operands)} operands")
    values, tensors, args = iter(attrs), iter(operands), []
    for k in ctor.kinds:
        if k == "i":
            args.append(attr_text(next(values)))
        elif k == "s":
            args.append(f'"{next(values)}"')
        elif k == "h":
            args.append(shape_term(attrs))  # type: ignore[arg-type]
        elif k == "t":
            args.append(next(tensors))
        else:
            args.append(tensor_list(list(tensors)))
    return f"({ctor.name} {' '.join(args)})"


_TERM_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def tensor_terms(text: str) -> set[str]:
    """The distinct tensor-constructor terms (as text, single-spaced) in egglog text: the e-nodes its actions can
    add at most, since egglog builds each distinct term once (variables and shared sub-terms are not new)."""
    found: set[str] = set()
    stack: list[list[str]] = []
    for tok in _TERM_TOKEN.findall(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            items = stack.pop()
            written = f"({' '.join(items)})"
            if items and items[0] in schema.CONSTRUCTORS:
                found.add(written)
            if stack:
                stack[-1].append(written)
        elif stack:
            stack[-1].append(tok)
    return found


@dataclass
class Encoding:
    """What the encoder named so far in one e-graph: its leaves, its opaque table and its next handle."""

    leaves: dict[str, Node] = field(default_factory=dict)
    """egglog name of input/weight leaves -> IR node"""
    opaque: list[Node] = field(default_factory=list)
    """opaque table: id -> an IR node carrying the op's attributes, shape and dtype"""
    opaque_ids: dict[tuple, int] = field(default_factory=dict)
    next_handle: int = 0
    handles: dict[int, str] = field(default_factory=dict)
    """id of every encoded IR node -> its first handle (:meth:`eqsat.snapshot.Snapshot.class_of` reads it)"""
    encoded: list[Node] = field(default_factory=list)
    """the encoded IR nodes, kept alive so that no id in :attr:`handles` is reused"""
    symbolic: bool = False
    """whether each node's ``sym`` (its shape's fingerprint, :mod:`eqsat.dims`) is set too"""
    marks: Mapping[str, frozenset[int]] = field(default_factory=dict)
    """relation (:data:`eqsat.egglog.schema.MARKS`) -> ids of the IR nodes it holds for: ``Causal`` the causal masks
    (:func:`eqsat.ops.attention.causal_masks`), ``Finite`` the masks finite on every input
    (:func:`eqsat.ops.bounds.finite_masks`), ``AboveLowest`` the NaN-zeroing attention masks far above float32's
    lowest (:func:`eqsat.ops.bounds.above_lowest_masks`)"""

    def term(self, n: Node, handles: dict[int, str]) -> str:
        """The constructor term of ``n``, its operands referred to by their handles."""
        refs = [f'(node "{handles[id(m)]}")' for m in n.inputs]
        if n.op in ("input", "weight"):
            key = f"{n.op[0]}:{n.name}"
            self.leaves[key] = n
            return term(n.op, (key,), refs)
        if n.op == "opaque":
            key_ = (n.attrs, n.shape, fingerprint(n.shape), n.dtype)  # symbolic dimensions told apart
            if key_ not in self.opaque_ids:
                self.opaque_ids[key_] = len(self.opaque)
                self.opaque.append(n)
            return term(n.op, (self.opaque_ids[key_],), refs)
        return term(n.op, n.attrs, refs)

    def program(self, outputs: Sequence[Node]) -> tuple[list[str], list[str]]:
        """The commands that add the program rooted at ``outputs`` (in order, one per string), and the handle
        of each output."""
        handles: dict[int, str] = {}
        commands: list[str] = []
        for n in topo_order(outputs):
            h = f"n{self.next_handle}"
            self.next_handle += 1
            handles[id(n)] = h
            if id(n) not in self.handles:
                self.handles[id(n)] = h
                self.encoded.append(n)
            commands.append(f'(set (node "{h}") {self.term(n, handles)})')
            commands.append(f'(set (shape (node "{h}")) {shape_term(n.shape)})')
            if self.symbolic:
                commands.append(f'(set (sym (node "{h}")) {shape_term(fingerprint(n.shape))})')
            if n.op == "weight":
                commands.append(f'(AllW (node "{h}"))')
            commands += [f'({mark} (node "{h}"))' for mark, ids in sorted(self.marks.items()) if id(n) in ids]
        return commands, [handles[id(o)] for o in outputs]


_DECODE = {ctor: (op, kinds, len(kinds) - len(kinds.lstrip("i")) if not kinds.lstrip("i").strip("t") else None)
           for ctor, (op, kinds) in schema.CONSTRUCTORS.items()}
"""constructor -> (op, argument kinds, how many leading i64 attributes when the rest are all tensors, else None)"""


def _shape_values(eg: eb.EGraph, fns: dict) -> dict:
    """egglog Shape value -> its dimensions."""
    i64 = eg.value_to_i64
    shape_of: dict = {}
    for r in range(schema.MAX_RANK + 1):
        for row in fns[f"S{r}"].rows:
            shape_of[row.output] = tuple(map(i64, row.inputs))
    for row in fns["SN"].rows:
        shape_of[row.output] = tuple(int(x) for x in eg.value_to_string(row.inputs[0]).split("_"))
    return shape_of


def handle_shapes(eg: eb.EGraph, function: str = "shape") -> dict[str, tuple[int, ...]]:
    """Each named handle's shape in the analysis ``function`` (``shape``, or ``sym`` in a symbolic e-graph), where
    it has one."""
    fns = eg.freeze().functions
    shape_of = _shape_values(eg, fns)
    of_class = {row.inputs[0]: shape_of[row.output] for row in fns[function].rows}
    return {eg.value_to_string(row.inputs[0]): of_class[row.output] for row in fns["node"].rows
            if row.output in of_class}


def decode(eg: eb.EGraph, encoding: Encoding, output_handles: Sequence[str]) -> Snapshot:
    """Freeze an egglog e-graph into integer-indexed classes and nodes (tensor sort only), the encoding's leaves
    and opaque table attached, its roots the classes of ``output_handles``.

    One pass over egglog's frozen tables. It runs after every MCTS rollout, so the row loop is written for
    speed: constructors whose arguments are i64 attributes then tensors (most) decode by slicing, an e-class
    gets its index from ``dict.setdefault``, and e-nodes skip the frozen dataclass's ``__init__``
    (:func:`~eqsat.snapshot.new_enode`): 10 to 30% less time than a plain loop over each row's arguments on
    grown SqueezeNet and NASNet-A e-graphs (``tests/egglog/test_analysis_rules.py`` checks they agree)."""
    fns = eg.freeze().functions
    i64 = eg.value_to_i64
    shape_of = _shape_values(eg, fns)
    cons = {row.output: row.inputs for row in fns["TCons"].rows}

    def flatten(v) -> list:
        items = []
        while v in cons:
            head, v = cons[v]
            items.append(head)
        return items

    class_index: dict = {}
    index = class_index.setdefault  # index(v, len(class_index)): v's class, numbered in order of first sight
    nodes: list[ENode] = []
    for ctor, (op, kinds, leading) in _DECODE.items():
        rows = fns[ctor].rows
        if leading is not None:
            for row in rows:
                if row.subsumed:
                    continue
                ins = row.inputs
                attrs = tuple(map(i64, ins[:leading]))
                children = tuple([index(v, len(class_index)) for v in ins[leading:]])
                nodes.append(new_enode(op, attrs, children, index(row.output, len(class_index))))
            continue
        for row in rows:
            if row.subsumed:
                continue
            attrs_: list = []
            children_: list[int] = []
            for k, v in zip(kinds, row.inputs):
                if k == "i":
                    attrs_.append(i64(v))
                elif k == "s":
                    attrs_.append(eg.value_to_string(v))
                elif k == "h":
                    attrs_.extend(shape_of[v])
                elif k == "t":
                    children_.append(index(v, len(class_index)))
                else:
                    children_.extend([index(x, len(class_index)) for x in flatten(v)])
            nodes.append(new_enode(op, tuple(attrs_), tuple(children_), index(row.output, len(class_index))))
    classes: list[list[int]] = [[] for _ in range(len(class_index))]
    for i, n in enumerate(nodes):
        classes[n.eclass].append(i)
    shapes: list = [None] * len(classes)
    for row in fns["shape"].rows:
        c = class_index.get(row.inputs[0])
        if c is not None:
            shapes[c] = shape_of[row.output]
    allw = [False] * len(classes)
    for row in fns["AllW"].rows:
        c = class_index.get(row.inputs[0])
        if c is not None:
            allw[c] = True
    handles = {eg.value_to_string(row.inputs[0]): row.output for row in fns["node"].rows}
    roots = [class_index[handles[h]] for h in output_handles]
    handle_classes = {h: class_index[v] for h, v in handles.items() if v in class_index}
    return Snapshot(nodes, classes, shapes, allw, roots, dict(encoding.leaves), list(encoding.opaque),
                    handle_classes, dict(encoding.handles))
