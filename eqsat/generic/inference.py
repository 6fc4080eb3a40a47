"""The shapes a written node computes, inferred from its inputs' (:func:`infer`): onnx's inference over the
symbols, then the writer's own arithmetic (a broadcast's sizes, a strided window's, a constant drop's or a join's),
and the entries of the small integer vectors among them."""

from __future__ import annotations

import onnx

from eqsat.onnx.axes.shape_values import evaluate
from eqsat.onnx.axes.symbolic import infer_node

from .affine import entries as summed
from .probes import small_vector
from .ranged import between
from .state import Rewrite
from .strided import TYPED, typed
from .values import BROADCASTING, broadcast_sizes


def infer(w: Rewrite, node: onnx.NodeProto, opaque: bool = False) -> None:
    """The shapes and element types of what ``node`` computes, and the entries of the small integer vectors among
    them, from its inputs' (the written program's ``w.made``); ``opaque``: an entry may hold the opaque symbols
    typed by their arithmetic (:attr:`.state.Fits.canon`: the original typed once, :mod:`.typed_original`, and a
    program written for the user, whose sizes read off a Shape of a strided or resized value then need no run of
    its prefix), else only the interface's symbols (those a written vector reads from the inputs' shapes), the rest
    fitted."""
    standard = node.domain in ("", "ai.onnx")
    inferred = infer_node(node, w.shapes, w.types, w.known, w.model.opset_import, w.sums, w.sized)
    for out in node.output:
        if out in inferred:
            elem, shape = inferred[out]
            if standard and w.final and (node.op_type in BROADCASTING or node.op_type == "MatMul") and shape is not None \
                    and None in shape:
                shape = broadcast_sizes(w, node, shape)
            if out == node.output[0] and standard and w.typing and node.op_type == "Slice":
                shape = between(w, node, shape)  # a table's rows between two bounds, on their span
            if out == node.output[0] and standard and w.final and node.op_type in TYPED:
                shape = typed(w, node, shape)  # a strided window's, a resize's, a constant drop's or a join's
            w.types.setdefault(out, elem)
            w.shapes.setdefault(out, shape)
        if small_vector(w, out):
            # its entries read off the shapes and the vectors known, where each is one monomial of the interface's
            # symbols at every size (as a fit's are); else fitted from runs (pending)
            entries = evaluate(out, w.made.get, w.sized, w.known, w.shapes)
            if entries is None and opaque and w.typing:  # sums that cancel to a monomial (:mod:`.affine`), in the
                # original only (a candidate's sizes the import folded are constants there: not its own arithmetic)
                entries = summed(w, out)
            w.fits.vectors[out] = entries if entries is not None and all(
                s in w.values or (opaque and s in w.fits.canon) for m in entries for s, _ in m.powers) else None
            if w.fits.vectors[out] is None:
                w.fits.pending.append(out)
        elif out in w.shaped.boundary:
            w.shaped.pending.append(out)


__all__ = ["infer"]
