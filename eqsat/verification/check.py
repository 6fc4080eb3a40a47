"""A candidate checked against the original at the representative shapes, on seeded random draws and the edge draws
made from the first (:func:`verify`; several candidates against one original: :class:`Verifier`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import InputError, first_line
from ..onnx.axes.interface import QUIET, shapes_text
from ..onnx.io import session
from .feeds import (
    EDGES,
    NONFINITE_EDGES,
    edge_cases,
    edge_inputs,
    edge_label,
    flags_alternated,
    index_bounds,
    random_inputs,
)
from .outputs import Spread, Verification, _difference, _on, compare_outputs
from .ties import TRIES, Screen


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
    with rows of -inf, a NaN, values near the type's range: :func:`eqsat.verification.feeds.edge_inputs`), and
    compare every output: where the original gives NaN or an infinity the optimized model must give the same
    (:func:`compare_outputs`), so a program that makes a NaN finite fails.

    Inputs take the shapes the user fixed (``input_shapes``, for the original's dynamic dimensions);
    integer inputs used as Gather indices range over the axis they index (see :mod:`eqsat.verification.feeds`).
    Several candidates against one original: :class:`Verifier`."""
    return Verifier(original, seed, draws, input_shapes).check(optimized)


class Verifier:
    """:func:`verify` of several candidates against one original: the original's session is built once and its
    outputs on each draw computed once (per input shapes), each candidate's session only while it is checked.
    Every candidate sees the inputs :func:`verify` would give it."""

    def __init__(self, original: onnx.ModelProto, seed: int = 0, draws: int = 3,
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None, edges: Sequence[str] = EDGES):
        """``edges``: the edge draws made from the first random one (:data:`eqsat.verification.feeds.EDGES`; a
        run under ``--assume-finite-masks`` leaves out those that hold -inf or NaN)."""
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
        if self._session is None:  # the original, its top-k choices exposed (:mod:`eqsat.verification.ties`)
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
        (:func:`eqsat.verification.feeds.edge_cases`, :func:`eqsat.verification.feeds.edge_inputs`), those the
        original itself runs (a model may refuse NaN in an input it checks: no check of the candidate there); one
        whose -inf leaves a near-tie among a row's finite values at a top-k of the original is made again from
        another random draw (``again``; :mod:`eqsat.verification.ties`)."""
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
        as served, :func:`eqsat.verification.feeds.served`, and where the draw was made again,
        :mod:`eqsat.verification.ties`); None otherwise."""
        return self.runs[next(iter(self.runs))][0][0] if len(self.runs) == 1 and self.draws else None

    def close(self) -> None:
        """Release the original's session and outputs (a later check builds them again)."""
        self._session = None
        self.runs = {}
        self._spread.close()
