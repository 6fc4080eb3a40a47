"""Targets and slices: the sizes a node reads written from the symbols, where the exported program holds them as
numbers.

- a ``Shape`` of a value of known symbolic shape is read from the inputs' shapes (:func:`read_shape`);
- a Reshape's target is its symbolic target (read off the vector that computes it, the original's runs, or the
  constant target and its input's symbolic shape: :func:`eqsat.onnx.axes.targets.reshape_target`) written with ``0``
  and ``-1`` (:func:`reshape`, :func:`written_target`); a Reshape to its input's own shape is dropped, one of a
  Reshape or Flatten reads the first one's input (:func:`collapse`), and a Gather at each element's (flat or
  multi-) index is the Reshape it is (:func:`gathered`);
- a Split along the kept last axis of rows reshaped to ``[batch, seq, 3*hidden]`` splits the rows
  (:func:`split_rows`);
- an Expand's target is written with 1 where its input has the size, and one to its input's own shape is dropped
  (:func:`expand`);
- a Slice that ran to the end of a symbolic axis runs to its end at any size (:func:`slice_to_end`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from eqsat.dims import Mono, follow, product
from eqsat.onnx.axes.fitting import above, run_values
from eqsat.onnx.axes.symbolic import int_values
from eqsat.onnx.axes.targets import reshape_target, resolve_target

from .probes import at_two, fit, original_target, probe
from .provenance import reading_by_data
from .state import Rewrite

INT64_MAX = np.iinfo(np.int64).max


def read_shape(w: Rewrite, node: onnx.NodeProto) -> bool:
    """A ``Shape`` of a value whose symbolic shape is known, read as those sizes written from the inputs'
    (True): the sizes computed from it no longer wait on the data, and the runs that fit them
    (:func:`fit_pending`) compute no data either."""
    dims = w.shapes.get(node.input[0])
    if dims is None or any(d is None or any(s not in w.places for s, _ in d.powers) for d in dims) \
            or node.output[0] in w.outputs():
        return False
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end")
    monos = [d for d in dims if d is not None][start:end]
    w.alias[node.output[0]] = w.vector(monos)
    return True


def reshape(w: Rewrite, node: onnx.NodeProto, fitted: list[Mono] | None) -> bool:
    """A Reshape's target written shape-generic: its symbolic target (``fitted``: read off the shape vector that
    computes it; else the original's constant or computed target of those entries, or guessed from the constant
    target and its input's shape, read as the original computes it where a symbol at 1 leaves the guess open:
    :func:`alike_target`) with 0 and -1. One to its input's own shape is dropped (its output read as its input:
    True)."""
    dims_in = w.reshaped.rows.get(node.input[0]) or w.shapes.get(node.input[0])
    if dims_in is None or any(d is None for d in dims_in):
        fit(w)
        dims_in = w.opaque_shape(node.input[0])
    allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
    known = None if dims_in is None or any(d is None for d in dims_in) else [d for d in dims_in if d is not None]
    if fitted is not None:
        sym = resolve_target(fitted, known, allowzero)
        if sym is None:  # its input's shape is not known: the target as computed, from the symbols
            node.input[1] = w.vector(fitted)
            return False
    else:
        target = int_values(w.constants[node.input[1]])
        if known is None:
            w.notes.append(f"Reshape {node.name!r}: its input's shape is not known symbolically")
            return False
        sym = constant_target(w, node.input[1], target, known, node.input[0]) \
            or original_target(w, node.input[1], target, known)
        if sym is None:
            sym = reshape_target(known, target, w.sizes_at, allowzero)
            if sym is not None and w.opaque(known):
                sym = at_two(w, node.input[1], target, known, sym, allowzero)
            elif sym is not None and any(w.values.get(s) == 1 for m in known for s, _ in m.powers):
                # a symbol at 1 hides which axis it goes with ([1, 6*batch, 64] to [-1, 384] reads as [1,
                # 384*batch] and as [batch, 384]; [1, batch, 384] to [1, 6, 64] as [batch, 6, 64] and as
                # [1, 6*batch, 64]): as the original computes it, where it does
                sym = alike_target(w, node.input[1], target, known, node.input[0]) or sym
            elif sym is not None and _coincides(w, known, target):
                # so may a size of the symbols equal to a constant of the target: as the original's Reshape that
                # holds the same elements reads it, where one does
                sym = alike_target(w, node.input[1], target, known, node.input[0], confirm=True) or sym
        if sym is None:  # the sizes do not decide it: as the original computes it, under another name
            sym = alike_target(w, node.input[1], target, known, node.input[0])
        if sym is None:
            w.notes.append(f"Reshape {node.name!r}: the target {target} does not line up with its input")
            return False
    w.shapes[node.output[0]] = list(sym)
    if node.input[0] in w.types:
        w.types[node.output[0]] = w.types[node.input[0]]
    collapsed = collapse(w, node)
    if collapsed is not None:
        known = collapsed
    if known is not None and list(sym) == known and identity_reshape(w, node):
        return True
    if all(m.is_const for m in sym) and fitted is None:
        if collapsed is not None:  # the constant target may copy (0) the sizes of the input it no longer reads
            node.input[1] = w.vector(sym)
        return False
    write_target(w, node, sym, known or [], allowzero)
    return False


def _coincides(w: Rewrite, known: list[Mono], target: list[int]) -> bool:
    """Whether a size of the input that the symbols make (``known``, at the representative sizes) equals a
    constant entry above 1 of ``target`` that the reading may take for it: a Swin's last stage of one window at
    224 pixels holds its 49 tokens, ``1/1024*batch*height*width``, as the window's 49, and ``[-1, 49, 12, 32]``
    read the tokens as the window (the q, k and v of four windows at 448 pixels then broke the product with the
    relative bias)."""
    entries = {t for t in target if t > 1}
    return any(not m.is_const and int(m.value(w.sizes_at)) in entries for m in known)


def constant_target(w: Rewrite, name: str, target: list[int], known: list[Mono], data: str | None = None
                    ) -> list[Mono] | None:
    """The symbolic target of a Reshape whose target is a constant of the original (of that name and those entries,
    a ``-1`` in it and no ``0``: ``[-1, 49, 384]``, the windows of a Swin layer): the original reshapes to it at
    every size, so its entries stay as they are and its ``-1`` takes the rest of the input's size (``known``). A
    target of entries that are each 1 or a symbol at 1 is read otherwise (as the sizes it groups: ``[batch *
    windows, 49, 384]`` at a batch and windows of 1 reads as ``[batch, windows * 49, 384]``), which is wrong where
    the batch or the windows grow. A constant the import named anew is read alike where the original reshapes to
    one of those entries (``[-1, 384]``, the pooled rows of a vision tower, which at batch 1 otherwise reads as
    ``[1, 384 * batch]``). Where the original also computes a target of those entries that reads otherwise (a
    MaskFormer's decoder keys ``[1, -1, 12, 32]`` over the 49 tokens of a Swin's last window, whose q, k and v the
    original computes as ``[windows, 49, -1, 32]``), the elements reshaped (``data``) tell which it is
    (:func:`.provenance.reading_by_data`; undecided: the constant's reading). None where the original holds no such
    constant, or it does not line up."""
    if target.count(-1) != 1 or 0 in target:
        return None
    if w.facts.constants.get(name) == target:
        return resolve_target([Mono.const(t) for t in target], known, False)
    if tuple(target) not in w.facts.reshape_constants:
        return None
    # named anew: the entries may be a symbol's size that equals a constant of the original by chance ([-1, 128]
    # of [batch, seq] at a sequence of 128): kept only where the -1 takes a whole product of the input's sizes
    sym = resolve_target([Mono.const(t) for t in target], known, False)
    whole = sym is not None and all(m.coef.denominator == 1 and all(p > 0 for _, p in m.powers) for m in sym)
    if not whole or sym is None:
        return None
    readings = original_readings(w, target, known) if data is not None and name not in w.facts.computed else {}
    mine = ",".join(m.key() for m in sym)
    if any(key != mine for key in readings):
        return reading_by_data(w, data, readings) or sym  # type: ignore[arg-type]
    return sym


def alike_target(w: Rewrite, name: str, target: list[int], known: list[Mono], data: str | None = None,
                 confirm: bool = False) -> list[Mono] | None:
    """The symbolic target of a Reshape whose constant target the original computes under another name (the import
    folded it and named it anew): the targets the original's Reshapes compute (their entries read off runs of it at
    further sizes: :meth:`.original.Original.targets`), or hold as constants with a ``-1``, of the same entries at the representative sizes that line up
    with the input (``known``), where they all read alike (a ``-1`` of ``target`` read as the size it takes). A
    target the sizes alone do not decide (``[1, 8, 8, 8]`` of ``[batch, height * width / 16, 8]``: which of the two
    8s is the height's; ``[-1, 384]`` of ``[1, 6 * batch, 64]``: ``[batch, 384]`` or ``[1, 384 * batch]``) is read as
    the original computes it, also over the reading its sizes suggest (:func:`reshape`). None where none is, or two
    read otherwise, unless the elements reshaped (``data``: the program's value) tell which
    (:func:`.provenance.reading_by_data`); where they do not, the one target the original computes without a
    ``-1`` of those entries, if one is. ``confirm``: only a reading the elements tell."""
    if name in w.facts.computed:
        return None
    found = original_readings(w, target, known)
    if data is not None and (len(found) > 1 or (confirm and found)):
        told = reading_by_data(w, data, found)
        if told is not None or confirm:
            return told
    plain = [out for out, _, computed in found.values() if computed]
    return plain[0] if len(plain) == 1 and not confirm else None


def original_readings(w: Rewrite, target: list[int], known: list[Mono]
                      ) -> dict[str, tuple[list[Mono], list[str], bool]]:
    """The readings of the original's Reshape targets whose entries at the representative sizes are ``target``'s
    and that line up with the input (``known``), by key, each with the names of the targets read so and whether one
    is computed without a ``-1``: those it computes, and its constants with a ``-1`` (the size it takes of
    ``known``)."""
    names = w.facts.computed_targets
    constants = [n for n in w.facts.reshape_targets if n in w.facts.constants and -1 in w.facts.constants[n]]
    fitted = list(w.facts.targets(names)) if names else []
    whole = list(target)  # its -1 as the size it takes here (the import writes [-1, 384] for [batch, 384])
    rest = int(np.prod([t for t in target if t != -1]))
    if target.count(-1) == 1 and rest > 0:  # (an opaque size of the input: no computed target's product is its)
        whole[target.index(-1)] = int(np.prod([int(m.value(w.sizes_at)) for m in known])) // rest
    found: dict[str, tuple[list[Mono], list[str], bool]] = {}
    fitted += [[Mono.const(t) for t in w.facts.constants[n]] for n in constants]
    for computed, entries in zip([*names, *constants], fitted):
        if entries is None or len(entries) != len(target) or any(m is None for m in entries):
            continue
        out = _rest_resolved([m for m in entries if m is not None], known)
        if out is None or any(s not in w.values for m in out for s, _ in m.powers):
            continue  # (a -1 taking a size fitted from runs, no symbol's: read as before, by the sizes)
        if [m.value(w.values) for m in out] == whole and all(m.coef > 0 for m in out) \
                and (product(out) == product(known) or _lines_up(w, out, known)):
            key = ",".join(m.key() for m in out)
            plain = computed in names and entries == out  # (computed, and no -1 resolved)
            held = found.get(key, (out, [], False))
            found[key] = (out, [*held[1], computed], held[2] or plain)
    return found


def _rest_resolved(entries: list[Mono], known: list[Mono]) -> list[Mono] | None:
    """A computed target's entries with its ``-1`` as the size it takes of an input of shape ``known`` (Swin's
    ``[windows, 49, -1, 32]``, whose ``-1`` is the 12 heads a candidate's constant target names); as they are where
    none is, None where two are."""
    rest = [k for k, m in enumerate(entries) if m.is_const and m.coef == -1]
    if not rest:
        return entries
    if len(rest) > 1 or any(m.is_const and m.coef <= 0 for k, m in enumerate(entries) if k != rest[0]):
        return None
    out = list(entries)
    out[rest[0]] = product(known) / product([m for k, m in enumerate(entries) if k != rest[0]])
    return None if any(p < 0 for _, p in out[rest[0]].powers) else out


def _lines_up(w: Rewrite, target: list[Mono], known: list[Mono]) -> bool:
    """Whether a Reshape of an input of shape ``known`` that holds a size fitted from runs (an opaque symbol of no
    arithmetic: a ViT's patches after its register tokens, ``floor(h / 16) * floor(w / 16)``, which no monomial is)
    to ``target`` (each entry a size of the symbols: ``[batch, 384, floor(h / 16), floor(w / 16)]``, a segmentation
    head's grid) keeps its elements in every run that sized it (:attr:`.state.Fits.runs`): the two products agree
    at each, and the runs vary every symbol the target reads. Sapiens2's grid was written at the tuned 14 x 14
    patches, and failed at any other size."""
    opaque = {s for m in known for s, _ in m.powers if s not in w.values}
    read = {s for m in target for s, _ in m.powers}
    if not opaque or not read <= set(w.values) or any(m.coef <= 0 for m in [*target, *known]) \
            or any(p < 0 for m in [*target, *known] for _, p in m.powers):
        return False
    keys: set | None = None
    for s in opaque:
        value, axis = w.places.get(s, ("", -1))
        have = {key for key, sizes in (w.fits.runs.get(value) or {}).items() if axis < len(sizes)}
        keys = have if keys is None else keys & have
    varied: set[str] = set()
    for key in keys or ():
        at = dict(key)
        sizes = {**at, **{s: w.fits.runs[w.places[s][0]][key][w.places[s][1]] for s in opaque}}
        lhs = int(np.prod([int(m.value(at)) for m in target]))  # (each entry a size: a floor of its own)
        rhs = int(np.prod([int(m.value(sizes)) for m in known]))
        if lhs != rhs:
            return False
        varied |= {s for s, n in at.items() if n != w.values.get(s)}
    return read <= varied


def write_target(w: Rewrite, node: onnx.NodeProto, sym: list[Mono], known: list[Mono], allowzero: bool) -> None:
    """A Reshape's target ``sym`` (its output's symbolic shape) written as :func:`written_target` writes it: 0 where it
    copies its input's (``known``) size, one -1, a constant where no other is left."""
    target = written_target(w, sym, known)
    if allowzero and any(t == Mono.const(0) for t in target):
        # a 0 written copies the input's size, the very size the target asks for (allowzero: a 0 in the
        # target is the size 0, which no written entry is)
        keep = [a for a in node.attribute if a.name != "allowzero"]
        del node.attribute[:]
        node.attribute.extend(keep)
    node.input[1] = w.vector(target)


def written_target(w: Rewrite, sym: list[Mono], known: list[Mono]) -> list[Mono]:
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
            and sym[k].powers[0][0] in w.places for k in loose):
        shared, alone = list(written), list(written)
        shared[rest[0]] = alone[loose[0]] = Mono.const(-1)
        # [batch, seq, -1] (one vector for every width), or [-1, seq, N] where that writes fewer nodes: the
        # sequence length's size is read already (a mask's, a position table's) and the batch's is not
        whole = [[v if v is not None else m for v, m in zip(t, sym)] for t in (shared, alone)]
        written = alone if w.cost(whole[1]) < w.cost(whole[0]) else shared
    elif loose:
        missing = [k for k in loose if not all(s in w.cache for s, _ in sym[k].powers)]
        written[(missing or loose)[0]] = Mono.const(-1)
    return [v if v is not None else m for v, m in zip(written, sym)]


def identity_reshape(w: Rewrite, node: onnx.NodeProto) -> bool:
    """A Reshape to its input's own shape (``[0, 0]``: onnxruntime keeps it) dropped (True): its output read as its
    input; where it is an output of the graph, the node that computes its input writes the output instead
    (the values read before under the input's name read it under the output's)."""
    out, source = node.output[0], node.input[0]
    g = w.model.graph
    if out not in {o.name for o in g.output}:
        w.read_as(out, source)
        return True
    producer = next((n for n in w.nodes if source in n.output), None)
    if producer is None or source in {o.name for o in g.output} or source in w.shaped.boundary \
            or source in w.shape_only:
        return False
    producer.output[list(producer.output).index(source)] = out
    for n in w.nodes:
        for k, name in enumerate(n.input):
            if name == source:
                n.input[k] = out
    w.alias[source] = out
    w.types.setdefault(out, w.types.get(source, 0))
    return True


def gathered(w: Rewrite, node: onnx.NodeProto, target: list[Mono] | None) -> None:
    """A Gather written as the Reshape it is (``target``: its output's symbolic shape; None: not rewritten),
    its target written relative to its input (0 and -1) and the Reshapes before it folded in."""
    if target is None:
        return
    w.reshaped.targeted.add(id(node))
    w.shapes[node.output[0]] = list[Mono | None](target)
    known = collapse(w, node) or [d for d in w.shapes.get(node.input[0]) or [] if d is not None]
    if len(known) == len(w.shapes.get(node.input[0]) or []):
        write_target(w, node, target, known, False)


def collapse(w: Rewrite, node: onnx.NodeProto) -> list[Mono] | None:
    """A Reshape of a Reshape or Flatten written (a chain of them) made to read the first one's input: one
    Reshape where the user's mask chain or a layer's rows wrote several (onnxruntime runs each). Its input's
    symbolic shape where it changed (the target is then written relative to it), else None."""
    name = node.input[0]
    changed = name in w.reshaped.rows
    while True:
        inner = w.made.get(name)
        if inner is None or inner.domain not in ("", "ai.onnx") or inner.op_type not in ("Reshape", "Flatten") \
                or not inner.input or not inner.input[0]:
            break
        dims = w.shapes.get(inner.input[0])
        if dims is None or any(d is None for d in dims):
            break
        name, changed = inner.input[0], True
    if not changed:
        return None
    dims = w.shapes.get(name)
    if dims is None or any(d is None for d in dims):
        return None
    node.input[0] = name
    return [d for d in dims if d is not None]


def split_rows(w: Rewrite, node: onnx.NodeProto) -> None:
    """A Split along the last axis of a Reshape that kept that axis (rows ``[batch*seq, 3*768]`` to ``[batch,
    seq, 3*768]``, split in three), where each part is only reshaped again, made to split the rows themselves:
    the Reshape before it is dropped, and the Reshapes after it write their targets from the rows."""
    inner = w.made.get(node.input[0]) if node.input else None
    if inner is None or inner.domain not in ("", "ai.onnx") or inner.op_type != "Reshape":
        return
    x = inner.input[0]
    dims_x, dims_y = w.shapes.get(x), w.shapes.get(node.input[0])
    if not dims_x or not dims_y or None in dims_x or None in dims_y or dims_x[-1] != dims_y[-1]:
        return
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if axis not in (-1, len(dims_y) - 1) or any(a.name == "num_outputs" for a in node.attribute):
        return
    outputs = w.outputs()
    sizes = w.constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    split = int_values(sizes) if sizes is not None else \
        next((list(a.ints) for a in node.attribute if a.name == "split"), None)
    if split is None or len(split) != len(node.output):
        return
    for out in node.output:
        readers = w.readers.get(out, [])
        if not out or out in outputs or not readers or any(
                r.domain not in ("", "ai.onnx") or r.op_type != "Reshape" or list(r.input).count(out) != 1
                or r.input[0] != out or len(r.input) < 2
                or not (r.input[1] in w.constants or r.input[1] in w.shape_only) for r in readers):
            return
    node.input[0] = x
    for a in node.attribute:
        if a.name == "axis":
            a.i = len(dims_x) - 1
    if not any(a.name == "axis" for a in node.attribute):
        node.attribute.append(helper.make_attribute("axis", len(dims_x) - 1))
    for out, n in zip(node.output, split):
        w.reshaped.rows[out] = [*dims_y[:-1], Mono.const(n)]
        w.shapes[out] = [*dims_x[:-1], Mono.const(n)]
        if x in w.types:
            w.types[out] = w.types[x]


def expand(w: Rewrite, node: onnx.NodeProto, fitted: list[Mono]) -> bool:
    """An Expand to a shape vector (``fitted``) written with the fewest computed sizes: a target size its input
    already has is written 1, and an Expand to its input's own shape is dropped (its output read as its input;
    True)."""
    dims = w.shapes.get(node.input[0])
    if dims is None or any(d is None for d in dims):
        fit(w)
        dims = w.shapes.get(node.input[0])
    if dims is None or any(d is None for d in dims):
        node.input[1] = w.vector(fitted)
        return False
    have = [Mono.const(1)] * (len(fitted) - len(dims)) + [d for d in dims if d is not None]
    want = [Mono.const(1)] * (len(have) - len(fitted)) + fitted
    out: list[Mono] = []
    for a, b in zip(have, want):
        if a != b and Mono.const(1) not in (a, b):
            node.input[1] = w.vector(fitted)
            return False
        out.append(b if a == Mono.const(1) else a)
    w.shapes[node.output[0]] = list[Mono | None](out)
    if node.input[0] in w.types:
        w.types[node.output[0]] = w.types[node.input[0]]
    if out == dims and node.output[0] not in w.outputs():
        w.read_as(node.output[0], node.input[0])
        return True
    whole = out[len(out) - len(fitted):]
    fewest = [Mono.const(1) if a == b else b for a, b in zip(have[len(have) - len(fitted):], whole)]
    node.input[1] = w.vector(whole if w.ready(whole) and not w.ready(fewest) else fewest)
    return False


def slice_to_end(w: Rewrite, node: onnx.NodeProto) -> None:
    """A Slice that ran to the end of a symbolic axis (its end at the axis' size) now runs to its end. An axis whose
    size no monomial of the symbols fits (an audio model's pooled frames, which SEW slices to the shorter of two
    equal lengths) is read as its opaque symbol (:meth:`.state.Rewrite.opaque_shape`), so an end at its size runs
    to its end too: a constant there would cut every longer input to the tuned size. A start or end inside such an
    axis that the original computes from the axis' size (``torch.roll``'s ``-shift % size``, folded at the
    representative sizes) is written counting from the axis' end (:func:`from_end`)."""
    starts, ends, axes = (w.constants.get(node.input[k]) for k in (1, 2, 3))
    if starts is None or ends is None or axes is None:
        return
    dims = w.shapes.get(node.input[0])
    if (dims is None or any(d is None for d in dims)) and w.final:  # the import's rewrite keeps such sizes unknown
        fit(w)
        dims = w.opaque_shape(node.input[0])
    if dims is None:
        return
    axes_v = int_values(axes)
    for k, bounds in ((1, starts), (2, ends)):
        if w.fits.exact.get(node.input[k]) is not None:  # read as the original computes it (.rewrite.exact)
            continue
        values = int_values(bounds)
        changed = False
        for j, (e, a) in enumerate(zip(values, axes_v)):
            d = dims[a] if -len(dims) <= a < len(dims) else None
            if d is None or d.is_const or e < 0:  # a negative bound counts from the axis' end: at every size
                continue
            size = int(d.value(w.sizes_at))
            if k == 2 and e >= size:
                values[j] = int(INT64_MAX)
                changed = True
            elif 0 < e < size and len(values) == len(axes_v) \
                    and from_end(w, node, node.input[k], j, e, a % len(dims), size):
                values[j] = e - size
                changed = True
            elif k == 2:
                w.notes.append(f"Slice {node.name!r} ends at {e}, inside the dynamic axis {d.key()}: kept as the "
                               "original has it")
        if changed:
            node.input[k] = w.const(np.array(values, np.int64), "ends" if k == 2 else "starts")


def from_end(w: Rewrite, node: onnx.NodeProto, name: str, j: int, e: int, axis: int, size: int) -> bool:
    """Whether entry ``j`` of a Slice bound ``name`` (``e`` at the representative sizes, inside ``axis`` of the
    sliced value, of ``size`` there) is that axis' size less ``size - e`` at every size: where the original computes
    ``name`` (the program holds it folded), at a further size of each symbol (one above a symbol at 1 or 2, else
    twice it: :func:`eqsat.onnx.axes.fitting.above`), its entry there (a run of the original) and the axis' size there (a
    run of the program so far, kept for the other Slices of the value: :attr:`.state.Fits.axes`) are that, in every
    run where both ran, and the axis' size changed in one of them. What no run shows stays as the original has it."""
    if name not in w.facts.computed:
        return False
    free = {s: v for s, v in w.values.items() if s not in w.sums}
    sizes = [follow({**w.values, s: n}, w.sums) for s, v in free.items() for n in (above(v) or [v + 1])]
    value = node.input[0]
    seen = w.fits.axes.setdefault(value, {})
    runs: list = []
    grew = False
    for at in sizes:
        want = w.facts.entries_at(name, at)
        if want is None or j >= len(want):
            continue
        key = tuple(sorted(at.items()))
        if key not in seen:
            if not runs:
                runs.append(run_values(probe(w, [value]), [value], shapes=True))
            got = runs[0](at)
            seen[key] = None if got is None else list(got[0])
        have = seen[key]
        if have is None or axis >= len(have):
            continue
        if want[j] != have[axis] - (size - e):
            return False
        grew |= have[axis] != size
    return grew


__all__ = ["alike_target", "collapse", "constant_target", "expand", "from_end", "gathered", "identity_reshape",
           "read_shape", "reshape", "slice_to_end", "split_rows", "write_target", "written_target"]
