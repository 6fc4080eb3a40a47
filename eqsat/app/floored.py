"""The candidates with their masked Softmax scores floored (:mod:`eqsat.onnx.softmax_floor`): where onnxruntime's exp
is slow on scores that underflow (a causal mask), the run also measures each candidate floored, checked against the
original, beside or in place of it (:func:`floored_phase`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx

from eqsat import memory
from eqsat.errors import first_line
from eqsat.measurement import floor_probe, runtimes
from eqsat.onnx import pool, softmax_floor
from eqsat.verification import Verifier
from eqsat.verification.feeds import one_row, unmasked

from .config import OptimizeConfig
from .report import Candidate, VerificationReport
from .selection import Built

FLOORED = "+floored"
"""the suffix of a candidate's name written floored by :func:`floored_phase`"""


def floored_phase(built: list[Built], first_passed: bool, original: onnx.ModelProto,
                  feeds: Mapping[str, np.ndarray] | None, config: OptimizeConfig, verifier: Verifier,
                  say: Callable[[str], None] = lambda _msg: None) -> list[Built]:
    """The candidates with their masked Softmax scores floored (:mod:`eqsat.onnx.softmax_floor`; ort-cpu on a CPU where
    it pays, :mod:`eqsat.measurement.floor_probe`; more than one candidate, the first passed its check): the first,
    the first floored, then each further one floored in its place where that passes its check (``NAME+floored``);
    ``built`` itself where no Softmax is deep. The probe's inputs: at one row (:func:`eqsat.verification.feeds.one_row`) every
    mask kept (:func:`eqsat.verification.feeds.unmasked`: a causal mask is deep, an unpadded encoder not); at several rows, which
    a server pads, the measurement's own. A probe or floor that fails leaves its candidate as it was (``say``)."""
    if config.candidates < 2 or not config.measure or feeds is None or not first_passed \
            or runtimes.resolve(config.runtime) != "ort-cpu" or not floor_probe.floor_pays()[0]:
        return built
    kept = unmasked(original, feeds) if one_row(original, feeds) else feeds
    out: list[Built] = []
    for k, b in enumerate(built):
        floored = None
        if (k == 0 or b.entry.verified) and (b.shapes is None or b.shapes.passed):
            try:
                floored = _floored(b, kept, config, verifier)
            except Exception as e:  # noqa: BLE001 - an optional form: the run goes on with the candidate as it is
                if isinstance(e, MemoryError):
                    raise
                say(f"candidate {b.entry.name}: its floored form left out ({type(e).__name__}: {first_line(e, 200)}); "
                    "this is a bug, please report it")
            if (weights := pool.current()) is not None:
                weights.drop_pages()
            memory.release()
        if k == 0:
            out += [b] if floored is None else [b, floored]
        else:
            out.append(floored if floored is not None and floored.entry.verified else b)
    if not any(o.entry.name.endswith(FLOORED) for o in out):
        return built
    return out


def _floored(b: Built, feeds: Mapping[str, np.ndarray], config: OptimizeConfig, verifier: Verifier) -> Built | None:
    """``b`` floored where its probe on ``feeds`` finds deep Softmax scores, checked against the original; None
    where none is deep."""
    deep = softmax_floor.deep_softmaxes(b.model, feeds)
    if not deep:
        return None
    model = softmax_floor.floored(b.model, deep)
    check = verifier.check(model)
    source = (f"{b.entry.name} with the scores of {len(deep)} Softmax floored {softmax_floor.FLOOR:g} below their "
              f"row's maximum (onnxruntime's exp is slow where masked scores underflow)")
    entry = Candidate(f"{b.entry.name}{FLOORED}", b.entry.estimated_cost,
                      softmax_floor.counted(b.entry.operators, b.model, model), source, verified=check.passed,
                      max_abs_error=check.max_abs_error, costs=dict(b.entry.costs),
                      note="" if check.passed else f"not measured: {check.detail}")
    # the floor computes no shape: the check at further shapes is the unfloored one's (build_candidates')
    return Built(b.program, model, entry, False, shapes=b.shapes, notes=list(b.notes),
                 check=VerificationReport.of(check, config.seed))
