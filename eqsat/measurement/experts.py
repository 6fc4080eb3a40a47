"""Which routed expert products run faster dense, timed here (:mod:`eqsat.onnx.experts`: the two forms).

For each distinct site shape (side, experts, outputs, inputs, rows, type) of a model, both forms are built alone
at the rows the run tunes at and at fewer (:func:`ladder`: down to one; :func:`eqsat.onnx.experts.site_model`), run
in onnxruntime with the measurement's session settings, in turn, ``rounds`` times; the dense form is written where
its median is below :data:`MARGIN` times the gathered one's at the tuned rows: for every size where it was so at every
size timed, else from the fewest rows where it was (:func:`from_rows`) behind an ``If`` on the rows, the user's form
below (a decode step's few rows would read every expert's weights in the dense form: 2.4x slower at one token for 16
experts, top 4). A site whose rows inference leaves unknown takes those of a site of its weights' shape
(a later layer of the same experts, whose rows inference lost on the way), else keeps the user's form. The decision
is the import's (every candidate starts from it); the whole program is verified and measured end to end after the
search, and the input comes back unless it is faster with confidence.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper

from eqsat.onnx import experts
from eqsat.onnx.io import session
from eqsat.verification import compare_outputs
from eqsat.verification.feeds import index_bounds, random_inputs
from eqsat.verification.ties import Screen

from .clock import timed_s, timing_session

TIMED_BYTES = 1 << 30
"""a site whose weight stack is larger is not timed (its two forms would hold it three times over): kept as exported"""
MARGIN = 0.9
"""the dense form is written where it takes less than this share of the gathered form's time"""
ROUNDS = 9
"""calls of each form, in turn, after one untimed call of each"""
SLOW_S = 1.0
"""a form whose first call takes longer: three rounds only"""


def time_forms(site: experts.Site, threads: int, seed: int, rounds: int = ROUNDS) -> tuple[float, float]:
    """The median milliseconds of ``site``'s (gathered, dense) forms, called in turn on the same seeded inputs."""
    model, feeds = experts.site_model(site, np.random.default_rng(seed))
    forms = [model, experts.dense(model, experts.sites(model))]
    sessions = [timing_session(m, threads) for m in forms]
    first = [timed_s(lambda s=s: s.run(None, feeds)) for s in sessions]  # type: ignore[misc]
    rounds = 3 if max(first) > SLOW_S else rounds
    times: list[list[float]] = [[], []]
    for r in range(rounds):
        for k in (r % 2, 1 - r % 2):
            times[k].append(timed_s(lambda s=sessions[k]: s.run(None, feeds)) * 1e3)  # type: ignore[misc]
    return statistics.median(times[0]), statistics.median(times[1])


def ladder(rows: int) -> list[int]:
    """The rows each site's forms are timed at: the tuned ones, a quarter, a sixteenth, a sixty-fourth and one."""
    return sorted({rows, *(rows // 4**j for j in (1, 2, 3)), 1} - {0})


def from_rows(timed: Mapping[int, tuple[float, float]]) -> int | None:
    """The fewest rows (of those timed: rows -> (gathered, dense) ms) from which the dense form was faster at every
    size timed; None where it was not at the most rows."""
    start = None
    for r in sorted(timed, reverse=True):
        gathered, dense = timed[r]
        if dense >= MARGIN * gathered:
            break
        start = r
    return start


def dense_where_faster(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], threads: int,
                       seed: int = 0) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with its routed expert products written dense where that form was timed faster (``model`` itself
    where none is), and a line per site shape saying what was timed and chosen."""
    found = experts.sites(model, input_shapes)
    found = [s if s.rows is None or s.rows > 0 else replace(s, rows=None) for s in found]  # no rows: none to time
    rows = {s.like: s.rows for s in reversed(found) if s.rows is not None}
    borrowed = [s.rows is None and s.like in rows for s in found]  # a later layer's rows past inference's reach
    found = [replace(s, rows=rows[s.like]) if b else s for s, b in zip(found, borrowed)]
    chosen: list[experts.Site] = []
    switched: dict[str, int] = {}
    notes = []
    for key in dict.fromkeys((s.key, b) for s, b in zip(found, borrowed)):
        group = [s for s, b in zip(found, borrowed) if (s.key, b) == key]
        site = group[0]
        what = (f"{len(group)} routed expert product(s) ({site.experts} experts of {site.outputs}x{site.inputs}, "
                f"{site.rows if site.rows is not None else '?'} rows{' as their like' if key[1] else ''})")
        if site.rows is None:
            notes.append(f"{what}: kept as exported (rows unknown to shape inference)")
            continue
        stack = site.experts * site.outputs * site.inputs * helper.tensor_dtype_to_np_dtype(site.elem_type).itemsize
        if stack > TIMED_BYTES:
            notes.append(f"{what}: kept as exported (a stack of {stack / 2**30:.1f} GiB is not timed)")
            continue
        try:
            timed = {r: time_forms(replace(site, rows=r), threads, seed) for r in ladder(site.rows)}
        except Exception as exc:  # noqa: BLE001 -- a form onnxruntime cannot run here (a type its kernels lack)
            notes.append(f"{what}: kept as exported (its forms could not be timed: {str(exc).splitlines()[0][:160]})")
            continue
        start = from_rows(timed)
        gathered, dense = timed[site.rows]
        fewest = min(timed)
        notes.append(f"{what}: gathered {gathered:.3f} ms, dense {dense:.3f} ms; at {fewest} row(s) "
                     f"{timed[fewest][0]:.3f} and {timed[fewest][1]:.3f} ms -> "
                     + ("kept as exported" if start is None else "written dense" if start == fewest else
                        f"written dense from {start} rows, as exported below (an If on the rows)"))
        if start is not None:
            chosen.extend(group)
            switched.update({s.matmul: start for s in group if start != fewest})
    if not chosen:
        return model, notes
    written = experts.dense(model, chosen, switched)
    why = disagreement(model, written, input_shapes, seed)
    if why is not None:  # (rows that broadcast, say): the user's form, every site
        return model, [*notes, f"the dense form was not kept: {why}"]
    return written, notes


def disagreement(original: onnx.ModelProto, written: onnx.ModelProto, shapes: Mapping[str, Sequence[int]],
                 seed: int) -> str | None:
    """Why ``written`` is not ``original``'s function on one seeded random feed at ``shapes`` in onnxruntime (an
    output of another shape or other values, or a run that fails); None where it gives the same outputs. The feed
    is one on which the original's top-k choices are decided (:mod:`eqsat.verification.ties`: a router's near-tie is rounding)."""
    try:
        screen = Screen.of(original)
        a, b = session(screen.model), session(written)
        rng, sizes, bounds = np.random.default_rng(seed), {k: tuple(v) for k, v in shapes.items()}, index_bounds(original)
        feeds, want = screen.draw(a, lambda: random_inputs(a, rng, sizes, bounds))
        for out, x, y in zip(a.get_outputs(), want, b.run(None, feeds)):
            if not compare_outputs(np.asarray(x), np.asarray(y))[0]:
                return f"output {out.name!r} differs ({np.shape(y)} against {np.shape(x)})"
    except Exception as exc:  # noqa: BLE001 -- a form onnxruntime refuses is not kept either
        return str(exc).splitlines()[0][:200]
    return None
