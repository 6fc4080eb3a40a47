"""The original typed once per model by the writer's own arithmetic, so that a size the import folded that no
monomial of the interface's symbols is (a Slice of an audio model's data to its frames read off another value,
``Shape(k)[1]``: a floor arithmetic of the samples, which no run fits) is written as a candidate's size of the same
arithmetic, exactly and without a run.

:func:`typed` walks the original's nodes once (:func:`.inference.infer`, in a rewrite that writes nothing), its
strided windows', constant drops' and Pads' sizes typed as opaque symbols that carry their arithmetic down to the
interface's symbols (:attr:`.state.Fits.canon`, :func:`.strided.canonical`: a window's parameters along its axis
over the size it windows; a 1-D Conv's and the 2-D one over a height of 1 that eqsat writes for it alike), and the
entries of its small integer vectors evaluated over those shapes. :func:`folded_exactly` reads one of them as a
candidate's: each opaque symbol as the candidate's of the same arithmetic. Two symbols of one arithmetic are one
size at every size of the interface, so nothing is sampled; the verification at further sizes stays the check of
the whole program.
"""

from __future__ import annotations

from onnx import numpy_helper

from eqsat.dims import Mono
from eqsat.onnx.axes.dataflow import shape_only
from eqsat.onnx.axes.interface import interface
from eqsat.onnx.axes.symbolic import constant_value, int_values
from eqsat.onnx.constant_ifs import Constants
from eqsat.onnx.external import set_weights_aside
from eqsat.onnx.subgraphs import implicit_inputs

from .annotate import declare
from .inference import infer
from .original import Original
from .state import Forms, Rewrite, Span

__all__ = ["folded_exactly", "spans", "typed"]


def typed(facts: Original) -> Rewrite:
    """The original read by the writer's shape arithmetic (its values' shapes and small vectors' entries, opaque
    symbols of known arithmetic among them), once per model (kept on ``facts``)."""
    if isinstance(facts.typed, Rewrite):
        return facts.typed
    skeleton, _ = set_weights_aside(facts.model)  # (the weights' shapes only)
    w = Rewrite(skeleton, facts.model, facts.values, Forms.EXPORT, facts, of_original=True)
    declare(w, interface(facts.model)[0])
    w.shape_only = shape_only(w.model)
    constants = Constants(skeleton)  # (the values computed from constants alone, as the import folds them)
    for node in skeleton.graph.node:
        if (value := constant_value(node)) is not None:
            w.node_constants[node.output[0]] = value
        elif len(node.output) == 1 and (folded := constants.value(node.output[0])) is not None:
            w.node_constants[node.output[0]] = numpy_helper.from_array(folded, node.output[0])
        w.made.update((o, node) for o in node.output if o)
        infer(w, node, opaque=True)
        spans = {s for i in [*node.input, *implicit_inputs(node)] if i for s in w.fits.ranged.get(i, ())}
        for o in node.output:  # what is computed from a size exact on a span only carries the span
            if o and spans:
                w.fits.ranged[o] = tuple(sorted({*w.fits.ranged.get(o, ()), *spans}, key=repr))
    w.fits.pending.clear()  # (nothing is fitted here)
    facts.typed = w
    return w


def folded_exactly(w: Rewrite, name: str) -> list[Mono] | None:
    """The entries of ``name``, a small integer vector the original computes and the candidate ``w`` holds folded,
    as sizes ``w`` can write: the original's entries (:func:`typed`) with each opaque symbol read as ``w``'s of the
    same arithmetic, already made (:attr:`~.sizes.SizeWriter.places`); None where an entry is unknown, an opaque
    symbol has no counterpart yet, or the entries do not give the folded value at the representative sizes."""
    if name not in w.constants or name not in w.facts.computed:
        return None
    original = typed(w.facts)
    entries = original.fits.vectors.get(name)
    if entries is None:
        return None
    mine = {canon: symbol for symbol, canon in w.fits.canon.items() if symbol in w.places}
    out: list[Mono] = []
    for m in entries:
        powers: list[tuple[str, int]] = []
        for s, p in m.powers:
            if s in w.values:
                powers.append((s, p))
                continue
            canon = original.fits.canon.get(s)
            counterpart = mine.get(canon) if canon is not None else None
            if counterpart is None:
                return None
            powers.append((counterpart, p))
        out.append(Mono(m.coef, tuple(sorted(powers))))
    folded = int_values(w.constants[name])
    if len(folded) != len(out) or any(m.value(w.sizes_at) != v for m, v in zip(out, folded)):
        return None
    return out


def spans(facts: Original) -> set[Span]:
    """The spans of the sizes on which a size of the original is exact only (:mod:`.ranged`: a table's rows between
    bounds of the frames), each of one symbol of the interface."""
    return {s for found in typed(facts).fits.ranged.values() for s in found}

