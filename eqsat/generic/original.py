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

import functools
from collections.abc import Callable, Mapping, Sequence

import onnx

from eqsat.dims import Mono, derived_symbols
from eqsat.errors import first_line
from eqsat.onnx.fitting import fit_runs, fit_vectors, run_values
from eqsat.onnx.interface import symbols
from eqsat.onnx.kernels import UpgradeError, converted

Entries = list[Mono | None] | None
"""one vector's entries as monomials (None where none fits), or None where the runs said nothing of it"""


SPLITS = 16
"""the most runs of halves of a batch that failed at a size (:meth:`Original.prefetch`)"""


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
        self._batch: dict[str, list[Mono]] = {}
        self._sources: dict[int, tuple[onnx.GraphProto | None, str]] = {}
        self._at: dict[tuple[str, tuple[tuple[str, int], ...]], list[int] | None] = {}

    @functools.cached_property
    def computed(self) -> frozenset[str]:
        """The values the original's nodes compute."""
        return frozenset(o for n in self.model.graph.node for o in n.output if o)

    def vectors(self, names: Sequence[str]) -> list[Entries]:
        """The entries of the original's small integer values ``names`` at every size (:func:`fit_vectors`)."""
        return self._fitted(names, self._vectors, fit_vectors)

    def prefetch(self, names: Sequence[str]) -> None:
        """The entries of those of the original's values ``names`` that are vectors of at most 8 entries at the
        representative sizes, fitted from one batch of runs (:func:`fit_vectors`), for :meth:`prefetched`: the
        import's rewrite asks for them a few at a time as it writes the program, and a run of the program so far
        for each ask ran the model's prefix again and again (Swin V2's windows: 237 times). Where the batch does
        not run at a size (a waveform's front-end at one sample), its halves are run there, down to the values
        that do (at most :data:`SPLITS` runs of halves in all: where most values fail there, finding the few that
        run would cost what it saves); a value is fitted here only where it ran at every size asked (else it is
        fitted as before)."""
        names = [n for n in dict.fromkeys(names) if n not in self._vectors and n not in self._batch]
        if not names:
            return
        sizes = run_values(self.model, names, shapes=True)(self.values)
        small = [n for n, shape in zip(names, sizes or []) if len(shape) <= 1 and (not shape or 0 < shape[0] <= 8)]
        if not small:
            return
        self.runs += 1
        batch = run_values(self.model, small, shapes=False)  # one session, kept; the halves' are not
        seen: dict[tuple[tuple[str, int], ...], dict[str, Sequence[int] | None]] = {}
        left = [SPLITS]

        def entries(part: tuple[str, ...], at: Mapping[str, int]) -> dict[str, Sequence[int] | None]:
            got = (batch if len(part) == len(small) else run_values(self.model, list(part), shapes=False))(at)
            if got is not None:
                return dict(zip(part, got))
            if len(part) == 1 or left[0] <= 0:  # a value not run here is fitted as before, off the program so far
                return dict.fromkeys(part)
            left[0] -= 2
            half = len(part) // 2
            return {**entries(part[:half], at), **entries(part[half:], at)}

        def at_size(at: Mapping[str, int]) -> dict[str, Sequence[int] | None]:
            key = tuple(sorted(at.items()))
            if key not in seen:
                seen[key] = entries(tuple(small), at)
            return seen[key]

        for name in small:
            failed: list[Mapping[str, int]] = []

            def run(at: Mapping[str, int], name: str = name, failed: list = failed) -> list[Sequence[int]] | None:
                got = at_size(at)[name]
                if got is None:
                    failed.append(at)
                    return None
                return [got]

            fitted = fit_vectors(run, self.values, self.sums)
            if fitted and not failed and all(m is not None for m in fitted[0]):
                self._batch[name] = [m for m in fitted[0] if m is not None]

    def prefetched(self, names: Sequence[str]) -> dict[str, list[Mono]]:
        """Those of ``names`` whose entries :meth:`prefetch` fitted, with them."""
        return {n: self._batch[n] for n in names if n in self._batch}

    def targets(self, names: Sequence[str]) -> list[Entries]:
        """The entries of the original's values ``names`` (Reshape targets), fitted from runs at and above the
        representative sizes (:func:`fit_runs`)."""
        return self._fitted(names, self._targets, fit_runs)

    def entries_at(self, name: str, at: Mapping[str, int]) -> list[int] | None:
        """The entries of the original's integer value ``name`` at the sizes ``at`` (None where it does not run
        there, or computes no such value)."""
        if name not in self.computed:
            return None
        key = (name, tuple(sorted(at.items())))
        if key not in self._at:
            self.runs += 1
            got = run_values(self.model, [name], shapes=False)(at)
            self._at[key] = None if got is None else [int(v) for v in got[0]]
        return self._at[key]

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


__all__ = ["SPLITS", "Entries", "Original"]
