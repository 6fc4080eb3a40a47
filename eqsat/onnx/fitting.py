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

from .interface import QUIET, zero_feeds
from .io import session
from .symbolic import Mono

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


def fit_runs(run: Callable[[Mapping[str, int]], Sizes | None],
             values: Mapping[str, int]) -> list[list[Mono | None]] | None:
    """:func:`fit_sizes` over the runs ``run`` makes at ``values`` and at two more sizes of each symbol (one and
    two above its value, else, where the model refuses those, one and two below); None when the run at
    ``values`` fails."""
    base = run(values)
    if base is None:
        return None
    grown: dict[str, Probes | None] = {}
    for sym, value in values.items():
        grown[sym] = None
        for steps in ((1, 2), (-1, -2)):
            one, two = value + steps[0], value + steps[1]
            if two < 1:
                continue
            first, second = run({**values, sym: one}), run({**values, sym: two})
            if first is not None and second is not None:
                grown[sym] = ((one, first), (two, second))
                break
    return fit_sizes(base, grown, values)


def run_values(model: onnx.ModelProto, names: list[str], shapes: bool) -> Callable[[Mapping[str, int]], Sizes | None]:
    """A run of ``model`` (one session, built once) giving ``names``: their shapes (``shapes``) or their integer
    entries; None at sizes onnxruntime cannot run it at."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
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


__all__ = ["POWERS", "Probes", "fit_runs", "fit_sizes", "run_values"]
