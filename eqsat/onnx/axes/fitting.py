"""Symbolic sizes read off runs: a value's sizes (or an integer vector's entries) at the representative sizes
of the symbols and, for each symbol, at two more, fitted as monomials (``c * prod(symbol ** power)``).

One more size of a symbol gives its power in each size (the ratio of the sizes is a power of the ratio of the
symbol's values); the second checks it. The further sizes are one and two above the symbol's value, or below it
where the model refuses those (a position table that ends at the representative length). What no power explains stays unknown (None).

>>> fit_sizes([[2, 128]], {"seq": ((129, [[2, 129]]), (130, [[2, 130]]))}, {"seq": 128})
[[Mono(coef=Fraction(2, 1), powers=()), Mono(coef=Fraction(1, 1), powers=(('seq', 1),))]]
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort

from ...dims import Mono, follow
from .. import pool
from ..io import session
from .dataflow import prune, unique_name
from .interface import QUIET, zero_feeds

POWERS = range(-2, 4)
"""the powers a symbol is tried at in one size"""

Sizes = Sequence[Sequence[int]]
"""one run: for each value, its sizes (or its entries)"""


Probes = tuple[tuple[int, Sizes], tuple[int, Sizes]]
"""a symbol's two further runs: (its value, the run) each"""


def fit_sizes(base: Sizes, grown: Mapping[str, Probes | None], values: Mapping[str, int],
              flat: Mapping[str, Sequence[Sizes]] | None = None) -> list[list[Mono | None]]:
    """Each value's sizes in ``base`` (the run at ``values``) as monomials, from ``grown`` (symbol -> its two
    further runs, None where they failed). ``flat``: for a symbol whose two runs failed, the runs that varied it
    alone and ran, one of them above its value: a size the same in each of them does not depend on it (power 0), so
    that a symbol the model refuses at most sizes (an image side that runs at multiples of 224 only) leaves the sizes
    of the others (the batch) fitted.

    >>> fit_sizes([[1, 56]], {"b": ((2, [[2, 56]]), (3, [[3, 56]])), "h": None}, {"b": 1, "h": 224},
    ...           {"h": [[[1, 112]]]})
    [[Mono(coef=Fraction(1, 1), powers=(('b', 1),)), None]]
    """
    out: list[list[Mono | None]] = []
    for k, sizes in enumerate(base):
        fitted: list[Mono | None] = []
        for axis, size in enumerate(sizes):
            powers: dict[str, int] | None = {} if size != 0 else None
            for sym, value in values.items():
                runs = grown.get(sym)
                if powers is not None and runs is None and (flat or {}).get(sym) \
                        and all(len(run[k]) == len(sizes) and run[k][axis] == size for run in (flat or {})[sym]):
                    continue
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
            coef = Fraction(size) / mono.value(values)
            # a negative entry (a Slice's start ``-seq``): a whole coefficient times positive powers only (a
            # program's integer division rounds toward zero, where the user's floor may round down)
            whole = coef.denominator == 1 and all(p > 0 for p in powers.values())
            fitted.append(Mono.const(coef) * mono if coef > 0 or whole else None)
        out.append(fitted)
    return out


Sums = Mapping[str, Callable[[Mapping[str, int]], int]]
"""the symbols written as arithmetic of others (``past + 1``: :func:`eqsat.onnx.axes.interface.derived_symbols`): never
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
    own), each entry checked at twice the value (:func:`above`) and, where it is wrong there, fitted from twice and
    three times it (:func:`multiples`) instead; None when the run at ``values`` fails. An entry no fit reproduces
    in every run that ran (:func:`agrees`) is None."""
    sums = sums or {}
    base = run(values)
    if base is None:
        return None
    seen: list[tuple[Mapping[str, int], Sizes]] = [(values, base)]
    near: dict[str, Probes | None] = {}
    free = {s: v for s, v in values.items() if s not in sums}
    runs = _Runs(run, values, sums, seen)
    for sym, value in free.items():
        near[sym] = None
        for one, two in ((value + 1, value + 2), (value - 1, value - 2)):
            if two < 1:
                continue
            near[sym] = runs.pair(sym, one, two)
            if near[sym] is not None:
                break
        for size in above(value):
            runs.at(sym, size)
    return _fitted(base, near, free, {}, seen, sums, runs)


REFUSED: contextvars.ContextVar[Callable[[Mapping[str, int]], bool] | None] = \
    contextvars.ContextVar("REFUSED", default=None)
"""where set (the writer sets it to the user's model's: :meth:`eqsat.generic.original.Original.refuses`), the sizes
at which the model the programs fitted stand for refuses to run: a run there is not read (a prefix of it runs where
the whole does not, and what it computes there is no size the model has: a Swin V2's windows at a side of 16, padded
up to one window, where it runs at multiples of 32 only)"""


class _Runs:
    """The runs of one fit, each size run once: ``seen`` gets each run that ran (its symbols' sizes, its sizes), at
    sizes the model does not refuse (:data:`REFUSED`)."""

    def __init__(self, run: Callable[[Mapping[str, int]], Sizes | None], values: Mapping[str, int], sums: Sums,
                 seen: list):
        self.run, self.values, self.sums, self.seen = run, values, sums, seen
        self.done: dict[tuple[str, int], Sizes | None] = {}

    def at(self, sym: str, size: int) -> Sizes | None:
        if (sym, size) not in self.done:
            at = _at(self.values, self.sums, sym, size)
            got = self.run(at)
            refused = REFUSED.get()
            got = self.done[sym, size] = None if got is None or refused is not None and refused(at) else got
            if got is not None:
                self.seen.append((at, got))
        return self.done[sym, size]

    def pair(self, sym: str, one: int, two: int) -> Probes | None:
        first, second = self.at(sym, one), self.at(sym, two)
        return None if first is None or second is None else ((one, first), (two, second))

    def ran(self, sym: str) -> list[tuple[int, Sizes]]:
        return [(size, got) for (s, size), got in self.done.items() if s == sym and got is not None]


def agrees(m: Mono, at: Mapping[str, int], size: int) -> bool:
    """Whether ``m`` at the sizes ``at`` is ``size`` as a program computes it from the inputs' sizes
    (:class:`eqsat.generic.sizes.SizeWriter`: the product of the symbols, times the numerator, floor-divided by the
    denominator): ``1/4*height`` is 8 at a height of 33, as a strided convolution's output is.

    >>> agrees(Mono.const(Fraction(1, 4)) * Mono.symbol("h"), {"h": 33}, 8), agrees(Mono.symbol("h"), {"h": 3}, 2)
    (True, False)
    """
    value = m.value(at)
    if value == size:
        return True
    return all(p > 0 for _, p in m.powers) and m.coef > 0 and value.numerator // value.denominator == size


def _fitted(base: Sizes, near: Mapping[str, Probes | None], free: Mapping[str, int],
            flat: Mapping[str, Sequence[Sizes]], seen: Sequence[tuple[Mapping[str, int], Sizes]], sums: Sums,
            runs: _Runs) -> list[list[Mono | None]]:
    """Each entry fitted from the runs near the symbols' values (``near``), or, where that fit is not every run's
    (:func:`agrees`: a size that is the same near the value and grows above it, a count of windows rounded up),
    from their multiples (:func:`multiples`, run only then); None where neither is. A symbol whose runs near it
    failed and that ran above it leaves the entries it does not change fitted (``flat``: :func:`fit_sizes`)."""
    for sym, value in free.items():
        ran = runs.ran(sym)
        if sym not in flat and any(size > value for size, _ in ran):
            flat = {**flat, sym: [got for _, got in ran]}
    fitted = _with_sums(fit_sizes(base, near, free, flat), seen, sums)

    def good(m: Mono | None, k: int, j: int) -> bool:
        return m is not None and all(len(r[k]) == len(base[k]) and agrees(m, at, r[k][j]) for at, r in seen)

    if all(good(m, k, j) for k, row in enumerate(fitted) for j, m in enumerate(row)):
        return fitted
    far = dict(near)
    for sym, value in free.items():
        for one, two in multiples(value):
            far[sym] = runs.pair(sym, one, two) or near[sym]
    for sym, value in free.items():
        ran = runs.ran(sym)
        if any(size > value for size, _ in ran):
            flat = {**flat, sym: [got for _, got in ran]}  # (the multiples' runs too)
    other = _with_sums(fit_sizes(base, far, free, flat), seen, sums) if far != near else fitted
    return [[m if good(m, k, j) else o if good(o, k, j) else None for j, (m, o) in enumerate(zip(row, other[k]))]
            for k, row in enumerate(fitted)]


def further_sizes(value: int) -> tuple[tuple[int, int], list[int]]:
    """The two sizes a symbol at ``value`` is fitted from (below it, unless it is 1 or 2), and the sizes the fit
    is checked at (1, half of it and three quarters of it; or four above it). Three quarters: a size that steps
    every few hundred samples (an audio model's frames, 12 at 4,094 to 4,096 samples and 6 at 2,048) has a parity
    there that its neighbours and halves may all share (SEW's padding back to an odd number of frames, 0 at each of
    those and 1 at 3,072 samples: a constant 0 read off them).

    >>> further_sizes(64), further_sizes(1)
    (((63, 62), [1, 32, 48]), ((2, 3), [5]))
    """
    if value > 2:
        return (value - 1, value - 2), sorted({1, max(1, value // 2), 3 * value // 4} - {value, value - 1, value - 2})
    return (value + 1, value + 2), [value + 4]


ABOVE_AT_MOST = 4096
"""the largest size :func:`above` checks a fit at (a run of a prefix at twice a long sequence costs its attention's
square)"""


def _knows() -> bool:
    """Whether the runs say where the model itself runs (:data:`REFUSED` set): only then are they read above the
    value (:func:`above`, :func:`multiples`); a prefix of a model that refuses the sizes above its position table
    still runs there, clamped, and says nothing of it."""
    return REFUSED.get() is not None


def above(value: int) -> list[int]:
    """The size above ``value`` that a fit from sizes below it (:func:`further_sizes`) is checked at too: twice it
    (where a model runs at few sizes, a multiple of its window or patch grid, twice the one it was tuned at is the
    likeliest to run), unless that is above :data:`ABOVE_AT_MOST`. A size that is the same at and below ``value``
    is not always constant: a count of windows rounded up (``ceil(side / 32 / 7)``) is 1 at every side up to the
    representative 224, and 2 at 448.

    Where the runs say where the model runs (:data:`REFUSED`), only then:

    >>> token = REFUSED.set(lambda at: False)
    >>> above(224), above(1), above(4096)
    ([448], [], [])
    >>> REFUSED.reset(token); above(224)
    []
    """
    return [2 * value] if 2 < value and 2 * value <= ABOVE_AT_MOST and _knows() else []


def multiples(value: int) -> list[tuple[int, int]]:
    """The two sizes a symbol at ``value`` is fitted from where the model refuses the sizes near it (a Swin V2 of
    traced window padding runs at multiples of its 224 pixels only): twice and three times it, where
    :func:`above` checks at twice it.

    >>> token = REFUSED.set(lambda at: False)
    >>> multiples(224), multiples(2)
    ([(448, 672)], [])
    >>> REFUSED.reset(token)
    """
    return [(2 * value, 3 * value)] if above(value) else []


def fit_vectors(run: Callable[[Mapping[str, int]], Sizes | None],
                values: Mapping[str, int], sums: Sums | None = None) -> list[list[Mono | None]] | None:
    """Integer vectors' entries (``run``: their entries, or sizes, at given sizes) as monomials, None where no
    monomial fits every run (every entry of a vector whose length changes); None when the run at ``values`` fails.

    Each symbol is fitted from two sizes below its value (above it where it is 1 or 2: a model often refuses
    sizes above the one it was tuned at, while its shape computations, clamped, still run there; twice and three
    times it where those fits are wrong at twice it or the model refuses the sizes below too: :func:`multiples`),
    and every fitted entry is checked at further sizes (1 and half the value, and twice it: :func:`above`; or four
    above) as a program computes it (:func:`agrees`). An entry of 0 or below (``0`` and ``-1`` in a Reshape target)
    is a constant where every run agrees. A :data:`Sums` symbol follows its own, and an entry that is one of them
    in every run is read as it.

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
    near: dict[str, Probes | None] = {}
    free = {s: v for s, v in values.items() if s not in sums}
    runs = _Runs(run, values, sums, seen)
    for sym, value in free.items():
        steps, checks = further_sizes(value)
        near[sym] = runs.pair(sym, *steps)
        for size in [*checks, *above(value)]:
            runs.at(sym, size)
    fitted = _fitted(base, near, free, {}, seen, sums, runs)
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
            vector.append(None if m is None or not all(agrees(m, at, r[k][j]) for at, r in seen) else m)
        out.append(vector)
    return out


def run_values(model: onnx.ModelProto, names: list[str], shapes: bool,
               whole: bool = False) -> Callable[[Mapping[str, int]], Sizes | None]:
    """A run of ``model`` (one session, built once, of the nodes ``names`` depend on) giving ``names``: their shapes
    (``shapes``: each one's Shape computed in the run, the value itself freed once read) or their integer entries;
    None at sizes onnxruntime cannot run it at (or whose memory would not fit: :mod:`eqsat.onnx.footprint`).
    ``whole``: the model's outputs computed too (not returned): a run of every node, which fails where the model
    refuses the sizes, not only where the nodes ``names`` depend on do; a value asked that holds no integers (a
    mask's ``-inf``) is given as no entries (``[]``)."""
    probe = _copy(model)
    asked = names
    if shapes:  # each value's Shape asked, not the value: a large one freed once read (not kept to the run's end)
        taken = {o for n in probe.graph.node for o in n.output} | {vi.name for vi in probe.graph.input} \
            | {t.name for t in probe.graph.initializer} | set(names)
        asked = [unique_name(f"{n}.shape", taken) for n in names]
        probe.graph.node.extend(onnx.helper.make_node("Shape", [n], [s]) for n, s in zip(names, asked))
    outputs = [o for o in probe.graph.output if o.name not in asked] if whole else []
    del probe.graph.output[:]
    probe.graph.output.extend([*(onnx.ValueInfoProto(name=n) for n in asked), *outputs])
    prune(probe)  # only what ``names`` depend on is run (a Reshape target: the input's Shape, not the model)
    sess: list[ort.InferenceSession] = []

    def run(at: Mapping[str, int]) -> Sizes | None:
        try:
            if not sess:
                sess.append(session(probe, optimized=not shapes))
            got = sess[0].run(None, zero_feeds(model, at), QUIET)[:len(asked)]
        except Exception:  # noqa: BLE001 - sizes it cannot run at (or a model it cannot load): nothing learnt
            return None
        return [[] if whole and np.asarray(r).dtype.kind not in "iub" else [int(v) for v in np.asarray(r).reshape(-1)]
                for r in got]

    return run


def run_arrays(model: onnx.ModelProto, names: list[str]) -> Callable[[Mapping[str, int]], list[np.ndarray] | None]:
    """A run of ``model`` (one session, built once, of the nodes ``names`` depend on, as written: nothing folded)
    on :func:`~.interface.zero_feeds` giving the values ``names``; None at sizes onnxruntime cannot run it at (or
    whose memory would not fit). For values computed from the sizes alone (a rotary table over an image's patch
    grid), which the zeros do not change."""
    probe = _copy(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    prune(probe)
    sess: list[ort.InferenceSession] = []

    def run(at: Mapping[str, int]) -> list[np.ndarray] | None:
        try:
            if not sess:
                sess.append(session(probe, optimized=False))
            return [np.asarray(r) for r in sess[0].run(None, zero_feeds(model, at), QUIET)]
        except Exception:  # noqa: BLE001 - sizes it cannot run at (or a model it cannot load)
            return None

    return run


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` to run, referring to the run's weight pool for its weights where there is one (the
    session reads them there)."""
    weights = pool.current()
    if weights is not None:
        return weights.slim(model)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    return probe


__all__ = ["ABOVE_AT_MOST", "POWERS", "REFUSED", "Probes", "above", "agrees", "multiples", "Sums", "fit_runs", "fit_sizes", "fit_vectors", "further_sizes", "run_arrays", "run_values"]
