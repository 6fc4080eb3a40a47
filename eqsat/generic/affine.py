"""Sizes that are a monomial of the symbols plus a constant, read off the small integer scalars a program computes
from its shapes (:func:`affine`): a length plus the one a Pad adds, ``Shape(x)[3] + 1``.

The original typed once (:mod:`.typed_original`) reads with them a size vector whose entries are such sums that
cancel to a monomial (``(frames + 1) - 1``). Only exact sums are read: a size that dropped a count is clamped at 0
(``max(0, frames - 3)``), so it is not expanded into its base less the count (``+ 3`` would cancel to the frames,
wrong below 3 frames), and a monomial of fractional coefficient is a floor (``floor(samples / 2)``: twice it is not
the samples), so no sum or multiple of one is taken."""

from __future__ import annotations

from fractions import Fraction

import onnx

from eqsat.dims import Mono, SymShape
from eqsat.onnx.axes.symbolic import int_values

from .state import Rewrite

Affine = tuple[Mono, int]
"""a monomial (``Mono.const(0)``: none) plus a constant"""

ZERO = Mono(Fraction(0))
_PASSING = frozenset({"Unsqueeze", "Squeeze", "Identity", "Reshape", "Cast"})


def difference(a: Mono, b: Mono) -> Mono | None:
    """``a - b`` where it is one monomial; None otherwise (:func:`.ranged.between`: a table's rows between two
    bounds)."""
    return _plus(a, b, -1)


def _plus(a: Mono, b: Mono, sign: int) -> Mono | None:
    """``a + sign * b`` where it is one monomial (like terms, or one of them none); None otherwise, and where either
    is a floor (a fractional coefficient)."""
    if a.coef.denominator != 1 or b.coef.denominator != 1:
        return None
    if b.coef == 0:
        return a
    if a.coef == 0:
        return Mono(sign * b.coef, b.powers)
    if a.powers != b.powers:
        return None
    coef = a.coef + sign * b.coef
    return ZERO if coef == 0 else Mono(coef, a.powers)


def expanded(w: Rewrite, d: Mono) -> Affine:
    """``d`` as a monomial plus a constant: an opaque symbol that is a size plus a count
    (:attr:`.state.Fits.offsets`) as that pair, a constant as itself."""
    if d.is_const and d.coef.denominator == 1:
        return ZERO, int(d.coef)
    if d.coef == 1 and len(d.powers) == 1 and d.powers[0][1] == 1 and d.powers[0][0] in w.fits.offsets:
        base, count = w.fits.offsets[d.powers[0][0]]
        if count >= 0 or d.powers[0][0] in w.fits.spans:  # (a drop is clamped at 0: kept whole; a table's rows
            return base, count                               # between two bounds exact on their span: .ranged)
    return d, 0


def affine(w: Rewrite, name: str, depth: int = 0) -> Affine | None:
    """The single entry of ``name`` (a scalar or a vector of one, computed from the shapes and constants) as a
    monomial plus a constant, by its nodes in ``w`` (``w.made``); None where another operator computes it."""
    const = w.known.get(name)
    if const is not None:
        values = int_values(const) if const.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) else []
        return (ZERO, values[0]) if len(values) == 1 else None
    node = w.made.get(name)
    if node is None or depth > 32 or node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if op in _PASSING:
        if op == "Cast" and not any(a.name == "to" and a.i in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
                                    for a in node.attribute):
            return None
        return affine(w, node.input[0], depth + 1)
    if op == "Gather":
        return _gathered(w, node)
    if op == "Shape":
        dims = _dims(w, node)
        return expanded(w, dims[0]) if dims is not None and len(dims) == 1 and dims[0] is not None else None
    if op == "Neg":
        got = affine(w, node.input[0], depth + 1)
        if got is None or got[0].coef.denominator != 1:
            return None
        return Mono(-got[0].coef, got[0].powers), -got[1]
    if op in ("Add", "Sub"):
        a, b = affine(w, node.input[0], depth + 1), affine(w, node.input[1], depth + 1)
        if a is None or b is None:
            return None
        sign = 1 if op == "Add" else -1
        base = _plus(a[0], b[0], sign)
        return None if base is None else (base, a[1] + sign * b[1])
    if op == "Mul":
        a, b = affine(w, node.input[0], depth + 1), affine(w, node.input[1], depth + 1)
        if a is None or b is None:
            return None
        if b[0].coef == 0:
            a, b = b, a
        if a[0].coef != 0 or b[0].coef.denominator != 1:  # (a product of two sizes, or a multiple of a floor)
            return None
        return Mono(b[0].coef * a[1], b[0].powers) if b[0].coef * a[1] else ZERO, b[1] * a[1]
    return None


def _dims(w: Rewrite, node: onnx.NodeProto) -> SymShape | None:
    """The sizes a ``Shape`` node gives (its ``start`` and ``end`` read)."""
    dims = w.shapes.get(node.input[0])
    if dims is None:
        return None
    attrs = {a.name: a.i for a in node.attribute}
    return list(dims)[attrs.get("start", 0):attrs.get("end", len(dims))]


def _gathered(w: Rewrite, node: onnx.NodeProto) -> Affine | None:
    """A Gather of one entry of a ``Shape``: that size."""
    source = w.made.get(node.input[0])
    index = w.known.get(node.input[1]) if len(node.input) > 1 else None
    if source is None or source.op_type != "Shape" or index is None:
        return None
    dims = _dims(w, source)
    at = int_values(index)
    if dims is None or len(at) != 1 or not -len(dims) <= at[0] < len(dims) or dims[at[0]] is None:
        return None
    d = dims[at[0]]
    return None if d is None else expanded(w, d)


def entries(w: Rewrite, name: str) -> list[Mono] | None:
    """A size vector's entries (a Concat of scalars, or one) where each is a monomial once its sums cancel
    (``Shape(x)[3] + 1`` where that size is ``2 * frames - 1``: ``2 * frames``); None otherwise."""
    node = w.made.get(name)
    parts = list(node.input) if node is not None and node.op_type == "Concat" else [name]
    out: list[Mono] = []
    for part in parts:
        const = w.known.get(part)
        if const is not None and const.data_type == onnx.TensorProto.INT64:
            out.extend(Mono.const(v) for v in int_values(const))
            continue
        got = affine(w, part)
        if got is None:
            return None
        base, count = got
        if base.coef == 0:
            out.append(Mono.const(count))
        elif count == 0:
            out.append(base)
        else:
            return None
    return out


__all__ = ["ZERO", "Affine", "affine", "difference", "entries", "expanded"]
