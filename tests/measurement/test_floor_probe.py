"""The attention core eqsat.measurement.floor_probe times, as written and floored: both compute the same values
(oracle: numpy's float64 softmax from its definition), the floored one holds the floor's nodes, and the measured
ratio is a positive number, the same answer within one process (which way it goes is the host's: not asserted)."""

from __future__ import annotations

import numpy as np

from eqsat.measurement import floor_probe
from eqsat.onnx import session


def test_the_core_floored_and_written_compute_the_masked_attention():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(floor_probe.SHAPE).astype(np.float32)
    v = rng.standard_normal((1, floor_probe.SHAPE[1], floor_probe.SHAPE[3], 64)).astype(np.float32)
    rows = floor_probe.SHAPE[2]
    causal = np.tril(np.ones((rows, rows), bool))
    s = np.where(causal, x.astype(np.float64), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    for floored in (False, True):
        model = floor_probe.core(floored)
        ops = [n.op_type for n in model.graph.node]
        assert ("Max" in ops and "ReduceMax" in ops) == floored
        got = session(model).run(None, {"x": x, "v": v})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_ratio_is_measured_once_per_process():
    floor_probe.floor_pays.cache_clear()
    pays, ratio = floor_probe.floor_pays()
    assert ratio > 0 and pays == (ratio < floor_probe.MARGIN)
    assert floor_probe.floor_pays() == (pays, ratio)
