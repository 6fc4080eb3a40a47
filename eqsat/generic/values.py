"""The values computed from the shapes alone that the data reads, written the way the static program's folded
constants run (onnxruntime cannot fold what depends on a symbol, and each node it runs costs), from the patterns
runs at several sizes show them to have (:mod:`.uniform`, :mod:`.tables`):

- one slice repeated along its symbolic axes is that slice, a constant, broadcast where its reader broadcasts it
  and else expanded (:func:`uniform_input`); a causal mask is a Trilu, and position ids, rotary cos and sin or a
  position embedding's rows a Slice of a constant table (:func:`as_pattern`); opset 23's RotaryEmbedding reads
  its cos and sin tables whole at position ids (:func:`rotary_positions`);
- an ``And`` with all true (an ``Or`` with all false) is dropped (:func:`identity`), and one of an all-true slice
  expanded to a shape is the other operand expanded (:func:`spread`);
- an Expand whose readers broadcast its input to the same values anyway (a padding mask added to the scores) is
  dropped (:func:`unexpand`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
import onnx

from eqsat.dims import Mono, SymShape
from eqsat.onnx.axes.symbolic import int_values
from eqsat.onnx.pool import array_of

from .guards import reads_table
from .probes import fit, probe
from .state import Rewrite
from .tables import Prefix, Triangle, pattern_key, write_prefix, write_triangle
from .uniform import shape_patterns

IDENTITIES: dict[str, bool] = {"And": True, "Or": False}
"""the boolean operators the masks torch exports combine, and their identity element (a Mul by ones or an Add of
zeros stays: onnxruntime's normalization fusions match the scale and the bias even where they are 1 and 0)"""

BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater",
                          "LessOrEqual", "GreaterOrEqual", "Where", "Sum", "Max", "Min", "Mean", "BitShift"})
"""elementwise operators that broadcast their inputs (numpy's rules): an input's axis of size 1 takes the others'"""


BROADCAST_SLOTS = frozenset({("Attention", 3)})
"""(operator, input) that broadcasts the input against the others: opset 23 Attention's mask"""


def uniform_input(w: Rewrite, node: onnx.NodeProto, k: int) -> str:
    """Input ``k`` of ``node``, written as its slice (:mod:`eqsat.generic.uniform`) where it is one slice repeated
    along its symbolic axes: the slice itself where ``node`` broadcasts it against inputs of those sizes,
    else the slice expanded to its shape."""
    name = node.input[k]
    if w.shaped.pending:
        names, w.shaped.pending = w.shaped.pending, []
        if any(w.shapes.get(n) is None or None in (w.shapes.get(n) or []) for n in names):
            fit(w)
        shapes = {n: [d for d in w.shapes.get(n) or [] if d is not None] for n in names}
        shapes = {n: dims for n, dims in shapes.items() if len(dims) == len(w.shapes.get(n) or [])
                  and any(not d.is_const for d in dims) and not w.opaque(dims)}
        if shapes:
            found = shape_patterns(probe(w, shapes), shapes, w.values)
            w.shaped.patterns.merge(found)
    dims = w.shapes.get(name)
    const = w.cache.get(f"uniform:{name}") or (as_pattern(w, name) if dims is not None else None)
    if const is None or dims is None:
        return name
    w.cache[f"uniform:{name}"] = const
    sizes = [d for d in dims if d is not None]
    written = w.shapes.get(const) or []
    others = [w.shapes.get(i) for j, i in enumerate(node.input) if j != k and i]
    covered = all(any(o is not None and len(o) >= len(sizes) - a and o[len(o) - len(sizes) + a] == d
                      for o in others) for a, d in enumerate(sizes)
                  if not d.is_const and (a >= len(written) or written[a] != d))
    if (node.op_type in BROADCASTING or (node.op_type, k) in BROADCAST_SLOTS) and covered:
        return const
    key = f"expanded:{const}:{','.join(d.key() for d in sizes)}"
    if key not in w.cache:
        w.cache[key] = w.emit("Expand", [const, w.vector(sizes)], "uniform")
        w.shaped.expanded[w.cache[key]] = (const, w.vector(sizes))
        w.types[w.cache[key]] = w.types.get(name, 0)
        w.shapes[w.cache[key]] = list(dims)
    return w.cache[key]


def as_pattern(w: Rewrite, name: str) -> str | None:
    """``name`` (a value computed from the shapes alone) written as the pattern runs showed it has: its slice,
    a constant; a triangle (Trilu); a prefix of a table (Slice); None where it has none."""
    elem = w.types.get(name, 0)
    if name in w.shaped.patterns.slices and w.every_form:
        return w.const(w.shaped.patterns.slices[name], "uniform")
    found: Triangle | Prefix | None = w.shaped.patterns.triangles.get(name) or w.shaped.patterns.prefixes.get(name)
    if found is None:
        return None
    key = first_key = f"pattern:{elem}:{pattern_key(found)}"  # one table or mask read twice (a rotary cache): once
    guarded = isinstance(found, Prefix) and found.beyond
    chain = chain_key(w, name) if guarded else ""
    if guarded:
        # beyond its table a value is what its own chain computes: two values alike within the table (a position
        # and that position clipped past the table) are one only where they are computed alike; the other keeps
        # its chain (one that reads a table the import wrote: a Slice and a guard of its own)
        first = w.cache.get(f"{first_key}:chain")
        if first is not None and first != chain:
            if not reads_table(w, name, w.made):
                return None
            key += f":{chain}"
    if key not in w.cache:
        written = write_triangle(w, found, elem) if isinstance(found, Triangle) else \
            write_prefix(w, found, elem)
        if written is None:
            return None
        w.cache[key] = written
        if guarded:
            assert isinstance(found, Prefix)
            w.cache.setdefault(f"{first_key}:chain", chain)
            w.guards.guarded.append((written, name, found))
    return w.cache[key]


def chain_key(w: Rewrite, name: str) -> str:
    """A digest of how the program written so far computes ``name``: each node's operator, attributes and output
    index over its inputs' digests, down to constants (by content), inputs, the data and values not computed by a
    written node (by name: the size vectors are written once per monomials), and Shapes (by the symbolic shape they read:
    two values' Shapes of one shape are one value). Equal digests: one value at every size."""
    memo: dict[str, str] = {}

    def of(value: str) -> str:
        if value in memo:
            return memo[value]
        memo[value] = f"value:{value}"  # (read where a malformed program's cycle comes back to it)
        const, node = w.known.get(value), w.made.get(value)
        nested = node is not None and any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                          for a in node.attribute)
        if const is not None:
            got = "tensor:" + w.fits.keys.tensor(const).hex()
        elif node is None or nested or value not in w.shape_only:
            got = f"value:{value}"
        elif node.op_type == "Shape" and node.domain in ("", "ai.onnx") and (dims := w.shapes.get(node.input[0])) \
                is not None and None not in dims:
            attrs = sorted((a.name, a.i) for a in node.attribute)
            got = f"shape:{[d.key() for d in dims if d is not None]}:{attrs}"
        else:
            h = hashlib.blake2b(digest_size=16)
            # (its number of outputs too: a Split without sizes cuts its input into as many parts as it has)
            h.update(f"{node.domain}:{node.op_type}:{list(node.output).index(value)}/{len(node.output)}:".encode())
            for a in sorted(node.attribute, key=lambda a: a.name):
                h.update(a.SerializeToString(deterministic=True))
            for i in node.input:
                h.update(f"|{of(i) if i else ''}".encode())
            got = h.hexdigest()
        memo[value] = got
        return got

    return of(name)


def spread(w: Rewrite, node: onnx.NodeProto) -> bool:
    """An ``And`` of an all-true slice expanded to a shape (:func:`uniform_input`: torch's mask of ones, expanded
    to ``[1, 1, seq, 1]``) and another boolean written as the other expanded to that shape (an ``Or`` of all
    false likewise): one kernel less (True: rewritten, its output's shape known)."""
    if len(node.input) != 2 or node.output[0] in w.outputs():
        return False
    for k in (0, 1):
        got, other = w.shaped.expanded.get(node.input[k]), node.input[1 - k]
        if got is None or w.types.get(other) != w.types.get(node.input[k]):
            continue
        value = array_of(w.constants[got[0]])
        if value.size == 0 or not np.all(value == IDENTITIES[node.op_type]) or any(n != 1 for n in value.shape):
            continue
        a, b = w.shapes.get(node.input[k]), w.shapes.get(other)
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
        w.shapes[node.output[0]] = [y if x == one else x for x, y in zip(a_, b_)]
        w.types[node.output[0]] = w.types[other]
        return True
    return False


def identity(w: Rewrite, node: onnx.NodeProto) -> bool:
    """An ``And`` with an all-true constant (an ``Or`` with all false) that broadcasts into the other input's
    shape, dropped: its output read as the other input (True). The user's mask computations are written back
    verbatim, where the static program folds them."""
    if len(node.input) != 2 or node.output[0] in w.outputs():
        return False
    for k in (0, 1):
        const, other = w.constants.get(node.input[k]), node.input[1 - k]
        if const is None or w.types.get(other) != const.data_type:
            continue
        value = array_of(const)
        if value.size == 0 or not np.all(value == IDENTITIES[node.op_type]):
            continue
        if w.shapes.get(other) is None or None in (w.shapes.get(other) or []):
            fit(w)
        dims = w.shapes.get(other)
        if dims is None or None in dims or value.ndim > len(dims) or any(
                n != 1 and (d is None or not d.is_const or int(d.coef) != n)
                for n, d in zip(value.shape[::-1], dims[::-1])):
            continue
        w.read_as(node.output[0], other)
        w.shapes[node.output[0]] = list(dims)
        w.types[node.output[0]] = w.types[other]
        return True
    return False


def unexpand(w: Rewrite) -> None:
    """An Expand whose readers broadcast its input to the same result anyway (a padding mask ``[batch, 1, 1,
    seq]`` expanded to ``[batch, 1, seq, seq]``, turned into a bias by a Where and added to each layer's scores
    ``[batch, heads, seq, seq]``) dropped: its readers read its input, the values between them keep their
    smaller shapes."""
    outputs = w.outputs()
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in w.nodes:
        for name in dict.fromkeys(node.input):
            readers.setdefault(name, []).append(node)
    for node in w.nodes:
        if node.op_type != "Expand" or node.domain not in ("", "ai.onnx") or node.output[0] in outputs:
            continue
        small = w.shapes.get(node.input[0])
        if small is None or None in small:
            continue
        shrunk: dict[str, SymShape] = {}
        if not broadcast_anyway(w, node.output[0], list(small), readers, outputs, shrunk, 2):
            continue
        for reader in readers.get(node.output[0], []):
            for k, name in enumerate(reader.input):
                if name == node.output[0]:
                    reader.input[k] = node.input[0]
        readers.setdefault(node.input[0], []).extend(readers.pop(node.output[0], []))
        w.shapes.update(shrunk)


def broadcast_anyway(w: Rewrite, name: str, shape: SymShape, readers: Mapping[str, list[onnx.NodeProto]],
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
        shapes = [shape if i == name else shrunk.get(i, w.shapes.get(i)) for i in reader.input]
        if any(s is None or None in s for s in shapes):
            return False
        out = _broadcast([[d for d in s if d is not None] for s in shapes if s is not None])
        want = w.shapes.get(reader.output[0])
        if out is None or want is None:
            return False
        if out == want:
            continue
        if depth == 0 or reader.output[0] in outputs:
            return False
        shrunk[reader.output[0]] = list[Mono | None](out)
        if not broadcast_anyway(w, reader.output[0], list[Mono | None](out), readers, outputs, shrunk, depth - 1):
            return False
    return True


def rotary_positions(w: Rewrite, node: onnx.NodeProto) -> None:
    """A ``RotaryEmbedding`` (opset 23) whose cos and sin are the first rows of tables (:mod:`eqsat.generic.tables`)
    expanded to the batch (its kernel wants them ``[batch, seq, d]``) reads the tables themselves at position
    ids, the first rows of a table of positions expanded to ``[batch, seq]``: one Slice and one Expand where
    the prefixes take two of each and the target of their Expand its own size computation."""
    made = {o: n for n in w.nodes for o in n.output}
    tables, ends, sizes = [], None, None
    for name in node.input[1:3]:
        expand = made.get(name)
        sliced = made.get(expand.input[0]) if expand is not None and expand.op_type == "Expand" else None
        if sliced is None or sliced.op_type != "Slice" or len(sliced.input) != 4 \
                or any(i not in w.constants for i in (sliced.input[0], sliced.input[1], sliced.input[3])):
            return
        if any(sliced.output[0] == written for written, _, _ in w.guards.guarded):
            return  # a table that stops below the sizes the user's program takes: read through its If
        table = array_of(w.constants[sliced.input[0]])
        axes = int_values(w.constants[sliced.input[3]])
        shape = w.shapes.get(name)
        if table.ndim != 3 or table.shape[0] != 1 or int_values(w.constants[sliced.input[1]]) != [0] \
                or axes not in ([1], [-2]) or shape is None or len(shape) != 3 or None in shape \
                or ends not in (None, sliced.input[2]) or sizes not in (None, shape[:2]):
            return
        tables.append(table[0])
        ends, sizes = sliced.input[2], shape[:2]
    assert ends is not None and sizes is not None
    positions = w.cache.get(f"rotary_positions:{ends}:{len(tables[0])}")
    if positions is None:
        rows = w.const(np.arange(len(tables[0]), dtype=np.int64)[None], "positions")
        first = w.emit("Slice", [rows, w.const(np.array([0], np.int64), "starts"), ends,
                                 w.const(np.array([1], np.int64), "axes")], "positions")
        positions = w.emit("Expand", [first, w.vector([d for d in sizes if d is not None])], "positions")
        w.shapes[first] = [Mono.const(1), sizes[1]]
        w.shapes[positions] = list(sizes)
        w.cache[f"rotary_positions:{ends}:{len(tables[0])}"] = positions
    for k, table in zip((1, 2), tables):
        node.input[k] = w.const(table, "rotary")
    node.input.append(positions)


def broadcast_sizes(w: Rewrite, node: onnx.NodeProto, shape: SymShape) -> SymShape:
    """The output ``shape`` of a broadcasting ``node`` (:data:`BROADCASTING`) with each size the shape inference left
    unknown, where its inputs' sizes there are monomials that differ (``[batch, c@2*c@3, 48] + [batch,
    49*t@1*t@3, 48]``: the embeddings and the windows merged back, each read its own way), written as one of them.
    The program runs only where the inputs' sizes there are equal or 1, so where every one of them that is not the
    constant 1 has the same size above 1 at the representative sizes (opaque ones included), the output's size is
    any of them: the one of fewest opaque symbols (:meth:`.state.Rewrite.opaque_shape`), then of fewest symbols.
    Where one is unknown, or is 1 at the representative sizes (a symbol at 1 may broadcast), or two differ there, it
    stays unknown (a run fits it: :func:`.probes.fit`). A MatMul's batch axes (all but its last two, where both its
    inputs are matrices or above) broadcast alike."""
    inputs = [w.shapes.get(name) for name in node.input if name]  # (a Where's condition broadcasts too)
    width = len(shape)
    if node.op_type == "MatMul":
        if any(dims is None or len(dims) < 2 for dims in inputs) or width < 2:
            return shape
        inputs, width = [dims[:-2] for dims in inputs if dims is not None], width - 2
    one = Mono.const(1)
    out = list(shape)
    for axis, d in enumerate(shape[:width]):
        if d is not None:
            continue
        sizes: list[Mono] = []
        for dims in inputs:
            if dims is None:
                sizes = []
                break
            k = len(dims) - width + axis
            if k < 0:
                continue
            m = dims[k]
            if m is None:
                sizes = []
                break
            if m != one:
                sizes.append(m)
        values = {m.value(w.sizes_at) for m in sizes}
        if not sizes or len(values) != 1 or next(iter(values)) <= 1:
            continue
        out[axis] = min(sizes, key=lambda m: (sum(s in w.fits.opaque for s, _ in m.powers), len(m.powers)))
    return out


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


__all__ = ["BROADCASTING", "BROADCAST_SLOTS", "IDENTITIES", "as_pattern", "broadcast_anyway", "broadcast_sizes",
           "identity", "rotary_positions", "spread", "unexpand", "uniform_input"]
