"""Sizes exact on a range of the interface's sizes only: a Slice of a constant table between two bounds that are each
a size plus a constant (a relative-position table's rows ``4999 - frames + 1`` to ``4999 + frames``: ``2 * frames -
1`` of them) has the length of their difference only while both bounds lie within the table. Past it onnx's Slice
wraps a negative start and clamps an end at the table's length, so the length is then another function of the
sizes (a 999-row table gives 999 rows at 500 frames and 1 row at 501).

The original typed once (:mod:`.typed_original`) types such a Slice (:func:`between`) where the sizes the bounds
lie within the table for form one range of a single symbol of the interface (each bound a monomial plus a
constant, its symbols' arithmetic known down to that symbol: :attr:`.state.Fits.formulas`, each monotone in it, so
the sizes where a bound holds are one side of a size): the symbol's span, found by bisection over that
arithmetic (:func:`span`). The values computed from the Slice carry the span (:attr:`.state.Fits.ranged`), and a
candidate that holds a constant in place of one of them (a size vector read exactly,
:func:`.typed_original.folded_exactly`, or one the runs fitted) is written for the span only, with the original
beyond it (:mod:`.within`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import onnx

from eqsat.dims import Mono, SymShape
from eqsat.onnx.axes.symbolic import int_values

from .affine import Affine, affine, difference
from .state import Rewrite, Span
from .strided import shifted, typed_sizes

LARGEST = 2**40
"""the largest size of a symbol a span is bisected up to (one past it: no bound above)"""


def between(w: Rewrite, node: onnx.NodeProto, shape: SymShape | None) -> SymShape | None:
    """A Slice's ``shape`` (the original typed once) with each unknown axis typed where it slices a constant axis (a
    table) by a step of 1 between two bounds that are each a size plus a constant (:mod:`.affine`): their
    difference, on the span of the interface's sizes where both lie within the table (:func:`span`), where a bound
    reads an opaque symbol (a table sliced by the interface's own sizes is guarded where the program is written:
    :mod:`.guards`). The Slice's output then carries the span (:attr:`.state.Fits.ranged`)."""
    dims = w.shapes.get(node.input[0])
    if shape is None or dims is None or len(dims) != len(shape) or None not in shape:
        return shape
    ins = list(node.input) + [""] * (5 - len(node.input))
    axes = int_values(w.known[ins[3]]) if ins[3] and ins[3] in w.known else None
    steps = int_values(w.known[ins[4]]) if ins[4] and ins[4] in w.known else None
    if (ins[3] and axes is None) or (ins[4] and steps is None) or (axes is not None and len(axes) != 1) \
            or (steps is not None and steps != [1]):
        return shape
    axis = (axes[0] if axes is not None else 0) % len(shape)
    start, end = affine(w, ins[1]), affine(w, ins[2])
    d = dims[axis]
    if shape[axis] is not None or d is None or not d.is_const or start is None or end is None:
        return shape
    if all(s in w.values for m, _ in (start, end) for s, _ in m.powers):
        return shape  # (bounds of the interface's symbols: a table guarded as it is sliced, :mod:`.guards`)
    base = difference(end[0], start[0])
    if base is None or base.coef <= 0 or base.coef.denominator != 1:
        return shape
    found = span(w, start, end, int(d.coef))
    if found is None:
        return shape
    out = list(shape)
    out[axis] = symbol = shifted(w, node.output[0], axis, base, end[1] - start[1])
    if symbol != base and len(symbol.powers) == 1:  # (the difference plus a count: a symbol of its own, exact on the
        w.fits.spans[symbol.powers[0][0]] = found   # span; the difference itself, the frames, is exact everywhere)
    w.fits.ranged.setdefault(node.output[0], (found,))
    return [dk if k != axis and have is None else have for k, (have, dk) in enumerate(zip(out, dims))]


def _symbols(key: object) -> Iterator[str]:
    """The interface's symbols an arithmetic key (:func:`.strided.canonical`) reads."""
    if isinstance(key, tuple):
        if len(key) == 2 and key[0] == "symbol" and isinstance(key[1], str):
            yield key[1]
            return
        for part in key:
            yield from _symbols(part)


def _reads(w: Rewrite, m: Mono) -> set[str] | None:
    """The interface's symbols ``m`` reads through its arithmetic; None where a symbol's is not known."""
    out: set[str] = set()
    for s, p in m.powers:
        if p <= 0 or (s not in w.values and s not in w.fits.canon):
            return None
        out.update([s] if s in w.values else _symbols(w.fits.canon[s]))
    return out


def span(w: Rewrite, start: Affine, end: Affine, rows: int) -> Span | None:
    """The span ``(symbol, low, high)`` of the one symbol of the interface the bounds read where ``0 <= start <=
    end <= rows`` (both within a table of ``rows``: the Slice's length their difference), the representative size
    within it; ``low``/``high`` None where no size of the symbol stops it on that side. None where the bounds read
    no symbol, or more than one, or an arithmetic is not known, or the representative size is not within."""
    reads = set()
    for m, _ in (start, end):
        got = _reads(w, m)
        if got is None:
            return None
        reads |= got
    if len(reads) != 1:
        return None
    sym = reads.pop()

    def within(v: int) -> bool:
        sizes = typed_sizes(w, {**w.values, sym: v})
        try:
            a, b = (int(m.value(sizes)) + k for m, k in (start, end))
        except KeyError:
            return False
        return 0 <= a <= b <= rows

    rep = w.values[sym]
    if not within(rep):
        return None
    return sym, _edge(within, rep, 1), _edge(within, rep, LARGEST)


def _edge(within: Callable[[int], bool], inside: int, limit: int) -> int | None:
    """The last size from ``inside`` towards ``limit`` where ``within`` holds (it holds on one range of sizes);
    None where it holds at ``limit`` itself."""
    if within(limit):
        return None
    good, bad = inside, limit
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if within(mid) else (good, mid)
    return good


def meet(a: Span, b: Span) -> Span:
    """The part of two spans of one symbol that both hold."""
    lows = [x for x in (a[1], b[1]) if x is not None]
    highs = [x for x in (a[2], b[2]) if x is not None]
    return a[0], max(lows) if lows else None, min(highs) if highs else None


__all__ = ["LARGEST", "between", "meet", "span"]
