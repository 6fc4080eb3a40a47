"""Repeated blocks of a program: copies of one sub-program (the same operators, attributes, shapes and dtypes;
different weights), chained one after the other, like the layers of a transformer.

:func:`find_blocks` looks for them: a block runs from a *cut* (a node every later layer reads only through
it, such as the residual stream after a layer's last norm) to the next cut of the same operator and shape. Its
body is every node on a path between the two cuts, plus the nodes only it reads: weight-only nodes (a transposed
weight) and, after the cut, values it computes from external inputs alone (a layer's own slice of a shared
ALiBi table). Nothing in it other than its output may be read from outside it, except by the program's outputs:
a node of the body that is a program output (a prefill's present key and value, one pair a layer) is a *side
output* of the block. Nodes the body reads from outside (an attention mask computed once, a weight shared by
every layer) are its *external* inputs, the same nodes for every copy. Two blocks are copies when their bodies
hash alike with the cut as a hole (the side outputs at the same places), their private weights by shape and dtype
only, and their external inputs by identity.

:attr:`Blocks.representative` is one copy as a program of its own (inputs: the cut and the external inputs;
its own weights; outputs: its output, then its side outputs); :meth:`Blocks.replay` puts an optimized version of
it in place of every copy, each with its own weights, and returns the whole program.

>>> import numpy as np
>>> from eqsat import ir
>>> x = ir.input_("x", (2, 4))
>>> h = x
>>> for k in range(3):
...     h = ir.make("relu", [ir.make("matmul", [h, ir.weight(f"w{k}", (4, 4))])])
>>> g = ir.Graph((x,), (h,), ("y",), {f"w{k}": np.eye(4, dtype="float32") for k in range(3)})
>>> blocks = find_blocks(g)
>>> blocks.copies, blocks.nodes_per_block
(2, 3)
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import ir
from .dims import fingerprint
from .ir import Graph, Node, Origin, topo_order
from .onnx import origins
from .onnx.axes.dataflow import unique_name
from .ops.bounds import value_range

MIN_BLOCK_NODES = 3
"""operators (weights and weight-only nodes included) a block needs to be worth searching alone"""

MAX_PERIOD = 16
"""at most this many cuts of one operator and shape per block (a layer has one or two: BERT's two LayerNorms;
a long chain that never repeats would try every period)"""
SHARED = 2
"""a value read by this many nodes or more may pass over a cut (:meth:`_Finder.separators`): an input the copies
share (a mask read by every layer, or by every other one where layers alternate, GPT-Neo's global and local
masks); a value read once beyond a cut (a skip connection around the whole stack) keeps it from being one"""
WORK_LIMIT = 2_000_000
"""positions of the order the search for blocks may scan (its candidate blocks' spans, summed) before it settles
for the best run found so far: a few seconds at worst (a long chain of same-shaped operators that never
repeats); the largest real models here take a sixth of it (ViT-Huge's 32 layers)"""

DEFAULT_MIN_COPIES = 3
"""copies a block needs for a default run to search one of them instead of the whole model (two layers are
cheap to search whole, and keep the rewrites that cross their boundary)"""
DEFAULT_MIN_WEIGHTS = 1
"""weights of its own a block needs for a default run to search one copy (layers have weights; a chain of
activations repeats too, but its rewrites cross any cut, as ReLU after ReLU)"""
DEFAULT_MIN_COVER = 0.5
"""the share of a model's nodes its copies must cover for a default run to search one of them (a few small
repeated blocks in a larger model, as VGG's convolutions, leave most of it to the whole-model search)"""


@dataclass(frozen=True, eq=False)
class Block:
    """One copy: the cut it reads, its output, its private weight leaves and its external inputs, each in
    the canonical order that makes copies correspond position by position."""

    cut: Node
    output: Node
    body: frozenset[int]
    """ids of the block's nodes (its output and private weight-only nodes included; not the cut)"""
    weights: tuple[Node, ...]
    externals: tuple[Node, ...]
    sides: tuple[Node, ...] = ()
    """the nodes of the body other than its output that are program outputs (read by nothing outside it)"""


@dataclass(frozen=True, eq=False)
class Blocks:
    """Copies of one block, in program order (each one's cut is the previous one's output)."""

    graph: Graph
    blocks: tuple[Block, ...]
    split: bool = False
    """whether :attr:`graph` is the imported program with its addnorms split (:func:`addnorms_split`): the whole
    program :meth:`replay` gives fuses them again"""

    @property
    def copies(self) -> int:
        return len(self.blocks)

    @property
    def nodes_per_block(self) -> int:
        return len(self.blocks[0].body)

    @functools.cached_property
    def operators_per_block(self) -> int:
        """A copy's operators (its weights and other leaves not counted, as :attr:`Rest.operators`)."""
        body = self.blocks[0].body
        return sum(1 for n in self.graph.nodes() if id(n) in body and n.op not in origins.LEAVES)

    def describe(self) -> dict[str, object]:
        """What the report says of them."""
        first = self.blocks[0]
        return {"copies": self.copies, "nodes_per_block": self.nodes_per_block,
                "weights_per_block": len(first.weights), "external_inputs": len(first.externals),
                "side_outputs": len(first.sides),
                "cut": f"{first.cut.op} {list(first.cut.shape)}",
                "operators": dict(sorted(_op_counts(self.graph, first).items()))}

    @functools.cached_property
    def representative(self) -> Graph:
        """The first copy as a program: inputs ``block_in`` (the cut) and ``block_ext_K`` (its external inputs
        that are not weights), its weights (private and shared) by their names, outputs ``block_out`` and
        ``block_side_K`` (its side outputs)."""
        first = self.blocks[0]
        leaf: dict[int, Node] = {id(first.cut): ir.input_("block_in", first.cut.shape, first.cut.dtype)}
        inputs = [leaf[id(first.cut)]]
        for k, e in enumerate(first.externals):
            if e.op != "weight":
                leaf[id(e)] = ir.input_(f"block_ext_{k}", e.shape, e.dtype)
                inputs.append(leaf[id(e)])
        outs = tuple(_rebuild([first.output, *first.sides], dict(leaf), stop=first.body))
        names = ("block_out", *(f"block_side_{k}" for k in range(len(first.sides))))
        return Graph(tuple(inputs), outs, names, _weights_of(self.graph, outs),
                     name=f"{self.graph.name}-block", opset=self.graph.opset, domains=dict(self.graph.domains))

    def external_ranges(self) -> dict[str, tuple[float, float]]:
        """:attr:`representative`'s external inputs (``block_ext_K``) whose values lie in a known interval in
        every copy (:func:`eqsat.ops.bounds.value_range` over the whole program): an attention mask computed once
        outside the blocks stays proven finite inside the copy searched."""
        out: dict[str, tuple[float, float]] = {}
        for k, e in enumerate(self.blocks[0].externals):
            if e.op == "weight":
                continue
            ranges = [value_range(b.externals[k], self.graph.weights) for b in self.blocks]
            if all(r is not None for r in ranges):
                out[f"block_ext_{k}"] = (min(r[0] for r in ranges if r), max(r[1] for r in ranges if r))
        return out

    @functools.cached_property
    def rest(self) -> Rest:
        """The program outside the blocks (:class:`Rest`)."""
        taken = {ir.leaf_name(n) for n in self.graph.inputs} | set(self.graph.weights) | set(self.graph.output_names)
        memo: dict[int, Node] = {}
        leaves = []
        for k, b in enumerate(self.blocks):
            leaf = ir.input_(unique_name(f"block_out_{k}", taken), b.output.shape, b.output.dtype)
            memo[id(b.output)] = leaf
            leaves.append(leaf)
        named = dict(zip((id(o) for o in self.graph.outputs), self.graph.output_names))
        reads = [o for o in self.graph.outputs] + [b.cut for b in self.blocks] + \
            [e for b in self.blocks for e in b.externals]
        sides = {id(n) for b in self.blocks for n in b.sides}  # outputs the copies compute
        targets = [n for n in {id(n): n for n in reads}.values()
                   if id(n) not in memo and id(n) not in sides and n.op not in origins.LEAVES]
        names = tuple(named.get(id(n)) or unique_name(f"rest_read_{k}", taken) for k, n in enumerate(targets))
        outputs = tuple(_rebuild(targets, memo))
        program = Graph((*self.graph.inputs, *leaves), outputs, names, _weights_of(self.graph, outputs),
                        name=f"{self.graph.name}-rest", opset=self.graph.opset, domains=dict(self.graph.domains),
                        origins=_remap(self.graph.origins, memo, outputs))
        return Rest(program, tuple(targets), tuple(leaves))

    def replay(self, program: Graph, rest: Graph | None = None) -> Graph:
        """The whole program with every copy replaced by ``program`` (a version of :attr:`representative`:
        the same inputs and weight names), each copy reading its own cut, external inputs and weights, and the
        operators outside the blocks replaced by ``rest`` (a version of :attr:`rest`'s program: the same inputs
        and outputs; None: as imported)."""
        first, outside = self.blocks[0], self.rest
        rest = rest if rest is not None else outside.program
        rep_weights = [ir.leaf_name(w) for w in first.weights]
        leaves = [n for n in ir.topo_order(program.outputs) if n.op in origins.LEAVES]
        of_leaf = {ir.leaf_name(x): x for x in rest.inputs}
        read = dict(zip((id(t) for t in outside.targets), rest.outputs))
        new: dict[int, Node] = {}  # id(node of rest) -> node of the whole program
        done: dict[int, Node] = {}  # id(original block output) -> its copy of program

        def mapped(n: Node) -> Node:  # an original node outside the blocks -> the whole program's
            if id(n) in done:
                return done[id(n)]
            return _rebuild([read[id(n)]], new)[0] if id(n) in read else n

        for b, leaf in zip(self.blocks, outside.leaves):
            reads = {"block_in": mapped(b.cut), **{f"block_ext_{k}": mapped(e) for k, e in enumerate(b.externals)
                                                   if e.op != "weight"}}
            own = dict(zip(rep_weights, b.weights))
            shared = {ir.leaf_name(e): e for e in b.externals if e.op == "weight"}
            inner = {id(x): reads[ir.leaf_name(x)] if x.op == "input" else
                     own.get(ir.leaf_name(x)) or shared[ir.leaf_name(x)] for x in leaves}
            out, *sides = _rebuild(program.outputs, dict(inner))
            done[id(b.output)] = new[id(of_leaf[ir.leaf_name(leaf)])] = out
            done.update(zip((id(n) for n in b.sides), sides))
        outs = tuple(mapped(o) for o in self.graph.outputs)
        if self.split:
            outs = _fused(outs)
        return dataclasses.replace(self.graph, outputs=outs,
                                   origins=origins.live(_remap(rest.origins, new, outs), outs))


@dataclass(frozen=True, eq=False)
class Rest:
    """The operators outside the blocks as a program of their own (the embeddings, a mask computed once, the
    head): its inputs are the model's and one ``block_out_K`` per copy (its output); its outputs are the
    model's outputs computed outside the blocks (not the copies' side outputs) and the nodes the blocks read (the
    first cut, their external inputs), :attr:`targets` in order."""

    program: Graph
    targets: tuple[Node, ...]
    """the original nodes that :attr:`program`'s outputs compute, in order"""
    leaves: tuple[Node, ...]
    """the input standing for each copy's output, in program order"""

    @property
    def operators(self) -> int:
        """Operators computed outside the blocks (leaves not counted)."""
        return sum(1 for n in self.program.nodes() if n.op not in origins.LEAVES)


def _weights_of(graph: Graph, outputs: Sequence[Node]) -> dict[str, np.ndarray]:
    """The weights of ``graph`` that the program rooted at ``outputs`` reads (the arrays themselves, not copies)."""
    names = {ir.leaf_name(n) for n in ir.topo_order(outputs) if n.op == "weight"}
    return {k: graph.weights[k] for k in sorted(names)}


def _remap(found: Sequence[Origin], new: Mapping[int, Node], outputs: Sequence[Node]) -> tuple[Origin, ...]:
    """The origins ``found`` with their IR nodes replaced through ``new`` (by id; others kept), those whose
    outputs the program rooted at ``outputs`` computes from inputs it also holds. An origin whose output became a
    leaf (a copy's output, an input of the rest) but whose inputs are the original copy's nodes is dropped: the
    exporter would write its ONNX nodes reading those, the whole copy as imported, in place of the program."""
    def m(n: Node) -> Node:
        return new.get(id(n), n)

    moved = (dataclasses.replace(o, inputs=tuple((k, None if n is None else m(n)) for k, n in o.inputs),
                                 outputs=tuple((k, m(n)) for k, n in o.outputs),
                                 expansion=tuple(m(n) for n in o.expansion)) for o in found)
    held = {id(n) for n in ir.topo_order(outputs)}
    return origins.live((o for o in moved if all(n is None or k in o.constants or id(n) in held
                                                 for k, n in o.inputs)), outputs)


def _rebuild(outputs: Sequence[Node], new: dict[int, Node], stop: frozenset[int] | None = None) -> list[Node]:
    """``outputs`` rebuilt with the nodes in ``new`` (by id) replaced; ``new`` is updated with every node
    rebuilt (a memo shared between calls). A node whose inputs are all unchanged is kept as it is (its
    identity, so that its origin stays live); nodes outside ``stop`` (when given) are kept as they are."""
    stack = [(o, False) for o in reversed(outputs)]
    seen: set[int] = set()
    while stack:
        n, ready = stack.pop()
        if id(n) in new or (ready is False and id(n) in seen):
            continue
        if stop is not None and id(n) not in stop:
            new[id(n)] = n
            continue
        if not ready:
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(n.inputs) if id(c) not in new)
            continue
        inputs = tuple(new[id(c)] for c in n.inputs)
        same = all(a is b for a, b in zip(inputs, n.inputs))
        new[id(n)] = n if same else dataclasses.replace(n, inputs=inputs)
    return [new[id(o)] for o in outputs]


def _inside_order(out: Node, body: set[int]) -> list[Node]:
    """The nodes of the block ending at ``out`` (``body``: their ids) and those it reads from outside, every
    node after its inputs, in the order of a depth-first walk from ``out`` (children in order); the walk does
    not enter the nodes outside."""
    return topo_order([out], lambda n: id(n) in body)


def _op_counts(graph: Graph, block: Block) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in graph.nodes():
        if id(n) in block.body:
            op = str(n.attrs[0]) if n.op == "opaque" else n.op
            counts[op] = counts.get(op, 0) + 1
    return counts


class _Finder:
    """The analysis :func:`find_blocks` runs on one program (indices, users, weight-only nodes, hashing)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.order = graph.nodes()
        self.index = {id(n): k for k, n in enumerate(self.order)}
        self.users: dict[int, list[Node]] = {id(n): [] for n in self.order}
        for n in self.order:
            for c in n.inputs:
                self.users[id(c)].append(n)
        self.weight_only: dict[int, bool] = {}
        for n in self.order:
            self.weight_only[id(n)] = n.op == "weight" or (
                n.op != "input" and bool(n.inputs) and all(self.weight_only[id(c)] for c in n.inputs))
        self.outputs = {id(o) for o in graph.outputs}
        self.keys: dict[tuple, int] = {}
        self.work = 0
        """positions scanned so far (:data:`WORK_LIMIT`)"""

    def block(self, cut: Node, out: Node) -> tuple[Block, int] | None:
        """The block from ``cut`` to ``out`` and its structural hash; None if it is not a block (``out`` does
        not read ``cut``, or a node inside is read from outside)."""
        lo, hi = self.index[id(cut)], self.index[id(out)]
        self.work += hi - lo
        after = {id(cut)}  # nodes in (lo, hi] that read cut
        for n in self.order[lo + 1:hi + 1]:
            if any(id(c) in after for c in n.inputs):
                after.add(id(n))
        if id(out) not in after:
            return None
        body: set[int] = set()
        stack = [out]
        while stack:  # ancestors of out that read cut
            n = stack.pop()
            if id(n) in body or id(n) not in after or n is cut:
                continue
            body.add(id(n))
            stack.extend(n.inputs)
        # private nodes, every user in the block (users before their inputs: reverse order): weight-only ones, and
        # those after the cut that it does not reach (a layer's own slice of a shared table)
        def private(c: Node) -> bool:
            return id(c) not in body and (self.weight_only[id(c)] or (c.op != "input" and self.index[id(c)] > lo))

        pending = [-self.index[id(c)] for k in body for c in self.order[self.index[k]].inputs if private(c)]
        heapq.heapify(pending)  # the latest position first
        while pending:
            c = self.order[-heapq.heappop(pending)]
            if id(c) in body or id(c) in self.outputs:
                continue
            if all(id(u) in body for u in self.users[id(c)]):
                body.add(id(c))
                for x in c.inputs:
                    if private(x):
                        heapq.heappush(pending, -self.index[id(x)])
        for k in body:  # read from outside only as a program output (a side output)
            if k != id(out) and any(id(u) not in body for u in self.users[k]):
                return None
        weights: list[Node] = []
        externals: list[Node] = []
        sides: list[Node] = []
        memo: dict[int, int] = {}
        for n in _inside_order(out, body):  # canonical: the DFS from out, children in order
            if n is cut:
                memo[id(n)] = self._key(("cut",))
            elif id(n) not in body:
                externals.append(n)
                memo[id(n)] = self._key(("external", id(n)))
            elif n.op == "weight":
                weights.append(n)
                memo[id(n)] = self._key(("weight", n.shape, n.dtype))
            else:
                side = n is not out and id(n) in self.outputs
                if side:
                    sides.append(n)
                memo[id(n)] = self._key((n.op, n.attrs, n.shape, n.dtype, tuple(memo[id(c)] for c in n.inputs), side))
        found = Block(cut, out, frozenset(body), tuple(weights), tuple(dict.fromkeys(externals)), tuple(sides))
        return found, memo[id(out)]

    def _key(self, key: tuple) -> int:
        return self.keys.setdefault(key, len(self.keys))

    def _chains(self, members: list[Node], period: int) -> list[list[Block]]:
        """Runs of at least two consecutive copies with cuts ``period`` members apart."""
        runs: list[list[Block]] = []
        for start in range(period):
            run: list[Block] = []
            run_key: int | None = None
            for k in range(start, len(members) - period, period):
                if self.work > WORK_LIMIT:
                    break
                got = self.block(members[k], members[k + period])
                if got is not None and got[1] == run_key and run and run[-1].output is got[0].cut:
                    run.append(got[0])
                    continue
                if len(run) >= 2:
                    runs.append(run)
                run, run_key = ([got[0]], got[1]) if got is not None else ([], None)
            if len(run) >= 2:
                runs.append(run)
        return runs

    def _extend_back(self, run: list[Block], cuts: list[bool]) -> list[Block]:
        """``run`` with the copy before its first, where that copy's cut is an operator of another kind (a first
        layer reading an embedding's Gather, not the previous layer's residual Add; not a graph input): the nearest
        separator before the first cut, within twice a block's length, from which a block of the same structure,
        with weights of its own, ends at it."""
        first = run[0]
        got = self.block(first.cut, first.output)
        if got is None:
            return run
        hi = self.index[id(first.cut)]
        for k in range(hi - 1, max(-1, hi - 2 * len(first.body) - 1), -1):
            n = self.order[k]
            if self.work > WORK_LIMIT:
                break
            if not cuts[k] or self.weight_only[id(n)] or n.op in ("input", first.cut.op):
                continue
            before = self.block(n, first.cut)
            if before is not None and before[1] == got[1] and before[0].weights:  # a layer: weights of its own
                return [before[0], *run]
        return run

    def separators(self, min_copies: int) -> list[bool]:
        """Per position of the order: whether the node there may be a cut. A cut is read by every later layer
        only through it: no edge passes over it (from a node before it to one after it) except from weight-only
        nodes, from the program's inputs (the ids that the embedding's Gather reads and a mask computed later
        reads too: external to every copy) and from nodes read by at least :data:`SHARED` nodes (an external input
        shared by the copies, such as a mask; GPT-Neo's global and local masks are each read by every other
        layer). A necessary condition, checked in one pass, so that the search for
        blocks tries only these (a skip connection around the whole stack of layers, read by fewer nodes, hides
        them)."""
        reach = -1  # the furthest position read by a node before the current one (edges that count)
        out: list[bool] = []
        for k, n in enumerate(self.order):
            out.append(reach <= k)
            users = self.users[id(n)]
            if users and not self.weight_only[id(n)] and n.op != "input" and len(users) < min(min_copies, SHARED):
                reach = max(reach, max(self.index[id(u)] for u in users))
        return out

    def best(self, min_copies: int, min_weights: int = 0) -> list[Block] | None:
        """The run of copies covering the most nodes (ties: more copies, then the earliest; the best found
        within :data:`WORK_LIMIT`)."""
        groups: dict[tuple, list[Node]] = {}
        cuts = self.separators(min_copies)
        for k, n in enumerate(self.order):
            if n.inputs and not self.weight_only[id(n)] and cuts[k]:
                groups.setdefault((n.op, n.attrs, n.shape, n.dtype), []).append(n)
        best: list[Block] | None = None
        score: tuple[int, int, int] = (0, 0, 0)
        for members in groups.values():
            # one copy fewer than asked may be cut at this kind: the first can be cut at another (_extend_back)
            for period in range(1, min((len(members) - 1) // max(1, min_copies - 1), MAX_PERIOD) + 1):
                runs = [self._extend_back(r, cuts) for r in self._chains(members, period)]
                runs = [r for r in runs if len(r) >= min_copies
                        and len(r[0].body) >= MIN_BLOCK_NODES and len(r[0].weights) >= min_weights]
                for run in runs:
                    s = (len(run) * len(run[0].body), len(run), -self.index[id(run[0].cut)])
                    if s > score:
                        best, score = run, s
                if runs or self.work > WORK_LIMIT:
                    break  # the shortest period that repeats: the most copies of this cut
        return best


def _alike(*shapes: Sequence[int]) -> bool:
    """Whether the shapes are one, the symbolic dimensions' fingerprints too (a batch of 1 is no constant 1)."""
    return all(tuple(s) == tuple(shapes[0]) and fingerprint(s) == fingerprint(shapes[0]) for s in shapes[1:])


def _split(n: Node) -> bool:
    return n.op == "addnorm" and _alike(n.inputs[0].shape, n.inputs[1].shape, n.shape)


def _rewritten(order: Iterable[Node], rewrite: Callable[[Node, tuple[Node, ...]], Node | None]) -> dict[int, Node]:
    """The nodes of ``order`` (children first) rebuilt: each one's inputs remapped through those already rebuilt,
    then ``rewrite(node, inputs)`` where it gives a replacement; the replaced and rebuilt nodes by id (a node none
    of whose inputs changed and that ``rewrite`` keeps is not in it: its identity stays)."""
    new: dict[int, Node] = {}
    for n in order:
        inputs = tuple(new.get(id(c), c) for c in n.inputs)
        replaced = rewrite(n, inputs)
        if replaced is not None:
            new[id(n)] = replaced
        elif any(x is not y for x, y in zip(inputs, n.inputs)):
            new[id(n)] = dataclasses.replace(n, inputs=inputs)
    return new


def _fused(outputs: Sequence[Node]) -> tuple[Node, ...]:
    """The inverse of :func:`addnorms_split` on the program rooted at ``outputs``: each ``layernorm`` of an
    ``ewadd`` of two operands of its shape that it alone reads, an ``addnorm`` again (both are written as the same
    Add and LayerNormalization; as one operator the program reads as the import's where the search changed
    nothing)."""
    readers: dict[int, int] = {}
    order = ir.topo_order(outputs)
    for n in order:
        for c in n.inputs:
            readers[id(c)] = readers.get(id(c), 0) + 1
    for o in outputs:
        readers[id(o)] = readers.get(id(o), 0) + 1  # a program output is read outside it

    def fuse(n: Node, inputs: tuple[Node, ...]) -> Node | None:
        add = inputs[0] if n.op == "layernorm" else None
        if add is not None and add.op == "ewadd" and readers.get(id(n.inputs[0])) == 1 \
                and _alike(add.inputs[0].shape, add.inputs[1].shape, n.shape):
            return ir.make("addnorm", [*add.inputs, *inputs[1:]], n.attrs)
        return None

    new = _rewritten(order, fuse)
    return tuple(new.get(id(o), o) for o in outputs)


def addnorms_split(graph: Graph) -> Graph | None:
    """``graph`` with every ``addnorm`` of two operands of its shape written as the ``layernorm`` of their
    ``ewadd`` (the same function, :mod:`eqsat.ops.norm`; the search's ``addnorm_fuse`` relates them), or None
    where it has none. A pre-norm decoder's last residual Add is read by the final norm alone, so the import
    fused the two: split, its last layer ends in the same operator as the others (:func:`find_blocks`). The
    origins of the split nodes are dropped (their ONNX nodes are written anew)."""
    if not any(_split(n) for n in graph.nodes()):
        return None
    def split(n: Node, inputs: tuple[Node, ...]) -> Node | None:
        if not _split(n):
            return None
        a, b, gamma, beta = inputs
        return ir.make("layernorm", [ir.make("ewadd", [a, b]), gamma, beta], n.attrs)

    new = _rewritten(graph.nodes(), split)  # children first
    outputs = tuple(new.get(id(o), o) for o in graph.outputs)
    kept = [o for o in graph.origins if not any(_split(x) for x in o.expansion)]
    return dataclasses.replace(graph, outputs=outputs, origins=_remap(kept, new, outputs))


def _found(graph: Graph, min_copies: int, min_cover: float, min_weights: int, split: bool = False) -> Blocks | None:
    finder = _Finder(graph)
    found = finder.best(min_copies, min_weights)
    if not found or sum(len(b.body) for b in found) < min_cover * len(finder.order):
        return None
    return Blocks(graph, tuple(found), split)


def find_blocks(graph: Graph, min_copies: int = 2, min_cover: float = 0.0, min_weights: int = 0) -> Blocks | None:
    """The repeated blocks of ``graph`` covering the most operators (at least ``min_copies`` copies of at least
    ``min_weights`` weights of their own, together at least ``min_cover`` of its nodes), or None. Where more
    copies are found with its ``addnorm`` nodes split (:func:`addnorms_split`: a pre-norm decoder's last layer),
    the blocks are those of the split program (:attr:`Blocks.graph`; only tried where the operators outside the
    copies are as many as a copy's: one may be a layer left out)."""
    found = _found(graph, min_copies, min_cover, min_weights)
    if found is not None and found.rest.operators < found.operators_per_block:
        return found  # no layer left outside the copies
    split = addnorms_split(graph)
    other = _found(split, min_copies, min_cover, min_weights, split=True) if split is not None else None
    if other is not None and (found is None or other.copies > found.copies):
        return other
    return found


__all__ = ["DEFAULT_MIN_COPIES", "DEFAULT_MIN_COVER", "DEFAULT_MIN_WEIGHTS", "MAX_PERIOD", "MIN_BLOCK_NODES", "SHARED", "WORK_LIMIT", "Block", "Blocks",
           "Rest", "addnorms_split", "find_blocks"]
