"""What the writer learns of the user's model, once per model (:class:`Original`), carried to every candidate's
rewrite: the entries of the small integer vectors and the Reshape targets the original computes from its inputs'
shapes, read off runs of it at further sizes (:mod:`eqsat.onnx.axes.fitting`); the original read as the import read it
(its tables and its values' symbolic shapes: :func:`.rewrite.read_original`); its graph at a newer opset. Each is
worked out at the first candidate that asks for it and read by the next ones; before, every candidate ran the
original again at further sizes, and once more through a whole rewrite of a copy of it.

Runs that fit the entries are batched over the names asked at once; a name asked later is fitted in a run of its
own. The verification at several sizes (:func:`eqsat.verification.verify_shapes`) stays the independent check of what
is written from these facts.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from eqsat.dims import Mono, SymShape, derived_symbols
from eqsat.errors import first_line
from eqsat.onnx.axes.dataflow import data_free, shape_only
from eqsat.onnx.axes.fitting import REFUSED, Sizes, fit_runs, fit_vectors, run_values
from eqsat.onnx.axes.interface import shapes_at, symbols
from eqsat.onnx.axes.shape_values import shape_values
from eqsat.onnx.footprint import static_shapes
from eqsat.onnx.kernels import UpgradeError, converted

from .keys import Key, batch_key

Entries = list[Mono | None] | None
"""one vector's entries as monomials (None where none fits), or None where the runs said nothing of it"""


Runs = dict[tuple[Key, bool, tuple[tuple[str, int], ...]], list[int] | None]
"""runs of programs at further sizes, by the content key of the value run (:mod:`.keys`; a batch's that failed:
:func:`.keys.batch_key`), whether its shape or its entries were asked, and the sizes"""

SPLITS = 16
"""the most runs of halves of a batch that failed at a size (:meth:`Original.prefetch`)"""

SMALL_VALUES = 1024
"""initializers of at most this many elements are read by value into a model's digest (:func:`_content`)"""

_CARRIED: contextvars.ContextVar[dict[tuple[str, tuple[tuple[str, int], ...]], Original] | None] = \
    contextvars.ContextVar("eqsat_originals", default=None)


@contextlib.contextmanager
def carried() -> Iterator[None]:
    """A scope (one run of :func:`eqsat.app.pipeline.optimize`) in which :meth:`Original.of` gives one
    :class:`Original` per model and sizes: what the import's rewrite of the user's model learnt (its runs, its
    values' symbolic shapes) is read by every candidate's rewrite, not learnt again."""
    token = _CARRIED.set({})
    try:
        yield
    finally:
        _CARRIED.reset(token)


def _content(model: onnx.ModelProto) -> str:
    """A digest of ``model``'s program (its nodes, interface, initializers' names, types and sizes, the small ones'
    values: the sizes and axes a program computes with; not the weights'): two copies of one model read alike."""
    g = model.graph
    graph = onnx.GraphProto(node=g.node, input=g.input, output=g.output, value_info=g.value_info)  # (no weights copied)
    digest = hashlib.sha256(graph.SerializeToString(deterministic=True))
    for t in model.graph.initializer:
        digest.update(f"{t.name}:{t.data_type}:{list(t.dims)};".encode())
        if int(np.prod(t.dims)) <= SMALL_VALUES and not t.external_data:
            digest.update(t.SerializeToString(deterministic=True))
    for o in model.opset_import:
        digest.update(f"{o.domain}:{o.version};".encode())
    return digest.hexdigest()


class Original:
    """The user's model at the symbols' ``values``, and what the rewrites of its candidates asked of it so far."""

    @classmethod
    def of(cls, model: onnx.ModelProto, values: Mapping[str, int]) -> Original:
        """The one of ``model`` at ``values`` in the run's scope (:func:`carried`), made where it has none; a new
        one outside a scope."""
        scope = _CARRIED.get()
        if scope is None:
            return cls(model, values)
        key = (_content(model), tuple(sorted(values.items())))
        if key not in scope:
            scope[key] = cls(model, values)
        got = scope[key]
        got.model = model  # the latest asker's copy (the run's slimmed one, not the weights the import read)
        return got

    def stands_for(self, model: onnx.ModelProto) -> bool:
        """Whether ``model`` is this one's, or a copy of it (the import read the user's model as prepared)."""
        return model is self.model or _content(model) == self.content

    def __init__(self, model: onnx.ModelProto, values: Mapping[str, int]):
        self.model = model
        self.values = dict(values)
        self.sums = derived_symbols(list(symbols(model)))
        """the interface's symbols written as arithmetic of others (``past + 1``)"""
        self.typed: object | None = None
        """the original read by the writer's shape arithmetic (a :class:`.state.Rewrite` that writes nothing:
        :func:`.typed_original.typed` makes and reads it); None until asked"""
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
        self._refused: dict[tuple[tuple[str, int], ...], bool] = {}
        self._whole: Any = None
        """a run of the whole original, its :attr:`small` values asked (:meth:`_whole_at`)"""
        self._sized: Runs = {}
        """(a value's content key, shapes or entries, the sizes) -> what a run there gave (None: it failed)"""
        self.shapes: dict[str, list[Mono]] = {}
        """the symbolic shapes of the original's values as a rewrite of the original itself knew them (each size a
        monomial of the symbols), read by the next one instead of runs (:func:`.probes.fit`)"""
        self.varying: dict[str, frozenset[int] | None] = {}
        """the original's values computed from its sizes alone, each with the axes whose size changes with them
        where it changes (another size or other entries), None where it does not (:func:`.recompute.varying`)"""
        self.probed = 0
        """the runs of programs so far (:meth:`runs_of`) made, and those read from earlier rewrites' runs"""
        self.elements: dict[str, Any] | None = None
        """a sample of the elements each of the original's Reshapes reshapes, on one seeded input at the
        representative sizes (:func:`.provenance.reading_by_data`); None until asked"""
        self.reread = 0

    def learn(self, shapes: Mapping[str, SymShape | None]) -> None:
        """Keep the symbolic ``shapes`` a rewrite of the original itself knew of its values (:attr:`shapes`): those
        whose sizes at the representative sizes are the original's there (:attr:`static`); a value the rewrite
        wrote in another form (a Split of rows, not of ``[batch, seq, hidden]``) is not the original's."""
        if not shapes:
            return
        for name, shape in shapes.items():
            at = self.static.get(name)
            if at is None or shape is None or None in shape or name not in self.computed:
                continue
            whole = [d for d in shape if d is not None]
            if any(s not in self.values for d in whole for s, _ in d.powers):
                continue  # an opaque size (``value@axis``: :meth:`.state.Rewrite.opaque_shape`) is no symbol's
            if [d.value(self.values) for d in whole] == list(at):
                self.shapes[name] = whole

    @functools.cached_property
    def static(self) -> dict[str, tuple[int, ...]]:
        """The original's values' shapes at its representative sizes: read off one run of it there (each value's
        Shape), else as onnx's inference gives them (:func:`eqsat.onnx.footprint.static_shapes`: a value it
        cannot size is left out)."""
        names = sorted(self.computed)
        got = run_values(self.model, names, shapes=True)(self.values)
        if got is not None:
            return {name: tuple(int(d) for d in shape) for name, shape in zip(names, got)}
        return static_shapes(self.model, shapes_at(self.model, self.values))

    @functools.cached_property
    def content(self) -> str:
        """The digest of the original's program (:func:`_content`)."""
        return _content(self.model)

    @functools.cached_property
    def computed(self) -> frozenset[str]:
        """The values the original's nodes compute."""
        return frozenset(o for n in self.model.graph.node for o in n.output if o)

    @functools.cached_property
    def sized(self) -> frozenset[str]:
        """The values the original computes from its sizes alone (an ``If`` on a size among them:
        :func:`eqsat.onnx.axes.dataflow.shape_only`)."""
        return frozenset(shape_only(self.model, branches=True))

    @functools.cached_property
    def data_free(self) -> frozenset[str]:
        """The values the original computes without the data: :attr:`sized`'s and its constants
        (:func:`eqsat.onnx.axes.dataflow.data_free`)."""
        return frozenset(data_free(self.model))

    @functools.cached_property
    def constants(self) -> dict[str, list[int]]:
        """The original's integer constants of at most 8 entries (its initializers, its Constant nodes' values):
        name -> entries, the same at every size."""
        out: dict[str, list[int]] = {}
        tensors = [*self.model.graph.initializer, *(a.t for n in self.model.graph.node
                                                     if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                                                     for a in n.attribute if a.name == "value" and a.HasField("t"))]
        names = [*(t.name for t in self.model.graph.initializer),
                 *(n.output[0] for n in self.model.graph.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                   for a in n.attribute if a.name == "value" and a.HasField("t"))]
        for name, t in zip(names, tensors):
            if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and len(t.dims) <= 1 \
                    and int(np.prod(t.dims)) <= 8 and not t.external_data:
                out[name] = [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
        return out

    @functools.cached_property
    def reshape_targets(self) -> list[str]:
        """The names of the original's Reshape targets, each once."""
        return list(dict.fromkeys(n.input[1] for n in self.model.graph.node if n.op_type == "Reshape"
                                  and n.domain in ("", "ai.onnx") and len(n.input) > 1))

    @functools.cached_property
    def computed_targets(self) -> list[str]:
        """The Reshape targets the original computes (not constants)."""
        return [name for name in self.reshape_targets if name in self.computed]

    @functools.cached_property
    def reshape_constants(self) -> frozenset[tuple[int, ...]]:
        """The entries of the original's Reshape targets that are constants (:attr:`constants`): a target of these
        entries is one the original reshapes to at every size, under whatever name the import gave it."""
        return frozenset(tuple(self.constants[name]) for name in self.reshape_targets if name in self.constants)

    def refuses(self, at: Mapping[str, int]) -> bool:
        """Whether onnxruntime cannot run the original at the sizes ``at`` (on zeros; each size run once, a run of
        every node: :meth:`_whole_at`): the runs that fit sizes are not read there
        (:data:`eqsat.onnx.axes.fitting.REFUSED`)."""
        if tuple(sorted(at.items())) == tuple(sorted(self.values.items())):
            return False
        return not self._whole_at(at)

    @functools.cached_property
    def small(self) -> tuple[str, ...]:
        """The original's values that are scalars or vectors of at most 8 entries at the representative sizes (its
        computed sizes and Reshape targets among them): a run of the whole original (:meth:`_whole_at`) reads their
        entries too."""
        return tuple(sorted(n for n, shape in self.static.items() if len(shape) == 0 or len(shape) == 1
                            and 0 < shape[0] <= 8))

    def _whole_at(self, at: Mapping[str, int]) -> bool:
        """Whether the whole original runs at the sizes ``at`` (each size run once; a model it cannot load runs at
        none). The run also gives the entries of its :attr:`small` values there (:meth:`entries_at`): a fit of the
        original's sizes at sizes the fits of the programs asked of it (:data:`eqsat.onnx.axes.fitting.REFUSED`) reads
        them, not a run of its own (a mixture of experts' Reshape targets, deep in the model: a second run of
        almost all of it at each size)."""
        key = tuple(sorted(at.items()))
        if key not in self._refused:  # (a run of the whole model, not a fit of its values: not counted in runs)
            if self._whole is None:
                self._whole = run_values(self.model, list(self.small), shapes=False, whole=True)
            got = self._whole(at)
            self._refused[key] = got is None
            for name, entries in zip(self.small, got or []):
                if entries:  # (none: a value of floats, or empty here; a fit runs its own batch for it)
                    self._at[name, key] = [int(v) for v in entries]
        return not self._refused[key]

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
        static = self.static  # (one run of every value at these sizes, which the rewrite's learn reads too)
        sizes = [static[n] for n in names] if all(n in static for n in names) \
            else run_values(self.model, names, shapes=True)(self.values)
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

    def runs_of(self, model: Callable[[], onnx.ModelProto], names: Sequence[str], keys: Mapping[str, Key | None],
                shapes: bool) -> Callable[[Mapping[str, int]], Sizes | None]:
        """:func:`run_values` of ``names`` (their shapes, or entries), whose runs are kept under the values'
        content ``keys`` (:mod:`.keys`) and read back where an earlier rewrite ran the same computation at the same
        sizes; ``model`` (the program so far) is made only where some value must run. A run that failed is kept
        under its batch of values: the same batch fails again without a run, and so does every batch holding a
        value that failed alone (a run computes every value it asks for)."""
        runners: dict[tuple[str, ...], Callable[[Mapping[str, int]], Sizes | None]] = {}
        program: list[onnx.ModelProto] = []

        def run(at: Mapping[str, int]) -> Sizes | None:
            where = tuple(sorted(at.items()))
            slots = {n: (k, shapes, where) for n in names if (k := keys.get(n)) is not None}
            if any(slot in self._sized and self._sized[slot] is None for slot in slots.values()):
                self.reread += 1
                return None
            missing = tuple(n for n in names if n not in slots or slots[n] not in self._sized)
            fresh: dict[str, Sequence[int]] = {}
            if missing:
                batch = None if any(n not in slots for n in missing) else batch_key([slots[n][0] for n in missing])
                if batch is not None and (batch, shapes, where) in self._sized:
                    self.reread += 1
                    return None
                if missing not in runners:
                    if not program:
                        program.append(model())
                    runners[missing] = run_values(program[0], list(missing), shapes)
                got = runners[missing](at)
                self.probed += 1
                if got is None:
                    if batch is not None:
                        self._sized[batch, shapes, where] = None
                    return None
                for i, n in enumerate(missing):
                    if n in slots:
                        self._sized[slots[n]] = list(got[i])
                fresh = dict(zip(missing, got))
            else:
                self.reread += 1
            return [fresh[n] if n in fresh else self._sized[slots[n]] or [] for n in names]

        return run

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
        key = (name, tuple(sorted(at.items())))  # (the runs that fitted its entries kept them: :meth:`_fitted`)
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

    @functools.cached_property
    def decided(self) -> dict[str, list[Mono]]:
        """The original's small integer values whose entries the shapes decide, read without a run
        (:func:`eqsat.onnx.axes.shape_values.shape_values`): a 30-layer decoder's Reshape targets and the vectors before
        its Expands were twenty runs of the whole model at further sizes."""
        return shape_values(self.model)

    def _fitted(self, names: Sequence[str], known: dict[str, Entries],
                fit: Callable[..., list[list[Mono | None]] | None]) -> list[Entries]:
        for name in dict.fromkeys(names):
            if name not in known and name in self.decided:
                known[name] = list(self.decided[name])
        missing = [n for n in dict.fromkeys(names) if n not in known]
        if missing:
            self.runs += 1
            batch = run_values(self.model, missing, shapes=False)

            # where the fits will ask whether the original runs at a size, that run of it gives these entries
            whole = REFUSED.get() is not None and set(self.small).issuperset(missing)
            tuned = tuple(sorted(self.values.items()))

            def run(at: Mapping[str, int]) -> Sequence[Sequence[int]] | None:  # each run's entries kept (entries_at)
                key = tuple(sorted(at.items()))
                if whole and key != tuned and self._whole_at(at):
                    read = [entries for name in missing if (entries := self._at.get((name, key))) is not None]
                    if len(read) == len(missing):
                        return read
                got = batch(at)
                for k, name in enumerate(missing):
                    self._at.setdefault((name, key), None if got is None else [int(v) for v in got[k]])
                return got

            fitted = fit(run, self.values, self.sums) or []
            for k, name in enumerate(missing):
                known[name] = fitted[k] if k < len(fitted) else None
        return [known[n] for n in names]


__all__ = ["SMALL_VALUES", "SPLITS", "Entries", "Original", "carried"]
