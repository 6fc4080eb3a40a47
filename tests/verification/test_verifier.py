"""Verifying several candidates against one original (:class:`eqsat.verification.Verifier`): each candidate gets what
:func:`eqsat.verification.verify` alone gives it, the original's session is built once, and the first draw's inputs are
those the end-to-end timing draws for the same seed (so the measurement need not draw them again)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_builders as ob
from onnx import numpy_helper

from eqsat.measurement.timing import timing_feeds
from eqsat.onnx import session
from eqsat.verification import Verifier, check, outputs, verify
from eqsat.verification.feeds import served


def _perturbed(model: onnx.ModelProto, scale: float) -> onnx.ModelProto:
    """``model`` with its largest initializer scaled: another computation unless ``scale`` is 1."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    t = max(out.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(scale), t.name))
    return out


def test_one_verifier_gives_each_candidate_what_verify_gives_it(monkeypatch):
    original = ob.attention(seed=1)
    candidates = [_perturbed(original, 1.0), _perturbed(original, 1.5), ob.attention(seed=1), _perturbed(original, 0.9)]
    alone = [verify(original, c, seed=4, draws=2) for c in candidates]
    assert [v.passed for v in alone] == [True, False, True, False]  # the oracle can fail
    built = []
    for module in (check, outputs):  # the check's sessions, and the spread's (the original unoptimized)
        monkeypatch.setattr(module, "session", lambda m, **kw: built.append(kw) or session(m, **kw))
    verifier = Verifier(original, seed=4, draws=2)
    shared = [verifier.check(c) for c in candidates]
    assert [(v.passed, v.max_abs_error, v.max_rel_error, v.draws, v.detail) for v in shared] == \
        [(v.passed, v.max_abs_error, v.max_rel_error, v.draws, v.detail) for v in alone]
    # the original's session once, one per candidate; and the original unoptimized once, for the runtime's own
    # spread where a candidate missed the tolerance (eqsat.verification.Spread: it excuses neither wrong one)
    assert sum(kw.get("optimized", True) for kw in built) == 1 + len(candidates)
    assert sum(not kw.get("optimized", True) for kw in built) == 1


def test_the_first_draw_is_what_the_timing_draws():
    original, other = ob.attention(seed=2), ob.attention(seed=3)
    verifier = Verifier(original, seed=9)
    verifier.check(other)
    feeds = served(original, verifier.first_inputs(), 9)  # the masks as timed, the rest as drawn
    want = timing_feeds(original, [session(original), session(other)], 9)
    assert feeds is not None and feeds.keys() == want.keys()
    assert all(np.array_equal(feeds[k], want[k]) for k in want)
    other_seed = timing_feeds(original, [session(original), session(other)], 10)
    assert not all(np.array_equal(feeds[k], other_seed[k]) for k in want)
    verifier.close()
    assert verifier.first_inputs() is None and verifier.check(other).passed is False  # checked again after close
    assert verifier.first_inputs() is not None
