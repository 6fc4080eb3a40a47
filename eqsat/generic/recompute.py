"""Values the original computes from its inputs' sizes alone that a candidate holds as constants, computed again as
the original computes them.

The import folds what the original computes from its inputs' shapes at the representative sizes where it does not
meet the data (:func:`eqsat.onnx.axes.live.live_shapes`; the e-graph's program is static). The patterns of
:mod:`.values` write most such values back for any size (a causal mask, a prefix of a position table); one that
follows none is a constant of the candidate under the original's name, right at the representative sizes only. A
rotary table over an image's patch grid is one (DINOv3's: ``(arange(h // 16) + 0.5) / (h // 16)`` for rows and
columns, every entry other at another side, the grid no prefix of a larger one), where the import does not see it
meet the data. Such a constant, where a run of the original's own nodes shows its value to change at a size the
written program is verified at (:func:`~eqsat.onnx.axes.interface.probe_sizes`; one run of those nodes a size,
once per model: :attr:`.original.Original.varying`), is computed by a copy of the original's nodes
(:func:`.guards.copy_original`). Its readers read the copy, whose changing axes are opaque symbols. Only a value
computed from the inputs' shapes and constants is taken: the run and the copy then compute no data. The value is
the original's at every size; what it costs is the few nodes of its chain, run on sizes and small tables."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from eqsat.dims import Mono
from eqsat.onnx.axes.dataflow import SHAPE_READERS
from eqsat.onnx.axes.fitting import run_arrays
from eqsat.onnx.axes.interface import probe_sizes
from eqsat.onnx.pool import array_of
from eqsat.onnx.subgraphs import implicit_inputs

from .guards import copy_original
from .original import Original
from .state import Rewrite


def varying(facts: Original, names: list[str]) -> dict[str, frozenset[int]]:
    """Those of ``names`` (values the original computes from its sizes alone) whose value at some size of
    :func:`~eqsat.onnx.axes.interface.probe_sizes` is not their value at the representative sizes (another shape,
    other entries), each with the axes whose size changes; each asked once per model. Only a value computed from the
    inputs' shapes (a ``Shape`` of an input or of a constant) and constants is asked: one read off a layer's
    output would run the model up to it at every size."""
    made = {o: n for n in facts.model.graph.node for o in n.output if o}
    for name in names:
        if name not in facts.varying and not _of_the_inputs(facts, made, name):
            facts.varying[name] = None  # (a run would compute the data: kept as the candidate has it, for the check)
    ask = [n for n in names if n not in facts.varying]
    if ask:
        run = run_arrays(facts.model, ask)
        base = run(facts.values)
        moved: dict[str, set[int]] = {}
        for _, at in probe_sizes(facts.model, facts.values) if base is not None else []:
            got = run(at)
            for name, a, b in zip(ask, base or [], got or []):
                if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
                    moved.setdefault(name, set()).update(
                        k for k in range(a.ndim) if a.ndim != b.ndim or a.shape[k] != b.shape[k])
        for name in ask:  # (the original not run at its own sizes: kept as the candidate has it, for the check)
            facts.varying[name] = frozenset(moved[name]) if name in moved else None
    return {n: axes for n in names if (axes := facts.varying[n]) is not None}


def _of_the_inputs(facts: Original, made: Mapping[str, onnx.NodeProto], name: str) -> bool:
    """Whether the original (``made``: value -> the node computing it) computes ``name`` from the shapes of its
    inputs (or of constants) and constants only; each value visited once."""
    inputs = {vi.name for vi in facts.model.graph.input}
    needed, seen = [name], {name}
    while needed:
        node = made.get(needed.pop())
        if node is None:
            continue
        if node.op_type in SHAPE_READERS and node.domain in ("", "ai.onnx"):
            if node.input[0] not in inputs and node.input[0] not in facts.data_free:
                return False
            continue
        if any(o not in facts.data_free for o in node.output if o):
            return False
        for i in [*node.input, *implicit_inputs(node)]:
            if i and i not in seen:
                seen.add(i)
                needed.append(i)
    return True


def recomputed(w: Rewrite) -> list[onnx.NodeProto]:
    """The copies of the original's nodes computing each constant of the candidate that stands for a value the
    original computes from its sizes and that changes with them (:func:`varying`), the candidate's readers of the
    constant reading the copy from now on (:attr:`.state.Rewrite.alias`); in a program written for the user only.
    Each axis of the copy whose size changes is an opaque symbol (:meth:`.state.Rewrite.opaque_shape`: read off the
    copy where a size needs it), the others constants. A constant of another shape than the original's value (a
    slice the import wrote in its place) is left."""
    if not w.final:
        return []
    read = {i for n in w.model.graph.node for i in n.input}
    tensors = {t.name: t for t in w.model.graph.initializer
               if t.name in w.facts.sized and t.name in read and not _small(t)
               and tuple(t.dims) == w.facts.static.get(t.name)}
    out: list[onnx.NodeProto] = []
    for name, axes in varying(w.facts, list(tensors)).items():
        out += _copied(w, name, tensors[name], axes) or []
    return out


def recomputed_vector(w: Rewrite, name: str) -> list[onnx.NodeProto] | None:
    """The copy of the original's nodes computing ``name``, a small integer vector of the original's sizes that the
    candidate holds folded and that neither a fit nor the writer's arithmetic reads as monomials of the symbols (a
    count of patches ``floor(h / 16) * floor(w / 16)``: a product of two floors, which no monomial is; Sapiens2's q/k
    split sizes), where it changes with the sizes (:func:`varying`) and the original computes it from its inputs'
    shapes alone; None where not. Its readers read the copy from now on (:attr:`.state.Rewrite.alias`). Before, the
    constant stayed, right at the representative sizes only, and the verification refused the program."""
    t = w.constants.get(name)
    if not w.final or t is None or not _small(t) \
            or w.facts.entries_at(name, w.values) != [int(v) for v in np.asarray(array_of(t)).reshape(-1)]:
        return None  # (a constant of the original's name that is not its value at the tuned sizes: left)
    axes = varying(w.facts, [name]).get(name)
    return None if axes is None else _copied(w, name, t, axes)


def _copied(w: Rewrite, name: str, t: onnx.TensorProto, axes: frozenset[int]) -> list[onnx.NodeProto] | None:
    """The original's chain computing ``name`` copied (:func:`.guards.copy_original`), ``name`` read as the copy, whose
    ``axes`` that change with the sizes are opaque symbols; None where it cannot be copied (read off the data, or the
    original not read at the program's opset: the check decides)."""
    chain = copy_original(w, name, within=w.facts.data_free)
    if chain is None:
        return None
    nodes, value = chain
    w.alias[name] = value
    w.shapes[value] = [w.opaque_symbol(value, k, n) if k in axes else Mono.const(n) for k, n in enumerate(t.dims)]
    w.types[value] = t.data_type
    return nodes


def _small(t: onnx.TensorProto) -> bool:
    """Whether ``t`` is an integer scalar or vector of at most 8 entries: a size, a Reshape target or a Slice's
    bounds, which the writer's own passes write from the symbols (:mod:`.reshapes`, :mod:`.sizes`)."""
    return t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and len(t.dims) <= 1 \
        and (not t.dims or t.dims[0] <= 8)


__all__ = ["recomputed", "recomputed_vector", "varying"]
