"""Which mixture-of-experts blocks run faster as onnxruntime's ``MoE`` kernel, timed here (:mod:`eqsat.onnx.moe`: the
block, its forms and the kernel's).

For each distinct block shape of a model (its routed products' sizes, k, the tokens at the tuned shapes), the
block alone is run in the user's form, in the dense form of its routed products (:mod:`eqsat.onnx.experts`) and as
the kernel (:func:`eqsat.onnx.moe.write`), in turn, at the tuned tokens and at fewer (down to one: a decode step),
on seeded rows and logits. The kernel is written where its median is below :data:`~eqsat.measurement.experts.MARGIN`
times the faster other form's at the tuned tokens, below it over the sizes timed (the geometric mean of the ratios)
and at no size more than a third slower (:data:`SLOWER`);
the routed products of a block left as exported are then timed dense as before. A block whose kernel gives other
outputs on the probes (:func:`form_of`) is left alone, and the whole rewritten model must give the
original's outputs on one seeded feed (:func:`~eqsat.measurement.experts.disagreement`); every candidate is then
verified and measured end to end as always.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from eqsat.onnx import experts, moe
from eqsat.onnx.io import session
from eqsat.verification import compare_outputs

from .clock import timed_s, timing_session
from .experts import MARGIN, ROUNDS, TIMED_BYTES, disagreement, ladder

SLOWER = 0.75
"""the kernel is not written where, at some number of tokens timed, it takes more than the other forms' time over
this (at a few tokens per expert it reads every expert's weights, as the dense form does, in GEMMs of a row or two:
OLMoE's block at 4 tokens 2.3 ms against the dense form's 1.8, where it is 2.1x faster at 128 and 1.4x at one)"""


def runner(model: onnx.ModelProto) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A function of the feeds that runs ``model`` in onnxruntime and gives its first output."""
    s = session(model)
    return lambda feeds: s.run(None, feeds)[0]


def form_of(model: onnx.ModelProto, block: moe.Block, seed: int = 0) -> moe.Form | None:
    """The form in which the kernel (as :func:`eqsat.onnx.moe.write` writes it) gives ``block``'s outputs on every
    probe (:func:`eqsat.onnx.moe.probes`) in onnxruntime, the forms tried in :func:`eqsat.onnx.moe.forms`' order;
    None where no form does."""
    alone = moe.region_model(model, block)
    probes = moe.probes(block, np.random.default_rng(seed))
    try:
        user = runner(alone)
        expected = [user(feeds) for feeds in probes]
    except Exception:  # noqa: BLE001 -- a block onnxruntime cannot run alone
        return None
    for form in moe.forms(block, moe.region(model.graph, block) or (), model.graph):
        try:
            run = runner(moe.write(alone, [(block, form)]))
            if all(compare_outputs(want, run(feeds))[0] for want, feeds in zip(expected, probes)):
                return form
        except Exception:  # noqa: BLE001 -- a form the kernel refuses (a size it does not take) is not this block's
            continue
    return None


def time_forms(forms: Sequence[onnx.ModelProto], feeds: Mapping[str, np.ndarray], threads: int,
               rounds: int = ROUNDS) -> list[float]:
    """The median milliseconds of each of ``forms``, called in turn (the order rotating) after one untimed call."""
    sessions = [timing_session(m, threads) for m in forms]
    for s in sessions:
        s.run(None, dict(feeds))
    times: list[list[float]] = [[] for _ in forms]
    for r in range(rounds):
        for j in range(len(forms)):
            k = (j + r) % len(forms)
            times[k].append(timed_s(lambda s=sessions[k]: s.run(None, dict(feeds))) * 1e3)  # type: ignore[misc]
    return [statistics.median(t) for t in times]


def _stack_bytes(block: moe.Block) -> int:
    size = helper.tensor_dtype_to_np_dtype(block.fc1.elem_type).itemsize
    return size * block.experts * (block.fc1.outputs * block.fc1.inputs + block.fc2.outputs * block.fc2.inputs)


def _timed(model: onnx.ModelProto, block: moe.Block, form: moe.Form, threads: int,
           seed: int) -> dict[int, tuple[float, float]]:
    """tokens -> (the faster of the user's and the dense form, the kernel) ms, at each size of the ladder."""
    alone = moe.region_model(model, block)
    assert block.rows is not None
    dense = experts.dense(alone, experts.sites(alone, {block.hidden: [block.rows, block.width],
                                                       block.logits: [block.rows, block.experts]}))
    forms = [alone, dense, moe.write(alone, [(block, form)])]
    out = {}
    for rows in ladder(block.rows):
        feeds = moe.probe_rows(block, rows, np.random.default_rng(seed), edges=())
        user, dense_ms, kernel = time_forms(forms, feeds, threads)
        out[rows] = (min(user, dense_ms), kernel)
    return out


def kernel_wins(timed: Mapping[int, tuple[float, float]], rows: int) -> bool:
    """Whether the kernel is written, from ``timed`` (tokens -> (the faster other form, the kernel) ms; ``rows``
    the tuned tokens): below :data:`MARGIN` times the other at ``rows``, below it over the sizes (the geometric mean
    of the ratios), at no size slower than the other over :data:`SLOWER`."""
    ratios = [k / b for b, k in timed.values()]
    return timed[rows][1] < MARGIN * timed[rows][0] and float(np.exp(np.mean(np.log(ratios)))) < 1.0 \
        and max(ratios) <= 1 / SLOWER


def kernel_where_faster(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], threads: int,
                        seed: int = 0) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with each MoE block written as the kernel where that was timed faster (``model`` itself where
    none is), and a line per block shape saying what was found, timed and chosen."""
    found = moe.blocks(model, input_shapes)
    if not found:
        return model, []
    notes, chosen = [], list[tuple[moe.Block, moe.Form]]()
    for key in dict.fromkeys(b.key for b in found):
        group = [b for b in found if b.key == key]
        first = group[0]
        what = (f"{len(group)} MoE block(s) ({first.experts} experts, top {first.k}, {first.width} wide, "
                f"{first.inner} inner, {first.rows if first.rows is not None else '?'} tokens)")
        if first.rows is None or first.rows < 1:
            notes.append(f"{what}: kept as exported (tokens unknown to shape inference)")
            continue
        if _stack_bytes(first) > TIMED_BYTES:
            notes.append(f"{what}: kept as exported (stacks of {_stack_bytes(first) / 2**30:.1f} GiB are not timed)")
            continue
        forms = []
        for b in group:
            form = form_of(model, b, seed)
            if form is None:
                break
            forms.append(form)
        if len(forms) < len(group):
            notes.append(f"{what}: kept as exported (no form of the kernel gives the block's outputs)")
            continue
        try:
            timed = _timed(model, first, forms[0], threads, seed)
        except Exception as exc:  # noqa: BLE001 -- a form onnxruntime cannot run here
            notes.append(f"{what}: kept as exported (its forms could not be timed: {str(exc).splitlines()[0][:160]})")
            continue
        best, kernel = timed[first.rows]
        worst = max(timed, key=lambda r: timed[r][1] / timed[r][0])  # the size where the kernel did least well
        wins = kernel_wins(timed, first.rows)
        what += (f": exported or dense {best:.3f} ms, kernel {kernel:.3f} ms; at {worst} token(s) "
                 f"{timed[worst][0]:.3f} and {timed[worst][1]:.3f} ms -> ")
        if not wins:
            notes.append(what + "kept as exported")
            continue
        notes.append(f"{what}the kernel ({forms[0].activation}, weights "
                     f"{'normalized' if forms[0].normalize else 'as routed'})")
        chosen.extend(zip(group, forms))
    if not chosen:
        return model, notes
    written = moe.write(model, chosen, _stem(model, "moe"))
    why = disagreement(model, written, input_shapes, seed)
    if why is not None:
        return model, [*notes, f"the kernel was not kept: {why}"]
    return written, notes


def _stem(model: onnx.ModelProto, stem: str) -> str:
    """``stem``, lengthened until no name in ``model`` begins with it."""
    taken = experts.names(model.graph)
    while any(t.startswith(stem) for t in taken):
        stem += "_"
    return stem
