"""IR -> e-graph: the egglog commands that add a program, as text (no egglog runtime here; the wrapper
:class:`eqsat.egglog.egraph.EGraph` runs them).

Every IR node gets a named handle (``(node "n7")``) set to its constructor term and its shape; input and
weight leaves are named ``i:NAME`` / ``w:NAME``; opaque operators are numbered in an opaque table.

>>> from eqsat import ir
>>> x = ir.input_("x", (2, 3))
>>> commands, outputs = Encoding().program([ir.make("relu", [x])])
>>> commands[2], outputs
('(set (node "n1") (Relu (node "n0")))', ['n1'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import ops
from ..ir import Node, topo_order
from . import schema


def _tensor_list(items: Sequence[str]) -> str:
    lst = "(TNil)"
    for item in reversed(items):
        lst = f"(TCons {item} {lst})"
    return lst


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

    def term(self, n: Node, handles: dict[int, str]) -> str:
        """The constructor term of ``n``, its operands referred to by their handles."""
        refs = [f'(node "{handles[id(m)]}")' for m in n.inputs]
        if n.op in ("input", "weight"):
            key = f"{n.op[0]}:{n.name}"
            self.leaves[key] = n
            return f'({"Input" if n.op == "input" else "Weight"} "{key}")'
        if n.op == "opaque":
            key_ = (n.attrs, n.shape, n.dtype)
            if key_ not in self.opaque_ids:
                self.opaque_ids[key_] = len(self.opaque)
                self.opaque.append(n)
            return f"(Opaque {self.opaque_ids[key_]} {_tensor_list(refs)})"
        if n.op == "concat" and len(n.inputs) != 2:
            return f"(ConcatN {n.attrs[0]} {_tensor_list(refs)})"
        # the first constructor that fits the operand count (attention: with or without a mask)
        ctor = "Concat" if n.op == "concat" else next(
            (c.name for c in ops.OPS[n.op].ctors if c.fits(len(refs))), schema.OP_TO_CONSTRUCTOR[n.op])
        kinds = schema.CONSTRUCTORS[ctor][1]
        ints = iter(n.attrs)
        tensors = iter(refs)
        args = []
        for k in kinds:
            if k == "i":
                args.append(str(int(next(ints))))
            elif k == "h":
                args.append(schema.shape_term(n.attrs))
            else:
                args.append(next(tensors))
        return f"({ctor} {' '.join(args)})"

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
            commands.append(f'(set (shape (node "{h}")) {schema.shape_term(n.shape)})')
            if n.op == "weight":
                commands.append(f'(AllW (node "{h}"))')
        return commands, [handles[id(o)] for o in outputs]
