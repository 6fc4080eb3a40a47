"""Tables and guards: a Slice of a table that stops below the sizes the user's program accepts becomes an ``If`` on
the sizes it reads being within the table (named :data:`eqsat.onnx.axes.branches.GUARD`, which the verification's
:func:`eqsat.verification.verify_guards` reads back). Its then-branch is the Slice; its else-branch computes the value
at any size: the user's nodes that computed it, moved into the branch, or, where the import had already written
the table, the original's chain (:func:`original_chain`) or the program's chain with the import's tables
computed as the original computes them (:func:`substituted_chain`), copied at the written program's opset
(:func:`source_graph`). Both need the original read as the import reads it, which the caller passes as
``found`` (a run of the rewrite over the original, made at most once and only where needed).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from eqsat.dims import Mono
from eqsat.onnx.axes.branches import GUARD
from eqsat.onnx.kernels import opset_of
from eqsat.onnx.pool import array_of
from eqsat.onnx.subgraphs import implicit_inputs, rename_outer, subgraphs

from .state import Rewrite
from .tables import Prefix, pattern_key, same_prefix


def guard_tables(w: Rewrite, found: Callable[[], Rewrite]) -> None:
    """Each Slice of a table that stops below the sizes the user's program accepts
    (:attr:`~.state.Guards.guarded`) becomes an ``If`` on every size it reads being within the table: its
    then-branch is the Slice, its else-branch the user's nodes that computed the value (moved into it where nothing
    else reads them: they read the outer values, the inputs' Shape among them), so that the written program runs at
    every size and onnxruntime runs only the taken branch. The Slices on the same sizes and bounds share one If (a
    rotary cos and sin, whose chains share their angles). ``found``: the original read as the import reads it."""
    if not w.guards.guarded:
        return
    groups: dict[tuple[tuple[str, int], ...], list[tuple[str, str, Prefix]]] = {}
    for sliced, user, prefix in w.guards.guarded:
        bounds: dict[str, int] = {}
        for a, d in zip(prefix.axes, prefix.ends):
            sym = d.powers[0][0]
            bounds[sym] = min(bounds.get(sym, int(prefix.table.shape[a])), int(prefix.table.shape[a]))
        groups.setdefault(tuple(sorted(bounds.items())), []).append((sliced, user, prefix))
    outputs = w.outputs()
    used, kept = outputs | {user for _, user, _ in w.guards.guarded}, []
    for node in reversed(w.nodes):  # what no output reads does not keep a chain outside the If
        if any(o in used for o in node.output if o):
            kept.append(node)
            used.update(i for i in [*node.input, *implicit_inputs(node)] if i)
    w.nodes = kept[::-1]
    for limits, members in groups.items():
        members = list({m[0]: m for m in members}.values())
        readers: dict[str, set[int]] = {}
        for node in w.nodes:
            for name in [*node.input, *implicit_inputs(node)]:
                readers.setdefault(name, set()).add(id(node))
        slices = {m[0] for m in members}
        then_nodes, then_outs = [], []
        for node in w.nodes:
            if node.output and node.output[0] in slices:
                inner = w.fresh(f"{node.output[0]}_then")
                then_nodes.append((node.output[0], node))
                node.output[0] = inner
        order = {m[0]: k for k, m in enumerate(members)}
        then_nodes.sort(key=lambda t: order[t[0]])
        made = {o: n for n in w.nodes for o in n.output if o}
        copied: dict[str, tuple[list[onnx.NodeProto], str]] = {}
        for _, user, prefix in members:
            if reads_table(w, user, made):
                # a table the import already wrote: the user's chain is the original's, or, where the written
                # value is not one of the original's (a rotary table's halves the e-graph sliced off), the
                # user's chain copied with the import's tables it reads computed as the original computes them
                chain = original_chain(w, found, prefix) or substituted_chain(w, found, user, made)
                if chain is not None:
                    copied[user] = chain
                else:
                    w.notes.append(f"the value {user!r} reads a table the import wrote, which stops at its bound: "
                                   "the written program is kept only where the original stops below it too")
        moved: set[int] = set()
        needed = {m[1] for m in members if m[1] not in copied}
        for node in reversed(w.nodes):
            outs = [o for o in node.output if o]
            if id(node) in {id(n) for _, n in then_nodes} or not any(o in needed for o in outs):
                continue
            if any(o in outputs or not readers.get(o, set()) <= moved for o in outs):
                continue
            moved.add(id(node))
            needed.update(i for i in [*node.input, *implicit_inputs(node)] if i)
        else_nodes = [n for n in w.nodes if id(n) in moved]
        else_outs = []
        for sliced, user, prefix in members:
            if user in copied:
                else_nodes += copied[user][0]
            value = _as_table(w, copied[user][1] if user in copied else user, user, sliced, prefix,
                              {o: n for n in else_nodes for o in n.output if o}, else_nodes)
            out = w.fresh(f"{sliced}_else")
            else_nodes.append(helper.make_node("Identity", [value], [out], name=out))
            else_outs.append(out)
        else_nodes = _needed(else_nodes, set(else_outs))
        then_outs = [n.output[0] for _, n in then_nodes]
        gone = moved | {id(n) for _, n in then_nodes}
        w.nodes = [n for n in w.nodes if id(n) not in gone]

        def branch(nodes: list[onnx.NodeProto], outs: list[str], label: str,
                   members: list[tuple[str, str, Prefix]] = members) -> onnx.GraphProto:
            infos = [helper.make_tensor_value_info(o, w.types.get(m[0], 0), None)
                     for o, m in zip(outs, members)]
            return helper.make_graph(nodes, w.fresh(label), [], infos)

        syms = [Mono.symbol(s) for s, _ in limits]
        limit = w.const(np.array([b + 1 for _, b in limits], np.int64), "bound")
        within = w.fresh("within_table")
        w.nodes.append(helper.make_node("Less", [w.vector(syms), limit], [within], name=within))
        if len(limits) > 1:
            every = w.fresh("within_table")
            w.nodes.append(helper.make_node("Cast", [within], [every + "_i"], name=every + "_i",
                                            to=onnx.TensorProto.INT64))
            w.nodes.append(helper.make_node("ReduceMin", [every + "_i"], [every + "_m"], name=every + "_m",
                                            keepdims=0))
            w.nodes.append(helper.make_node("Cast", [every + "_m"], [every], name=every,
                                            to=onnx.TensorProto.BOOL))
            within = every
        node = helper.make_node("If", [within], [m[0] for m in members], name=w.fresh(GUARD),
                                then_branch=branch([n for _, n in then_nodes], then_outs, "within"),
                                else_branch=branch(else_nodes, else_outs, "beyond"))
        w.nodes.append(node)
    w.nodes = _topological(w.nodes)


def _as_table(w: Rewrite, value: str, user: str, sliced: str, prefix: Prefix, made: Mapping[str, onnx.NodeProto],
              nodes: list[onnx.NodeProto]) -> str:
    """The else-branch's ``value`` (the user's value ``user``, or the original's chain computing it) at the
    then-branch's shape: the table holds size 1 on the value's repeated symbolic axes (the Slice's readers
    broadcast it, or expand it after the If), where the user's value has its full size (DeBERTa's relative
    positions expanded to ``[batch*heads, seq, seq]``), so that both branches give one value of one shape, which
    the guard's check compares. An Expand to the full size read as its input where that has the table's shape
    already, else its first entry along those axes (a Slice, appended to ``nodes``); the value itself where it
    has size 1 there."""
    cut = [a for a in range(prefix.table.ndim) if a not in prefix.axes and prefix.table.shape[a] == 1]
    have, want = w.shapes.get(user), w.shapes.get(sliced)
    if have is not None and len(have) == prefix.table.ndim:
        cut = [a for a in cut if (d := have[a]) is None or not d.is_const]
    if not cut:
        return value
    node = made.get(value)
    if node is not None and node.op_type == "Expand" and node.domain in ("", "ai.onnx") and want is not None \
            and None not in want and w.shapes.get(node.input[0]) == want:
        return node.input[0]
    out = w.fresh(f"{sliced}_first")
    nodes.append(helper.make_node("Slice", [value, w.const(np.zeros(len(cut), np.int64), "starts"),
                                            w.const(np.ones(len(cut), np.int64), "ends"),
                                            w.const(np.array(cut, np.int64), "axes")], [out], name=out))
    return out


def _needed(nodes: list[onnx.NodeProto], outs: set[str]) -> list[onnx.NodeProto]:
    """The ``nodes`` the values ``outs`` are computed from (an Expand :func:`_as_table` read through left out),
    in their order."""
    needed, kept = set(outs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output if o):
            kept.append(node)
            needed.update(i for i in [*node.input, *implicit_inputs(node)] if i)
    return kept[::-1]


def reads_table(w: Rewrite, user: str, made: Mapping[str, onnx.NodeProto]) -> bool:
    """Whether the nodes computing ``user`` read a table the import wrote (a Slice of a constant up to a size
    computed from the shapes: directly, or through the Slices and Concat of a rotary table's halves), which
    stops at the same bound: the chain to run beyond it is then the original's."""
    seen, todo = set(), [user]
    while todo:
        node = made.get(todo.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type == "Slice" and node.input[0] in w.constants and len(node.input) > 2 \
                and node.input[2] not in w.constants:
            return True
        todo.extend(i for i in node.input if i and i not in w.constants)
    return False


def original_chain(w: Rewrite, found: Callable[[], Rewrite], prefix: Prefix
                   ) -> tuple[list[onnx.NodeProto], str] | None:
    """The original's nodes computing the value ``prefix`` is a table of (found as the import found it), copied
    under fresh names (the constants they read copied too), and the name of the value; None where not found."""
    found()
    assert w.guards.original_tables is not None
    users = {user for p, user in w.guards.original_tables if pattern_key(p) == pattern_key(prefix)} \
        or {user for p, user in w.guards.original_tables if same_prefix(p, prefix)}
    return copy_original(w, users.pop()) if len(users) == 1 else None  # (two values alike there: neither)


def source_graph(w: Rewrite) -> onnx.GraphProto | None:
    """The original's graph with its nodes at the written program's opset: the original's own, or converted
    where the program is of a newer opset (a kernel's upgrade, :mod:`eqsat.onnx.kernels`: a chain copied into an
    If must be of the program's opset, e.g. a ReduceMean's ``axes`` an input from opset 18); None where ONNX's
    converter cannot take it there (no chain is copied then)."""
    graph, why = w.facts.source(opset_of(w.model))
    if graph is None:
        note = f"the original's nodes are not copied into the written opset: {why}"
        if note not in w.notes:
            w.notes.append(note)
    return graph


def copy_original(w: Rewrite, user: str, within: Collection[str] | None = None
                  ) -> tuple[list[onnx.NodeProto], str] | None:
    """The original's nodes computing its value ``user`` (at the written program's opset), copied under fresh
    names, and the value's new name; None where the original cannot be read at that opset, or where the chain
    holds a node computing a value not ``within`` (where given: the data a size is read off, which only a
    ``Shape`` read from the inputs' shapes spares). The initializers they read are the program's own where it holds
    one of the same name and values (an embedding read for its shape), else copied, once for every chain."""
    copied = copy_values(w, [user], within)
    return None if copied is None else (copied[0], copied[1][0])


def copy_values(w: Rewrite, users: Sequence[str], within: Collection[str] | None = None, shapes_read: bool = True
                ) -> tuple[list[onnx.NodeProto], list[str]] | None:
    """:func:`copy_original` of several values at once (the nodes they share copied once); ``shapes_read``: a
    ``Shape`` whose sizes the symbols give written from the inputs' shapes, not copied (False: every node copied,
    the program outside not read)."""
    g = source_graph(w)
    if g is None:
        return None
    inits = {t.name: t for t in g.initializer} | {t.name: t for t in w.original.graph.initializer}
    needed, chain, sized = set(users), [], []
    rename: dict[str, str] = {}
    for node in reversed(g.node):
        if any(o in needed for o in node.output if o):
            sizes = _shape_read(w, node) if shapes_read else None
            if sizes is not None:  # its input not computed for it (an encoder's output: not the encoder again)
                rename[node.output[0]], written = _in_branch(w, sizes)
                sized += written
                continue
            if within is not None and any(o not in within for o in node.output if o):
                return None
            chain.append(node)
            needed.update(i for i in [*node.input, *implicit_inputs(node)] if i)
    for name in sorted(needed & set(inits)):
        if name not in w.guards.copied_constants:
            own = w.constants.get(name)
            if own is not None and tuple(own.dims) == tuple(inits[name].dims) \
                    and own.data_type == inits[name].data_type \
                    and np.array_equal(array_of(own), array_of(inits[name])):
                w.guards.copied_constants[name] = name
            else:
                tensor = onnx.TensorProto()
                tensor.CopyFrom(inits[name])
                tensor.name = w.fresh(name)
                w.model.graph.initializer.append(tensor)
                w.guards.copied_constants[name] = tensor.name
        rename[name] = w.guards.copied_constants[name]
    out = []
    for node in reversed(chain):
        copy_node = onnx.NodeProto()
        copy_node.CopyFrom(node)
        copy_node.name = w.fresh(node.name or node.op_type)
        for k, o in enumerate(copy_node.output):
            if o:
                copy_node.output[k] = rename[o] = w.fresh(o)
        out.append(copy_node)
    for node in out:
        for k, i in enumerate(node.input):
            node.input[k] = rename.get(i, i)
        for sub in subgraphs(node):
            rename_outer(sub, rename)
    return sized + out, [rename.get(user, user) for user in users]


def _in_branch(w: Rewrite, sizes: list[Mono]) -> tuple[str, list[onnx.NodeProto]]:
    """``sizes`` written from the inputs' shapes (:meth:`.sizes.SizeWriter.vector`) by nodes of their own, for an
    If's else-branch (the program outside does not compute them on every run, nor reads them: they are not kept
    for it to share)."""
    count, cache, written = len(w.nodes), dict(w.cache), dict(w.written)
    name = w.vector(sizes)
    nodes = w.nodes[count:]
    del w.nodes[count:]
    w.cache, w.written = cache, written
    return name, nodes


def _shape_read(w: Rewrite, node: onnx.NodeProto) -> list[Mono] | None:
    """The sizes a ``Shape`` of the original's gives, where its input's symbolic shape is known
    (:attr:`.original.Original.shapes`) in the symbols the program reads: written from the inputs' shapes, they
    need no run of what computes its input (a table's chain copied into an ``If`` that reads the length off a
    layer's output: T5's relative positions, read after its first layer norm, which the else-branch computed
    again). None where it is no such Shape."""
    if node.op_type != "Shape" or node.domain not in ("", "ai.onnx"):
        return None
    shape = w.facts.shapes.get(node.input[0])
    if shape is None or any(s not in w.places for d in shape for s, _ in d.powers):
        return None
    attrs = {a.name: a.i for a in node.attribute}
    return list(shape)[attrs.get("start", 0):attrs.get("end")]


def substituted_chain(w: Rewrite, found: Callable[[], Rewrite], user: str, made: Mapping[str, onnx.NodeProto]
                      ) -> tuple[list[onnx.NodeProto], str] | None:
    """The program's nodes computing ``user`` from the tables the import wrote (a Slice of a constant up to a
    size computed from the shapes), copied under fresh names, with each such Slice replaced by the original's
    nodes computing the value it stands for (cut to size 1 along the axes the table was cut along: a table
    repeated along the batch). The chain's other nodes (the sizes it expands to) are copied too: they run only
    where the If takes its else-branch. None where a table is not one the original's import found, or a node
    holds a subgraph."""
    read = found()
    by_table: dict[tuple[str, tuple[int, ...], str], str] = {}
    for _, name, p in read.guards.guarded:
        by_table.setdefault(_table_key(p.table), name)
    order = {id(n): k for k, n in enumerate(w.nodes)}
    chain: dict[int, onnx.NodeProto] = {}
    tables: dict[str, str] = {}  # an import's Slice's output -> the original's value it stands for
    todo = [user]
    while todo:
        node = made.get(todo.pop())
        if node is None or id(node) in chain:
            continue
        if node.op_type == "Slice" and node.input[0] in w.constants and len(node.input) > 2 \
                and node.input[2] not in w.constants:
            stands = by_table.get(_table_key(array_of(w.constants[node.input[0]])))
            if stands is None:
                return None
            tables[node.output[0]] = stands
            continue
        if any(True for _ in subgraphs(node)) or id(node) not in order:
            return None
        chain[id(node)] = node
        todo.extend(i for i in node.input if i and i not in w.constants)
    if not tables:
        return None
    depends = set(tables)
    kept = sorted(chain.values(), key=lambda n: order[id(n)])
    for node in kept:
        if any(i in depends for i in node.input):
            depends.update(o for o in node.output if o)
    if user not in depends:
        return None
    out: list[onnx.NodeProto] = []
    rename: dict[str, str] = {}
    for sliced, name in tables.items():
        have, want = read.shapes.get(name), w.shapes.get(sliced)
        if have is None or want is None or len(have) != len(want) or None in have or None in want:
            return None
        cut = [a for a, (h, v) in enumerate(zip(have, want)) if h != v]
        if any(want[a] != Mono.const(1) for a in cut):
            return None
        chain_ = copy_original(w, name)
        if chain_ is None:
            return None
        nodes_, value = chain_
        out += nodes_
        if cut:
            first = w.fresh("beyond")
            out.append(helper.make_node("Slice", [value, w.const(np.zeros(len(cut), np.int64), "starts"),
                                                  w.const(np.ones(len(cut), np.int64), "ends"),
                                                  w.const(np.array(cut, np.int64), "axes")], [first],
                                        name=first))
            value = first
        rename[sliced] = value
    for node in kept:
        copy_node = onnx.NodeProto()
        copy_node.CopyFrom(node)
        copy_node.name = w.fresh(node.name or node.op_type)
        for k, i in enumerate(copy_node.input):
            copy_node.input[k] = rename.get(i, i)
        for k, o in enumerate(copy_node.output):
            if o:
                copy_node.output[k] = rename[o] = w.fresh(o)
        out.append(copy_node)
    return out, rename[user]


def _table_key(table: np.ndarray) -> tuple[str, tuple[int, ...], str]:
    """A key equal for two tables of the same values."""
    return str(table.dtype), tuple(table.shape), hashlib.sha256(np.ascontiguousarray(table).tobytes()).hexdigest()


def _topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` in an order where each comes after what it reads (its subgraphs' outer reads included), as close
    to the given order as that allows."""
    made = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    waits: list[set[int]] = []
    readers: dict[int, list[int]] = {}
    for k, node in enumerate(nodes):
        deps = {made[i] for i in [*node.input, *implicit_inputs(node)] if i in made and made[i] != k}
        waits.append(deps)
        for d in deps:
            readers.setdefault(d, []).append(k)
    ready = [k for k, deps in enumerate(waits) if not deps]
    heapq.heapify(ready)
    out: list[onnx.NodeProto] = []
    while ready:
        k = heapq.heappop(ready)
        out.append(nodes[k])
        for r in readers.get(k, []):
            waits[r].discard(k)
            if not waits[r]:
                heapq.heappush(ready, r)
    return out if len(out) == len(nodes) else nodes


__all__ = ["copy_original", "copy_values", "guard_tables", "original_chain", "reads_table", "source_graph", "substituted_chain"]
