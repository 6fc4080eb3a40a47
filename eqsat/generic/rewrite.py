"""Write a program exported at one representative shape so that it works for every value of the interface's
symbols, with the original's interface.

The exporter writes a program at the concrete shapes it was tuned at (:mod:`eqsat.onnx.interface`): its Reshape
targets and Slice bounds are numbers. :func:`make_generic` walks the exported model in order, carrying each
value's shape as monomials of the symbols (:mod:`eqsat.onnx.symbolic`), and rewrites each shape-dependent
constant into its shape-polymorphic form: a Reshape target with ``0`` (copy the input's dimension) and ``-1``
(the rest), and where two target dimensions depend on the symbols, the target computed from the inputs' ``Shape``
(Shape, Gather, Mul/Div, Concat); a Slice that ran to the end of a symbolic axis runs to its end at any size. The
inputs and outputs get the original's declared types (names, element types, ``dim_param`` names).

The user's shape computations written back verbatim (:mod:`eqsat.onnx.live`) are written the way the static
program's folded constants run (onnxruntime cannot fold what depends on a symbol, and each node it runs costs):

- a ``Shape`` of a value of known symbolic shape is read from the inputs' shapes; a small integer vector computed
  from the shapes alone (Shape, Gather, Unsqueeze, Concat, torch's Equal/Where of ``expand(-1)``) is read off runs
  at several sizes as monomials (:func:`eqsat.onnx.fitting.fit_vectors`) and written once from the symbols
  (:mod:`eqsat.generic.sizes`: a constant, an input's ``Shape``, Gathers of its sizes and a Concat), as a Reshape
  target with 0 and -1, or as an Expand target of 1 where the input has the size (an Expand to its input's own
  shape is dropped);
- a larger value computed from the shapes alone that is one slice repeated along its symbolic axes is that slice,
  and a Gather (GatherND) at each element's flat (multi-) index is a Reshape (:mod:`eqsat.generic.uniform`); a
  causal mask is a Trilu, and position ids, rotary cos and sin or a position embedding's rows a Slice of a
  constant table (:mod:`eqsat.generic.tables`); an ``And`` with all true is dropped;
- a Reshape of a Reshape or Flatten reads the first one's input (one Reshape, its target with 0 and -1 against
  that input: a mask's chain, a layer's rows); a Split along the kept last axis of rows reshaped to ``[batch, seq,
  3*hidden]`` splits the rows (the Reshape before it goes); an ``And`` of an all-true slice expanded to a shape is
  the other operand expanded, and an Expand whose readers broadcast its input to the same values anyway (a padding
  mask added to the scores) is dropped: as many kernels as the static program, size computations included;
- a Reshape to its input's own shape is dropped, and the targets back to ``[batch, seq, N]`` are one vector
  ``[batch, seq, -1]`` (or ``[-1, seq, N]`` where the sequence length's size is read already and the batch's is
  not: one node fewer); opset 23's RotaryEmbedding reads its cos and sin tables whole at position ids (its kernel
  wants the caches ``[batch, seq, d]``: no Expand of each);
- the chains no longer read are pruned (:mod:`eqsat.onnx.dataflow`), and the inner values' symbolic shapes are
  written as ``value_info`` (onnxruntime's SkipLayerNormalization fusion compares its inputs' shapes).

Which symbols a Reshape's target dimensions are is read off its input's symbolic shape and the concrete target:
dimensions are grouped where their sizes' products meet, and a group's symbols go to the target dimensions whose
sizes they are. A symbol at 1 (a batch of 1) is ambiguous where several target dimensions are 1: the first free
one takes it. The result is a best effort: :func:`eqsat.verify.verify_shapes` runs it at several values of each
symbol, and a program that fails at any is not written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from eqsat.errors import first_line
from eqsat.onnx.branches import GUARD
from eqsat.onnx.dataflow import prune, shape_only
from eqsat.onnx.fitting import fit_runs, fit_vectors, run_values
from eqsat.onnx.interface import interface, symbol_values
from eqsat.onnx.kernels import UpgradeError, converted, opset_of
from eqsat.onnx.pool import array_of
from eqsat.onnx.subgraphs import implicit_inputs, rename_outer, subgraphs
from eqsat.onnx.symbolic import Mono, SymShape, constant_shape, infer_node, int_values, product
from eqsat.onnx.targets import reshape_target, resolve_target

from .gemm import bias_add, consumers, write_gemm
from .sizes import SizeWriter
from .tables import Prefix, Triangle, pattern_key, write_prefix, write_triangle
from .uniform import Patterns, flat_gather, grid_gather, shape_patterns

INT64_MAX = np.iinfo(np.int64).max

IDENTITIES: dict[str, bool] = {"And": True, "Or": False}
"""the boolean operators the masks torch exports combine, and their identity element (a Mul by ones or an Add of
zeros stays: onnxruntime's normalization fusions match the scale and the bias even where they are 1 and 0)"""

BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater",
                          "LessOrEqual", "GreaterOrEqual", "Where", "Sum", "Max", "Min", "Mean", "BitShift"})
"""elementwise operators that broadcast their inputs (numpy's rules): an input's axis of size 1 takes the others'"""


BROADCAST_SLOTS = frozenset({("Attention", 3)})
"""(operator, input) that broadcasts the input against the others: opset 23 Attention's mask"""


@dataclass
class Generic:
    """The rewritten model and what could not be made generic (empty when every constant was)."""

    model: onnx.ModelProto
    notes: list[str] = field(default_factory=list)


class _Rewriter(SizeWriter):
    def __init__(self, model: onnx.ModelProto, original: onnx.ModelProto, values: Mapping[str, int],
                 full: bool = True, final: bool = True):
        super().__init__(model)
        self.full = full
        self.final = final
        self.original = original
        self.values = dict(values)
        self.notes: list[str] = []
        self._probed: dict[str, list[Mono | None]] | None = None
        self._tried: set[str] = set()
        self.shape_only: set[str] = set()
        self.vectors: dict[str, list[Mono] | None] = {}
        """small integer values computed from the shapes alone -> their entries as monomials (None: not fitted)"""
        self.pending: list[str] = []
        self.alias: dict[str, str] = {}
        """the output of an Expand that expands nothing -> its input"""
        self.boundary: set[str] = set()
        self.patterns = Patterns()
        """what runs showed of the values computed from the shapes alone that the data reads"""
        self.pending_uniform: list[str] = []
        self._original_tables: dict[str, str] | None = None
        self._original_found: _Rewriter | None = None
        """the original as the import read it (:meth:`_original_chain`): its tables and its values' shapes"""
        self._source: onnx.GraphProto | None | bool = False
        """the original's graph at the written program's opset (:meth:`_source_graph`; False: not read yet)"""
        self._copied_constants: dict[str, str] = {}
        """an initializer of the original read by a chain copied into an If (:meth:`_copy_original`) -> its name in
        the written program (copied once, or the program's own where it holds the same values)"""
        self.guarded: list[tuple[str, str, Prefix]] = []
        """(the Slice of a table written, the user's value it stands for, its table) where the user's program
        computes the value beyond the table (:meth:`_guard_tables`)"""
        self.made: dict[str, onnx.NodeProto] = {}
        """value -> the node written that computes it"""
        self.expanded: dict[str, tuple[str, str]] = {}
        """a constant slice expanded to its value's shape (:meth:`_uniform`) -> (the slice, the shape)"""
        self.targeted: set[int] = set()
        """the Reshapes (by id) whose target is written (a Gather written as a Reshape)"""
        self.rows: dict[str, SymShape] = {}
        """a Split's output split on rows (:meth:`_split`) -> the shape it had (its Reshape readers' targets are read
        off that shape)"""

    def run(self) -> Generic:
        g = self.model.graph
        (ins, outs) = interface(self.original)
        declared_in = {vi.name: vi for vi in self.original.graph.input}
        declared_out = {vi.name: vi for vi in self.original.graph.output}
        for vi in g.input:
            if vi.name in declared_in and vi.name not in self.constants:
                vi.type.CopyFrom(declared_in[vi.name].type)
        for vi in g.output:
            if vi.name in declared_out:
                vi.type.CopyFrom(declared_out[vi.name].type)
        del g.value_info[:]
        for port in ins:
            self.types[port.name] = port.elem_type
            if port.dims is None:
                self.shapes[port.name] = None
                continue
            shape: SymShape = []
            for k, d in enumerate(port.dims):
                sym = d if isinstance(d, int) or d else f"{port.name}:{k}"
                if isinstance(sym, int):
                    shape.append(Mono.const(sym))
                else:
                    shape.append(Mono.symbol(sym))
                    self.places.setdefault(sym, (port.name, k))
            self.shapes[port.name] = shape
        for t in g.initializer:
            self.types[t.name] = t.data_type
            self.shapes[t.name] = constant_shape(t)
        self.ports = [p.name for p in ins if self.shapes.get(p.name) is not None]
        self.shape_only = shape_only(self.model)
        self.boundary = self._boundary()
        self.readers = consumers(self.model)
        self.absorbed: set[int] = set()
        """the Adds written with their MatMul as a Gemm (:mod:`eqsat.generic.gemm`), by id"""
        self.folded = self._folded_sizes() if self.full else {}
        self.vectors.update(self.folded)
        for node in list(g.node):
            self._node(node)
        if self.full and self.final:
            self._unexpand()
            self._guard_tables()
        del g.node[:]
        g.node.extend(self.nodes)
        for port in outs:
            got = self.shapes.get(port.name)
            if port.dims is None or got is None:
                continue
            for k, (want, have) in enumerate(zip(port.dims, got)):
                if isinstance(want, str) and have is not None and have.is_const:
                    self.notes.append(f"output {port.name!r} axis {k} is {have.key()} where the original's is "
                                      f"{want or 'dynamic'}")
        prune(self.model)
        self._annotate()
        return Generic(self.model, self.notes)

    def _annotate(self) -> None:
        """The symbolic shapes of the program's inner values as its ``value_info`` (a product of symbols as one
        ``dim_param``, ``batch*seq``): onnxruntime's fusions (SkipLayerNormalization, Attention) compare their
        inputs' shapes, which its own inference loses behind a Reshape to a computed or ``-1`` target."""
        g = self.model.graph
        ports = {vi.name for vi in [*g.input, *g.output]} | {t.name for t in g.initializer}
        for node in g.node:
            for out in node.output:
                shape, elem = self.shapes.get(out), self.types.get(out)
                if not out or out in ports or shape is None or not elem or any(
                        d is None or d.coef.denominator != 1 or d.coef <= 0 for d in shape):
                    continue
                dims: list[int | str | None] = [int(d.coef) if d.is_const else d.key() for d in shape if d is not None]
                g.value_info.append(helper.make_tensor_value_info(out, elem, dims))

    def _node(self, node: onnx.NodeProto) -> None:
        if id(node) in self.absorbed:
            return
        for k, name in enumerate(node.input):
            node.input[k] = self.alias.get(name, name)
        standard = node.domain in ("", "ai.onnx")
        if standard and node.op_type == "MatMul" and self.full and self.final:
            linear = bias_add(self, node, self.readers.get(node.output[0], []),
                              {o.name for o in self.model.graph.output})
            if linear is not None:
                self.absorbed.add(id(linear[0]))
                start = len(self.nodes)
                write_gemm(self, node, *linear)
                self.made.update((o, n) for n in self.nodes[start:] for o in n.output)
                self._collapse(self.nodes[start])  # its rows' Reshape ([-1, K]: no 0) of a Reshape: one
                return
        if standard and node.op_type == "Shape" and self.full and self._shape(node):
            return
        vectors = self._vectors_read(node) if self.full else {}
        if self.full:
            for k, name in enumerate(node.input):
                if name in self.folded and k not in vectors:  # read by a shape computation: computed from the symbols
                    node.input[k] = self.vector(self.folded[name], self.shapes.get(name) == [])
        if standard and not all(o in self.shape_only for o in node.output if o):
            for k, name in enumerate(node.input):
                if name in self.boundary:
                    node.input[k] = self._uniform(node, k)
            if not self.full:
                pass
            elif node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in self.patterns.iota:
                self._gathered(node, flat_gather(self, node))
            elif node.op_type == "GatherND" and len(node.input) == 2 and node.input[1] in self.patterns.grids:
                self._gathered(node, grid_gather(self, node, self.patterns.grids[node.input[1]]))
        if standard and node.op_type in IDENTITIES and not self._spread(node) and self._identity(node):
            return
        if standard and self.full and node.op_type == "RotaryEmbedding" and len(node.input) == 3:
            self._rotary_positions(node)
        if not self.full:
            pass
        elif standard and node.op_type == "Reshape" and len(node.input) > 1 and id(node) not in self.targeted \
                and (node.input[1] in self.constants or 1 in vectors):
            if self._reshape(node, vectors.get(1)):
                return
        elif standard and node.op_type == "Expand" and 1 in vectors:
            if self._expand(node, vectors[1]):
                return
        elif standard and node.op_type == "Slice" and len(node.input) > 3:
            self._slice(node)
        elif standard and node.op_type == "Split":
            self._split(node)
        for k, monos in vectors.items():
            if node.input[k] in self.vectors:  # not rewritten above: written from the symbols
                node.input[k] = self.vector(monos, self.shapes.get(node.input[k]) == [])
        self.nodes.append(node)
        self.made.update((o, node) for o in node.output if o)
        inferred = infer_node(node, self.shapes, self.types, self.constants, self.model.opset_import)
        for out in node.output:
            if out in inferred:
                elem, shape = inferred[out]
                self.types.setdefault(out, elem)
                self.shapes.setdefault(out, shape)
            if self._small_vector(out):
                self.vectors[out] = None
                self.pending.append(out)
            elif out in self.boundary:
                self.pending_uniform.append(out)

    def _shape(self, node: onnx.NodeProto) -> bool:
        """A ``Shape`` of a value whose symbolic shape is known, read as those sizes written from the inputs'
        (True): the sizes computed from it no longer wait on the data, and the runs that fit them
        (:meth:`_fit_vectors`) compute no data either."""
        dims = self.shapes.get(node.input[0])
        if dims is None or any(d is None or any(s not in self.places for s, _ in d.powers) for d in dims) \
                or node.output[0] in {o.name for o in self.model.graph.output}:
            return False
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end")
        monos = [d for d in dims if d is not None][start:end]
        self.alias[node.output[0]] = self.vector(monos)
        return True

    def _folded_sizes(self) -> dict[str, list[Mono]]:
        """The small int64 constants of the program that the original computes from its inputs' shapes (the
        importer folded them at the representative sizes: torch's ``x.shape[0]`` of a batch of 1, beside a
        sequence length kept live), as monomials of the symbols read off runs of the original at further sizes;
        only those that depend on a symbol."""
        computed = {o for n in self.original.graph.node for o in n.output if o}
        names = [t.name for t in self.model.graph.initializer if t.name in computed
                 and t.data_type == onnx.TensorProto.INT64 and len(t.dims) <= 1 and int(np.prod(t.dims)) <= 8]
        if not names:
            return {}
        fitted = fit_vectors(run_values(self.original, names, shapes=False), self.values) or []
        out: dict[str, list[Mono]] = {}
        for name, entries in zip(names, fitted):
            whole = [m for m in entries if m is not None]
            if len(whole) == len(entries) and any(not m.is_const for m in whole) \
                    and all(s in self.places for m in whole for s, _ in m.powers):
                out[name] = whole
        return out

    def _boundary(self) -> set[str]:
        """The values computed from the shapes alone (not small integer vectors) that a node computing the data
        reads."""
        out: set[str] = set()
        for node in self.model.graph.node:
            if not all(o in self.shape_only for o in node.output if o):
                out.update(i for i in node.input if i in self.shape_only)
        return out

    def _uniform(self, node: onnx.NodeProto, k: int) -> str:
        """Input ``k`` of ``node``, written as its slice (:mod:`eqsat.generic.uniform`) where it is one slice repeated
        along its symbolic axes: the slice itself where ``node`` broadcasts it against inputs of those sizes,
        else the slice expanded to its shape."""
        name = node.input[k]
        if self.pending_uniform:
            names, self.pending_uniform = self.pending_uniform, []
            if any(self.shapes.get(n) is None or None in (self.shapes.get(n) or []) for n in names):
                self._fit()
            shapes = {n: [d for d in self.shapes.get(n) or [] if d is not None] for n in names}
            shapes = {n: dims for n, dims in shapes.items() if len(dims) == len(self.shapes.get(n) or [])
                      and any(not d.is_const for d in dims)}
            if shapes:
                found = shape_patterns(self._probe(shapes), shapes, self.values)
                self.patterns.merge(found)
        dims = self.shapes.get(name)
        const = self.cache.get(f"uniform:{name}") or (self._pattern(name) if dims is not None else None)
        if const is None or dims is None:
            return name
        self.cache[f"uniform:{name}"] = const
        sizes = [d for d in dims if d is not None]
        written = self.shapes.get(const) or []
        others = [self.shapes.get(i) for j, i in enumerate(node.input) if j != k and i]
        covered = all(any(o is not None and len(o) >= len(sizes) - a and o[len(o) - len(sizes) + a] == d
                          for o in others) for a, d in enumerate(sizes)
                      if not d.is_const and (a >= len(written) or written[a] != d))
        if (node.op_type in BROADCASTING or (node.op_type, k) in BROADCAST_SLOTS) and covered:
            return const
        key = f"expanded:{const}:{','.join(d.key() for d in sizes)}"
        if key not in self.cache:
            self.cache[key] = self.emit("Expand", [const, self.vector(sizes)], "uniform")
            self.expanded[self.cache[key]] = (const, self.vector(sizes))
            self.types[self.cache[key]] = self.types.get(name, 0)
            self.shapes[self.cache[key]] = list(dims)
        return self.cache[key]

    def _pattern(self, name: str) -> str | None:
        """``name`` (a value computed from the shapes alone) written as the pattern runs showed it has: its slice,
        a constant; a triangle (Trilu); a prefix of a table (Slice); None where it has none."""
        elem = self.types.get(name, 0)
        if name in self.patterns.slices and self.full:
            return self.const(self.patterns.slices[name], "uniform")
        found: Triangle | Prefix | None = self.patterns.triangles.get(name) or self.patterns.prefixes.get(name)
        if found is None:
            return None
        key = f"pattern:{elem}:{pattern_key(found)}"  # one table or mask read twice (a rotary cache): written once
        if key not in self.cache:
            written = write_triangle(self, found, elem) if isinstance(found, Triangle) else \
                write_prefix(self, found, elem)
            if written is None:
                return None
            self.cache[key] = written
            if isinstance(found, Prefix) and found.beyond:
                self.guarded.append((written, name, found))
        return self.cache[key]

    def _guard_tables(self) -> None:
        """Each Slice of a table that stops below the sizes the user's program accepts (:attr:`guarded`) becomes an
        ``If`` on every size it reads being within the table: its then-branch is the Slice, its else-branch the
        user's nodes that computed the value (moved into it where nothing else reads them: they read the outer
        values, the inputs' Shape among them), so that the written program runs at every size and onnxruntime runs
        only the taken branch. The Slices on the same sizes and bounds share one If (a rotary cos and sin, whose
        chains share their angles)."""
        if not self.guarded:
            return
        groups: dict[tuple[tuple[str, int], ...], list[tuple[str, str, Prefix]]] = {}
        for sliced, user, prefix in self.guarded:
            bounds: dict[str, int] = {}
            for a, d in zip(prefix.axes, prefix.ends):
                sym = d.powers[0][0]
                bounds[sym] = min(bounds.get(sym, int(prefix.table.shape[a])), int(prefix.table.shape[a]))
            groups.setdefault(tuple(sorted(bounds.items())), []).append((sliced, user, prefix))
        outputs = {o.name for o in self.model.graph.output}
        used, kept = outputs | {user for _, user, _ in self.guarded}, []
        for node in reversed(self.nodes):  # what no output reads does not keep a chain outside the If
            if any(o in used for o in node.output if o):
                kept.append(node)
                used.update(i for i in [*node.input, *implicit_inputs(node)] if i)
        self.nodes = kept[::-1]
        for limits, members in groups.items():
            members = list({m[0]: m for m in members}.values())
            readers: dict[str, set[int]] = {}
            for node in self.nodes:
                for name in [*node.input, *implicit_inputs(node)]:
                    readers.setdefault(name, set()).add(id(node))
            slices = {m[0] for m in members}
            then_nodes, then_outs = [], []
            for node in self.nodes:
                if node.output and node.output[0] in slices:
                    inner = self.fresh(f"{node.output[0]}_then")
                    then_nodes.append((node.output[0], node))
                    node.output[0] = inner
            order = {m[0]: k for k, m in enumerate(members)}
            then_nodes.sort(key=lambda t: order[t[0]])
            made = {o: n for n in self.nodes for o in n.output if o}
            copied: dict[str, tuple[list[onnx.NodeProto], str]] = {}
            for _, user, prefix in members:
                if self._reads_table(user, made):
                    # a table the import already wrote: the user's chain is the original's, or, where the written
                    # value is not one of the original's (a rotary table's halves the e-graph sliced off), the
                    # user's chain copied with the import's tables it reads computed as the original computes them
                    chain = self._original_chain(prefix) or self._substituted_chain(user, made)
                    if chain is not None:
                        copied[user] = chain
                    else:
                        self.notes.append(f"the value {user!r} reads a table the import wrote: beyond its bound the "
                                          "written program stops where the original runs")
            moved: set[int] = set()
            needed = {m[1] for m in members if m[1] not in copied}
            for node in reversed(self.nodes):
                outs = [o for o in node.output if o]
                if id(node) in {id(n) for _, n in then_nodes} or not any(o in needed for o in outs):
                    continue
                if any(o in outputs or not readers.get(o, set()) <= moved for o in outs):
                    continue
                moved.add(id(node))
                needed.update(i for i in [*node.input, *implicit_inputs(node)] if i)
            else_nodes = [n for n in self.nodes if id(n) in moved]
            else_outs = []
            for sliced, user, _ in members:
                if user in copied:
                    else_nodes += copied[user][0]
                out = self.fresh(f"{sliced}_else")
                else_nodes.append(helper.make_node("Identity", [copied[user][1] if user in copied else user], [out],
                                                   name=out))
                else_outs.append(out)
            then_outs = [n.output[0] for _, n in then_nodes]
            gone = moved | {id(n) for _, n in then_nodes}
            self.nodes = [n for n in self.nodes if id(n) not in gone]

            def branch(nodes: list[onnx.NodeProto], outs: list[str], label: str,
                       members: list[tuple[str, str, Prefix]] = members) -> onnx.GraphProto:
                infos = [helper.make_tensor_value_info(o, self.types.get(m[0], 0), None)
                         for o, m in zip(outs, members)]
                return helper.make_graph(nodes, self.fresh(label), [], infos)

            syms = [Mono.symbol(s) for s, _ in limits]
            limit = self.const(np.array([b + 1 for _, b in limits], np.int64), "bound")
            within = self.fresh("within_table")
            self.nodes.append(helper.make_node("Less", [self.vector(syms), limit], [within], name=within))
            if len(limits) > 1:
                every = self.fresh("within_table")
                self.nodes.append(helper.make_node("Cast", [within], [every + "_i"], name=every + "_i",
                                                   to=onnx.TensorProto.INT64))
                self.nodes.append(helper.make_node("ReduceMin", [every + "_i"], [every + "_m"], name=every + "_m",
                                                   keepdims=0))
                self.nodes.append(helper.make_node("Cast", [every + "_m"], [every], name=every,
                                                   to=onnx.TensorProto.BOOL))
                within = every
            node = helper.make_node("If", [within], [m[0] for m in members], name=self.fresh(GUARD),
                                    then_branch=branch([n for _, n in then_nodes], then_outs, "within"),
                                    else_branch=branch(else_nodes, else_outs, "beyond"))
            self.nodes.append(node)
        self.nodes = _topological(self.nodes)

    def _reads_table(self, user: str, made: Mapping[str, onnx.NodeProto]) -> bool:
        """Whether the nodes computing ``user`` read a table the import wrote (a Slice of a constant up to a size
        computed from the shapes: directly, or through the Slices and Concat of a rotary table's halves), which
        stops at the same bound: the chain to run beyond it is then the original's."""
        seen, todo = set(), [user]
        while todo:
            node = made.get(todo.pop())
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type == "Slice" and node.input[0] in self.constants and len(node.input) > 2 \
                    and node.input[2] not in self.constants:
                return True
            todo.extend(i for i in node.input if i and i not in self.constants)
        return False

    def _found(self) -> _Rewriter:
        """The original read as the import read it (its tables found, not written): its guarded tables and its
        values' symbolic shapes."""
        if self._original_found is None:
            copy = onnx.ModelProto()
            copy.CopyFrom(self.original)
            found = _Rewriter(copy, self.original, self.values, full=False)
            found.run()
            self._original_found = found
            self._original_tables = {pattern_key(p): user for _, user, p in found.guarded}
        return self._original_found

    def _original_chain(self, prefix: Prefix) -> tuple[list[onnx.NodeProto], str] | None:
        """The original's nodes computing the value ``prefix`` is a table of (found as the import found it), copied
        under fresh names (the constants they read copied too), and the name of the value; None where not found."""
        self._found()
        assert self._original_tables is not None
        user = self._original_tables.get(pattern_key(prefix))
        return None if user is None else self._copy_original(user)

    def _source_graph(self) -> onnx.GraphProto | None:
        """The original's graph with its nodes at the written program's opset: the original's own, or converted
        where the program is of a newer opset (a kernel's upgrade, :mod:`eqsat.onnx.kernels`: a chain copied into an
        If must be of the program's opset, e.g. a ReduceMean's ``axes`` an input from opset 18); None where ONNX's
        converter cannot take it there (no chain is copied then)."""
        if self._source is False:
            try:
                self._source = converted(self.original, opset_of(self.model)).graph
            except UpgradeError as e:
                self._source = None
                self.notes.append(f"the original's nodes are not copied into the written opset: {first_line(e)}")
        assert self._source is not True
        return self._source

    def _copy_original(self, user: str) -> tuple[list[onnx.NodeProto], str] | None:
        """The original's nodes computing its value ``user`` (at the written program's opset), copied under fresh
        names, and the value's new name; None where the original cannot be read at that opset. The initializers
        they read are the program's own where it holds one of the same name and values (an embedding read for its
        shape), else copied, once for every chain."""
        g = self._source_graph()
        if g is None:
            return None
        inits = {t.name: t for t in g.initializer} | {t.name: t for t in self.original.graph.initializer}
        needed, chain = {user}, []
        for node in reversed(g.node):
            if any(o in needed for o in node.output if o):
                chain.append(node)
                needed.update(i for i in [*node.input, *implicit_inputs(node)] if i)
        rename: dict[str, str] = {}
        for name in sorted(needed & set(inits)):
            if name not in self._copied_constants:
                own = self.constants.get(name)
                if own is not None and tuple(own.dims) == tuple(inits[name].dims) \
                        and own.data_type == inits[name].data_type \
                        and np.array_equal(array_of(own), array_of(inits[name])):
                    self._copied_constants[name] = name
                else:
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(inits[name])
                    tensor.name = self.fresh(name)
                    self.model.graph.initializer.append(tensor)
                    self._copied_constants[name] = tensor.name
            rename[name] = self._copied_constants[name]
        out = []
        for node in reversed(chain):
            copy_node = onnx.NodeProto()
            copy_node.CopyFrom(node)
            copy_node.name = self.fresh(node.name or node.op_type)
            for k, o in enumerate(copy_node.output):
                if o:
                    copy_node.output[k] = rename[o] = self.fresh(o)
            out.append(copy_node)
        for node in out:
            for k, i in enumerate(node.input):
                node.input[k] = rename.get(i, i)
            for sub in subgraphs(node):
                rename_outer(sub, rename)
        return out, rename[user]

    def _substituted_chain(self, user: str, made: Mapping[str, onnx.NodeProto]) -> tuple[list[onnx.NodeProto], str] \
            | None:
        """The program's nodes computing ``user`` from the tables the import wrote (a Slice of a constant up to a
        size computed from the shapes), copied under fresh names, with each such Slice replaced by the original's
        nodes computing the value it stands for (cut to size 1 along the axes the table was cut along: a table
        repeated along the batch). The chain's other nodes (the sizes it expands to) are copied too: they run only
        where the If takes its else-branch. None where a table is not one the original's import found, or a node
        holds a subgraph."""
        found = self._found()
        by_table: dict[tuple[str, tuple[int, ...], str], str] = {}
        for _, name, p in found.guarded:
            by_table.setdefault(_table_key(p.table), name)
        order = {id(n): k for k, n in enumerate(self.nodes)}
        chain: dict[int, onnx.NodeProto] = {}
        tables: dict[str, str] = {}  # an import's Slice's output -> the original's value it stands for
        todo = [user]
        while todo:
            node = made.get(todo.pop())
            if node is None or id(node) in chain:
                continue
            if node.op_type == "Slice" and node.input[0] in self.constants and len(node.input) > 2 \
                    and node.input[2] not in self.constants:
                stands = by_table.get(_table_key(array_of(self.constants[node.input[0]])))
                if stands is None:
                    return None
                tables[node.output[0]] = stands
                continue
            if any(True for _ in subgraphs(node)) or id(node) not in order:
                return None
            chain[id(node)] = node
            todo.extend(i for i in node.input if i and i not in self.constants)
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
            have, want = found.shapes.get(name), self.shapes.get(sliced)
            if have is None or want is None or len(have) != len(want) or None in have or None in want:
                return None
            cut = [a for a, (h, w) in enumerate(zip(have, want)) if h != w]
            if any(want[a] != Mono.const(1) for a in cut):
                return None
            chain_ = self._copy_original(name)
            if chain_ is None:
                return None
            nodes_, value = chain_
            out += nodes_
            if cut:
                first = self.fresh("beyond")
                out.append(helper.make_node("Slice", [value, self.const(np.zeros(len(cut), np.int64), "starts"),
                                                      self.const(np.ones(len(cut), np.int64), "ends"),
                                                      self.const(np.array(cut, np.int64), "axes")], [first],
                                            name=first))
                value = first
            rename[sliced] = value
        for node in kept:
            copy_node = onnx.NodeProto()
            copy_node.CopyFrom(node)
            copy_node.name = self.fresh(node.name or node.op_type)
            for k, i in enumerate(copy_node.input):
                copy_node.input[k] = rename.get(i, i)
            for k, o in enumerate(copy_node.output):
                if o:
                    copy_node.output[k] = rename[o] = self.fresh(o)
            out.append(copy_node)
        return out, rename[user]

    def _probe(self, outputs: Iterable[str]) -> onnx.ModelProto:
        """The program written so far with ``outputs`` (value names) as its outputs, pruned to what they read."""
        probe = onnx.ModelProto()
        probe.CopyFrom(self.model)
        del probe.graph.node[:]
        probe.graph.node.extend(self.nodes)
        del probe.graph.output[:]
        probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs)
        return prune(probe)

    def _alias(self, name: str, to: str) -> None:
        """``name`` read as ``to`` from now on; where the data read ``name``, it reads ``to``."""
        self.alias[name] = to
        if name in self.boundary and to in self.shape_only and to not in self.boundary:
            self.boundary.add(to)
            if to not in self.vectors:
                self.pending_uniform.append(to)

    def _unexpand(self) -> None:
        """An Expand whose readers broadcast its input to the same result anyway (a padding mask ``[batch, 1, 1,
        seq]`` expanded to ``[batch, 1, seq, seq]``, turned into a bias by a Where and added to each layer's scores
        ``[batch, heads, seq, seq]``) dropped: its readers read its input, the values between them keep their
        smaller shapes."""
        outputs = {o.name for o in self.model.graph.output}
        readers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(node.input):
                readers.setdefault(name, []).append(node)
        for node in self.nodes:
            if node.op_type != "Expand" or node.domain not in ("", "ai.onnx") or node.output[0] in outputs:
                continue
            small = self.shapes.get(node.input[0])
            if small is None or None in small:
                continue
            shrunk: dict[str, SymShape] = {}
            if not self._broadcast_anyway(node.output[0], list(small), readers, outputs, shrunk, 2):
                continue
            for reader in readers.get(node.output[0], []):
                for k, name in enumerate(reader.input):
                    if name == node.output[0]:
                        reader.input[k] = node.input[0]
            readers.setdefault(node.input[0], []).extend(readers.pop(node.output[0], []))
            self.shapes.update(shrunk)

    def _broadcast_anyway(self, name: str, shape: SymShape, readers: Mapping[str, list[onnx.NodeProto]],
                          outputs: set[str], shrunk: dict[str, SymShape], depth: int) -> bool:
        """Whether every reader of ``name`` gives the same result where ``name`` has the smaller ``shape``
        (broadcast by the reader's other inputs, or by the readers of its output, ``depth`` readers on); the
        outputs that would then be smaller go to ``shrunk``."""
        got = readers.get(name, [])
        if not got or name in outputs:
            return False
        for reader in got:
            if reader.op_type not in BROADCASTING or reader.domain not in ("", "ai.onnx") or len(reader.output) != 1:
                return False
            shapes = [shape if i == name else shrunk.get(i, self.shapes.get(i)) for i in reader.input]
            if any(s is None or None in s for s in shapes):
                return False
            out = _broadcast([[d for d in s if d is not None] for s in shapes if s is not None])
            want = self.shapes.get(reader.output[0])
            if out is None or want is None:
                return False
            if out == want:
                continue
            if depth == 0 or reader.output[0] in outputs:
                return False
            shrunk[reader.output[0]] = list[Mono | None](out)
            if not self._broadcast_anyway(reader.output[0], list[Mono | None](out), readers, outputs, shrunk,
                                          depth - 1):
                return False
        return True

    def _spread(self, node: onnx.NodeProto) -> bool:
        """An ``And`` of an all-true slice expanded to a shape (:meth:`_uniform`: torch's mask of ones, expanded
        to ``[1, 1, seq, 1]``) and another boolean written as the other expanded to that shape (an ``Or`` of all
        false likewise): one kernel less (True: rewritten, its output's shape known)."""
        if len(node.input) != 2 or node.output[0] in {o.name for o in self.model.graph.output}:
            return False
        for k in (0, 1):
            got, other = self.expanded.get(node.input[k]), node.input[1 - k]
            if got is None or self.types.get(other) != self.types.get(node.input[k]):
                continue
            value = array_of(self.constants[got[0]])
            if value.size == 0 or not np.all(value == IDENTITIES[node.op_type]) or any(n != 1 for n in value.shape):
                continue
            a, b = self.shapes.get(node.input[k]), self.shapes.get(other)
            if a is None or b is None or None in a or None in b:
                continue
            width = max(len(a), len(b))
            one = Mono.const(1)
            a_, b_ = [one] * (width - len(a)) + [d for d in a if d is not None], \
                [one] * (width - len(b)) + [d for d in b if d is not None]
            if any(x != y and one not in (x, y) for x, y in zip(a_, b_)):
                continue
            node.op_type = "Expand"
            del node.input[:]
            node.input.extend([other, got[1]])
            self.shapes[node.output[0]] = [y if x == one else x for x, y in zip(a_, b_)]
            self.types[node.output[0]] = self.types[other]
            return True
        return False

    def _identity(self, node: onnx.NodeProto) -> bool:
        """An ``And`` with an all-true constant (an ``Or`` with all false) that broadcasts into the other input's
        shape, dropped: its output read as the other input (True). The user's mask computations are written back
        verbatim, where the static program folds them."""
        if len(node.input) != 2 or node.output[0] in {o.name for o in self.model.graph.output}:
            return False
        for k in (0, 1):
            const, other = self.constants.get(node.input[k]), node.input[1 - k]
            if const is None or self.types.get(other) != const.data_type:
                continue
            value = array_of(const)
            if value.size == 0 or not np.all(value == IDENTITIES[node.op_type]):
                continue
            if self.shapes.get(other) is None or None in (self.shapes.get(other) or []):
                self._fit()
            dims = self.shapes.get(other)
            if dims is None or None in dims or value.ndim > len(dims) or any(
                    n != 1 and (d is None or not d.is_const or int(d.coef) != n)
                    for n, d in zip(value.shape[::-1], dims[::-1])):
                continue
            self._alias(node.output[0], other)
            self.shapes[node.output[0]] = list(dims)
            self.types[node.output[0]] = self.types[other]
            return True
        return False

    def _small_vector(self, name: str, elem: int | None = None, shape: SymShape | None = None) -> bool:
        """Whether ``name`` (of ``elem`` and ``shape``: by default, as inferred) is an int64 scalar or vector of at
        most 8 entries computed from the shapes alone."""
        elem = self.types.get(name) if elem is None else elem
        shape = self.shapes.get(name) if shape is None else shape
        return name in self.shape_only and elem == onnx.TensorProto.INT64 and shape is not None \
            and (shape == [] or (len(shape) == 1 and shape[0] is not None and shape[0].is_const
                                 and 0 < shape[0].coef <= 8))

    def _vectors_read(self, node: onnx.NodeProto) -> dict[int, list[Mono]]:
        """The fitted entries of the shape vectors ``node`` reads (input index -> entries), unless ``node`` only
        computes another such vector (then the vector it computes is read where it is used)."""
        read = [k for k, name in enumerate(node.input) if name in self.vectors]
        if not read:
            return {}
        inferred = infer_node(node, self.shapes, self.types, self.constants, self.model.opset_import)
        outs = [o for o in node.output if o]
        if all(o in inferred and self._small_vector(o, *inferred[o]) for o in outs) \
                and not any(o in {vi.name for vi in self.model.graph.output} for o in outs):
            return {}
        self._fit_vectors()
        return {k: monos for k in read if (monos := self.vectors.get(node.input[k])) is not None}

    def _fit_vectors(self) -> None:
        """The entries of the pending shape vectors as monomials, read off runs of the program so far at several
        sizes (:func:`eqsat.onnx.fitting.fit_vectors`)."""
        names, self.pending = self.pending, []
        if not names:
            return
        fitted = fit_vectors(run_values(self._probe(names), names, shapes=False), self.values) or []
        for name, entries in zip(names, fitted):
            whole = [m for m in entries if m is not None]
            self.vectors[name] = whole if len(whole) == len(entries) else None

    def _reshape(self, node: onnx.NodeProto, fitted: list[Mono] | None) -> bool:
        """A Reshape's target written shape-generic: its symbolic target (``fitted``: read off the shape vector that
        computes it; else guessed from the constant target and its input's shape) with 0 and -1. One to its input's
        own shape is dropped (its output read as its input: True)."""
        dims_in = self.rows.get(node.input[0]) or self.shapes.get(node.input[0])
        if dims_in is None or any(d is None for d in dims_in):
            self._fit()
            dims_in = self.shapes.get(node.input[0])
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        known = None if dims_in is None or any(d is None for d in dims_in) else [d for d in dims_in if d is not None]
        if fitted is not None:
            sym = resolve_target(fitted, known, allowzero)
            if sym is None:  # its input's shape is not known: the target as computed, from the symbols
                node.input[1] = self.vector(fitted)
                return False
        else:
            target = int_values(self.constants[node.input[1]])
            if known is None:
                self.notes.append(f"Reshape {node.name!r}: its input's shape is not known symbolically")
                return False
            sym = self._original_target(node.input[1], target, known)
            if sym is None:
                sym = reshape_target(known, target, self.values, allowzero)
            if sym is None:
                self.notes.append(f"Reshape {node.name!r}: the target {target} does not line up with its input")
                return False
        self.shapes[node.output[0]] = list(sym)
        if node.input[0] in self.types:
            self.types[node.output[0]] = self.types[node.input[0]]
        collapsed = self._collapse(node)
        if collapsed is not None:
            known = collapsed
        if known is not None and list(sym) == known and self._identity_reshape(node):
            return True
        if all(m.is_const for m in sym) and fitted is None:
            if collapsed is not None:  # the constant target may copy (0) the sizes of the input it no longer reads
                node.input[1] = self.vector(sym)
            return False
        self._write_target(node, sym, known or [], allowzero)
        return False

    def _write_target(self, node: onnx.NodeProto, sym: list[Mono], known: list[Mono], allowzero: bool) -> None:
        """A Reshape's target ``sym`` (its output's symbolic shape) written as :meth:`_target` writes it: 0 where it
        copies its input's (``known``) size, one -1, a constant where no other is left."""
        target = self._target(sym, known)
        if allowzero and any(w == Mono.const(0) for w in target):
            # a 0 written copies the input's size, the very size the target asks for (allowzero: a 0 in the
            # target is the size 0, which no written entry is)
            keep = [a for a in node.attribute if a.name != "allowzero"]
            del node.attribute[:]
            node.attribute.extend(keep)
        node.input[1] = self.vector(target)

    def _rotary_positions(self, node: onnx.NodeProto) -> None:
        """A ``RotaryEmbedding`` (opset 23) whose cos and sin are the first rows of tables (:mod:`eqsat.generic.tables`)
        expanded to the batch (its kernel wants them ``[batch, seq, d]``) reads the tables themselves at position
        ids, the first rows of a table of positions expanded to ``[batch, seq]``: one Slice and one Expand where
        the prefixes take two of each and the target of their Expand its own size computation."""
        made = {o: n for n in self.nodes for o in n.output}
        tables, ends, sizes = [], None, None
        for name in node.input[1:3]:
            expand = made.get(name)
            sliced = made.get(expand.input[0]) if expand is not None and expand.op_type == "Expand" else None
            if sliced is None or sliced.op_type != "Slice" or len(sliced.input) != 4 \
                    or any(i not in self.constants for i in (sliced.input[0], sliced.input[1], sliced.input[3])):
                return
            if any(sliced.output[0] == written for written, _, _ in self.guarded):
                return  # a table that stops below the sizes the user's program takes: read through its If
            table = array_of(self.constants[sliced.input[0]])
            axes = int_values(self.constants[sliced.input[3]])
            shape = self.shapes.get(name)
            if table.ndim != 3 or table.shape[0] != 1 or int_values(self.constants[sliced.input[1]]) != [0] \
                    or axes not in ([1], [-2]) or shape is None or len(shape) != 3 or None in shape \
                    or ends not in (None, sliced.input[2]) or sizes not in (None, shape[:2]):
                return
            tables.append(table[0])
            ends, sizes = sliced.input[2], shape[:2]
        assert ends is not None and sizes is not None
        positions = self.cache.get(f"rotary_positions:{ends}:{len(tables[0])}")
        if positions is None:
            rows = self.const(np.arange(len(tables[0]), dtype=np.int64)[None], "positions")
            first = self.emit("Slice", [rows, self.const(np.array([0], np.int64), "starts"), ends,
                                        self.const(np.array([1], np.int64), "axes")], "positions")
            positions = self.emit("Expand", [first, self.vector([d for d in sizes if d is not None])], "positions")
            self.shapes[first] = [Mono.const(1), sizes[1]]
            self.shapes[positions] = list(sizes)
            self.cache[f"rotary_positions:{ends}:{len(tables[0])}"] = positions
        for k, table in zip((1, 2), tables):
            node.input[k] = self.const(table, "rotary")
        node.input.append(positions)

    def _identity_reshape(self, node: onnx.NodeProto) -> bool:
        """A Reshape to its input's own shape (``[0, 0]``: onnxruntime keeps it) dropped (True): its output read as its
        input; where it is an output of the graph, the node that computes its input writes the output instead
        (the values read before under the input's name read it under the output's)."""
        out, source = node.output[0], node.input[0]
        g = self.model.graph
        if out not in {o.name for o in g.output}:
            self._alias(out, source)
            return True
        producer = next((n for n in self.nodes if source in n.output), None)
        if producer is None or source in {o.name for o in g.output} or source in self.boundary \
                or source in self.shape_only:
            return False
        producer.output[list(producer.output).index(source)] = out
        for n in self.nodes:
            for k, name in enumerate(n.input):
                if name == source:
                    n.input[k] = out
        self.alias[source] = out
        self.types.setdefault(out, self.types.get(source, 0))
        return True

    def _target(self, sym: list[Mono], known: list[Mono]) -> list[Mono]:
        """A Reshape target (``sym``) of an input of shape ``known`` as written: ``0`` where it keeps the input's
        symbolic size, ``-1`` for one of the other symbolic sizes (the first whose symbols are not computed yet:
        the sequence length of ``[batch, seq, N]``, which a decoder's mask and position tables read too, rather
        than the batch), the rest computed from the inputs' shapes. Where those are sizes of the inputs and one
        constant size is left, the ``-1`` is that constant instead: ``[batch, seq, -1]``, one vector for every
        width (a decoder's reshapes back from rows to ``[batch, seq, N]`` share it), unless ``[-1, seq, N]``
        writes fewer nodes (the sequence length is read already, the batch is not: a Concat, where the shared
        vector is a Shape and a Concat)."""
        written: list[Mono | None] = [Mono.const(0) if k < len(known) and m == known[k] and not m.is_const
                                      else None for k, m in enumerate(sym)]
        loose = [k for k, m in enumerate(sym) if written[k] is None and not m.is_const]
        rest = [k for k, m in enumerate(sym) if written[k] is None and m.is_const]
        if len(loose) > 1 and len(rest) == 1 and sym[rest[0]].coef > 0 and all(
                sym[k].coef == 1 and len(sym[k].powers) == 1 and sym[k].powers[0][1] == 1
                and sym[k].powers[0][0] in self.places for k in loose):
            shared, alone = list(written), list(written)
            shared[rest[0]] = alone[loose[0]] = Mono.const(-1)
            # [batch, seq, -1] (one vector for every width), or [-1, seq, N] where that writes fewer nodes: the
            # sequence length's size is read already (a mask's, a position table's) and the batch's is not
            whole = [[w if w is not None else m for w, m in zip(t, sym)] for t in (shared, alone)]
            written = alone if self.cost(whole[1]) < self.cost(whole[0]) else shared
        elif loose:
            missing = [k for k in loose if not all(s in self.cache for s, _ in sym[k].powers)]
            written[(missing or loose)[0]] = Mono.const(-1)
        return [w if w is not None else m for w, m in zip(written, sym)]

    def _gathered(self, node: onnx.NodeProto, target: list[Mono] | None) -> None:
        """A Gather written as the Reshape it is (``target``: its output's symbolic shape; None: not rewritten),
        its target written relative to its input (0 and -1) and the Reshapes before it folded in."""
        if target is None:
            return
        self.targeted.add(id(node))
        self.shapes[node.output[0]] = list[Mono | None](target)
        known = self._collapse(node) or [d for d in self.shapes.get(node.input[0]) or [] if d is not None]
        if len(known) == len(self.shapes.get(node.input[0]) or []):
            self._write_target(node, target, known, False)

    def _collapse(self, node: onnx.NodeProto) -> list[Mono] | None:
        """A Reshape of a Reshape or Flatten written (a chain of them) made to read the first one's input: one
        Reshape where the user's mask chain or a layer's rows wrote several (onnxruntime runs each). Its input's
        symbolic shape where it changed (the target is then written relative to it), else None."""
        name = node.input[0]
        changed = name in self.rows
        while True:
            inner = self.made.get(name)
            if inner is None or inner.domain not in ("", "ai.onnx") or inner.op_type not in ("Reshape", "Flatten") \
                    or not inner.input or not inner.input[0]:
                break
            dims = self.shapes.get(inner.input[0])
            if dims is None or any(d is None for d in dims):
                break
            name, changed = inner.input[0], True
        if not changed:
            return None
        dims = self.shapes.get(name)
        if dims is None or any(d is None for d in dims):
            return None
        node.input[0] = name
        return [d for d in dims if d is not None]

    def _split(self, node: onnx.NodeProto) -> None:
        """A Split along the last axis of a Reshape that kept that axis (rows ``[batch*seq, 3*768]`` to ``[batch,
        seq, 3*768]``, split in three), where each part is only reshaped again, made to split the rows themselves:
        the Reshape before it is dropped, and the Reshapes after it write their targets from the rows."""
        inner = self.made.get(node.input[0]) if node.input else None
        if inner is None or inner.domain not in ("", "ai.onnx") or inner.op_type != "Reshape":
            return
        x = inner.input[0]
        dims_x, dims_y = self.shapes.get(x), self.shapes.get(node.input[0])
        if not dims_x or not dims_y or None in dims_x or None in dims_y or dims_x[-1] != dims_y[-1]:
            return
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if axis not in (-1, len(dims_y) - 1) or any(a.name == "num_outputs" for a in node.attribute):
            return
        outputs = {o.name for o in self.model.graph.output}
        sizes = self.constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        split = int_values(sizes) if sizes is not None else \
            next((list(a.ints) for a in node.attribute if a.name == "split"), None)
        if split is None or len(split) != len(node.output):
            return
        for out in node.output:
            readers = self.readers.get(out, [])
            if not out or out in outputs or not readers or any(
                    r.domain not in ("", "ai.onnx") or r.op_type != "Reshape" or list(r.input).count(out) != 1
                    or r.input[0] != out or len(r.input) < 2
                    or not (r.input[1] in self.constants or r.input[1] in self.shape_only) for r in readers):
                return
        node.input[0] = x
        for a in node.attribute:
            if a.name == "axis":
                a.i = len(dims_x) - 1
        if not any(a.name == "axis" for a in node.attribute):
            node.attribute.append(helper.make_attribute("axis", len(dims_x) - 1))
        for out, n in zip(node.output, split):
            self.rows[out] = [*dims_y[:-1], Mono.const(n)]
            self.shapes[out] = [*dims_x[:-1], Mono.const(n)]
            if x in self.types:
                self.types[out] = self.types[x]

    def _expand(self, node: onnx.NodeProto, fitted: list[Mono]) -> bool:
        """An Expand to a shape vector (``fitted``) written with the fewest computed sizes: a target size its input
        already has is written 1, and an Expand to its input's own shape is dropped (its output read as its input;
        True)."""
        dims = self.shapes.get(node.input[0])
        if dims is None or any(d is None for d in dims):
            self._fit()
            dims = self.shapes.get(node.input[0])
        if dims is None or any(d is None for d in dims):
            node.input[1] = self.vector(fitted)
            return False
        have = [Mono.const(1)] * (len(fitted) - len(dims)) + [d for d in dims if d is not None]
        want = [Mono.const(1)] * (len(have) - len(fitted)) + fitted
        out: list[Mono] = []
        for a, b in zip(have, want):
            if a != b and Mono.const(1) not in (a, b):
                node.input[1] = self.vector(fitted)
                return False
            out.append(b if a == Mono.const(1) else a)
        self.shapes[node.output[0]] = list[Mono | None](out)
        if node.input[0] in self.types:
            self.types[node.output[0]] = self.types[node.input[0]]
        if out == dims and node.output[0] not in {o.name for o in self.model.graph.output}:
            self._alias(node.output[0], node.input[0])
            return True
        whole = out[len(out) - len(fitted):]
        fewest = [Mono.const(1) if a == b else b for a, b in zip(have[len(have) - len(fitted):], whole)]
        node.input[1] = self.vector(whole if self.ready(whole) and not self.ready(fewest) else fewest)
        return False

    def _original_target(self, name: str, target: list[int], dims_in: list[Mono]) -> list[Mono] | None:
        """The symbolic target of a Reshape written back from the user's model whose target the original computes
        (a folded Shape computation, kept under its name): read off runs of the original at further sizes, where
        it agrees with ``target`` and the input's size."""
        if self._probed is None:
            computed = {o for n in self.original.graph.node for o in n.output if o}
            names = [n.input[1] for n in self.model.graph.node if n.op_type == "Reshape" and len(n.input) > 1
                     and n.input[1] in computed and n.input[1] in self.constants]
            runs = fit_runs(run_values(self.original, names, shapes=False), self.values) if names else None
            self._probed = dict(zip(names, runs or []))
        entries = self._probed.get(name)
        if entries is None or len(entries) != len(target) or any(m is None for m in entries):
            return None
        out = [m for m in entries if m is not None]
        if [int(m.value(self.values)) for m in out] != target or any(m.coef <= 0 for m in out) \
                or product(out) != product(dims_in):
            return None
        return out

    def _fit(self) -> None:
        """The symbolic shapes of the values written so far that shape inference left unknown, read off runs of
        the program so far in onnxruntime (:mod:`eqsat.onnx.fitting`)."""
        unknown = [o for n in self.nodes for o in n.output if o and o not in self._tried
                   and (self.shapes.get(o) is None or any(d is None for d in self.shapes[o] or []))]
        if not unknown:
            return
        self._tried.update(unknown)  # each value fitted once: a run of a prefix of a large model is not cheap
        prefix = onnx.ModelProto()
        prefix.CopyFrom(self.model)
        del prefix.graph.node[:]
        prefix.graph.node.extend(self.nodes)
        fitted = fit_vectors(run_values(prefix, unknown, shapes=True), self.values)
        for name, dims in zip(unknown, fitted or []):
            old = self.shapes.get(name)
            if old is None or len(old) != len(dims):
                self.shapes[name] = dims
            else:
                self.shapes[name] = [a if a is not None else b for a, b in zip(old, dims)]

    def _slice(self, node: onnx.NodeProto) -> None:
        """A Slice that ran to the end of a symbolic axis (its end at the axis' size) now runs to its end."""
        dims = self.shapes.get(node.input[0])
        starts, ends, axes = (self.constants.get(node.input[k]) for k in (1, 2, 3))
        if dims is None or starts is None or ends is None or axes is None:
            return
        ends_v, axes_v = int_values(ends), int_values(axes)
        changed = False
        for j, (e, a) in enumerate(zip(ends_v, axes_v)):
            d = dims[a] if -len(dims) <= a < len(dims) else None
            if d is None or d.is_const:
                continue
            if e >= d.value(self.values):
                ends_v[j] = int(INT64_MAX)
                changed = True
            else:
                self.notes.append(f"Slice {node.name!r} ends at {e}, inside the dynamic axis {d.key()}: kept as the "
                                  "original has it")
        if changed:
            node.input[2] = self.const(np.array(ends_v, np.int64), "ends")


def _table_key(table: np.ndarray) -> tuple[str, tuple[int, ...], str]:
    """A key equal for two tables of the same values."""
    return str(table.dtype), tuple(table.shape), hashlib.sha256(np.ascontiguousarray(table).tobytes()).hexdigest()


def _topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` in an order where each comes after what it reads (its subgraphs' outer reads included), as close
    to the given order as that allows."""
    import heapq

    made = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    waits: list[set[int]] = []
    readers: dict[int, list[int]] = {}
    for k, node in enumerate(nodes):
        deps = {made[i] for i in [*node.input, *implicit_inputs(node)] if i in made and made[i] != k}
        waits.append(deps)
        for d in deps:
            readers.setdefault(d, []).append(k)
    ready = [k for k, w in enumerate(waits) if not w]
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


def _broadcast(shapes: list[list[Mono]]) -> list[Mono] | None:
    """The shape numpy's broadcasting gives ``shapes`` (None where two sizes differ and neither is 1)."""
    width = max((len(s) for s in shapes), default=0)
    one = Mono.const(1)
    out = []
    for axis in range(width):
        sizes = {s[len(s) - width + axis] for s in shapes if len(s) - width + axis >= 0} - {one}
        if len(sizes) > 1:
            return None
        out.append(next(iter(sizes), one))
    return out


def make_generic(model: onnx.ModelProto, original: onnx.ModelProto, values: Mapping[str, int],
                 full: bool = True, final: bool = True) -> Generic:
    """``model`` (exported at the symbols' ``values``) rewritten shape-polymorphic, with ``original``'s interface;
    ``model`` itself is left as it was. Not ``full``: only the triangles and prefix tables among the values computed
    from the shapes alone that the data reads are written in their forms (a Trilu, a Slice of a table:
    :mod:`eqsat.generic.tables`); the rest is left as it is (for a model the importer reads again, at the
    representative sizes). Not ``final`` (the importer's simplification): the forms only a written program takes are
    left out (a MatMul and its bias stay as they are, as the static program's e-graph starts from them, and no
    Expand is dropped: the e-graph's attention rules read the mask's full shape)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return _Rewriter(copy, original, values, full, final).run()


def simplify_for_import(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto | None:
    """A dynamic-axes ``model`` (at ``input_shapes``) with its computations from the shapes alone written in the forms
    the importer reads (:func:`eqsat.onnx.importer.simplified`): every form where that leaves no notes, else only the
    tables; None where neither does (or the rewrite fails: a best effort, the user's chains are then imported as
    they are)."""
    for full in (True, False):  # every form (the e-graph starts near the static program's size); else the tables
        try:
            written = make_generic(model, model, symbol_values(model, input_shapes), full=full, final=False)
        except Exception:  # noqa: BLE001 - a best effort: the user's chains are imported as they are
            continue
        if not written.notes:
            return written.model
    return None


__all__ = ["Generic", "make_generic", "simplify_for_import"]
