"""The driver: :func:`make_generic` and :func:`simplify_for_import` run one :class:`~.state.Rewrite` through the
passes (:func:`run`), each node of the program in order through :func:`write_node`."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from eqsat.onnx.axes.dataflow import prune, shape_only
from eqsat.onnx.axes.fitting import REFUSED, run_values
from eqsat.onnx.axes.interface import interface, symbol_values
from eqsat.onnx.axes.symbolic import constant_value

from .annotate import annotate, declare, note_outputs
from .gemm import bias_add, consumers, write_gemm
from .guards import guard_tables
from .inference import infer
from .original import Original
from .probes import boundary, folded_sizes, vectors_read
from .recompute import recomputed, recomputed_vector
from .reshapes import collapse, expand, gathered, read_shape, reshape, slice_to_end, split_rows
from .state import Forms, Rewrite
from .typed_original import folded_exactly
from .uniform import flat_gather, grid_gather
from .values import (
    IDENTITIES,
    identity,
    rotary_positions,
    spread,
    unexpand,
    uniform_input,
)
from .within import keep_within


@dataclass
class Generic:
    """The rewritten model and what could not be made generic (empty when every constant was)."""

    model: onnx.ModelProto
    notes: list[str] = field(default_factory=list)
    unnamed_constant_outputs: list[str] = field(default_factory=list)
    """those of the notes that tie the program to no symbol (:attr:`.state.Rewrite.unnamed_constant_outputs`)"""
    unwritable: bool = False
    """whether the program could not be written for every size (the program as exported is given instead)"""


def make_generic(model: onnx.ModelProto, original: onnx.ModelProto, values: Mapping[str, int],
                 facts: Original | None = None) -> Generic:
    """``model`` (exported at the symbols' ``values``) rewritten shape-polymorphic, with ``original``'s interface
    (every form: :data:`~.state.Forms.EXPORT`); ``model`` itself is left as it was. ``facts``: what the rewrites
    of earlier candidates learnt of ``original`` (:class:`.original.Original`, one per model: the original is then
    run at further sizes once per model, not per candidate); None: learnt anew."""
    written = rewrite(model, original, values, Forms.EXPORT, facts)
    if written.unwritable:
        return Generic(model, written.notes)
    return written if runs_where(written.model, model, values) else Generic(
        model, [*written.notes, "the program written shape-generic fails at the representative sizes: kept as "
                "exported (its sizes constants)"])


def runs_where(written: onnx.ModelProto, model: onnx.ModelProto, values: Mapping[str, int]) -> bool:
    """Whether ``written`` runs at the symbols' ``values``, where ``model`` (as exported, its sizes constants) does:
    a write that breaks the program at the very sizes it was exported at is not kept (the candidate is then the
    program as exported, which the verification at further sizes refuses as any program not written for them)."""
    outputs = [o.name for o in written.graph.output]
    return run_values(written, outputs, shapes=True)(values) is not None \
        or run_values(model, [o.name for o in model.graph.output], shapes=True)(values) is None


SIMPLIFY_SECONDS = 60.0
"""the import's rewrite of the user's model (:func:`simplify_for_import`), a best effort, stops after this long and
the model is imported as it is: a 36,772-node RWKV export (TorchScript unrolls its 128 steps) fitted sizes off runs
of ever longer prefixes of it for 13 minutes before it was stopped; a 4-layer model's takes seconds"""
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("_DEADLINE", default=None)


class _TooLong(Exception):
    """The import's rewrite passed :data:`SIMPLIFY_SECONDS`."""


def simplify_for_import(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto | None:
    """A dynamic-axes ``model`` (at ``input_shapes``) with its computations from the shapes alone written in the forms
    the importer reads (:func:`.importing.simplified`): every form a model read again takes where that
    leaves no notes (:data:`~.state.Forms.IMPORT`), else only the tables (:data:`~.state.Forms.TABLES`); None where
    neither does (or the rewrite fails: a best effort, the user's chains are then imported as they are). A note that
    an output axis is constant where the original names it with a name of its own (TorchScript's
    ``Concatpresent.0.key_dim_3`` for a head size) does not count: the import keeps the original's interface, and every
    candidate is written from the original and verified at several sizes."""
    values = symbol_values(model, input_shapes)
    facts = Original.of(model, values)  # the second try reads the first's runs; the candidates' rewrites, both
    token = _DEADLINE.set(time.monotonic() + SIMPLIFY_SECONDS)
    try:
        for forms in (Forms.IMPORT, Forms.TABLES):  # every form (the e-graph starts near the static program's size)
            try:
                written = rewrite(model, model, values, forms, facts)
            except _TooLong:
                return None
            except Exception:  # noqa: BLE001 - a best effort: the user's chains are imported as they are
                continue
            if set(written.notes) <= set(written.unnamed_constant_outputs):
                return written.model
        return None
    finally:
        _DEADLINE.reset(token)


def rewrite(model: onnx.ModelProto, original: onnx.ModelProto, values: Mapping[str, int], forms: Forms,
            facts: Original | None = None) -> Generic:
    """``model`` rewritten (a copy: ``model`` is left as it was) in ``forms``, with ``original``'s interface."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return run(Rewrite(copy, original, values, forms, facts, of_original=model is original))


def run(w: Rewrite) -> Generic:
    """The passes, in order (the package's docstring): the interface declared, the nodes written one by one, the
    final forms (Expands dropped, tables guarded), the nodes no output reads pruned, the shapes annotated where
    eqsat reads the program again (not in a candidate written for the user)."""
    # a program written for the user: the runs that fit sizes read only where the original runs (the import's
    # rewrite reads them everywhere: the import folds what it computes from the shapes at one size anyway)
    token = REFUSED.set(w.facts.refuses if w.final else None)
    try:
        return _run(w)
    finally:
        REFUSED.reset(token)


def _run(w: Rewrite) -> Generic:
    g = w.model.graph
    (ins, outs) = interface(w.original)
    declare(w, ins)
    w.shape_only = shape_only(w.model)
    w.shaped.boundary = boundary(w)
    w.readers = consumers(w.model)
    w.fits.folded = folded_sizes(w) if w.every_form else {}
    w.fits.vectors.update(w.fits.folded)
    for node in recomputed(w):  # the original's chains of the sizes' tables the candidate holds folded
        _written(w, node)
    deadline = _DEADLINE.get()
    for node in list(g.node):
        if deadline is not None and time.monotonic() > deadline:
            raise _TooLong
        write_node(w, node)
    if w.every_form and w.final:
        unexpand(w)
        guard_tables(w, lambda: read_original(w))
        if not keep_within(w):  # (a size exact on a span only, and the original not copied)
            w.notes.append("a size the program reads is exact on a span of the sizes only, and the original could "
                           "not be copied to compute the others: kept as exported")
            w.unwritable = True
    if w.of_original:  # the original's values' symbolic shapes, for the next rewrite of it (:func:`.probes.fit`)
        w.facts.learn(w.shapes)
    del g.node[:]
    g.node.extend(w.nodes)
    note_outputs(w, outs)
    prune(w.model)
    if not w.final:  # a program written for the user carries no inner shapes (.annotate's docstring)
        annotate(w)
    return Generic(w.model, w.notes, w.unnamed_constant_outputs, w.unwritable)


def read_original(w: Rewrite) -> Rewrite:
    """The original read as the import read it (its tables found, not written: :data:`~.state.Forms.TABLES`),
    once per model (:attr:`.original.Original.found`): its guarded tables and its values' symbolic shapes
    (:mod:`.guards` copies its chains)."""
    found = w.facts.found
    if found is None:
        copy = onnx.ModelProto()
        copy.CopyFrom(w.original)
        found = Rewrite(copy, w.original, w.values, Forms.TABLES, w.facts, of_original=True)
        run(found)
        w.facts.found = found
    assert isinstance(found, Rewrite)
    if w.guards.original_tables is None:
        w.guards.original_tables = [(p, user) for _, user, p in found.guards.guarded]
    return found


def write_node(w: Rewrite, node: onnx.NodeProto) -> None:
    """``node`` (of the program as given) written through the passes that take it, or dropped (its output read
    as another value); the shapes and element types of what it computes inferred."""
    if id(node) in w.reshaped.absorbed:
        return
    for k, name in enumerate(node.input):
        node.input[k] = w.alias.get(name, name)
    standard = node.domain in ("", "ai.onnx")
    if (value := constant_value(node)) is not None:  # its value, for the shape inference (Rewrite.known)
        w.node_constants[node.output[0]] = value
    if standard and node.op_type == "MatMul" and w.every_form and w.final:
        linear = bias_add(w, node, w.readers.get(node.output[0], []), w.outputs())
        if linear is not None:
            w.reshaped.absorbed.add(id(linear[0]))
            start = len(w.nodes)
            write_gemm(w, node, *linear)
            w.made.update((o, n) for n in w.nodes[start:] for o in n.output)
            collapse(w, w.nodes[start])  # its rows' Reshape ([-1, K]: no 0) of a Reshape: one
            return
    if standard and node.op_type == "Shape" and w.every_form and read_shape(w, node):
        return
    if w.every_form and w.final:
        exact(w, node)
    vectors = vectors_read(w, node) if w.every_form else {}
    if w.every_form:
        for k, name in enumerate(node.input):
            if name in w.fits.folded and k not in vectors:  # read by a shape computation: computed from the symbols
                node.input[k] = w.vector(w.fits.folded[name], w.shapes.get(name) == [])
    if standard and not all(o in w.shape_only for o in node.output if o):
        for k, name in enumerate(node.input):
            if name in w.shaped.boundary:
                node.input[k] = uniform_input(w, node, k)
        if not w.every_form:
            pass
        elif node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in w.shaped.patterns.iota:
            gathered(w, node, flat_gather(w, node))
        elif node.op_type == "GatherND" and len(node.input) == 2 and node.input[1] in w.shaped.patterns.grids:
            gathered(w, node, grid_gather(w, node, w.shaped.patterns.grids[node.input[1]]))
    if standard and node.op_type in IDENTITIES and not spread(w, node) and identity(w, node):
        return
    if standard and w.every_form and node.op_type == "RotaryEmbedding" and len(node.input) == 3:
        rotary_positions(w, node)
    if not w.every_form:
        pass
    elif standard and node.op_type == "Reshape" and len(node.input) > 1 and id(node) not in w.reshaped.targeted \
            and (node.input[1] in w.constants or 1 in vectors):
        if reshape(w, node, vectors.get(1)):
            return
    elif standard and node.op_type == "Expand" and 1 in vectors:
        if expand(w, node, vectors[1]):
            return
    elif standard and node.op_type == "Slice" and len(node.input) > 3:
        slice_to_end(w, node)
    elif standard and node.op_type == "Split":
        split_rows(w, node)
    for k, monos in vectors.items():
        if node.input[k] in w.fits.vectors:  # not rewritten above: written from the symbols
            node.input[k] = w.vector(monos, w.shapes.get(node.input[k]) == [])
    _written(w, node)


def exact(w: Rewrite, node: onnx.NodeProto) -> None:
    """The small vectors ``node`` reads that the import folded and no run fitted (a size no monomial of the interface's
    symbols is: an audio model's frames), read as the candidate's sizes of the same arithmetic where the original
    computes them so (:func:`.typed_original.folded_exactly`), each looked at once."""
    for name in node.input:
        if not name or name in w.fits.folded or name in w.fits.exact or name not in w.facts.computed \
                or name not in w.constants:
            continue
        t = w.constants[name]
        if t.data_type != onnx.TensorProto.INT64 or len(t.dims) > 1 or int(np.prod(t.dims)) > 8:
            continue  # (a size vector only: the original is not typed for a folded weight)
        entries = folded_exactly(w, name)
        w.fits.exact[name] = entries
        if entries is not None and any(not m.is_const for m in entries):
            w.fits.folded[name] = entries
            w.fits.vectors[name] = entries
        elif entries is None and not _written_from_symbols(node, name):  # no arithmetic reads it: the original's
            for copied in recomputed_vector(w, name) or []:  # own nodes compute it, where they can
                _written(w, copied)
    for k, name in enumerate(node.input):
        node.input[k] = w.alias.get(name, name)


def _written_from_symbols(node: onnx.NodeProto, name: str) -> bool:
    """Whether ``node`` reads ``name`` where the passes of :mod:`.reshapes` write it from the symbols or from runs
    of the original (a Reshape's or an Expand's target, a Slice's bounds), which they try first."""
    slots = {"Reshape": (1,), "Expand": (1,), "Slice": (1, 2, 3, 4)}.get(node.op_type, ())
    return node.domain in ("", "ai.onnx") and any(k < len(node.input) and node.input[k] == name for k in slots)


def _written(w: Rewrite, node: onnx.NodeProto) -> None:
    """``node`` appended to the program written, the shapes and element types of what it computes inferred."""
    w.nodes.append(node)
    w.made.update((o, node) for o in node.output if o)
    infer(w, node, opaque=w.final)


__all__ = ["Generic", "make_generic", "read_original", "rewrite", "run", "runs_where",
           "simplify_for_import", "write_node"]
