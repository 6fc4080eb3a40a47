"""The state of one rewrite (:class:`Rewrite`): the program being written (a :class:`~.sizes.SizeWriter`: its
nodes, constants, the symbolic shape and element type of each value), what the rewrite is for (:class:`Forms`),
and what each pass learns on the way, in one part per pass (:class:`Fits`, :class:`Shaped`, :class:`Reshaped`,
:class:`Guards`), so that a pass's module says which part it reads and writes.
"""

from __future__ import annotations

import enum
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx

from eqsat.dims import Mono, SymShape

from .keys import Keys
from .original import Original
from .sizes import SizeWriter
from .tables import Prefix
from .uniform import Patterns


class Forms(enum.Enum):
    """Which forms a rewrite writes."""

    EXPORT = "export"
    """every form: a candidate written for the user (:func:`eqsat.generic.make_generic`)"""
    IMPORT = "import"
    """every form but those only a written program takes (a MatMul and its bias stay as they are, as the static
    program's e-graph starts from them, and no Expand is dropped: the e-graph's attention rules read the mask's
    full shape): a model the importer reads again (:func:`eqsat.generic.simplify_for_import`)"""
    TABLES = "tables"
    """only the triangles and prefix tables among the values computed from the shapes alone that the data reads
    (a Trilu, a Slice of a table); the rest is left as it is: the importer's second try, and the original read as
    the import reads it (:mod:`.guards`)"""


RunKey = tuple[tuple[str, int], ...]
"""the symbols' sizes in one run, sorted by symbol"""

Span = tuple[str, int | None, int | None]
"""a symbol of the interface and the first and last of its sizes where a size is exact (None: no bound on that
side; :mod:`.ranged`)"""


@dataclass
class Fits:
    """What runs of the program (or the original) at several sizes showed of the sizes it computes
    (:mod:`.probes`)."""

    folded: dict[str, list[Mono]] = field(default_factory=dict)
    """the program's small int64 constants that the original computes from its inputs' shapes -> their entries as
    monomials"""
    vectors: dict[str, list[Mono] | None] = field(default_factory=dict)
    """small integer values computed from the shapes alone -> their entries as monomials (None: not fitted)"""
    pending: list[str] = field(default_factory=list)
    """such values written since the last fit"""
    probed: dict[str, list[Mono | None] | None] | None = None
    """the Reshape targets the original computes -> their entries read off its runs (None: not run yet)"""
    tried: set[str] = field(default_factory=set)
    """the values whose unknown shapes a run was asked for (each once)"""
    ran: int = 0
    """the nodes of the programs so far run to fit the small vectors (a node run again counted again)"""
    prefetched: bool = False
    """whether the original's small integer vectors were fitted in one batch (:attr:`Rewrite.of_original`), once
    the runs of the program so far had run more nodes than it has"""
    sizes: dict[str, list[int]] = field(default_factory=dict)
    """the values whose unknown shapes a run was asked for -> their sizes at the representative sizes"""
    opaque: dict[str, int] = field(default_factory=dict)
    """the opaque symbols (:meth:`Rewrite.opaque_shape`) -> their sizes at the representative sizes"""
    axes: dict[str, dict[RunKey, list[int] | None]] = field(default_factory=dict)
    """the values a Slice's bounds were read against (:func:`.reshapes.from_end`) -> their sizes in each run of
    the program so far (None: it did not run there)"""
    keys: Keys = field(default_factory=Keys)
    """the content keys of the program's values (:func:`.probes.keys`), its constants' digests kept for the rewrite"""
    runs: dict[str, dict[RunKey, list[int]]] = field(default_factory=dict)
    """in a program written for the user, the values whose shapes the runs left with a size no monomial fits ->
    their sizes in each run that ran, by the symbols' sizes there (:meth:`Rewrite._split_ones` reads them)"""
    formulas: dict[str, Callable[[Mapping[str, int]], int]] = field(default_factory=dict)
    """the opaque symbols typed by their arithmetic (:mod:`.strided`) -> their size from the sizes of the symbols
    and of the opaque symbols made before them"""
    offsets: dict[str, tuple[Mono, int]] = field(default_factory=dict)
    """those of them that are a size plus a constant -> that size and the constant"""
    arithmetic: dict[tuple, str] = field(default_factory=dict)
    """the arithmetic of each of them -> the symbol (the same arithmetic of the same size is one symbol)"""
    exact: dict[str, list[Mono] | None] = field(default_factory=dict)
    """the original's folded vectors looked at by :func:`.rewrite.exact` -> their entries as this rewrite's sizes
    (None: not so read)"""
    spans: dict[str, Span] = field(default_factory=dict)
    """those of them exact on a span of the interface's sizes only (:mod:`.ranged`: a table's rows between two
    bounds) -> that span"""
    ranged: dict[str, tuple[Span, ...]] = field(default_factory=dict)
    """the original typed once: the values computed from a size exact on a span only -> the spans"""
    canon: dict[str, tuple] = field(default_factory=dict)
    """those of them whose arithmetic is known down to the interface's symbols -> that arithmetic, keyed alike in
    every rewrite of the model (:func:`.strided.canonical`): the original's sizes read as a candidate's
    (:mod:`.typed_original`)"""


@dataclass
class Shaped:
    """The values computed from the shapes alone that the data reads, and how they were written (:mod:`.values`)."""

    boundary: set[str] = field(default_factory=set)
    """the values computed from the shapes alone (not small integer vectors) that a node computing the data reads"""
    pending: list[str] = field(default_factory=list)
    """such values written since their patterns were last looked for"""
    patterns: Patterns = field(default_factory=Patterns)
    """what runs showed of them"""
    expanded: dict[str, tuple[str, str]] = field(default_factory=dict)
    """a constant slice expanded to its value's shape -> (the slice, the shape)"""


@dataclass
class Reshaped:
    """What the Reshape and Gemm forms changed (:mod:`.reshapes`, :mod:`.gemm`)."""

    targeted: set[int] = field(default_factory=set)
    """the Reshapes (by id) whose target is written (a Gather written as a Reshape)"""
    rows: dict[str, SymShape] = field(default_factory=dict)
    """a Split's output split on rows -> the shape it had (its Reshape readers' targets are read off that shape)"""
    absorbed: set[int] = field(default_factory=set)
    """the Adds written with their MatMul as a Gemm (:mod:`.gemm`), by id"""


@dataclass
class Guards:
    """The tables that stop below the sizes the user's program accepts, and what guarding them read
    (:mod:`.guards`)."""

    guarded: list[tuple[str, str, Prefix]] = field(default_factory=list)
    """(the Slice of a table written, the user's value it stands for, its table) where the user's program computes
    the value beyond the table"""
    original_tables: list[tuple[Prefix, str]] | None = None
    """the tables the original read as the import read it guarded (:attr:`.original.Original.found`), each with the
    original's value it stands for"""
    copied_constants: dict[str, str] = field(default_factory=dict)
    """an initializer of the original read by a chain copied into an If -> its name in the written program (copied
    once, or the program's own where it holds the same values)"""


class Rewrite(SizeWriter):
    """One rewrite of ``model`` (a copy, rewritten in place) against ``original`` at the symbols' ``values``;
    ``facts``: what earlier rewrites against the same original learnt of it (:class:`.original.Original`; None: a
    new one, this rewrite's own)."""

    def __init__(self, model: onnx.ModelProto, original: onnx.ModelProto, values: Mapping[str, int], forms: Forms,
                 facts: Original | None = None, of_original: bool = False):
        super().__init__(model)
        self.forms = forms
        self.original = original
        self.of_original = of_original
        """whether ``model`` is a copy of ``original`` itself (the import's rewrite, the original read as the import
        reads it): each value of the program written so far is then the original's of that name at every size, and
        the sizes it computes are read off one batch of runs of the original (:meth:`.original.Original.prefetch`),
        not off runs of the program so far, one per value written (where ``model`` is a candidate, its constants
        were folded at the representative sizes)"""
        self.values = dict(values)
        if facts is not None and (facts.values != self.values or not facts.stands_for(original)):
            raise ValueError("the facts carried are another original's, or of other sizes")
        self.facts = facts or Original(original, values)
        """what runs of the original show, worked out once per model"""
        self.sums = self.facts.sums
        """the interface's symbols written as arithmetic of others (``past + 1``): a Concat's length may be one"""
        self.notes: list[str] = []
        """what could not be written shape-generic"""
        self.node_constants: dict[str, onnx.TensorProto] = {}
        """the values of the program's Constant nodes met so far (TorchScript writes an Unsqueeze's axes so): read by
        the shape inference (:attr:`known`), not written as initializers"""
        self.unnamed_constant_outputs: list[str] = []
        """those of :attr:`notes` that say an output axis is written constant where the original declares a name
        that no input carries, nor arithmetic of the inputs' (an exporter's own, ``Concatpresent.0.key_dim_3``): the
        original's interface ties it to no symbol, and a program correct at every size computes it as the original
        does"""
        self.unwritable = False
        """whether a size it reads is exact on a span only and the original could not be copied beyond it
        (:mod:`.within`): the program as exported is given instead"""
        self.shape_only: set[str] = set()
        """the values computed from the shapes alone (:func:`eqsat.onnx.axes.dataflow.shape_only`)"""
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        """value -> the nodes of the program as given that read it"""
        self.alias: dict[str, str] = {}
        """a value no longer written -> the value read in its place (an Expand that expands nothing: its input)"""
        self.made: dict[str, onnx.NodeProto] = {}
        """value -> the node written that computes it"""
        self.fits = Fits()
        self._splitting: set[str] = set()
        """the values whose opaque sizes :meth:`_split_ones` is reading (a value is not read in terms of itself)"""
        self.shaped = Shaped()
        self.reshaped = Reshaped()
        self.guards = Guards()

    @property
    def every_form(self) -> bool:
        """Whether the rewrite writes more than the tables."""
        return self.forms is not Forms.TABLES

    @property
    def final(self) -> bool:
        """Whether the rewrite writes a program for the user (the forms only a written program takes included)."""
        return self.forms is Forms.EXPORT

    @property
    def typing(self) -> bool:
        """Whether the rewrite reads the original by the written program's arithmetic and writes nothing (the
        original typed once: :mod:`.typed_original`)."""
        return self.of_original and self.final

    @property
    def known(self) -> Mapping[str, onnx.TensorProto]:
        """The constants whose values the shape inference reads: the initializers, then the Constant nodes'."""
        return ChainMap(self.constants, self.node_constants)

    @property
    def sized(self) -> Mapping[str, list[Mono] | None]:
        """The int64 size vectors whose entries are known as monomials: those written from the symbols, then those
        fitted (:attr:`Fits.vectors`), which shape inference reads as a Reshape's or a Tile's sizes."""
        return ChainMap(self.written, self.fits.vectors)  # type: ignore[arg-type]

    @property
    def sizes_at(self) -> dict[str, int]:
        """The symbols' representative sizes, the opaque symbols' (:meth:`opaque_shape`) included."""
        return {**self.values, **self.fits.opaque}

    def opaque_shape(self, name: str) -> SymShape | None:
        """``name``'s symbolic shape; in a program written for the user (:attr:`final`), each size no monomial of
        the symbols fits (the frames of an audio front-end's strided convolutions: a floor of a quotient of the
        samples) an **opaque symbol** of its own, ``name@axis``, read where it is needed as that size of ``name``
        itself (its place), where a run gave its representative size (:func:`.probes.fit`). What it stands for
        is never computed from the inputs, only read off the value, so a Reshape target keeps it (``0``) or reads
        it; a target that lines it up with the wrong axis (a guess made at one size) fails the verification at
        further sizes, as any guessed target does."""
        dims, sizes = self.shapes.get(name), self.fits.sizes.get(name)
        if not self.final or sizes is None or (dims is not None and (len(dims) != len(sizes) or None not in dims)):
            return dims
        out: list[Mono | None] = []
        for axis, size in enumerate(sizes):
            d = dims[axis] if dims is not None else None
            if d is None:
                d = self._split_ones(name, axis) or self.opaque_symbol(name, axis, size)
            out.append(d)
        self.shapes[name] = out
        return out

    def opaque_symbol(self, name: str, axis: int, size: int) -> Mono:
        """The opaque symbol of ``name``'s ``axis`` (:meth:`opaque_shape`), of representative size ``size``."""
        symbol = f"{name}@{axis}"
        self.places.setdefault(symbol, (name, axis))
        self.fits.opaque[symbol] = size
        return Mono.symbol(symbol)

    def _split_ones(self, name: str, axis: int) -> Mono | None:
        """An opaque size that is a symbol at 1 times the opaque size of another value's axis (rows of ``[frames *
        batch, 384]``: at a batch of 1 they read as the frames, so the rows reshaped to ``[batch, frames, 384]``
        would be written ``[1, rows, 384]``): that symbol times the other's opaque symbol, where in every run of
        both values (:func:`.probes.fit`) this size is the symbol's size times the other's, some run had the symbol
        above 1 and the other's size changes from run to run. None where no such value was run (the opaque size is
        then a symbol of its own). A reading that sizes coincide into fails the verification at further sizes, as
        any guess does."""
        mine = {key: sizes[axis] for key, sizes in self.fits.runs.get(name, {}).items() if axis < len(sizes)}
        ones = [s for s, v in self.values.items() if v == 1 and s not in self.sums]
        for symbol in ones:
            at = {key: dict(key).get(symbol, 0) for key in mine}
            if not mine or min(at.values()) < 1 or max(at.values()) < 2 or any(mine[k] % at[k] for k in mine):
                continue
            rest = {key: size // at[key] for key, size in mine.items()}
            if len(set(rest.values())) < 2:  # the rest the same in every run: any size could be it
                continue
            for other, runs in self.fits.runs.items():
                ranks = {len(sizes) for sizes in runs.values()}
                if other == name or other in self._splitting or len(ranks) != 1 or not rest.keys() <= runs.keys():
                    continue
                for k in range(ranks.pop()):
                    if any(runs[key][k] != v for key, v in rest.items()):
                        continue
                    self._splitting.add(name)
                    try:
                        place = self.opaque_shape(other)
                    finally:
                        self._splitting.discard(name)
                    d = place[k] if place is not None and k < len(place) else None
                    if d is not None and not d.is_const and all(s != symbol for s, _ in d.powers):
                        return Mono.symbol(symbol) * d
        return None

    def opaque(self, dims: Sequence[Mono | None]) -> bool:
        """Whether ``dims`` holds an opaque symbol (:meth:`opaque_shape`)."""
        return any(s in self.fits.opaque for d in dims if d is not None for s, _ in d.powers)

    def outputs(self) -> set[str]:
        """The program's outputs' names."""
        return {o.name for o in self.model.graph.output}

    def read_as(self, name: str, to: str) -> None:
        """``name`` read as ``to`` from now on; where the data read ``name``, it reads ``to``."""
        self.alias[name] = to
        if name in self.shaped.boundary and to in self.shape_only and to not in self.shaped.boundary:
            self.shaped.boundary.add(to)
            if to not in self.fits.vectors:
                self.shaped.pending.append(to)


__all__ = ["Fits", "Forms", "Guards", "Reshaped", "Rewrite", "RunKey", "Shaped"]
