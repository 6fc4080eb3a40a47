"""The else-branches of a program's table guards checked beyond the tables' bounds, which no probe within them runs
(:func:`verify_guards`), and whether the original itself stops there (:func:`refuses`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from ..dims import derived_symbols, follow
from ..errors import first_line
from ..onnx import footprint
from ..onnx.axes.branches import guard_bounds, shapes_fed, table_guards, taken
from ..onnx.axes.interface import QUIET, Shapes, shapes_at, symbols
from ..onnx.io import session
from .feeds import index_bounds, random_inputs
from .outputs import compare_outputs
from .shapes import ShapesCheck


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
                  index: Mapping[str, int], fed: Mapping[str, str]) -> dict[str, np.ndarray]:
    """One seeded random feed for the inputs of both branches' models: the else-branch's, and the then-branch's
    others; an input a branch reads only the shape of fed by its shape (``fed``: :func:`shapes_fed`)."""
    feeds = {**random_inputs(then_s, np.random.default_rng(seed + 1), shapes, index),
             **random_inputs(else_s, np.random.default_rng(seed), shapes, index)}
    feeds.update({by: np.array(shapes[name], np.int64) for name, by in fed.items() if name in shapes})
    return feeds


def verify_guards(original: onnx.ModelProto, optimized: onnx.ModelProto, values: Mapping[str, int],
                  seed: int = 0) -> ShapesCheck:
    """Check the else-branches of ``optimized``'s table guards (:mod:`eqsat.onnx.axes.branches`), which no shape within
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
            read = symbols(beyond)  # the symbols of the inputs the guard reads
            (within, fed), (beyond, fed_too) = shapes_fed(within), shapes_fed(beyond)
            fed.update(fed_too)
            then_s, else_s = session(within, prepacking=False), session(beyond, prepacking=False)
            for sym in read:
                for first in bounds:
                    sizes = (f"{sym}={first - 1}", f"{sym}={first} (beyond the tables)")
                    feeds = tuple(_branch_feeds(then_s, else_s, seed,
                                                shapes_at(optimized, follow({**values, sym: v}, derived)), index, fed)
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
