"""The sizes past the constant axes a model slices to an end it computes at run time: a position table's first
``seq`` rows, ``h[..., :seq]`` over a projection's 512 columns. A program written from the symbols reads such a
slice's size as the symbol, which holds up to the axis' length only (past it the slice stops at the length), and the
sizes verified by default (:func:`eqsat.onnx.axes.interface.probe_values`: 1, 37, 256, ...) may all lie below it; so a
written program is also verified past each such length (:func:`beyond_shapes`), where the original runs."""

from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import numpy_helper

from ...dims import derived_symbols, follow
from .. import footprint
from ..external import infer_shapes_aside
from .branches import within_spans
from .interface import Shapes, batch_symbols, probe_values, shapes_at, symbols
from .shape_values import shape_values
from .symbolic import constant_value

MOST = 5120
"""the largest size verified past a sliced axis (a 4096-row table's); past it the runs cost more than they check"""
COUNT = 2
"""sizes past sliced axes verified per symbol, the smallest first"""


def past(length: int) -> int:
    """The size verified past an axis of ``length``: far enough that a count off by the excess (a Shape of the
    slice read as the symbol, summed) differs beyond the verification's tolerance, as one more does not.

    >>> past(64), past(512), past(4096)
    (101, 640, 5120)
    """
    return length + max(37, length // 4)


def sliced_lengths(model: onnx.ModelProto) -> list[int]:
    """The lengths (above 1) of the constant axes the model's top-level Slices cut at an end computed at run time
    that the sizes may move (not a constant, nor a vector whose entries are constants at every size: Phi-3's fused
    projections split at ``hidden`` computed from a Shape, :func:`eqsat.onnx.axes.shape_values.shape_values`), sorted;
    axes sized by onnx's shape inference over the model (none where it fails)."""
    try:
        inferred = infer_shapes_aside(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - no shapes, no lengths (the default sizes are verified all the same)
        return []
    decided = shape_values(model)
    dims: dict[str, list[int]] = {t.name: list(t.dims) for t in model.graph.initializer}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims.setdefault(vi.name, [d.dim_value if d.HasField("dim_value") else 0
                                      for d in vi.type.tensor_type.shape.dim])
    constants = {t.name: t for t in model.graph.initializer}
    constants |= {t.name: t for n in model.graph.node if (t := constant_value(n)) is not None}
    out: set[int] = set()
    for node in model.graph.node:
        if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.input) < 3 \
                or node.input[2] in constants or not dims.get(node.input[0]):
            continue
        ends = decided.get(node.input[2])
        if ends is not None and all(m.is_const for m in ends):  # a constant at every size
            continue
        shape = dims[node.input[0]]
        given = len(node.input) > 3 and node.input[3] in constants
        axes = [int(a) for a in numpy_helper.to_array(constants[node.input[3]]).reshape(-1)] if given \
            else range(len(shape))
        out |= {shape[a % len(shape)] for a in axes if -len(shape) <= a < len(shape) and shape[a % len(shape)] > 1}
    return sorted(out)


def beyond_shapes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, Shapes]]:
    """(label, shapes): each free symbol that is no batch :func:`past` each of :func:`sliced_lengths` above its
    value (at most :data:`COUNT` of them, none above :data:`MOST`, none already among its :func:`probe_values`),
    the others at their ``values``. The original refuses most of them (a position table it adds to the tokens);
    where it runs, a written program must compute what it computes there."""
    lengths = sliced_lengths(model)
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    batches = set(batch_symbols(model))
    out: list[tuple[str, Shapes]] = []
    for sym in syms:
        if sym in derived or sym in batches or sym not in values:
            continue
        taken = {values[sym], *probe_values(values[sym], False)}
        sizes = [v for v in map(past, lengths) if values[sym] < v <= MOST and v not in taken][:COUNT]
        out += [(f"{sym}={v}", shapes_at(model, follow({**values, sym: v}, derived))) for v in sizes]
    return out


SPAN_GROWTH = 16
"""a bound of a span is checked only where a run of the original there is estimated to take at most this many
times the memory of one at the tuned sizes (a Wav2Vec2-Conformer's table of 9,999 relative positions spans up to
1.6 million samples: a run there took minutes); beyond the span the written program is the original itself, which
:func:`eqsat.verification.verify_within` checks at the tuned sizes"""


def span_shapes(model: onnx.ModelProto, written: onnx.ModelProto, values: Mapping[str, int]
                ) -> list[tuple[str, Shapes]]:
    """(label, shapes) on both sides of each bound of the spans a program written for a span only is kept to
    (:func:`.branches.within_spans`: the last size within and the first beyond, the others at their ``values``);
    ``model``: the original (its shapes at those sizes)."""
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    place = {p: sym for sym, places in syms.items() for p in places}
    out: list[tuple[str, Shapes]] = []
    for at, (low, high) in within_spans(written).items():
        sym = place.get(at)
        if sym is None or sym in derived:
            continue
        sizes = [(v, v < low) for v in (low - 1, low) if v >= 1] if low is not None else []
        sizes += [(v, v > high) for v in (high, high + 1)] if high is not None else []
        tuned = footprint.activation_bytes(model, shapes_at(model, values))
        for v, beyond in sizes:
            shapes = shapes_at(model, follow({**values, sym: v}, derived))
            if footprint.activation_bytes(model, shapes) <= SPAN_GROWTH * max(tuned, 1):
                out.append((f"{sym}={v}" + (" (beyond the span)" if beyond else ""), shapes))
    return out


__all__ = ["COUNT", "MOST", "SPAN_GROWTH", "beyond_shapes", "past", "sliced_lengths", "span_shapes"]
