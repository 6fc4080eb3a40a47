"""What runs at several sizes show of the sizes a program computes (:mod:`eqsat.onnx.axes.fitting`), for the passes that
write them from the symbols: the original's folded sizes (:func:`folded_sizes`) and Reshape targets
(:func:`original_target`; read once per model, :class:`.original.Original`), the small integer vectors computed from the shapes alone (:func:`vectors_read`) and the
shapes inference left unknown (:func:`fit`), each read off runs of the program written so far
(:func:`probe`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from eqsat.dims import Mono, SymShape, follow, product
from eqsat.onnx.axes.dataflow import prune
from eqsat.onnx.axes.fitting import Sizes, fit_vectors, run_values
from eqsat.onnx.axes.symbolic import infer_node
from eqsat.onnx.axes.targets import leading, reshape_target

from .keys import Key
from .products import product_fit
from .state import Rewrite, RunKey
from .strided import opaque_at

PREFETCH_AFTER = 1.0
"""the import's rewrite fits the original's small vectors in one batch (:func:`fit_pending`) once the runs of the
program so far have run this many times the original's nodes (a node run again counted again): a model asking
few cheap ones (a BERT: 19 asks of a few nodes each) fits them as it asks; one asking along its depth (Swin V2's
windows: 237 asks of growing prefixes) switches early"""


def probe(w: Rewrite, outputs: Iterable[str]) -> onnx.ModelProto:
    """The program written so far with ``outputs`` (value names) as its outputs, pruned to what they read."""
    model = onnx.ModelProto()
    model.CopyFrom(w.model)
    del model.graph.node[:]
    model.graph.node.extend(w.nodes)
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs)
    return prune(model)


def folded_sizes(w: Rewrite) -> dict[str, list[Mono]]:
    """The small int64 constants of the program that the original computes from its inputs' shapes (the
    importer folded them at the representative sizes: torch's ``x.shape[0]`` of a batch of 1, beside a
    sequence length kept live), as monomials of the symbols read off runs of the original at further sizes;
    only those that depend on a symbol."""
    names = [t.name for t in w.model.graph.initializer if t.name in w.facts.computed
             and t.data_type == onnx.TensorProto.INT64 and len(t.dims) <= 1 and int(np.prod(t.dims)) <= 8]
    if not names:
        return {}
    out: dict[str, list[Mono]] = {}
    for name, entries in zip(names, w.facts.vectors(names)):
        if entries is None:
            continue
        whole = [m for m in entries if m is not None]
        if len(whole) == len(entries) and any(not m.is_const for m in whole) \
                and all(s in w.places for m in whole for s, _ in m.powers):
            out[name] = whole
    return out


def keys(w: Rewrite) -> dict[str, Key | None]:
    """The content keys of the values of the program written so far (:mod:`.keys`): runs of an earlier rewrite
    of the same model that computed a value alike are read back (:meth:`.original.Original.runs_of`)."""
    inits = {t.name for t in w.model.graph.initializer}
    inputs = [i for i in w.model.graph.input if i.name not in inits]
    return w.fits.keys.of_nodes(inputs, w.nodes, w.known)


def boundary(w: Rewrite) -> set[str]:
    """The values computed from the shapes alone (not small integer vectors) that a node computing the data
    reads."""
    out: set[str] = set()
    for node in w.model.graph.node:
        if not all(o in w.shape_only for o in node.output if o):
            out.update(i for i in node.input if i in w.shape_only)
    return out


def small_vector(w: Rewrite, name: str, elem: int | None = None, shape: SymShape | None = None) -> bool:
    """Whether ``name`` (of ``elem`` and ``shape``: by default, as inferred) is an int64 scalar or vector of at
    most 8 entries computed from the shapes alone."""
    elem = w.types.get(name) if elem is None else elem
    shape = w.shapes.get(name) if shape is None else shape
    return name in w.shape_only and elem == onnx.TensorProto.INT64 and shape is not None \
        and (shape == [] or (len(shape) == 1 and shape[0] is not None and shape[0].is_const
                             and 0 < shape[0].coef <= 8))


def vectors_read(w: Rewrite, node: onnx.NodeProto) -> dict[int, list[Mono]]:
    """The fitted entries of the shape vectors ``node`` reads (input index -> entries), unless ``node`` only
    computes another such vector (then the vector it computes is read where it is used)."""
    read = [k for k, name in enumerate(node.input) if name in w.fits.vectors]
    if not read:
        return {}
    inferred = infer_node(node, w.shapes, w.types, w.known, w.model.opset_import, w.sums, w.sized)
    outs = [o for o in node.output if o]
    if all(o in inferred and small_vector(w, o, *inferred[o]) for o in outs) \
            and not any(o in w.outputs() for o in outs):
        return {}
    fit_pending(w)
    return {k: monos for k in read if (monos := w.fits.vectors.get(node.input[k])) is not None}


def fit_pending(w: Rewrite) -> None:
    """The entries of the pending shape vectors as monomials, read off runs of the program so far at several
    sizes (:func:`eqsat.onnx.axes.fitting.fit_vectors`)."""
    names, w.fits.pending = w.fits.pending, []
    if not names:
        return
    if w.of_original and not w.fits.prefetched and w.fits.ran >= PREFETCH_AFTER * len(w.original.graph.node):
        # the original's own values, and the runs of prefixes so far ran more nodes than it has: every one of its
        # small vectors fitted at once, from one batch of runs of it (fewer asks cost less than the batch)
        w.fits.prefetched = True
        w.facts.prefetch([o for n in w.original.graph.node for o in n.output if o in w.shape_only
                          and w.fits.vectors.get(o) is None])
    if w.fits.prefetched:
        known = w.facts.prefetched(names)
        w.fits.vectors.update(known)
        names = [n for n in names if n not in known]
        if not names:
            return
    def program() -> onnx.ModelProto:
        model = probe(w, names)
        w.fits.ran += len(model.graph.node)
        return model

    runs = w.facts.runs_of(program, names, keys(w), shapes=False)
    seen: list[tuple[Mapping[str, int], Sizes]] = []

    def run(at: Mapping[str, int]) -> Sizes | None:  # every run's entries kept for a product's fit
        got = runs(at)
        if got is not None and w.final:
            seen.append((dict(at), got))
        return got

    fitted = fit_vectors(run, w.values, w.sums) or []
    for k, (name, entries) in enumerate(zip(names, fitted)):
        entries = with_products(w, entries, seen, k)
        whole = [m for m in entries if m is not None]
        w.fits.vectors[name] = whole if len(whole) == len(entries) else None


def fit(w: Rewrite) -> None:
    """The symbolic shapes of the values written so far that shape inference left unknown, read off runs of
    the program so far in onnxruntime (:mod:`eqsat.onnx.axes.fitting`)."""
    unknown = [o for n in w.nodes for o in n.output if o and o not in w.fits.tried
               and (w.shapes.get(o) is None or any(d is None for d in w.shapes[o] or []))]
    if w.of_original:  # the original's values a rewrite of it before knew (the import's)
        for name in unknown:
            if name in w.facts.shapes:
                w.shapes[name] = list(w.facts.shapes[name])
        unknown = [name for name in unknown if name not in w.facts.shapes]
    if not unknown:
        return
    w.fits.tried.update(unknown)  # each value fitted once: a run of a prefix of a large model is not cheap

    def prefix() -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(w.model)
        del model.graph.node[:]
        model.graph.node.extend(w.nodes)
        return model

    runs = w.facts.runs_of(prefix, unknown, keys(w), shapes=True)
    base: list[Sizes | None] = []

    seen: list[tuple[RunKey, Sizes]] = []

    def run(at: Mapping[str, int]) -> Sizes | None:  # the run at the representative sizes kept, and every run's sizes
        got = runs(at)
        if not base:
            base.append(got)
        if got is not None and w.final:
            seen.append((tuple(sorted(at.items())), got))
        return got

    fitted = fit_vectors(run, w.values, w.sums)
    if base and base[0] is not None:
        w.fits.sizes.update(zip(unknown, (list(s) for s in base[0])))
    for k, (name, dims) in enumerate(zip(unknown, fitted or [])):
        dims = with_products(w, dims, [(dict(key), sizes) for key, sizes in seen], k)
        old = w.shapes.get(name)
        shape = dims if old is None or len(old) != len(dims) else [a if a is not None else b for a, b in zip(old, dims)]
        w.shapes[name] = shape
        if None in shape and seen:  # an opaque size: its sizes in every run kept for Rewrite._split_ones
            w.fits.runs[name] = {key: list(sizes[k]) for key, sizes in seen}
    if w.final:  # each size no monomial fits read as its opaque symbol now: shape inference carries it to the
        # values computed from it, which then need no run of a longer prefix each (an audio model's frames: one
        # fit, not one a layer)
        for name in unknown:
            if None in (w.shapes.get(name) or []):
                w.opaque_shape(name)


def with_products(w: Rewrite, entries: list[Mono | None], seen: list[tuple[Mapping[str, int], Sizes]],
                  index: int) -> list[Mono | None]:
    """``entries`` (value ``index``'s of each run in ``seen``, as fitted) with each that no monomial fits read as a
    product of the typed opaque symbols where one is (:func:`.products.product_fit`; a program written for the user
    only, where the opaque symbols are)."""
    if not w.final or None not in entries:
        return entries
    out = list(entries)
    for j, m in enumerate(entries):
        if m is None:
            out[j] = product_fit(w, [(at, int(sizes[index][j])) for at, sizes in seen
                                     if index < len(sizes) and len(sizes[index]) == len(entries)])
    return out


def at_two(w: Rewrite, name: str, target: list[int], dims_in: list[Mono], guess: list[Mono],
           allowzero: bool) -> list[Mono] | None:
    """A Reshape target ``guess``ed (:func:`eqsat.onnx.axes.targets.reshape_target`) for an input of shape ``dims_in``
    that holds an opaque symbol (:meth:`.state.Rewrite.opaque_shape`), made again where no symbol of the input is
    at 1 (a batch of 1 hides which axis it goes with: ``[frames*batch, 384]`` and ``[frames, 384*batch]`` read
    alike): every such symbol at 2, the target the original computes there (``name``, read off a run of it) and the
    opaque sizes there (by their arithmetic, else off a run of the program so far: :func:`_opaque_sizes`). None where the two disagree; ``guess`` where nothing is
    at 1. Where the original computes no ``name`` (a Reshape of a layer replayed from the first one's program), or
    a run says nothing there, the guess as networks write them: a symbol at 1 split out onto an axis of 1 after it
    (``ones_before``: ``[frames, batch, 384]``, not ``[frames*batch, 1, 384]``), none on the last axis
    (:func:`eqsat.onnx.axes.targets.leading`)."""
    ones = sorted({s for d in dims_in for s, _ in d.powers if w.values.get(s) == 1})
    if not ones:
        return guess
    at = follow({**w.values, **dict.fromkeys(ones, 2)}, w.sums)
    want = w.facts.entries_at(name, at)
    places = {s: w.places[s] for d in dims_in for s, _ in d.powers if s in w.fits.opaque}
    opaque = None if want is None else _opaque_sizes(w, at, places)
    if want is None or opaque is None:
        again = reshape_target(dims_in, target, w.sizes_at, allowzero, ones_before=True)
        return None if again is None else leading(again, set(ones))
    sizes = {**at, **opaque}
    again = reshape_target(dims_in, want, sizes, allowzero)
    if again is None or [m.value(w.sizes_at) for m in again] != [m.value(w.sizes_at) for m in guess]:
        return None  # (``target`` may hold a 0 or a -1: the guess is its sizes)
    return again


def _opaque_sizes(w: Rewrite, at: Mapping[str, int], places: Mapping[str, tuple[str, int]]) -> dict[str, int] | None:
    """The opaque symbols' sizes at the sizes ``at``: by their arithmetic (:mod:`.strided`), else off a run of the
    program so far (``places``: where each is read); None where it does not run there."""
    typed = opaque_at(w, at)
    if typed is not None:
        return {s: typed[s] for s in places}
    names = sorted({value for value, _ in places.values()})
    have = run_values(probe(w, names), names, shapes=True)(at)
    return None if have is None else {s: have[names.index(value)][axis] for s, (value, axis) in places.items()}


def original_target(w: Rewrite, name: str, target: list[int], dims_in: list[Mono]) -> list[Mono] | None:
    """The symbolic target of a Reshape written back from the user's model whose target the original computes
    (a folded Shape computation, kept under its name): read off runs of the original at further sizes, where
    it agrees with ``target`` and the input's size."""
    if w.fits.probed is None:
        names = [n.input[1] for n in w.model.graph.node if n.op_type == "Reshape" and len(n.input) > 1
                 and n.input[1] in w.facts.computed and n.input[1] in w.constants]
        w.fits.probed = dict(zip(names, w.facts.targets(names))) if names else {}
    entries = w.fits.probed.get(name)
    if entries is None or len(entries) != len(target) or any(m is None for m in entries):
        return None
    out = [m for m in entries if m is not None]
    if [int(m.value(w.values)) for m in out] != target or any(m.coef <= 0 for m in out) \
            or product(out) != product(dims_in):
        return None
    return out


__all__ = ["PREFETCH_AFTER", "at_two", "boundary", "fit", "fit_pending", "folded_sizes", "original_target", "with_products",
           "probe", "small_vector", "vectors_read"]
