"""Verification draws on which the original's top-k choices are decided (:mod:`eqsat.verification.ties`). Oracles: values built
with a known gap between the k-th and next (exact ties, a few ulps, NaN rows), and onnxruntime running an original
whose routing a candidate's rounding may flip at near-ties only, against a candidate that routes otherwise."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.verification import ShapesVerifier, Verifier, ties

F = TensorProto.FLOAT
EXPERTS, WIDTH = 4, 8


def _router(sign: float = 1.0, largest: int = 1) -> onnx.ModelProto:
    """``y[r] = sum of table[e] over the 2 experts e ranked first by round(2 x[r]) / 2 + sign * 1e-6 x[r]``: rows
    whose second and third inputs fall in one bucket of 0.5 are ranked by the 1e-6 term alone (a near-tie, within
    2^-16 of the values), the other rows by their buckets; ``sign`` -1 ranks a bucket's members the other way."""
    table = np.random.default_rng(7).standard_normal((EXPERTS, WIDTH)).astype(np.float32)
    consts = {"two": np.float32(2), "half": np.float32(0.5), "small": np.float32(sign * 1e-6),
              "k": np.array([2], np.int64), "table": table, "one": np.array([1], np.int64)}
    nodes = [helper.make_node("Mul", ["x", "two"], ["x2"]), helper.make_node("Round", ["x2"], ["r"]),
             helper.make_node("Mul", ["r", "half"], ["bucket"]), helper.make_node("Mul", ["x", "small"], ["t"]),
             helper.make_node("Add", ["bucket", "t"], ["logits"]),
             helper.make_node("TopK", ["logits", "k"], ["v", "idx"], axis=-1, largest=largest),
             helper.make_node("Gather", ["table", "idx"], ["rows"], axis=0),
             helper.make_node("ReduceSum", ["rows", "one"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "router", [helper.make_tensor_value_info("x", F, ["n", EXPERTS])],
                              [helper.make_tensor_value_info("y", F, ["n", WIDTH])],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _undecided(values: np.ndarray, k: int = 2, axis: int = -1, largest: bool = True) -> bool:
    screen = ties.Screen(onnx.ModelProto(), 0, ((axis, largest),))
    return bool(screen.undecided([values, np.array([k], np.int64)]))


def test_a_near_tie_at_the_kth_place_is_undecided():
    row = np.array([[3.0, 1.0, 1.0, -2.0]], np.float32)
    row[0, 2] = np.nextafter(np.nextafter(row[0, 1], 0), 0)  # second and third two ulps apart
    assert _undecided(row)
    assert not _undecided(row, k=1)  # the first place is clear
    assert not _undecided(np.array([[3.0, 1.0, 1.0, -2.0]], np.float32))  # an exact tie: TopK's order is specified
    assert not _undecided(np.array([[3.0, 1.0, 0.5, -2.0]], np.float32))
    nan = row.copy()
    nan[0, 3] = np.nan  # a row holding NaN: the edge draws' business
    assert not _undecided(nan)
    lowest = np.finfo(np.float32).min
    assert not _undecided(np.array([[3.0, 1.0, 0.5, lowest]], np.float32), k=2)  # a mask's fill is no value's size
    assert _undecided(np.array([[0.5, 1e-7, 1.5e-7, -0.5]], np.float32))  # near zero, within the row's rounding
    half = np.array([[1.0, 0.5, np.nextafter(np.float16(0.5), np.float16(1))]], np.float16)
    assert _undecided(half)  # float16's ulps: 2^-11 of a value, over float32's 2^-16 share
    smallest = np.array([[3.0, -1.0, np.nextafter(np.float32(-1.0), np.float32(0)), 2.0]], np.float32)
    assert _undecided(smallest, k=1, largest=False)  # the smallest: -1 and its neighbour at the first place
    assert _undecided(row.T.copy(), axis=0)


def test_the_screen_adds_outputs_after_the_originals_only_where_a_topk_is():
    model = _router()
    screen = ties.Screen.of(model)
    assert screen.outputs == 1 and screen.topks == ((-1, True),)
    assert [o.name for o in screen.model.graph.output][:1] == ["y"] and len(screen.model.graph.output) == 3
    assert [o.name for o in model.graph.output] == ["y"]  # the original untouched
    plain = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [helper.make_tensor_value_info("x", F, [2])],
                                                [helper.make_tensor_value_info("y", F, [2])]))
    assert ties.Screen.of(plain).model is plain


PROBES = [("n=2", {"x": (2, EXPERTS)}), ("n=3", {"x": (3, EXPERTS)})]


def test_a_candidate_that_differs_at_near_ties_only_passes_and_a_wrong_one_does_not(monkeypatch):
    """The candidate ranks a bucket's members the other way: a near-tie, and only a near-tie, routes otherwise.
    Without the screen the seeded draws hold one and the candidate is refused; with it, it passes; a candidate that
    takes the k smallest is refused either way."""
    original, rounding, wrong = _router(), _router(sign=-1.0), _router(largest=0)
    assert ShapesVerifier(original, PROBES, seed=0).check(rounding).passed
    assert Verifier(original, seed=0, input_shapes={"x": (2, EXPERTS)}).check(rounding).passed
    assert not ShapesVerifier(original, PROBES, seed=0).check(wrong).passed
    assert not Verifier(original, seed=0, input_shapes={"x": (2, EXPERTS)}).check(wrong).passed
    monkeypatch.setattr(ties, "share", lambda dtype: 0.0)  # no draw is undecided: the draws as they come
    assert not ShapesVerifier(original, PROBES, seed=0).check(rounding).passed


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_draws_are_the_seeds(seed):
    runs = [ShapesVerifier(_router(), PROBES, seed=seed)._reference(*PROBES[1])[0] for _ in range(2)]
    for (f1, o1), (f2, o2) in zip(*runs):
        np.testing.assert_array_equal(f1["x"], f2["x"])
        np.testing.assert_array_equal(o1[0], o2[0])
        assert len(o1) == 1  # the original's outputs only


def test_a_topk_near_tied_on_every_draw_stops_the_screen():
    """``1 + 1e-5 x``: every row's values within 2^-16 of each other: the first draw tries :data:`ties.TRIES` times
    and keeps its last; the later draws are taken as they come (no more runs of the original)."""
    nodes = [helper.make_node("Mul", ["x", "small"], ["t"]), helper.make_node("Add", ["t", "one"], ["logits"]),
             helper.make_node("TopK", ["logits", "k"], ["y", "idx"], axis=-1)]
    consts = {"small": np.float32(1e-5), "one": np.float32(1.0), "k": np.array([2], np.int64)}
    graph = helper.make_graph(nodes, "near", [helper.make_tensor_value_info("x", F, [2, EXPERTS])],
                              [helper.make_tensor_value_info("y", F, [2, 2])],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    screen = ties.Screen.of(model)
    sess = ort.InferenceSession(screen.model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng, made = np.random.default_rng(0), []

    def make() -> dict[str, np.ndarray]:
        made.append(1)
        return {"x": rng.standard_normal((2, EXPERTS)).astype(np.float32)}

    spent: set[int] = set()
    feeds, outs = screen.draw(sess, make, spent=spent)
    assert len(made) == ties.TRIES and spent == {0} and len(outs) == 1
    np.testing.assert_array_equal(outs[0], -np.sort(-(1 + np.float32(1e-5) * feeds["x"]), axis=-1)[:, :2])
    screen.draw(sess, make, spent=spent)
    assert len(made) == ties.TRIES + 1
    screen.draw(sess, make)  # another caller's draws (other input shapes): screened again
    assert len(made) == 2 * ties.TRIES + 1
