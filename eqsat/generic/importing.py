"""The import of a model whose program is to work at every size (a generic import: :func:`import_generic`): the
IR read (:func:`eqsat.onnx.import_model`) from the forms this writer gives the model's computations from its
shapes (:func:`simplified`), so that the import carries a few opaque nodes where the user's chains would be dozens.

The ONNX layer below takes the rewrite as an argument; it does not import this writer."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import onnx

from eqsat.ir import Graph
from eqsat.onnx import import_model
from eqsat.onnx.axes.live import live_shapes
from eqsat.onnx.external import tensor_size

from .rewrite import simplify_for_import

SIMPLIFIED_WEIGHTS = 256 << 20
"""bytes of weights up to which a generic import first rewrites the shape computations (:func:`simplified`)"""


def simplified(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """A dynamic-axes ``model`` with its computations from the shapes alone written as the static program holds
    them, or nearly (:func:`.rewrite.simplify_for_import`: a causal mask a Trilu, position and rotary tables Slices of
    constants, a row repeated along the symbols a constant, sizes read from the inputs' shapes); ``model`` where the
    rewrite leaves notes, the model computes nothing from its shapes that meets the data, or its weights pass
    :data:`SIMPLIFIED_WEIGHTS` (the rewrite works on a copy). Every form is written where it leaves no notes (the
    e-graph of a BERT layer then starts at the static program's size, not twice it: the sym analysis pays for each
    e-node); else only the tables."""
    if sum(tensor_size(t) for t in model.graph.initializer) > SIMPLIFIED_WEIGHTS or not live_shapes(model):
        return model
    written = simplify_for_import(model, input_shapes)
    return model if written is None else written


def import_generic(model: onnx.ModelProto | str | os.PathLike, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                   source: str | None = None, generic: bool = True,
                   begins: Callable[[onnx.ModelProto], None] | None = None) -> Graph:
    """:func:`eqsat.onnx.import_model` of ``model`` at ``input_shapes``, its dynamic axes kept symbolic and its
    shape computations first written by :func:`simplified` (``generic=False``: the static import, as the ONNX layer's,
    for a caller that decides by a flag). ``begins``: called with the prepared model as that rewrite begins, once the
    checks that refuse a model before any work have passed (a progress line: the rewrite and the import after it run
    the model at further sizes)."""
    def simplify(prepared: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
        if begins is not None:
            begins(prepared)
        return simplified(prepared, shapes)

    return import_model(model, input_shapes, generic=generic, source=source, simplify=simplify if generic else None)


__all__ = ["SIMPLIFIED_WEIGHTS", "import_generic", "simplified"]
