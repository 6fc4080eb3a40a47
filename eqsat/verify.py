"""Check that two ONNX models compute the same outputs in onnxruntime (timing: :mod:`eqsat.measurement.timing`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from .dims import derived_symbols, follow
from .errors import InputError, first_line
from .inputs import (
    EDGES,
    NONFINITE_EDGES,
    edge_cases,
    edge_inputs,
    edge_label,
    flags_alternated,
    index_bounds,
    random_inputs,
)
from .onnx import footprint
from .onnx.branches import guard_bounds, table_guards, taken
from .onnx.interface import QUIET, Shapes, interface_difference, shapes_at, shapes_text, symbols
from .onnx.io import session
from .ties import TRIES, Screen

_RTOL = {"float16": 1e-2, "float32": 1e-3, "float64": 1e-7}


@dataclass
class Verification:
    passed: bool
    max_abs_error: float
    max_rel_error: float
    draws: int
    detail: str = ""
    edge: str = ""
    """the edge draw the first mismatch was on (:data:`eqsat.inputs.EDGES`' label); "" where the candidate matched,
    or failed on the random draws (or could not load or run)"""
    spread: float = 0.0
    """where an output matched only within the runtime's own spread (:class:`Spread`), the largest such spread"""


SPREAD_FACTOR = 2.0
"""a candidate's output may differ from the original's by at most this many times as much as onnxruntime's run of
the original without its graph optimizations does (:class:`Spread`)"""


class Spread:
    """How far onnxruntime's own graph optimizations move the original's outputs: the original run as written (no
    fusion, no constant folding) beside the reference, which runs it optimized. In a float32 graph the two agree to
    rounding, far inside :func:`compare_outputs`' tolerance; in a float16 graph, or one that quantizes its
    activations at run time, they do not (a sum reordered before a quantizer moves a value across a quantization
    step: a dynamically quantized BERT's differ by up to 1.3e-2, a per-channel LLaMA's by 0 to 2.7e-2 from one draw to
    the next), and a program eqsat writes, run optimized, moves them as much (its import alone, no rule applied:
    8.4e-3, the original refused before). Such an output matches where its error is at most :data:`SPREAD_FACTOR`
    times the widest spread of the original's on the draws at those input shapes, with its NaNs and infinities where
    the original's are: the runtime gives no closer answer for the user's own model. Made only where an output
    fails the tolerance (one more run of the original on each of those draws, kept for the next candidates)."""

    def __init__(self, original: onnx.ModelProto):
        self.original = original
        self._session: ort.InferenceSession | None = None
        self._outs: dict[int, list | None] = {}
        self.largest = 0.0
        """the largest spread an output was allowed so far"""

    def allows(self, draws: Sequence[tuple[dict[str, np.ndarray], Sequence]], index: int, ref: np.ndarray,
               got: np.ndarray, nan_spreads: bool = False) -> bool:
        """Whether output ``index`` of a program (``got``) is the original's (``ref``) within the runtime's own
        spread over ``draws`` (each draw's inputs and the original's outputs on them, the draw ``got`` ran on among
        them)."""
        if ref.dtype.kind != "f" or got.dtype.kind != "f":
            return False
        _ok, err, _rel = compare_outputs(ref, got, nan_spreads)
        if not np.isfinite(err):  # NaNs or infinities elsewhere than the original's: no spread excuses that
            return False
        widest = 0.0
        for feeds, outs in draws:
            off = self._unoptimized(feeds)
            if off is not None and index < len(off) and index < len(outs):
                spread = compare_outputs(np.asarray(outs[index]), np.asarray(off[index]))[1]
                widest = max(widest, spread) if np.isfinite(spread) else widest
        if err > SPREAD_FACTOR * widest:
            return False
        self.largest = max(self.largest, widest)
        return True

    def _unoptimized(self, feeds: dict[str, np.ndarray]) -> list | None:
        key = id(feeds)  # (each draw's feeds are held by the verifier for as long as this is)
        if key not in self._outs:
            try:
                if self._session is None:
                    self._session = session(self.original, prepacking=False, optimized=False)
                with np.errstate(all="ignore"):
                    self._outs[key] = list(self._session.run(None, feeds, QUIET))
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: no spread known
                self._outs[key] = None
        return self._outs[key]

    def close(self) -> None:
        self._session, self._outs = None, {}


def compare_outputs(ref: np.ndarray, got: np.ndarray, nan_spreads: bool = False) -> tuple[bool, float, float]:
    """Pass iff NaNs and infinities sit at the same positions (same signs) and, elsewhere,
    |got - ref| <= atol + rtol |ref|; tolerances from the dtype and the magnitude of the finite outputs.
    ``nan_spreads`` (a NaN or an infinity was fed): ``got`` may also be NaN where ``ref`` is not (a NaN reaching
    more places, or an infinity multiplied by a kernel's zero, as when a kernel is enlarged with zeros to merge
    two: the equivalence contract, docs/robustness.md), never a number or an infinity where ``ref`` is NaN. Returns (passed, max abs error, max rel error), errors over the finite positions (inf on
    a mismatch)."""
    if ref.shape != got.shape:
        return False, float("inf"), float("inf")
    if ref.dtype.kind != "f" or got.dtype.kind != "f":
        ok = bool(np.array_equal(ref, got))
        return ok, 0.0 if ok else float("inf"), 0.0 if ok else float("inf")
    if np.isfinite(ref).all() and np.isfinite(got).all():  # the common case, in fewer passes (a model's logits)
        return _compare_finite(ref.astype(np.float64), got.astype(np.float64), _RTOL.get(ref.dtype.name, 1e-3))
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    if nan_spreads:  # a NaN of got's where ref has none is excused; ref's NaNs must stay NaN
        kept = ~(np.isnan(got64) & ~np.isnan(ref64))
        ref64, got64 = ref64[kept], got64[kept]
    finite = np.isfinite(ref64)
    same_special = np.array_equal(np.isnan(ref64), np.isnan(got64)) and np.array_equal(finite, np.isfinite(got64)) \
        and np.array_equal(ref64[np.isinf(ref64)], got64[np.isinf(got64)])
    if not same_special:
        return False, float("inf"), float("inf")
    return _compare_finite(ref64[finite], got64[finite], _RTOL.get(ref.dtype.name, 1e-3))


def _compare_finite(ref64: np.ndarray, got64: np.ndarray, rtol: float) -> tuple[bool, float, float]:
    """:func:`compare_outputs` of finite float64 values: |got - ref| <= atol + rtol |ref|, atol a tenth of rtol of
    the largest |ref|; the relative error is over that largest |ref| (no |ref| exceeds it)."""
    if not ref64.size:
        return True, 0.0, 0.0
    size = np.abs(ref64)
    scale = float(size.max())
    atol = rtol * max(scale, 1e-6) * 0.1
    err = np.abs(got64 - ref64, out=got64)  # got64 is a copy made for this comparison
    max_abs = float(err.max())
    max_rel = max_abs / max(scale, 1e-12)
    size *= rtol
    size += atol
    ok = bool(np.all(err <= size))
    return ok, max_abs, max_rel


def _on(label: str) -> str:
    return "" if label == "random" else f" on inputs with {label}"


def _difference(ref: np.ndarray, got: np.ndarray) -> str:
    """How ``got`` differs from ``ref`` (:func:`compare_outputs` failed): where the NaNs or infinities differ, or
    the largest errors."""
    if ref.shape != got.shape:
        return f"shape {got.shape} vs {ref.shape}"
    if ref.dtype.kind == "f" and got.dtype.kind == "f":
        ref_nan, got_nan = np.isnan(ref), np.isnan(got)
        if not np.array_equal(ref_nan, got_nan):
            return (f"the original gives NaN at {int(ref_nan.sum())} places, this program at {int(got_nan.sum())} "
                    f"({int((ref_nan & ~got_nan).sum())} of the original's NaNs made numbers)")
        ref_inf, got_inf = np.isinf(ref), np.isinf(got)
        if not np.array_equal(ref_inf, got_inf) or not np.array_equal(ref[ref_inf], got[got_inf]):
            return (f"the original gives an infinity at {int(ref_inf.sum())} places, this program at "
                    f"{int(got_inf.sum())}")
    _ok, e_abs, e_rel = compare_outputs(ref, got)
    return f"max abs error {e_abs:.3g}, max rel error {e_rel:.3g}"


def feed_shapes(original: ort.InferenceSession, optimized: ort.InferenceSession,
                input_shapes: Mapping[str, tuple[int, ...]] | None) -> dict[str, tuple[int, ...]]:
    """The user's fixed shapes, completed for every dynamic input of ``original`` that the (static)
    ``optimized`` model fixes, so that both accept the same feeds."""
    shapes = dict(input_shapes or {})
    static = {i.name: tuple(i.shape) for i in optimized.get_inputs()
              if all(isinstance(d, int) and d > 0 for d in i.shape)}
    for i in original.get_inputs():
        dynamic = any(not (isinstance(d, int) and d > 0) for d in i.shape)
        if dynamic and i.name not in shapes and i.name in static and len(static[i.name]) == len(i.shape):
            shapes[i.name] = static[i.name]
    return shapes


def verify(original: onnx.ModelProto, optimized: onnx.ModelProto, seed: int = 0, draws: int = 3,
           input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Verification:
    """Run both models on ``draws`` seeded random inputs, and on the edge draws made from the first (float inputs
    with rows of -inf, a NaN, values near the type's range: :func:`eqsat.inputs.edge_inputs`), and compare every
    output: where the original gives NaN or an infinity the optimized model must give the same
    (:func:`compare_outputs`), so a program that makes a NaN finite fails.

    Inputs take the shapes the user fixed (``input_shapes``, for the original's dynamic dimensions);
    integer inputs used as Gather indices range over the axis they index (see :mod:`eqsat.inputs`).
    Several candidates against one original: :class:`Verifier`."""
    return Verifier(original, seed, draws, input_shapes).check(optimized)


class Verifier:
    """:func:`verify` of several candidates against one original: the original's session is built once and its
    outputs on each draw computed once (per input shapes), each candidate's session only while it is checked.
    Every candidate sees the inputs :func:`verify` would give it."""

    def __init__(self, original: onnx.ModelProto, seed: int = 0, draws: int = 3,
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None, edges: Sequence[str] = EDGES):
        """``edges``: the edge draws made from the first random one (:data:`eqsat.inputs.EDGES`; a run under
        ``--assume-finite-masks`` leaves out those that hold -inf or NaN)."""
        self.original, self.seed, self.draws, self.input_shapes = original, seed, draws, input_shapes
        self.edges = tuple(edges)
        self._session: ort.InferenceSession | None = None
        self._screen = Screen(original, len(original.graph.output))
        self._spread = Spread(original)
        self.runs: dict[tuple, list[tuple[dict[str, np.ndarray], list, str]]] = {}
        """input shapes (sorted items) -> each draw's inputs, the original's outputs on them and what the draw is
        (``random``, or an edge draw's label)"""

    def check(self, optimized: onnx.ModelProto) -> Verification:
        """``optimized`` checked against the original (:func:`verify`)."""
        if self._session is None:  # the original, its top-k choices exposed (:mod:`eqsat.ties`)
            self._screen = Screen.of(self.original)
            self._session = session(self._screen.model, prepacking=False)  # checked, not timed
        s1, screen = self._session, self._screen
        try:
            s2 = session(optimized, prepacking=False)
        except MemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime's errors have no common type: the candidate fails
            return Verification(False, float("inf"), float("inf"), 0,
                                f"onnxruntime cannot load the written program (a bug in its writer: please report "
                                f"it): {first_line(e)}")
        names1 = [o.name for o in s1.get_outputs()][: screen.outputs]
        names2 = [o.name for o in s2.get_outputs()]
        if len(names1) != len(names2):
            return Verification(False, float("inf"), float("inf"), 0, f"{len(names1)} outputs vs {len(names2)}")
        shapes = feed_shapes(s1, s2, self.input_shapes)
        key = tuple(sorted(shapes.items()))
        if key not in self.runs:
            bounds = index_bounds(self.original)
            rng, again, spent = np.random.default_rng(self.seed), np.random.default_rng(self.seed + 2), set[int]()
            try:  # draws on which the original's top-k choices are decided
                self.runs[key] = [(*screen.draw(s1, lambda k=k: flags_alternated(  # type: ignore[misc]
                    random_inputs(s1, rng, shapes, bounds), k), spent=spent), "random") for k in range(self.draws)]
            except InputError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's model and sizes: said as such, not a traceback
                raise InputError(f"onnxruntime cannot run the original model on random inputs at input shapes "
                                 f"{shapes_text(shapes) or 'its own'}: {first_line(e)}") from e
            self.runs[key] += self._edge_runs(s1, self.runs[key][0][0] if self.runs[key] else None,
                                              lambda: random_inputs(s1, again, shapes, bounds), spent)
        worst_abs = worst_rel = 0.0
        passed = True
        detail = edge = ""
        spread = self._spread
        spread.largest = 0.0
        same_shapes = [(feeds, outs1) for feeds, outs1, label in self.runs[key] if label == "random"]
        for feeds, outs1, label in self.runs[key]:
            try:
                outs2 = s2.run(None, feeds)
            except MemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - as above: a candidate onnxruntime cannot run is no match
                return Verification(False, float("inf"), float("inf"), self.draws,
                                    f"onnxruntime cannot run it{_on(label)}: {first_line(e)}",
                                    "" if label == "random" else label)
            for k, (name, a, b) in enumerate(zip(names1, outs1, outs2)):
                spreads = label.startswith(NONFINITE_EDGES)
                ok, e_abs, e_rel = compare_outputs(np.asarray(a), np.asarray(b), nan_spreads=spreads)
                ok = ok or spread.allows(same_shapes if label == "random" else [*same_shapes, (feeds, outs1)], k,
                                         np.asarray(a), np.asarray(b), spreads)
                if label == "random":  # the errors of the edge draws are not rounding: said, not summed up
                    worst_abs, worst_rel = max(worst_abs, e_abs), max(worst_rel, e_rel)
                if not ok and passed:
                    passed, edge = False, "" if label == "random" else label
                    detail = f"output {name!r} differs{_on(label)}: " + _difference(np.asarray(a), np.asarray(b))
        return Verification(passed, worst_abs, worst_rel, self.draws, detail, edge, spread.largest)

    def _edge_runs(self, s1: ort.InferenceSession, first: dict[str, np.ndarray] | None,
                   again: Callable[[], dict[str, np.ndarray]], spent: set[int]) -> list:
        """The original's outputs on each edge draw made from the first random draw
        (:func:`eqsat.inputs.edge_draws`), those the original itself runs (a model may refuse NaN in an input it
        checks: no check of the candidate there); one whose -inf leaves a near-tie among a row's finite values at a
        top-k of the original is made again from another random draw (``again``; :mod:`eqsat.ties`)."""
        out: list = []
        if first is None:
            return out
        rng, screen = np.random.default_rng(self.seed + 1), self._screen
        for edge, name in edge_cases(first, self.edges):
            base = first
            for attempt in range(TRIES):
                feeds = edge_inputs(base, edge, rng, name)
                if feeds is None:
                    break
                try:
                    with np.errstate(all="ignore"):
                        outs = list(s1.run(None, feeds, QUIET))
                except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: the original refuses it
                    break
                near = screen.undecided(outs[screen.outputs:], spent) if screen.topks else set()
                if not near or attempt == TRIES - 1:
                    spent |= near
                    out.append((feeds, outs[: screen.outputs], edge_label(edge, name)))
                    break
                base = again()
        return out

    def first_inputs(self) -> dict[str, np.ndarray] | None:
        """The first draw's inputs, when every candidate checked took the same input shapes (they are then the
        inputs :func:`eqsat.measurement.timing.timing_feeds` gives for the same seed, but for the masks it feeds
        as served, :func:`eqsat.inputs.served`, and where the draw was made again, :mod:`eqsat.ties`); None
        otherwise."""
        return self.runs[next(iter(self.runs))][0][0] if len(self.runs) == 1 and self.draws else None

    def close(self) -> None:
        """Release the original's session and outputs (a later check builds them again)."""
        self._session = None
        self.runs = {}
        self._spread.close()


@dataclass
class ShapesCheck:
    """The check of a shape-generic result at further shapes (:func:`verify_shapes`)."""

    passed: bool
    verified: list[str] = field(default_factory=list)
    """the labels of the shapes both models ran at and agreed"""
    skipped: list[str] = field(default_factory=list)
    """the labels of the shapes the original itself refuses (onnxruntime fails on it), and of those a run at
    would not fit in memory (with what it would take): not a check"""
    detail: str = ""


def verify_shapes(original: onnx.ModelProto, optimized: onnx.ModelProto, probes: Sequence[tuple[str, Shapes]],
                  seed: int = 0, draws: int = 1) -> ShapesCheck:
    """Check that ``optimized`` keeps ``original``'s interface (names, element types, ``dim_param`` names) and
    computes its outputs at each of ``probes`` ((label, input shapes): one symbol changed, or all at once), ``draws``
    seeded random inputs each. A shape the original refuses is skipped; the first failure ends the check.
    Several candidates against one original: :class:`ShapesVerifier`."""
    return ShapesVerifier(original, probes, seed, draws).check(optimized)


class ShapesVerifier:
    """:func:`verify_shapes` of several candidates against one original: the original's session is built once and
    its outputs at each probe computed once, when a candidate first reaches that probe; each candidate's session
    lives only while it is checked. Every candidate sees the inputs :func:`verify_shapes` would give it."""

    def __init__(self, original: onnx.ModelProto, probes: Sequence[tuple[str, Shapes]], seed: int = 0,
                 draws: int = 1, near: Sequence[tuple[str, str, Shapes]] = ()):
        self.original, self.probes, self.seed, self.draws = original, list(probes), seed, draws
        self.near = list(near)
        """(symbol, label, shapes) checked where the original refuses every probe labelled ``symbol=...``
        (:func:`eqsat.onnx.interface.near_shapes`)"""
        self._session: ort.InferenceSession | None = None
        self._screen = Screen(original, len(original.graph.output))
        self._spread = Spread(original)
        self._runs: dict[str, tuple[list[tuple[dict[str, np.ndarray], list]], bool]] = {}
        """probe label -> the draws the original ran (their inputs and its outputs), and whether it refused the
        next one (the probe is then skipped, once the candidate matched on those before it)"""
        self.too_large: dict[str, str] = {}
        """probe label -> why it is not run: the memory a run there would take (:mod:`eqsat.onnx.footprint`)"""

    def _reference(self, label: str, shapes: Shapes) -> tuple[list[tuple[dict[str, np.ndarray], list]], bool]:
        if label not in self._runs:
            try:
                footprint.check(shapes)
            except footprint.TooLarge as exc:  # not run: a skip, saying why (the original does not refuse it)
                self._runs[label], self.too_large[label] = ([], True), exc.short()
                return self._runs[label]
            if self._session is None:  # the original, its top-k choices exposed (:mod:`eqsat.ties`)
                self._screen = Screen.of(self.original)
                self._session = session(self._screen.model, prepacking=False)  # checked, not timed
            rng, bounds = np.random.default_rng(self.seed), index_bounds(self.original)
            runs: list[tuple[dict[str, np.ndarray], list]] = []
            refused = False
            s1, spent = self._session, set[int]()
            for k in range(self.draws):
                try:
                    runs.append(self._screen.draw(s1, lambda k=k: flags_alternated(  # type: ignore[misc]
                        random_inputs(s1, rng, shapes, bounds), k), QUIET, spent))
                except InputError:  # inputs eqsat cannot draw: not the original's refusal
                    raise
                except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: the original refuses it
                    refused = True
                    break
            self._runs[label] = runs, refused
        return self._runs[label]

    def check(self, optimized: onnx.ModelProto) -> ShapesCheck:
        """``optimized`` checked against the original at every probe (:func:`verify_shapes`)."""
        changed = interface_difference(self.original, optimized)
        if changed:
            return ShapesCheck(False, detail=f"the interface changed: {changed}")
        s2 = session(optimized, prepacking=False)  # checked, not timed
        names = [o.name for o in s2.get_outputs()]
        out = ShapesCheck(True)
        refusals: set[str] = set()
        for label, shapes in self._probes(refusals):
            runs, refused = self._reference(label, shapes)
            for feeds, ref in runs:
                try:
                    got = s2.run(None, feeds, QUIET)
                except Exception as exc:  # noqa: BLE001
                    return ShapesCheck(False, out.verified, out.skipped,
                                       f"at {label} onnxruntime fails: {first_line(exc)}")
                for k, (name, a, b) in enumerate(zip(names, ref, got)):
                    ok, e_abs, e_rel = compare_outputs(np.asarray(a), np.asarray(b))
                    if not ok and not self._spread.allows(runs, k, np.asarray(a), np.asarray(b)):
                        shapes_ab = f"shape {np.shape(b)} where the original's is {np.shape(a)}" \
                            if np.shape(a) != np.shape(b) else \
                            f"max abs error {e_abs:.3g}, max rel error {e_rel:.3g}"
                        return ShapesCheck(False, out.verified, out.skipped, f"at {label} output {name!r} differs: "
                                           + shapes_ab)
            if refused:
                refusals.add(label)
                out.skipped.append(f"{label} ({self.too_large[label]})" if label in self.too_large else label)
            else:
                out.verified.append(label)
        return out

    def _probes(self, refusals: set[str]) -> Iterator[tuple[str, Shapes]]:
        """The probes, then each near one whose symbol's probes (of that symbol alone; or the probe of that label)
        were all skipped (``refusals`` so far: read as the near ones are reached)."""
        yield from self.probes
        for sym, label, shapes in self.near:
            own = [lb for lb, _ in self.probes if lb == sym or lb.startswith(f"{sym}=") and "," not in lb]
            if own and all(lb in refusals for lb in own):
                yield label, shapes

    def close(self) -> None:
        """Release the original's session and outputs (a later check builds them again)."""
        self._session, self._runs, self.too_large = None, {}, {}
        self._spread.close()


def _beyond(name: str, then_s: ort.InferenceSession, else_s: ort.InferenceSession, outputs: Sequence[str],
            feeds: tuple[dict[str, np.ndarray], dict[str, np.ndarray]], sizes: tuple[str, str]) -> str | None:
    """One guard's check at the last size within its table and the first beyond (``feeds``, ``sizes``: their
    labels): "" when these sizes do not cross the guard's bound (the condition holds beyond too, or fails within:
    another of the guard's sizes, or another bound), None when the else-branch passes, else what failed."""
    near_feeds, far_feeds = feeds
    *far, cond_far = else_s.run(None, _own(else_s, far_feeds), QUIET)
    if bool(np.all(cond_far)):
        return ""
    *near, cond_near = then_s.run(None, _own(then_s, near_feeds), QUIET)
    *near_else, _ = else_s.run(None, _own(else_s, near_feeds), QUIET)
    if not bool(np.all(cond_near)):
        return ""  # another size of the guard's is beyond its table here: not this symbol's bound
    for value, t, e, f in zip(outputs, near, near_else, far):
        t, e, f = np.asarray(t), np.asarray(e), np.asarray(f)
        ok, e_abs, _ = compare_outputs(t, e)
        if not ok:
            return f"at {sizes[0]} a table eqsat wrote in place of a computation of the original differs from that " \
                   f"computation (max abs error {e_abs:.3g}; the guard {name!r}, its value {value!r})"
        grew = f.shape != t.shape and f.ndim == t.ndim and all(a >= b for a, b in zip(f.shape, t.shape))
        if not grew:
            beside = "the shape it has" if f.shape == t.shape else f"not grown from its shape {t.shape}"
            return Stops(f"at {sizes[1]} the else-branch of {name!r} gives {value!r} of shape {f.shape}, {beside} "
                         f"at {sizes[0]}: a value the guard stands for must grow beyond its table")
        if not compare_outputs(t, f[tuple(slice(0, n) for n in t.shape)])[0]:
            return f"at {sizes[1]} the else-branch of {name!r} gives {value!r} grown to {f.shape} from {t.shape} " \
                   f"at {sizes[0]}, but its first values are not the then-branch's there"
    return None


class Stops(str):
    """The failure of an else-branch that gives its then-branch's value beyond the table (it stops where the table
    does, as ConvBERT's indices of an unfold the import made a table of): the one failure :func:`refuses` may excuse."""


BEYOND_RUN = 9
"""the original is refused at this many consecutive sizes, from the last within the table on, before a guard's
else-branch that stops at the table is excused (:func:`refuses`: a size the original needs a multiple of, up to
this, or a power of two up to the table's, is among them)"""
BEYOND_SECONDS = 20.0
"""the longest a run of the original beyond a guard's table may be estimated to take (:func:`refuses`): a longer
one is not made, and the guard is not excused (a CLIP text model's table of the batch's indices, 4096 long: one run
of the original at a batch of 4096 took over ten minutes)"""


def refuses(sess: ort.InferenceSession, original: onnx.ModelProto, values: Mapping[str, int], sym: str, first: int,
            seed: int = 0, index: Mapping[str, int] | None = None) -> bool:
    """Whether the original (``sess``) stops below a guard's table along ``sym``: onnxruntime runs it, on seeded random
    inputs, with ``sym`` one above its representative size (the control: the others, and the symbols derived from
    it, follow; a model whose inputs' sizes must agree otherwise is never excused), and refuses it at each of
    :data:`BEYOND_RUN` consecutive sizes from the table's last (``first - 1``) on (BERT's position embeddings stop
    at 512 rows: every longer input fails at their Add). No input the original takes then reaches the sizes where a
    guard's else-branch that stops at the table (:class:`Stops`) is taken. A run there that would not fit the run's
    memory (:func:`eqsat.onnx.footprint.check`), or is estimated to take over :data:`BEYOND_SECONDS` (the control's
    seconds grown as the estimated memory of the run grows), is not made: it may run there, so it is not excused."""
    index = index_bounds(original) if index is None else index
    derived = derived_symbols(list(symbols(original)))

    def shapes(v: int) -> Shapes:
        return shapes_at(original, follow({**values, sym: v}, derived))

    def runs(v: int) -> bool:
        feeds = random_inputs(sess, np.random.default_rng(seed), shapes(v), index)
        try:
            sess.run(None, feeds, QUIET)
        except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: the original refuses it
            return False
        return True

    start = time.perf_counter()
    if not runs(values[sym] + 1):
        return False
    seconds = time.perf_counter() - start
    beyond = range(first - 1, first - 1 + BEYOND_RUN)
    control = footprint.activation_bytes(original, shapes(values[sym] + 1))
    if control > 0 and seconds * footprint.activation_bytes(original, shapes(beyond[-1])) / control > BEYOND_SECONDS:
        return False  # (the largest of the runs: the others take no longer)
    for v in beyond:
        try:
            footprint.check(shapes(v), original)
        except footprint.TooLarge:
            return False
        if runs(v):
            return False
    return True


def _own(sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds ``sess`` takes: a branch's model keeps only the inputs it reads (a mask one branch does not)."""
    return {i.name: feeds[i.name] for i in sess.get_inputs()}


def _branch_feeds(then_s: ort.InferenceSession, else_s: ort.InferenceSession, seed: int, shapes: Shapes,
                  index: Mapping[str, int]) -> dict[str, np.ndarray]:
    """One seeded random feed for the inputs of both branches' models: the else-branch's, and the then-branch's
    others."""
    return {**random_inputs(then_s, np.random.default_rng(seed + 1), shapes, index),
            **random_inputs(else_s, np.random.default_rng(seed), shapes, index)}


def verify_guards(original: onnx.ModelProto, optimized: onnx.ModelProto, values: Mapping[str, int],
                  seed: int = 0) -> ShapesCheck:
    """Check the else-branches of ``optimized``'s table guards (:mod:`eqsat.onnx.branches`), which no shape within
    the tables runs: for each guard and each symbol of the inputs (``values``: their representative sizes) whose
    size the guard's bound stops (the first size beyond it turns the guard's condition false), the else-branch
    computes the then-branch's values at the last size within the table, and at the first size beyond it runs and
    grows them, their first rows the then-branch's at the last size within. Each model computes only the guard's
    outputs: a long input costs its Shape and the values the else-branch reads. A guard that cannot be checked
    (no size reaches its bound, its branches do not load apart) fails the check: a wrong model is worse than a
    slow one. An else-branch that stops at the table (:class:`Stops`) where the original itself stops below it
    (:func:`refuses`: at its position embeddings' rows) is no failure: those sizes are skipped, the guard checked;
    every other failure is one. The symbols derived from ``sym`` (``past + 1``) follow it. The labels say
    ``beyond``."""
    out = ShapesCheck(True)
    index = index_bounds(original)
    derived = derived_symbols(list(symbols(original)))
    own: list[ort.InferenceSession] = []  # the original's session, made where an else-branch stops at its table
    for guard in table_guards(optimized):
        bounds = sorted(set(guard_bounds(optimized, guard) or []))
        checked = False
        try:
            within, beyond = (taken(optimized, guard, b) for b in ("then_branch", "else_branch"))
            then_s, else_s = session(within, prepacking=False), session(beyond, prepacking=False)
            for sym in symbols(beyond):  # the symbols of the inputs the guard reads
                for first in bounds:
                    sizes = (f"{sym}={first - 1}", f"{sym}={first} (beyond the tables)")
                    feeds = tuple(_branch_feeds(then_s, else_s, seed,
                                                shapes_at(optimized, follow({**values, sym: v}, derived)), index)
                                  for v in (first - 1, first))
                    failed = _beyond(guard.name, then_s, else_s, guard.output, feeds, sizes)  # type: ignore[arg-type]
                    if isinstance(failed, Stops) and sym not in derived:
                        own = own or [session(original, prepacking=False)]
                        if refuses(own[0], original, values, sym, first, seed, index):
                            out.skipped.append(sizes[1])  # no input the original takes reaches the else-branch
                            checked = True
                            continue
                    if failed:
                        return ShapesCheck(False, out.verified, out.skipped, failed)
                    if failed is None:
                        out.verified.append(sizes[1])
                        checked = True
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors have no common type
            return ShapesCheck(False, out.verified, out.skipped,
                               f"the else-branch of {guard.name!r} fails beyond its table: {first_line(exc)}")
        if not checked:
            return ShapesCheck(False, out.verified, out.skipped, f"no size of an input reaches the bound of "
                               f"{guard.name!r} ({bounds}): its else-branch cannot be checked")
    return out
