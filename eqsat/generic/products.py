"""A size no monomial of the interface's symbols fits, read as a product of the opaque symbols typed by their
arithmetic (:mod:`.strided`): the tokens of a strided convolution's output flattened, ``floor(h/4) * floor(w/4)``,
which ``h * w / 16`` is not (the two differ at a side of 33). The runs that fitted the sizes (:mod:`.probes`) give
the size at several sizes of the interface, and each typed opaque symbol's size there is its arithmetic's; a
product of one or two of them (and one of the interface's symbols: a batch) times a whole constant that is the size
in every run is the size's reading, where exactly one such product of the fewest factors is (:func:`product_fit`);
never a fraction of one (half a side that a Conv of stride 2 rounds: the runs, at even sides, may all divide).
What is read so is checked, as every fit is, by the verification at further sizes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

from eqsat.dims import Mono

from .state import Rewrite
from .strided import typed_sizes

MOST = 2
"""the most typed opaque symbols one product reads (a height's and a width's)"""


def product_fit(w: Rewrite, runs: Sequence[tuple[Mapping[str, int], int]]) -> Mono | None:
    """The size that is ``runs``' (each run's interface sizes and the size there) as a whole constant times a product of
    one or two typed opaque symbols and at most one of the interface's symbols; None where no such product is the size
    in every run, where a factor is of one size in every run, or where two products of the fewest factors both are
    (the runs do not tell them apart)."""
    if len(runs) < 3 or not w.fits.formulas:
        return None
    sized = [(typed_sizes(w, at), size) for at, size in runs]
    typed = [s for s in w.fits.formulas if all(s in got for got, _ in sized)]
    free = [s for s in w.values if s not in w.sums and all(s in got for got, _ in sized)]
    readings = [(opaque, extra) for count in range(1, MOST + 1)
                for opaque in itertools.combinations_with_replacement(typed, count)
                for extra in [(), *((s,) for s in free)]]
    for factors in range(1, MOST + 2):  # the fewest factors first; two readings of as many: the runs cannot tell
        found: dict[str, Mono] = {}
        for opaque, extra in readings:
            if len(opaque) + len(extra) == factors and (m := _reading(sized, (*opaque, *extra))) is not None:
                found[m.key()] = m
        if found:
            return next(iter(found.values())) if len(found) == 1 else None
    return None


def _reading(sized: Sequence[tuple[Mapping[str, int], int]], factors: Sequence[str]) -> Mono | None:
    """The size in every run of ``sized`` (the symbols' sizes there, the size) as a whole constant times the product
    of ``factors``; None where none is, or a factor is of the same size in every run."""
    products = [math.prod(got[s] for s in factors) for got, _ in sized]
    if 0 in products or any(len({got[s] for got, _ in sized}) < 2 for s in factors):
        return None  # (a factor of the same size in every run says nothing of it: 197 tokens at every size run)
    coef = Fraction(sized[0][1], products[0])
    if coef <= 0 or coef.denominator != 1 or any(coef * p != size for p, (_, size) in zip(products, sized)):
        return None  # (a fraction of one, half a strided side, is a floor whose rounding the runs may hide)
    m = Mono.const(coef)
    for s in factors:
        m = m * Mono.symbol(s)
    return m


__all__ = ["MOST", "product_fit"]
