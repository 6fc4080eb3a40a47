"""Symbolic sizes read off runs: a value's sizes (or an integer vector's entries) at the representative sizes
of the symbols and, for each symbol, at two more, fitted as monomials (``c * prod(symbol ** power)``).

One more size of a symbol gives its power in each size (the ratio of the sizes is a power of the ratio of the
symbol's values); the second checks it. The further sizes are one and two above the symbol's value, or below it
where the model refuses those (a position table that ends at the representative length). What no power explains stays unknown (None).

>>> fit_sizes([[2, 128]], {"seq": ((129, [[2, 129]]), (130, [[2, 130]]))}, {"seq": 128})
[[Mono(coef=Fraction(2, 1), powers=()), Mono(coef=Fraction(1, 1), powers=(('seq', 1),))]]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort

from ..dims import Mono, follow
from . import pool
from .dataflow import prune
from .interface import QUIET, zero_feeds
from .io import session

POWERS = range(-2, 4)
"""the powers a symbol is tried at in one size"""

Sizes = Sequence[Sequence[int]]
"""one run: for each value, its sizes (or its entries)"""


Probes = tuple[tuple[int, Sizes], tuple[int, Sizes]]
"""a symbol's two further runs: (its value, the run) each"""


def fit_sizes(base: Sizes, grown: Mapping[str, Probes | None], values: Mapping[str, int]) -> list[list[Mono | None]]:
    """Each value's sizes in ``base`` (the run at ``values``) as monomials, from ``grown`` (symbol -> its two
    further runs, None where they failed)."""
    out: list[list[Mono | None]] = []
    for k, sizes in enumerate(base):
        fitted: list[Mono | None] = []
        for axis, size in enumerate(sizes):
            powers: dict[str, int] | None = {} if size > 0 else None
            for sym, value in values.items():
                runs = grown.get(sym)
                if powers is None or runs is None or any(len(run[k]) != len(sizes) for _, run in runs):
                    powers = None
                    break
                power = next((p for p in POWERS if all(Fraction(run[k][axis], size) == Fraction(v, value) ** p
                                                       for v, run in runs)), None)
                if power is None:
                    powers = None
                    break
                if power:
                    powers[sym] = power
            if powers is None:
                fitted.append(None)
                continue
            mono = Mono(Fraction(1), tuple(sorted(powers.items())))
            fitted.append(Mono.const(Fraction(size) / mono.value(values)) * mono)
        out.append(fitted)
    return out


Sums = Mapping[str, Callable[[Mapping[str, int]], int]]
"""the symbols written as arithmetic of others (``past + 1``: :func:`eqsat.onnx.interface.derived_symbols`): never
varied alone (they follow their symbols), and a size no monomial fits may be one of them"""


def _at(values: Mapping[str, int], sums: Sums, sym: str, size: int) -> dict[str, int]:
    """``values`` with ``sym`` at ``size`` and the :data:`Sums` following it."""
    return follow({**values, sym: size}, sums)


def _with_sums(fitted: list[list[Mono | None]], seen: Sequence[tuple[Mapping[str, int], Sizes]],
               sums: Sums) -> list[list[Mono | None]]:
    """``fitted`` with each size no monomial fits read as the one of ``sums`` it is in every run (``seen``: the
    sizes at each run's symbols)."""
    if not sums or len(seen) < 3:
        return fitted
    for k, entries in enumerate(fitted):
        for j, m in enumerate(entries):
            if m is None and all(len(r[k]) == len(entries) for _, r in seen):
                entries[j] = next((Mono.symbol(name) for name in sums  # one that changed across the runs
                                   if len({at[name] for at, _ in seen}) > 1
                                   and all(r[k][j] == at[name] for at, r in seen)), None)
    return fitted


def fit_runs(run: Callable[[Mapping[str, int]], Sizes | None],
             values: Mapping[str, int], sums: Sums | None = None) -> list[list[Mono | None]] | None:
    """:func:`fit_sizes` over the runs ``run`` makes at ``values`` and at two more sizes of each symbol (one and
    two above its value, else, where the model refuses those, one and two below; a :data:`Sums` symbol follows its
    own); None when the run at ``values`` fails."""
    sums = sums or {}
    base = run(values)
    if base is None:
        return None
    seen: list[tuple[Mapping[str, int], Sizes]] = [(values, base)]
    grown: dict[str, Probes | None] = {}
    free = {s: v for s, v in values.items() if s not in sums}
    for sym, value in free.items():
        grown[sym] = None
        for steps in ((1, 2), (-1, -2)):
            one, two = value + steps[0], value + steps[1]
            if two < 1:
                continue
            first, second = run(_at(values, sums, sym, one)), run(_at(values, sums, sym, two))
            if first is not None and second is not None:
                grown[sym] = ((one, first), (two, second))
                seen += [(_at(values, sums, sym, one), first), (_at(values, sums, sym, two), second)]
                break
    return _with_sums(fit_sizes(base, grown, free), seen, sums)


def further_sizes(value: int) -> tuple[tuple[int, int], list[int]]:
    """The two sizes a symbol at ``value`` is fitted from (below it, unless it is 1 or 2), and the sizes the fit
    is checked at (1 and half of it; or four above it).

    >>> further_sizes(64), further_sizes(1)
    (((63, 62), [1, 32]), ((2, 3), [5]))
    """
    if value > 2:
        return (value - 1, value - 2), sorted({1, max(1, value // 2)} - {value, value - 1, value - 2})
    return (value + 1, value + 2), [value + 4]


def fit_vectors(run: Callable[[Mapping[str, int]], Sizes | None],
                values: Mapping[str, int], sums: Sums | None = None) -> list[list[Mono | None]] | None:
    """Integer vectors' entries (``run``: their entries, or sizes, at given sizes) as monomials, None where no
    monomial fits every run (every entry of a vector whose length changes); None when the run at ``values`` fails.

    Each symbol is fitted from two sizes below its value (above it where it is 1 or 2: a model often refuses
    sizes above the one it was tuned at, while its shape computations, clamped, still run there), and every
    fitted entry is checked at further sizes (1 and half the value; or four above). An entry of 0 or below
    (``0`` and ``-1`` in a Reshape target) is a constant where every run agrees. A :data:`Sums` symbol follows its
    own, and an entry that is one of them in every run is read as it.

    >>> b, s, minus = Mono.symbol("b"), Mono.symbol("s"), Mono.const(-1)
    >>> fit_vectors(lambda at: [[at["b"], at["s"], -1], [at["s"] if at["s"] > 40 else 0]], {"b": 1, "s": 64}) \\
    ...     == [[b, s, minus], [None]]
    True
    """
    sums = sums or {}
    base = run(values)
    if base is None:
        return None
    seen: list[tuple[dict[str, int], Sizes]] = [(dict(values), base)]
    grown: dict[str, Probes | None] = {}
    free = {s: v for s, v in values.items() if s not in sums}
    for sym, value in free.items():
        steps, checks = further_sizes(value)
        one, two = ((size, run(_at(values, sums, sym, size))) for size in steps)
        grown[sym] = None if one[1] is None or two[1] is None else ((one[0], one[1]), (two[0], two[1]))
        for size, got in [one, two, *((size, run(_at(values, sums, sym, size))) for size in checks)]:
            if got is not None:
                seen.append((_at(values, sums, sym, size), got))
    fitted = _with_sums(fit_sizes(base, grown, free), seen, sums)
    # an entry the same in every run is a constant only where every symbol was varied in some run that ran (a
    # symbol whose every further run failed says nothing of the entries it sizes)
    varied = {sym for at, _ in seen[1:] for sym in free if at[sym] != values[sym]} == set(free)
    out: list[list[Mono | None]] = []
    for k, entries in enumerate(fitted):
        if any(len(r[k]) != len(base[k]) for _, r in seen):
            out.append([None] * len(base[k]))
            continue
        vector: list[Mono | None] = []
        for j, m in enumerate(entries):
            if m is None and varied and len({r[k][j] for _, r in seen}) == 1 and len(seen) > 1 + len(free):
                m = Mono.const(base[k][j])
            vector.append(None if m is None or any(m.value(at) != r[k][j] for at, r in seen) else m)
        out.append(vector)
    return out


def run_values(model: onnx.ModelProto, names: list[str], shapes: bool) -> Callable[[Mapping[str, int]], Sizes | None]:
    """A run of ``model`` (one session, built once, of the nodes ``names`` depend on) giving ``names``: their shapes
    (``shapes``) or their integer entries; None at sizes onnxruntime cannot run it at."""
    weights = pool.current()
    if weights is not None:  # a copy referring to the pool for its weights (the session reads them there)
        probe = weights.slim(model)
    else:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    prune(probe)  # only what ``names`` depend on is run (a Reshape target: the input's Shape, not the model)
    sess: list[ort.InferenceSession] = []

    def run(at: Mapping[str, int]) -> Sizes | None:
        try:
            if not sess:
                sess.append(session(probe))
            got = sess[0].run(names, zero_feeds(model, at), QUIET)
        except Exception:  # noqa: BLE001 - sizes it cannot run at (or a model it cannot load): nothing learnt
            return None
        if shapes:
            return [[int(d) for d in np.shape(v)] for v in got]
        return [[int(v) for v in np.asarray(r).reshape(-1)] for r in got]

    return run


__all__ = ["POWERS", "Probes", "Sums", "fit_runs", "fit_sizes", "fit_vectors", "further_sizes", "run_values"]
