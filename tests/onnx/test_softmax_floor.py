"""Softmax scores floored below their row's maximum (eqsat.onnx.softmax_floor): the floored program computes what the
Softmax computes, on the edges users feed, and the probe finds the Softmax nodes whose scores are masked. Oracles:
a float64 softmax in numpy, written from its definition, and onnxruntime's outputs of the unfloored model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx import session
from eqsat.onnx.softmax_floor import DEEP, FLOOR, deep_softmaxes, floored

LOWEST = np.finfo(np.float32).min
N = 16


def _softmax_model(opset: int, axis: int = -1, mask: np.ndarray | None = None,
                   dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``Softmax(x [+ mask], axis)`` on x [2, 3, N, N], with a graph output of its own."""
    nodes, inits, scores = [], [], "x"
    if mask is not None:
        inits.append(numpy_helper.from_array(mask.astype(np.float32), "mask"))
        nodes.append(helper.make_node("Add", ["x", "mask"], ["scores"]))
        scores = "scores"
    nodes.append(helper.make_node("Softmax", [scores], ["y"], axis=axis))
    g = helper.make_graph(nodes, "softmax", [helper.make_tensor_value_info("x", dtype, [2, 3, N, N])],
                          [helper.make_tensor_value_info("y", dtype, [2, 3, N, N])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _reference(x: np.ndarray, axis: int) -> np.ndarray:
    """softmax from its definition in float64: exp(x - max) / sum, NaN where the row holds a NaN or +inf or is -inf
    throughout (x - max is NaN there)."""
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def _causal() -> np.ndarray:
    return np.where(np.tril(np.ones((N, N), bool)), 0.0, LOWEST)


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    base = rng.standard_normal((2, 3, N, N)).astype(np.float32) * 3
    lowest = np.where(np.tril(np.ones((N, N), bool)), base, LOWEST).astype(np.float32)
    neg_inf = np.where(np.tril(np.ones((N, N), bool)), base, -np.inf).astype(np.float32)
    spread = (base * 40).astype(np.float32)  # rows spanning far more than FLOOR: deep entries without a mask
    edges = lowest.copy()
    edges[0, 0, 1, :] = -np.inf  # a row masked with -inf throughout: NaN
    edges[0, 0, 2, :] = LOWEST  # a row masked with the lowest float throughout: uniform
    edges[0, 1, 3, 5] = np.nan  # a NaN score: its row NaN
    edges[0, 1, 4, 0] = np.inf  # +inf: its row NaN
    edges[1, 2, 5, :] = np.float32(3.0e38)  # near the type's range, all equal: uniform
    edges[1, 2, 6, :3] = [3.0e38, 2.9e38, -np.inf]  # near the range, far apart: one weight 1 (max - FLOOR rounds to max)
    edges[1, 2, 7, :] = LOWEST  # two masks added: the lowest float beside -inf, the -inf weighs nothing
    edges[1, 2, 7, 9:] = -np.inf
    return {"random": base, "lowest": lowest, "-inf": neg_inf, "spread": spread, "edges": edges}


@pytest.mark.parametrize("opset,axis", [(13, -1), (17, -1), (18, -1), (21, 1), (17, 2)])
def test_a_floored_softmax_computes_the_softmax(opset, axis):
    m = _softmax_model(opset, axis)
    out = floored(m, ["y"])
    assert [i.name for i in out.graph.input] == ["x"] and [o.name for o in out.graph.output] == ["y"]
    assert [n.op_type for n in out.graph.node] == ["ReduceMax", "Sub", "Max", "Softmax"]
    onnx.checker.check_model(out)
    plain, flo = session(m), session(out)
    for label, x in _inputs().items():
        want = _reference(x, axis)
        got = flo.run(None, {"x": x})[0]
        ort_plain = plain.run(None, {"x": x})[0]
        assert np.array_equal(np.isnan(got), np.isnan(want)), label  # NaN exactly where the definition has it
        assert np.array_equal(np.isnan(got), np.isnan(ort_plain)), label
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, equal_nan=True, err_msg=label)
        np.testing.assert_allclose(got, ort_plain, rtol=2e-6, atol=1e-7, equal_nan=True, err_msg=label)


def test_the_floor_moves_a_masked_weight_by_less_than_its_bound():
    """Where an entry lies far below its row's maximum, its weight becomes e^-FLOOR / sum instead of ~0: within
    the bound the module states, and every other weight as before."""
    x = _inputs()["lowest"]
    got = session(floored(_softmax_model(17), ["y"])).run(None, {"x": x})[0].astype(np.float64)
    want = _reference(x, -1)
    masked = ~np.broadcast_to(np.tril(np.ones((N, N), bool)), x.shape)
    assert np.all(got[masked] > 0) and np.all(got[masked] <= np.exp(-FLOOR) * (1 + 1e-5))
    assert np.abs(got - want).max() <= N * np.exp(-FLOOR) + 1e-6 * np.abs(want).max()


def test_the_probe_finds_the_masked_softmax_and_leaves_the_model_as_it_was():
    for opset in (17, 18):
        masked = _softmax_model(opset, mask=_causal())
        before = masked.SerializeToString()
        x = np.random.default_rng(0).standard_normal((2, 3, N, N)).astype(np.float32)
        assert deep_softmaxes(masked, {"x": x}) == ["y"]
        assert masked.SerializeToString() == before
        unmasked = _softmax_model(opset, mask=np.zeros((N, N)))
        assert deep_softmaxes(unmasked, {"x": x}) == []
        # a mask just short of the depth is not deep; one just past it is
        shallow = np.where(np.tril(np.ones((N, N), bool)), 0.0, -(DEEP - 20))
        assert deep_softmaxes(_softmax_model(opset, mask=shallow), {"x": x * 0}) == []
        deep = np.where(np.tril(np.ones((N, N), bool)), 0.0, -(DEEP + 1))
        assert deep_softmaxes(_softmax_model(opset, mask=deep), {"x": x * 0}) == ["y"]


def test_the_probe_leaves_softmax_of_other_types_and_old_opsets_alone():
    x = np.where(np.tril(np.ones((N, N), bool)), 0.0, -np.inf)
    x = np.broadcast_to(x, (2, 3, N, N))
    half = _softmax_model(17, dtype=TensorProto.FLOAT16)
    assert deep_softmaxes(half, {"x": x.astype(np.float16)}) == []
    old = _softmax_model(12)  # flattens at its axis: not floored
    assert deep_softmaxes(old, {"x": x.astype(np.float32)}) == []
    assert [n.op_type for n in floored(old, ["y"]).graph.node] == ["Softmax"]


def test_a_model_floored_before_is_floored_again_under_names_of_its_own():
    """eqsat's output given back to eqsat: its ``eqsat_floor`` names are taken, the second floor's are new."""
    m = _softmax_model(17, mask=_causal())
    twice = floored(floored(m, ["y"]), ["y"])
    onnx.checker.check_model(twice)
    names = [o for n in twice.graph.node for o in n.output] + [t.name for t in twice.graph.initializer]
    assert len(names) == len(set(names)) and [n.op_type for n in twice.graph.node].count("Max") == 2
    x = _inputs()["edges"]
    want = session(m).run(None, {"x": x})[0]
    got = session(twice).run(None, {"x": x})[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, equal_nan=True)
