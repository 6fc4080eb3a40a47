"""What the writer learns of the user's model, once per model (:class:`Original`), carried to every candidate's
rewrite: the entries of the small integer vectors and the Reshape targets the original computes from its inputs'
shapes, read off runs of it at further sizes (:mod:`eqsat.onnx.fitting`); the original read as the import read it
(its tables and its values' symbolic shapes: :func:`.rewrite.read_original`); its graph at a newer opset. Each is
worked out at the first candidate that asks for it and read by the next ones; before, every candidate ran the
original again at further sizes, and once more through a whole rewrite of a copy of it.

Runs that fit the entries are batched over the names asked at once; a name asked later is fitted in a run of its
own. The verification at several sizes (:func:`eqsat.verify.verify_shapes`) stays the independent check of what
is written from these facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import onnx

from eqsat.dims import Mono, derived_symbols
from eqsat.errors import first_line
from eqsat.onnx.fitting import fit_runs, fit_vectors, run_values
from eqsat.onnx.interface import symbols
from eqsat.onnx.kernels import UpgradeError, converted

Entries = list[Mono | None] | None
"""one vector's entries as monomials (None where none fits), or None where the runs said nothing of it"""


class Original:
    """The user's model at the symbols' ``values``, and what the rewrites of its candidates asked of it so far."""

    def __init__(self, model: onnx.ModelProto, values: Mapping[str, int]):
        self.model = model
        self.values = dict(values)
        self.sums = derived_symbols(list(symbols(model)))
        """the interface's symbols written as arithmetic of others (``past + 1``)"""
        self.found: object | None = None
        """the original read as the import read it (a :class:`.state.Rewrite`, which imports this module:
        :func:`.rewrite.read_original` makes and reads it); None until asked"""
        self.runs = 0
        """the runs of the original made at further sizes (batches of names), for the tests and the curious"""
        self._vectors: dict[str, Entries] = {}
        self._targets: dict[str, Entries] = {}
        self._sources: dict[int, tuple[onnx.GraphProto | None, str]] = {}

    def vectors(self, names: Sequence[str]) -> list[Entries]:
        """The entries of the original's small integer values ``names`` at every size (:func:`fit_vectors`)."""
        return self._fitted(names, self._vectors, fit_vectors)

    def targets(self, names: Sequence[str]) -> list[Entries]:
        """The entries of the original's values ``names`` (Reshape targets), fitted from runs at and above the
        representative sizes (:func:`fit_runs`)."""
        return self._fitted(names, self._targets, fit_runs)

    def source(self, opset: int) -> tuple[onnx.GraphProto | None, str]:
        """The original's graph with its nodes at ``opset`` (its own where that is its opset), and why not (None:
        ONNX's converter cannot take it there)."""
        if opset not in self._sources:
            try:
                self._sources[opset] = (converted(self.model, opset).graph, "")
            except UpgradeError as e:
                self._sources[opset] = (None, first_line(e))
        return self._sources[opset]

    def _fitted(self, names: Sequence[str], known: dict[str, Entries],
                fit: Callable[..., list[list[Mono | None]] | None]) -> list[Entries]:
        missing = [n for n in dict.fromkeys(names) if n not in known]
        if missing:
            self.runs += 1
            fitted = fit(run_values(self.model, missing, shapes=False), self.values, self.sums) or []
            for k, name in enumerate(missing):
                known[name] = fitted[k] if k < len(fitted) else None
        return [known[n] for n in names]


__all__ = ["Entries", "Original"]
