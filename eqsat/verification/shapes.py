"""A shape-generic candidate checked at further shapes of the interface's symbols: its interface the original's, its
outputs the original's at each probe (:func:`verify_shapes`; several candidates: :class:`ShapesVerifier`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import InputError, first_line
from ..onnx import footprint
from ..onnx.axes.interface import QUIET, Shapes, interface_difference
from ..onnx.io import session
from .feeds import flags_alternated, index_bounds, random_inputs
from .outputs import Spread, compare_outputs
from .ties import Screen


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
        (:func:`eqsat.onnx.axes.interface.near_shapes`)"""
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
            if self._session is None:  # the original, its top-k choices exposed (:mod:`eqsat.verification.ties`)
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
                    return ShapesCheck(False, out.verified, out.skipped, f"at {label} the written program fails in "
                                       f"onnxruntime where the original runs: {first_line(exc)}")
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
