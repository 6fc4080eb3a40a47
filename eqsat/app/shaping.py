"""How a run treats the model's dynamic dimensions: the shapes it tunes and measures at, whether the result keeps
the interface (shape-generic) or is specialized on purpose (``--static-shape``), and the shapes it is verified at.

A model with dynamic input dimensions is tuned at its representative shapes (``--input-shape`` where given, else
:mod:`eqsat.onnx.axes.interface`'s defaults: a batch-like dimension 1, an image's side 224, any other 128, halved
down to 8 while the model refuses it, and where no smaller size runs doubled up to 4096) and written shape-generic with
the original's interface (:mod:`eqsat.generic`); each candidate is verified at the representative shapes and
at further sizes of each symbol, and one that fails at any is not written. ``--static-shape NAME=D1,...``
specializes: every input takes a fixed shape (the named ones; others their representative shape), the written
model has those shapes, and the report says the interface changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from eqsat.dims import derived_symbols, follow, tie
from eqsat.errors import InputError, ModelRefused, first_line
from eqsat.generic import Original, make_generic
from eqsat.onnx.axes.beyond import beyond_shapes, span_shapes
from eqsat.onnx.axes.heads import sliced_heads
from eqsat.onnx.axes.interface import (
    MAX_DEFAULT,
    MIN_DEFAULT,
    QUIET,
    Shapes,
    batch_symbols,
    interface,
    is_batch_like,
    length_symbols,
    near_shapes,
    probe_shapes,
    runnable_values,
    shapes_at,
    shapes_text,
    short_outputs,
    symbol_values,
    symbols,
)
from eqsat.onnx.axes.smallest import smallest_shapes
from eqsat.onnx.axes.tied import Ties, assumed_ties, assumed_values, expression_names, tied_symbols
from eqsat.onnx.io import session
from eqsat.onnx.prepare import check_input_sizes
from eqsat.verification import ShapesCheck, ShapesVerifier, verify_guards, verify_within
from eqsat.verification.feeds import index_bounds, random_inputs

from .config import OptimizeConfig
from .report import InterfaceReport


def check_given(original: onnx.ModelProto, config: OptimizeConfig) -> None:
    """Raise :class:`InputError` naming the flag that gave it (``--input-shape`` or ``--static-shape``) where a
    given shape names no model input, has another rank than the input, changes a static dimension, or sizes a
    dimension another given shape sizes otherwise (inputs that share a ``dim_param``)."""
    inits = {t.name for t in original.graph.initializer} | {t.values.name for t in original.graph.sparse_initializer}
    inputs = {vi.name: vi for vi in original.graph.input if vi.name not in inits}
    flags = {**{n: "--static-shape" for n in config.static_shapes}, **{n: "--input-shape" for n in config.input_shapes}}
    for flag, given in (("--input-shape", config.input_shapes), ("--static-shape", config.static_shapes)):
        unknown = sorted(set(given) - set(inputs))
        if unknown:
            raise InputError(f"{flag} names {unknown}, which are not model inputs (inputs: {list(inputs)})")
        for name, dims in given.items():
            vi = inputs[name]
            if not vi.type.HasField("tensor_type"):
                continue  # refused as such by the import (eqsat.onnx.prepare.check_tensor_interface)
            declared = vi.type.tensor_type.shape.dim
            if len(declared) != len(dims):
                raise InputError(f"{flag} {name}: model input has rank {len(declared)}, got {len(dims)} dimensions")
            for k, (d, fixed) in enumerate(zip(declared, dims)):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != fixed:
                    raise InputError(f"{flag} {name}={','.join(map(str, dims))}: dimension {k} of input {name!r} is "
                                     f"static ({d.dim_value}); only dynamic dimensions can be fixed")
    for sym, places in symbols(original).items():
        given = {**config.static_shapes, **config.input_shapes}
        sized = [(name, given[name][axis]) for name, axis in places if name in flags and name in given]
        for name, size in sized[1:]:
            first, first_size = sized[0]
            if size != first_size:
                raise InputError(f"{flags[first]} {first} and {flags[name]} {name} give the dimension {sym!r} two "
                                 f"sizes, {first_size} and {size}; inputs that share a dim_param take one size")


def further_sizes(original: onnx.ModelProto, config: OptimizeConfig,
                  values: dict[str, int]) -> list[tuple[str, Shapes]]:
    """``--also-at``'s sizes: (label, every dynamic input's shape there: the symbols not given at their
    representative ``values``, the derived ones following). :class:`InputError` where the model has no dynamic
    dimensions, the run specializes it (``--static-shape``), or a size names no free symbol of the model."""
    if not config.also_at:
        return []
    free = [s for s in values if s not in derived_symbols(list(values))]
    if not values:
        raise InputError("--also-at: the model has no dynamic dimensions; it runs at one shape only")
    if config.static_shapes:
        raise InputError("--also-at with --static-shape: the written model is specialized to one shape; give one "
                         "of them")
    out = []
    for size in config.also_at:
        unknown = sorted(set(size) - set(free))
        if unknown:
            derived = all(s in values for s in unknown)
            raise InputError(f"--also-at names {unknown}, which " + (
                "follow other dimensions (give those)" if derived else "are not all free dynamic dimensions of the "
                "model") + f"; its dimensions: {', '.join(free)}")
        at = follow({**values, **size}, derived_symbols(list(values)))
        label = ",".join(f"{k}={v}" for k, v in size.items())
        shapes = shapes_at(original, at)
        try:
            check_input_sizes(original, shapes)
        except InputError as exc:
            raise InputError(f"--also-at {label}: {exc}") from exc
        out.append((label, shapes))
    return out


@dataclass
class Shaping:
    """The run's treatment of the original's dynamic dimensions."""

    original: onnx.ModelProto | None
    shapes: Shapes = field(default_factory=dict)
    """input -> the shape tuned, verified and measured at"""
    values: dict[str, int] = field(default_factory=dict)
    """symbol -> its representative size"""
    static: bool = False
    """--static-shape: the result is specialized to ``shapes``"""
    defaulted: list[str] = field(default_factory=list)
    """the symbols no given shape sizes (at their default size)"""
    also: list[tuple[str, Shapes]] = field(default_factory=list)
    """``--also-at``: (label ``SYMBOL=N,...``, the input shapes there) the shipped program is verified and measured at
    besides"""
    wider: list[tuple[str, Shapes]] = field(default_factory=list)
    """where an output's dynamic length came out short at the given sizes (a waveform's frames at 1): a size of
    the lengths doubled until it does not, verified at too (not measured), so that no program fitted where a
    symbol looks like a constant ships unchecked (:meth:`probe`)"""
    beyond: list[tuple[str, Shapes]] | None = field(default=None, repr=False)
    """the shapes just past the constant axes the original slices to an end it computes (:mod:`eqsat.onnx.axes.beyond`),
    verified at too: read once, at the first :meth:`check`"""
    smallest: list[tuple[str, Shapes]] | None = field(default=None, repr=False)
    """the shapes at the smallest size the original runs at, for a symbol the default sizes verified all lie below
    (:mod:`eqsat.onnx.axes.smallest`: a front end's one frame), verified at too: read once, at the first
    :meth:`check`"""
    written_from: onnx.ModelProto | None = field(default=None, repr=False)
    """where the import rewrote the original before reading it (a mixture of experts' products written dense:
    :func:`eqsat.app.pipeline.rewritten_import_phase`), that program: the writer reads the sizes it fits off its
    runs (the same function and interface, faster to run); the checks at further sizes run the original"""
    branch_programs: bool = False
    """whether ``written_from`` holds If branches' programs, each gated faster with confidence on its own
    (:mod:`eqsat.app.branch_programs`)"""
    facts: Original | None = field(default=None, repr=False)
    """what the writer learnt of the original, carried from the import's rewrite of it (:meth:`Original.of`) and from
    one candidate's :meth:`write` to the next"""
    checks: ShapesVerifier | None = field(default=None, repr=False)
    """the original's runs at the further shapes, carried from one candidate's :meth:`check` to the next (until
    :meth:`close`)"""
    assumed: dict[str, str] = field(default_factory=dict)
    """``--assume-dim``: symbol -> the arithmetic of others the user vouches it always is (:mod:`eqsat.onnx.axes.tied`)"""
    ties: Ties = field(default_factory=Ties)
    """the symbols the original ties to others, its names not saying so (``total`` -> ``past + seq``): those it runs
    under only, read so by the run from :meth:`probe` on (with :attr:`assumed`), and those it likely is fed under"""

    @property
    def generic(self) -> bool:
        """Whether candidates are written shape-generic and checked at further shapes."""
        return self.original is not None and bool(self.values) and not self.static

    @classmethod
    def of(cls, original: onnx.ModelProto | None, config: OptimizeConfig) -> Shaping:
        """The shaping of a run of ``config`` on ``original`` (None: an IR graph, static)."""
        both = set(config.input_shapes) & set(config.static_shapes)
        if both:
            raise InputError(f"{sorted(both)} given with both --input-shape and --static-shape; give one of them")
        if original is None:
            if config.also_at or config.assume_dims:
                raise InputError(f"{'--also-at' if config.also_at else '--assume-dim'} applies to ONNX models with "
                                 "dynamic dimensions; an IR graph has one shape")
            return cls(None, {**config.input_shapes, **config.static_shapes})
        check_given(original, config)
        given = {**config.input_shapes, **config.static_shapes}
        syms = symbols(original)
        sized = {s for s, places in syms.items() if any(name in given for name, _ in places)}
        sized |= {u for s, f in derived_symbols(list(syms)).items() if s in sized for u in f.uses}  # solved for
        defaulted = [s for s in syms if s not in sized]
        if given:
            check_input_sizes(original, given)  # sizes too large to feed, before anything runs the model there
        values, ran = runnable_values(original, symbol_values(original, given), defaulted)
        assumed = assumed_ties(original, config.assume_dims, values, sorted(sized))
        values = assumed_values(values, assumed)
        out = cls(original, {**shapes_at(original, values), **given}, values, bool(config.static_shapes),
                  defaulted, further_sizes(original, config, values), assumed=assumed)
        if not ran and not given and (why := refusal(original, out.shapes, config.seed)) is not None:
            # (sizes given too: :meth:`probe` names them and the flag)
            raise out.explain(InputError(
                f"onnxruntime cannot run the original model at the default sizes of its dynamic dimensions, nor at "
                f"their halves and doubles from {MIN_DEFAULT} to {MAX_DEFAULT}, nor with one of them at 1: {why}"))
        return out

    @property
    def resized(self) -> dict[str, int]:
        """The defaulted symbols tuned at another size than their default (the model refused it): symbol -> size."""
        if self.original is None:
            return {}
        defaults = symbol_values(self.original, {})
        derived = derived_symbols(list(defaults))  # they follow the resized ones (past + 1 after past)
        return {s: self.values[s] for s in self.defaulted
                if s in defaults and s not in derived and self.values[s] != defaults[s]}

    def resized_text(self) -> str:
        """What :attr:`resized` means for the user, or ""."""
        if not self.resized:
            return ""
        sizes = ", ".join(f"{s}={v}" for s, v in self.resized.items())
        defaults = symbol_values(self.original, {}) if self.original is not None else {}
        refused = ", ".join(f"{defaults[s]} of {s}" for s in self.resized)
        ones = [s for s, v in self.resized.items() if v == 1]
        tied = {**self.ties.likely, **self.ties.found, **self.ties.head}
        if all(s in tied for s in self.resized):
            how = (", ".join(f"{s} at {tied[s]}" for s in self.resized) + ", where it runs (a length of the others' "
                   "arithmetic), the others at their defaults")
        elif not ones:
            how = ("the nearest halving or doubling at which it runs (where none does, a doubling of 5/4 of it), one with "
                   "outputs of length 8 or more where one runs (the others back at their defaults where it runs there)")
        else:
            how = (f"{ones[0]} at 1, where it runs with its outputs' sizes following it (a step of one new token), "
                   "and at no halving or doubling of the defaults; the others at their defaults")
        return (f"onnxruntime refused the default size {refused}: tuned, verified and measured at {sizes}, {how}; "
                "--input-shape sets the size you serve")

    def ties_text(self) -> str:
        """What :attr:`ties` and :attr:`assumed` mean for the user, or ""."""
        said = []
        if self.ties.found:
            tied = ", ".join(f"{s} as {e}" for s, e in self.ties.found.items())
            said.append(f"read {tied}: onnxruntime runs the original only where that holds (each size changed alone "
                        "is refused); tuned, fitted and verified with it holding, the interface's names kept")
        for s, e in self.ties.head.items():
            said.append(f"read {s} as {e}: the original runs with {s} longer only, reading its inputs' {s} axes at "
                        f"their first {e} positions only (their tail changed, its outputs did not); tuned and fitted "
                        f"with the tie holding, each program written for it reading those inputs through a Slice to "
                        f"{e}, verified with {s} longer too")
        if self.assumed:
            said.append("read " + ", ".join(f"{s} as {e}" for s, e in self.assumed.items()) + " (--assume-dim)")
        for s, e in self.ties.likely.items():
            names = " or ".join(sorted(expression_names(e)))
            said.append(f"{s} looks fed as {e}: onnxruntime refuses the original where {names} changes and {s} does "
                        f"not, but runs it at other sizes where they differ; kept free (sizes fitted off runs that change one "
                        f"alone may not be); if {s} is always {e}, --assume-dim '{s}={e}' reads it so")
        return "; ".join(said)

    def probe(self, config: OptimizeConfig) -> None:
        """Where the user gave input sizes (``--input-shape``, ``--static-shape``, ``--also-at``), raise
        :class:`InputError` (naming them and the flag) if onnxruntime cannot run the original there on the
        verification's kind of inputs: said before a search, where the verification would say it only after it (an
        optimize run only: ``eqsat info`` does not run the model). There, the symbols the original ties to others
        are found (:meth:`_tie`)."""
        if self.original is None:
            return
        sess = _session_or_none(self.original) if config.input_shapes or config.static_shapes else None
        outputs = None
        if sess is not None:
            why, outputs = _attempt(sess, self.original, self.shapes, config.seed)
            if why is not None:
                flag = "--static-shape" if config.static_shapes else "--input-shape"
                raise InputError(f"onnxruntime cannot run the original model at the given input shapes "
                                 f"({shapes_text(self.shapes)}): {why}; give {flag} sizes the model accepts (e.g. a "
                                 "sequence no longer than its position table)")
        if self.generic:
            self._tie(sess, config)
        for label, shapes in self.also:
            why = refusal(self.original, shapes, config.seed)
            if why is not None:
                raise InputError(f"--also-at {label}: onnxruntime cannot run the original model there "
                                 f"({shapes_text(shapes)}): {why}; give sizes the model accepts")
        if sess is None:
            return
        if self.generic and outputs is not None and short_outputs(self.original, outputs):
            lengths = [s for s in length_symbols(self.original) if s in self.values]
            for times in (2, 4, 8, 16):
                at = follow({**self.values, **{s: self.values[s] * times for s in lengths}},
                            derived_symbols(list(self.values)))
                shapes = shapes_at(self.original, at)
                why, outputs = _attempt(sess, self.original, shapes, config.seed)
                if why is None and outputs is not None and not short_outputs(self.original, outputs):
                    self.wider = [(",".join(f"{s}={at[s]}" for s in lengths), shapes)]
                    break

    def _off_ties(self) -> list[tuple[str, Shapes]]:
        """(label, shapes) where a tie read by the run does not hold: its symbol alone longer by 1, 2, its size and one
        more, at 1 and at a half; each symbol it is read in at 1 alone; for a tie read at its head, longer at a batch
        of 2. The original refuses them where a found tie is real (skipped); where it runs, a program written for the
        tie is checked there."""
        assert self.original is not None
        derived = derived_symbols(list(symbols(self.original)))
        batches = [b for b in batch_symbols(self.original) if b in self.values]
        out: list[tuple[str, Shapes]] = []
        for s, e in {**self.ties.found, **self.ties.head}.items():
            t = self.values[s]
            at = [{s: v} for v in sorted({t + 1, t + 2, 2 * t, 2 * t + 1, 1, t // 2} - {t, 0})]
            at += [{u: 1, s: t} for u in sorted(expression_names(e)) if self.values.get(u, 1) != 1]
            if s in self.ties.head and batches:
                at.append({**dict.fromkeys(batches, 2), s: t + 3})
            out += [(",".join(f"{k}={v}" for k, v in sizes.items()) + f" (off {e})",
                     shapes_at(self.original, follow({**self.values, **sizes}, derived) | sizes)) for sizes in at]
        return out

    def _tie(self, sess: ort.InferenceSession | None, config: OptimizeConfig) -> None:
        """Read the symbols the user assumes tied (:attr:`assumed`) and those the original ties to others
        (:func:`eqsat.onnx.axes.tied.tied_symbols`, run in ``sess`` on the verification's kind of inputs; None: opened at
        the first run where no sizes were given, not tried where they were) so for the rest of the run (:attr:`eqsat.dims.SymbolTable.ties`; ``--also-at``'s sizes follow them)."""
        assert self.original is not None
        original, derived = self.original, derived_symbols(list(self.values))
        opened = [sess]

        def live() -> ort.InferenceSession | None:  # opened at the first run (none where no size is others' sum)
            if opened[0] is None:
                opened[0] = _session_or_none(original)
            return opened[0]

        def runs(at: dict[str, int]) -> bool:
            why, outputs = _attempt(live(), original, shapes_at(original, follow(at, derived)), config.seed)
            return why is None and outputs is not None

        def head(symbol: str) -> bool:
            sess = live()
            return sess is not None and reads_head(sess, original, follow(self.values, derived), symbol, config.seed)

        if sess is not None or not (config.input_shapes or config.static_shapes):
            self.ties = tied_symbols(original, self.values, runs, self.assumed, head)
        if self.ties.found or self.ties.head or self.assumed:
            tie({**self.assumed, **self.ties.found, **self.ties.head})
            self.also = further_sizes(original, config, self.values)

    def explain(self, error: InputError) -> InputError:
        """``error`` (the import failed) with a hint when a dimension took its default size: the model may not
        accept it (a position table shorter than the default 128), and ``--input-shape`` chooses another."""
        if not self.defaulted or isinstance(error, ModelRefused):  # no size would change it
            return error
        sizes = ", ".join(f"{s}={self.values[s]}" for s in self.defaulted)
        name, shape = next(iter(self.shapes.items()))
        place = {at: sym for sym, places in (symbols(self.original) if self.original else {}).items()
                 for at in places if sym in self.defaulted and not is_batch_like(sym)}
        dims = [f"<{place[name, k]}>" if (name, k) in place else str(v) for k, v in enumerate(shape)]
        lengths = length_symbols(self.original) if self.original is not None else []
        tied = (f"; where one of {', '.join(lengths)} is always others' arithmetic (a mask over the cache and the new "
                "tokens), give sizes where it holds, or say it with --assume-dim SYMBOL=EXPR (e.g. total=past+seq)"
                if len(lengths) >= 2 else "")
        message = (f"{error} (the dynamic dimensions took their default sizes {sizes}; give sizes the model accepts "
                   f"with --input-shape, e.g. --input-shape {name}={','.join(dims)} with the sizes you run it at"
                   f"{tied})")
        try:
            return type(error)(message)
        except TypeError:  # a subclass with other arguments
            return InputError(message)

    def write(self, model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
        """A candidate as written: shape-generic with the original's interface, unless specialized; with what could
        not be written shape-generic (:attr:`eqsat.generic.Generic.notes`; none where the run is not generic)."""
        if not self.generic:
            return model, []
        assert self.original is not None
        source = self.written_from if self.written_from is not None else self.original
        if self.facts is None or self.facts.values != self.values or not self.facts.stands_for(source):
            # (the import's, where the run carried it)
            self.facts = Original.of(source, self.values)
        written = make_generic(model, source, self.values, self.facts)
        if not self.ties.head:
            return written.model, list(written.notes)
        sliced = sliced_heads(written.model, self.ties.head)
        if sliced is None:  # the check with the symbols longer refuses it
            return written.model, [*written.notes, "its inputs read at their head only could not be sliced"]
        return sliced, list(written.notes)

    def check(self, model: onnx.ModelProto, seed: int) -> ShapesCheck:
        """A written candidate at the further shapes, then its table guards' else-branches beyond their bounds
        (:func:`eqsat.verification.verify_guards`); passed at once when the run is not generic."""
        if not self.generic:
            return ShapesCheck(True)
        assert self.original is not None
        probes = probe_shapes(self.original, self.values)
        if self.beyond is None:
            self.beyond = beyond_shapes(self.original, self.values)
        if self.smallest is None:
            self.smallest = smallest_shapes(self.original, self.values)
        probes += [p for p in [*self.also, *self.wider, *self._off_ties(), *self.beyond, *self.smallest,
                               *span_shapes(self.original, model, self.values)] if p[0] not in dict(probes)]
        near = near_shapes(self.original, self.values)
        if self.checks is None or self.checks.original is not self.original or self.checks.seed != seed \
                or self.checks.probes != probes or self.checks.near != near:
            self.checks = ShapesVerifier(self.original, probes, seed, near=near)
        check = self.checks.check(model)
        if not check.passed:
            return check
        guards = verify_guards(self.original, model, self.values, seed=seed)
        if guards.passed:
            spans = verify_within(self.original, model, self.values, seed=seed)
            guards = ShapesCheck(spans.passed, guards.verified + spans.verified, guards.skipped, spans.detail)
        return ShapesCheck(guards.passed, check.verified + guards.verified, check.skipped + guards.skipped,
                           guards.detail)

    def close(self) -> None:
        """Release the original's runs at the further shapes (a later :meth:`check` makes them again)."""
        self.checks = None

    def report(self, shipped: onnx.ModelProto | None, check: ShapesCheck | None,
               notes: list[str] | None = None) -> InterfaceReport:
        """The report's ``interface`` section for the returned model (``shipped``: None for the original; ``notes``:
        what its write could not make shape-generic)."""
        out = InterfaceReport(symbols=dict(self.values), shapes={k: list(v) for k, v in self.shapes.items()})
        if check is not None:
            out.verified_at, out.skipped = list(check.verified), list(check.skipped)
        said = [self.resized_text()] if self.resized else []
        said += [text] if (text := self.ties_text()) else []
        if shipped is not None and notes:
            said += notes
        out.note = "; ".join(said)
        if self.static and shipped is not None and self.original is not None \
                and interface(shipped)[0] != interface(self.original)[0]:
            out.kept = False
            out.note = ("--static-shape: the written model is specialized to the input shapes "
                        + ", ".join(f"{k}={','.join(map(str, v))}" for k, v in self.shapes.items())
                        + "; the interface changed (other sizes are refused)")
        return out


HEADS = ("drawn", "ones", "zeros")
"""the heads :func:`reads_head` feeds: a random draw, a mask of all ones (a reduction over the whole mask sees no
zero in it), all zeros"""
TAILS = ((3, "drawn"), (8, "zeros"), (3, "ones"), (8, "extreme"), (None, "drawn"))
"""the tails it adds to each (length, kind; None: as long as the head, plus one): random, zeros, ones, and NaN, the
type's extremes and the additive masks' constants (-10000, -1e9) in turn"""


def _filled(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "drawn":
        return x
    if kind != "extreme":
        return np.ones_like(x) if kind == "ones" else np.zeros_like(x)
    if x.dtype == np.bool_:
        return np.ones_like(x)
    info = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
    marks = [np.nan, info.max, info.min, -np.inf, np.inf, -10000.0, -1e9, 0.5] if x.dtype.kind == "f" else \
        [info.max, 2, -1, info.min]  # (NaN, the extremes and the additive masks' constants)
    out = np.empty_like(x)
    flat = out.reshape(-1)
    for k, mark in enumerate(marks):
        flat[k::len(marks)] = mark
    return out


def reads_head(sess: ort.InferenceSession, model: onnx.ModelProto, values: dict[str, int], symbol: str,
               seed: int) -> bool:
    """Whether ``model`` (run in ``sess``) reads every input axis of ``symbol`` at its first ``values[symbol]``
    positions only: at ``values`` and with the batch at 2, seeded random feeds whose heads are drawn, all ones or all
    zeros (:data:`HEADS`) give the same outputs, bit for bit, with those axes longer (:data:`TAILS`: random, zero,
    one, NaN and extreme tails, of 2 to more than the head's length)."""
    syms = symbols(model)
    places = syms.get(symbol, [])
    derived = derived_symbols(list(syms))
    batches = [s for s in batch_symbols(model) if s in values]
    bounds, size = index_bounds(model), values[symbol]
    rng = np.random.default_rng(seed)
    try:
        for at in [values, *([follow({**values, **dict.fromkeys(batches, 2)}, derived)] if batches else [])]:
            drawn = random_inputs(sess, rng, shapes_at(model, at), bounds)
            for head in HEADS:
                short = {**drawn, **{name: _filled(drawn[name], head) for name, _ in places}}
                ref = sess.run(None, short, QUIET)
                for extra, tail in TAILS:
                    k = size + 1 if extra is None else extra
                    longer = random_inputs(sess, rng, shapes_at(model, {**at, symbol: size + k}), bounds)
                    feeds = dict(short)
                    for name, axis in places:
                        end = _filled(np.take(longer[name], range(size, size + k), axis=axis), tail)
                        feeds[name] = np.concatenate([short[name], end], axis=axis)
                    got = sess.run(None, feeds, QUIET)
                    if not all(np.shape(a) == np.shape(b) and np.array_equal(
                            a, b, equal_nan=np.asarray(a).dtype.kind in "fc") for a, b in zip(ref, got)):
                        return False
    except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: refused, so not read at the head
        return False
    return True


def refusal(model: onnx.ModelProto, shapes: Shapes, seed: int) -> str | None:
    """onnxruntime's first line of error where it cannot run ``model`` on a seeded random feed at ``shapes`` (the
    verification's kind of inputs: token ids within their table); None where it runs, or where the model does not
    load (the importer names what is wrong with it then)."""
    return _attempt(_session_or_none(model), model, shapes, seed)[0]


def _session_or_none(model: onnx.ModelProto) -> ort.InferenceSession | None:
    try:
        return session(model)
    except Exception:  # noqa: BLE001 - the importer names what is wrong with the model
        return None


def _attempt(sess: ort.InferenceSession | None, model: onnx.ModelProto, shapes: Shapes,
             seed: int) -> tuple[str | None, list[tuple[int, ...]] | None]:
    """(:func:`refusal`'s answer, the outputs' shapes where it ran) for a session of ``model`` (None: it does not
    load, nothing said)."""
    if sess is None:
        return None, None
    try:
        feeds = random_inputs(sess, np.random.default_rng(seed), shapes, index_bounds(model))
    except InputError:  # sizes that contradict the model's, an input type eqsat cannot feed: the import says so
        return None, None
    try:
        outputs = sess.run(None, feeds, QUIET)
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors have no common type: sizes it refuses
        return first_line(e), None
    return None, [np.shape(o) for o in outputs]


__all__ = ["Shaping"]
