"""The symbolic target of a Reshape: which symbols a target written at concrete sizes stands for
(:func:`reshape_target`; at a symbol of 1, which axis it goes with as networks write it: :func:`leading`), and a
target's 0 and -1 resolved against its input's symbolic shape (:func:`resolve_target`)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import numpy as np

from ...dims import Mono, product


def _groups(sizes_in: list[int], sizes_out: list[int]) -> list[tuple[list[int], list[int]]] | None:
    """Index groups (input axes, output axes) whose size products are equal, in order; None if they never meet.
    Trailing axes of size 1 join the last group."""
    groups: list[tuple[list[int], list[int]]] = []
    i = k = 0
    while i < len(sizes_in) and k < len(sizes_out):
        gi, gk = [i], [k]
        pi, pk = sizes_in[i], sizes_out[k]
        while pi != pk:
            if pi < pk and i + 1 < len(sizes_in):
                i += 1
                gi.append(i)
                pi *= sizes_in[i]
            elif pk < pi and k + 1 < len(sizes_out):
                k += 1
                gk.append(k)
                pk *= sizes_out[k]
            else:
                return None
        groups.append((gi, gk))
        i, k = i + 1, k + 1
    rest_in, rest_out = list(range(i, len(sizes_in))), list(range(k, len(sizes_out)))
    if any(sizes_in[j] != 1 for j in rest_in) or any(sizes_out[j] != 1 for j in rest_out):
        return None
    if not groups:
        return [(rest_in, rest_out)] if rest_in or rest_out else []
    groups[-1][0].extend(rest_in)
    groups[-1][1].extend(rest_out)
    return groups


def _in_order(dims_in: list[Mono], sizes_out: list[int], values: Mapping[str, int]) -> list[Mono] | None:
    """The output axes of a group as a Reshape fills them, in memory order: each takes the input's axes in turn, a
    constant axis split where an output axis takes part of it (GroupNorm's ``[1, 256, h/32, w/32]`` to ``[1, 32,
    392]``: 32 of the 256 channels, then the other 8 times both sides). None where an output axis would take part of
    a symbolic axis, or a symbol is at 1 (which axis it goes with is then open: :func:`_assign` reads it)."""
    if any(values[s] == 1 for m in dims_in for s, _ in m.powers):
        return None
    pieces = list(dims_in)
    out: list[Mono] = []
    for n in sizes_out:
        taken = Mono.const(1)
        while taken.value(values) < n:
            if not pieces:
                return None
            piece, have = pieces.pop(0), taken.value(values)
            size = piece.value(values)
            if n % (have * size) == 0:
                taken = taken * piece
            elif piece.is_const and n % have == 0 and size % (n // have) == 0:
                taken = taken * Mono.const(n // have)
                pieces.insert(0, Mono.const(size // (n // have)))
            else:
                return None
        if taken.value(values) != n:
            return None
        out.append(taken)
    return out if all(m.is_const and m.value(values) == 1 for m in pieces) else None


def _assign(dims_in: list[Mono], sizes_out: list[int], values: Mapping[str, int]) -> list[Mono] | None:
    """The monomials of a group's output axes (concrete ``sizes_out``) whose product is that of ``dims_in``: in
    memory order where that decides them (:func:`_in_order`), else each symbol on an axis its size divides."""
    total = product(dims_in)
    if len(sizes_out) == 1:
        return [total]
    ordered = _in_order(dims_in, sizes_out, values)
    if ordered is not None:
        return ordered
    factors: list[str] = []
    for s, p in total.powers:
        if p < 0:
            return None  # a quotient split over several axes: not guessed
        factors += [s] * p
    factors.sort(key=lambda s: -values[s])  # the informative (large) symbols first, a symbol at 1 last
    order = {s: min(k for k, d in enumerate(dims_in) if any(t == s for t, _ in d.powers)) for s in factors}
    rest = [Fraction(n) for n in sizes_out]
    given: list[list[str]] = [[] for _ in sizes_out]
    wide = [j for j, n in enumerate(sizes_out) if n != 1]
    for s in factors:
        v = values[s]
        if v != 1 and len(wide) == 1:
            # one axis above 1 (rows back to ``[1, patches, 384]``): it takes every symbol above 1, whatever the
            # coefficient (``1/256*height*width`` patches of 16 pixels is no multiple of either side's size)
            rest[wide[0]] /= v
            given[wide[0]].append(s)
            continue
        # the axes holding the other symbols of its input axis
        fellows = [j for j, g in enumerate(given) if any(values[t] != 1 and order[t] == order[s] for t in g)]
        if v == 1:  # ambiguous: an axis of 1 between the axes of the symbols around it in the input, else theirs
            later = [j for j, g in enumerate(given) for t in g if values[t] != 1 and order[t] > order[s]]
            earlier = [j for j, g in enumerate(given) for t in g if values[t] != 1 and order[t] < order[s]]
            low, high = max(earlier, default=-1), min(later, default=len(rest))
            free = [j for j in range(len(rest)) if rest[j] == 1 and not given[j] and low < j < high]
            j = free[0] if free else high if later else low if earlier else fellows[0] if fellows else None
            if j is not None:
                given[j].append(s)
                continue
        fraction = total.coef.denominator != 1
        free = [j for j in range(len(rest)) if rest[j] > 1 and not given[j] and fraction][:1]
        tiers = [[j for j in range(len(rest)) if rest[j] == v and not given[j]],
                 [j for j in range(len(rest)) if rest[j] == v],
                 [j for j in range(len(rest)) if (rest[j] / v).denominator == 1 and not given[j]],
                 [j for j in range(len(rest)) if (rest[j] / v).denominator == 1],
                 # a size a fraction of the symbol (``length / 2`` frames of a stride-2 convolution onto ``[1, 32]``,
                 # a side of 16-pixel patches): the first axis above 1 that holds no symbol yet, where the symbol's
                 # size over a whole number is it; else the axis of the other symbols of its input axis (Swin's
                 # windows, ``[1/16*batch*h*w, 144]`` to ``[64, 49, 144]``, are ``1/784*batch*h*w``, not 2/7 of the
                 # height by 7/32 of the width); else that first free axis, its coefficient the fraction
                 [j for j in free if (rest[j] / v).numerator == 1],
                 fellows if fraction else [],
                 free,
                 [j for j, n in enumerate(sizes_out) if n > 1 and fraction]]
        j = next((t[0] for t in tiers if t), None)
        if j is None:
            return None
        rest[j] /= v
        given[j].append(s)
    out = []
    for r, syms in zip(rest, given):
        if r.denominator != 1 and not syms:
            return None
        out.append(product([Mono.const(r), *(Mono.symbol(s) for s in syms)]))
    return out if product(out) == total else None


def _ones_before(groups: list[tuple[list[int], list[int]]], sizes_out: list[int], dims_in: list[Mono],
                 values: Mapping[str, int]) -> list[tuple[list[int], list[int]]]:
    """``groups`` with the output axes of size 1 that open a group moved into the group before, where that group's
    input holds a symbol at 1 (which may be split out onto them: ``[frames*batch, 384]`` -> ``[frames, batch, 384]``
    at a batch of 1)."""
    out = [(list(gi), list(gk)) for gi, gk in groups]
    for g in range(1, len(out)):
        before, here = out[g - 1], out[g]
        if not any(values.get(s) == 1 for j in before[0] for s, _ in dims_in[j].powers):
            continue
        while len(here[1]) > 1 and sizes_out[here[1][0]] == 1:
            before[1].append(here[1].pop(0))
    return out


def _ones_to_rest(groups: list[tuple[list[int], list[int]]], sizes_in: list[int],
                  rest: int) -> list[tuple[list[int], list[int]]]:
    """``groups`` with the input axes of size 1 at a boundary between two groups moved into the group whose output
    holds the target's ``-1`` (``rest``): a target written with ``-1`` gives the sizes that change to it, so an
    axis of a symbol at 1 goes there (``[batch, wh, ww, 4, 4, 16]`` at 1 window of 16 to ``[-1, 16, 16]``: the
    windows join the batch on the ``-1``, not the 16 positions after them). A group keeps one input axis at least."""
    out = [(list(gi), list(gk)) for gi, gk in groups]
    for g in range(1, len(out)):
        before, here = out[g - 1], out[g]
        if rest in before[1]:
            while len(here[0]) > 1 and sizes_in[here[0][0]] == 1:
                before[0].append(here[0].pop(0))
        elif rest in here[1]:
            while len(before[0]) > 1 and sizes_in[before[0][-1]] == 1:
                here[0].insert(0, before[0].pop())
    return out


def reshape_target(dims_in: list[Mono], target: list[int], values: Mapping[str, int],
                   allowzero: bool = False, ones_before: bool = False) -> list[Mono] | None:
    """The symbolic target of a Reshape of a value of symbolic shape ``dims_in`` to ``target`` (as written: 0 and
    -1 resolved at the concrete ``values``), or None when the sizes do not line up.

    >>> b, s = Mono.symbol("b"), Mono.symbol("s")
    >>> [d.key() for d in reshape_target([b, s, Mono.const(64)], [1, 128, 4, 16], {"b": 1, "s": 128})]
    ['b', 's', '4', '16']
    >>> [d.key() for d in reshape_target([b * s, Mono.const(64)], [1, 128, 64], {"b": 1, "s": 128})]
    ['b', 's', '64']
    >>> [d.key() for d in reshape_target([b, s], [16, 1], {"b": 1, "s": 16})]  # a Flatten: b stays before s
    ['b*s', '1']

    A group of one axis above 1 takes every symbol above 1, whatever their coefficient (patches of 16 pixels
    back from rows):

    >>> patches = Mono.const(Fraction(1, 256)) * Mono.symbol("h") * Mono.symbol("w")
    >>> [d.key() for d in reshape_target([b * patches, Mono.const(8)], [1, 196, 8], {"b": 1, "h": 224, "w": 224})]
    ['b', '1/256*h*w', '8']

    ``ones_before``: an output axis of size 1 that opens a group of axes is read as part of the group before where
    that one's input holds a symbol at 1 (:func:`_ones_before`; the writer's reading where nothing else decides):

    >>> [d.key() for d in reshape_target([s * b, Mono.const(64)], [16, 1, 64], {"b": 1, "s": 16}, ones_before=True)]
    ['s', 'b', '64']

    A target written with ``-1`` takes the input's axes of size 1 at a group's boundary onto its ``-1``
    (:func:`_ones_to_rest`):

    >>> w, c = Mono.symbol("w"), Mono.const
    >>> [d.key() for d in reshape_target([b, w, c(4), c(4), c(16)], [-1, 16, 16], {"b": 1, "w": 1})]
    ['b*w', '16', '16']
    """
    sizes_in = [m.value(values) for m in dims_in]
    if any(v.denominator != 1 or v <= 0 for v in sizes_in):
        return None
    ints_in = [int(v) for v in sizes_in]
    resolved = [ints_in[k] if t == 0 and not allowzero and k < len(ints_in) else t for k, t in enumerate(target)]
    if resolved.count(-1) == 1:
        known = int(np.prod([t for t in resolved if t != -1]))
        whole = int(np.prod(ints_in))
        if known <= 0 or whole % known:
            return None
        resolved[resolved.index(-1)] = whole // known
    if any(t <= 0 for t in resolved) or int(np.prod(resolved)) != int(np.prod(ints_in)):
        return None
    groups = _groups(ints_in, resolved)
    if groups is None:
        return None
    if ones_before:
        groups = _ones_before(groups, resolved, dims_in, values)
    if target.count(-1) == 1:
        groups = _ones_to_rest(groups, ints_in, target.index(-1))
    out: list[Mono | None] = [None] * len(resolved)
    for gi, gk in groups:
        part = _assign([dims_in[j] for j in gi], [resolved[j] for j in gk], values)
        if part is None:
            return None
        for j, m in zip(gk, part):
            out[j] = m
    return [m if m is not None else Mono.const(1) for m in out]


def resolve_target(target: list[Mono], dims_in: list[Mono] | None, allowzero: bool) -> list[Mono] | None:
    """A Reshape target's entries (0: the input's size, unless ``allowzero``; -1: the rest) as the output's sizes,
    for an input of sizes ``dims_in``; None where they need the input's sizes and those are not known, or do not
    line up."""
    out: list[Mono | None] = []
    for k, m in enumerate(target):
        if m == Mono.const(0) and not allowzero:
            out.append(dims_in[k] if dims_in is not None and k < len(dims_in) else None)
        else:
            out.append(None if m == Mono.const(-1) else m)
    if sum(m == Mono.const(-1) for m in target) > 1 or dims_in is None and None in out:
        return None
    if None in out:
        assert dims_in is not None
        out[out.index(None)] = product(dims_in) / product([m for m in out if m is not None])
    sizes = [m for m in out if m is not None]
    if dims_in is not None and product(sizes) != product(dims_in):
        return None
    return sizes



def leading(target: list[Mono], ones: set[str]) -> list[Mono]:
    """``target`` with its last axis, where it is a constant times one symbol of ``ones`` (at 1 where it was read),
    made that constant, the symbol moved to the nearest axis before it that holds another symbol:
    ``[frames, 384*batch]`` -> ``[frames*batch, 384]``. The two are the same sizes where the symbol is 1; the
    programs exported from networks fold a batch into the rows, not into the features, whose sizes their weights
    fix (a batch folded with the heads, ``[frames, 6*batch, 64]``, is not on the last axis and stays).

    >>> f, b, c = Mono.symbol("f"), Mono.symbol("b"), Mono.const
    >>> [m.key() for m in leading([f, c(384) * b], {"b"})], [m.key() for m in leading([f, c(6) * b, c(64)], {"b"})]
    (['b*f', '384'], ['f', '6*b', '64'])
    """
    out = list(target)
    last = out[-1] if out else None
    if last is None or len(last.powers) != 1 or last.powers[0][0] not in ones or last.powers[0][1] != 1:
        return out
    symbol = Mono.symbol(last.powers[0][0])
    before = [i for i in range(len(out) - 1) if any(s not in ones for s, _ in out[i].powers)]
    if before:
        out[before[-1]], out[-1] = out[before[-1]] * symbol, last / symbol
    return out


__all__ = ["leading", "reshape_target", "resolve_target"]
