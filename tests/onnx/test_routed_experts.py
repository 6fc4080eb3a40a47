"""Routed expert products (a mixture of experts' ``batched_mm``: ``MatMul(Gather(W, idx), x)``) and their dense form
(:mod:`eqsat.onnx.experts`): found where the gathered weights are a constant stack; the dense form gives the user's
form's values in onnxruntime (the oracle) at any number of rows, with negative indices, NaN and infinities in the
rows; an index out of range fails in both; the run times both forms per site shape and says what it chose
(:mod:`eqsat.measurement.experts`), the written model equal to the original whichever it chose."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.measurement.experts import dense_where_faster, disagreement, from_rows, ladder
from eqsat.onnx import experts

F, I64 = TensorProto.FLOAT, TensorProto.INT64
EXPERTS, OUT, IN = 4, 6, 5


def _routed(side: str, gather_axis: int = 0, weight_input: bool = False, index: str = "gather") -> onnx.ModelProto:
    """``y[s] = W[idx[s]] @ x[s]`` over S rows (dynamic): ``left``, W [E, O, I] times x unsqueezed to [S, I, 1];
    ``right``, x unsqueezed to [S, 1, I] times W [E, I, O]."""
    shape = (EXPERTS, OUT, IN) if side == "left" else (EXPERTS, IN, OUT)
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    axis = [2] if side == "left" else [1]
    gathers = {"gather": [helper.make_node("Gather", ["w", "idx"], ["g"], axis=gather_axis)],
               # torch's dynamo exporter: GatherND of the index with a last axis of 1 (an Unsqueeze, or a Reshape)
               "unsqueezed": [helper.make_node("Unsqueeze", ["idx", "last"], ["idx1"]),
                              helper.make_node("GatherND", ["w", "idx1"], ["g"])],
               "reshaped": [helper.make_node("Reshape", ["idx", "column"], ["idx1"]),
                            helper.make_node("GatherND", ["w", "idx1"], ["g"])],
               }[index]
    nodes = [helper.make_node("Unsqueeze", ["x", "axis"], ["xu"]), *gathers,
             helper.make_node("MatMul", ["g", "xu"] if side == "left" else ["xu", "g"], ["y3"], name="routed"),
             helper.make_node("Squeeze", ["y3", "axis"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", F, ["rows", IN]), helper.make_tensor_value_info("idx", I64, ["rows"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in (
        ("axis", axis), ("last", [-1]), ("column", [-1, 1]))]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", F, list(w.shape)))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    graph = helper.make_graph(nodes, "routed", inputs, [helper.make_tensor_value_info("y", F, ["rows", OUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _assert_same_outputs(model: onnx.ModelProto, other: onnx.ModelProto, rows: int, seed: int) -> None:
    """Every output of ``other`` is ``model``'s in onnxruntime, on seeded rows and expert indices."""
    rng = np.random.default_rng(seed)
    x, idx = rng.standard_normal((rows, IN)).astype(np.float32), rng.integers(0, EXPERTS, rows).astype(np.int64)
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, other)]
    for want, got in zip(*(s.run(None, {"x": x, "idx": idx}) for s in sessions)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _run(model: onnx.ModelProto, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "idx": idx})[0]


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_routed_product_of_a_constant_stack_is_a_site(side):
    (site,) = experts.sites(_routed(side), {"x": (7, IN), "idx": (7,)})
    assert (site.side, site.experts, site.outputs, site.inputs, site.rows) == (side, EXPERTS, OUT, IN, 7)


@pytest.mark.parametrize("model", [_routed("left", gather_axis=1), _routed("left", weight_input=True),
                                   _routed("right", weight_input=True)],
                         ids=["gathered along another axis", "left, weights an input", "right, weights an input"])
def test_other_products_are_not_sites(model):
    assert experts.sites(model, {"x": (7, IN), "idx": (7,)}) == []


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("index", ["unsqueezed", "reshaped"])
def test_a_gathernd_of_a_stack_is_read_as_the_gather_it_is(side, index):
    """torch's dynamo exporter gathers the routed stack with GatherND over an index of a last axis 1: no site as
    exported, one as :func:`experts.as_gathers` writes it, whose values are the original's (negative indices, NaN
    and infinite rows), an index out of range failing in both."""
    model = _routed(side, index=index)
    shapes = {"x": (7, IN), "idx": (7,)}
    assert experts.sites(model, shapes) == []
    gathered = experts.as_gathers(model, shapes)
    assert not any(n.op_type in ("GatherND", "Unsqueeze") and n.input[0] == "idx" for n in gathered.graph.node)
    (site,) = experts.sites(gathered, shapes)
    assert (site.side, site.experts, site.outputs, site.inputs) == (side, EXPERTS, OUT, IN)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((7, IN)).astype(np.float32)
    x[1, 2], x[3, 0], x[4] = np.nan, np.inf, -3e38
    idx = rng.integers(-EXPERTS, EXPERTS, 7).astype(np.int64)
    np.testing.assert_array_equal(_run(gathered, x, idx), _run(model, x, idx))
    for m in (model, gathered):
        with pytest.raises(Exception, match="(?i)indices|index|range|bound"):
            _run(m, x[:3], np.array([0, EXPERTS, 1], np.int64))


@pytest.mark.parametrize("last", [1, 2])
def test_a_gathernd_is_a_gather_only_where_its_index_names_one_axis(last):
    """An index [S, 1] given as an input: a Squeeze of it, then the Gather; an index of (expert, row) pairs [S, 2]
    gathers rows of matrices, no stack: left as it is."""
    w = np.random.default_rng(0).standard_normal((EXPERTS, OUT, IN)).astype(np.float32)
    v = np.random.default_rng(1).standard_normal((IN, 3)).astype(np.float32)
    nodes = [helper.make_node("GatherND", ["w", "idx"], ["g"]), helper.make_node("MatMul", ["g", "v"], ["y"])]
    out = ["rows", IN, 3] if last == 1 else ["rows", 3]
    graph = helper.make_graph(nodes, "nd", [helper.make_tensor_value_info("idx", I64, ["rows", last])],
                              [helper.make_tensor_value_info("y", F, out)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(v, "v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    written = experts.as_gathers(model, {"idx": (5, last)})
    if last == 2:
        assert written is model
        return
    assert [n.op_type for n in written.graph.node] == ["Squeeze", "Gather", "MatMul"]
    idx = np.array([[0], [3], [-1], [2], [-4]], np.int64)
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, written)]
    want, got = (s.run(None, {"idx": idx})[0] for s in sessions)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_the_dense_form_gives_the_routed_values(side, rows):
    model = _routed(side)
    dense = experts.dense(model, experts.sites(model, {"x": (rows, IN), "idx": (rows,)}))
    assert not any(n.op_type == "Gather" for n in dense.graph.node)  # the stack is no longer gathered
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, IN)).astype(np.float32)
    idx = rng.integers(-EXPERTS, EXPERTS, rows).astype(np.int64)  # negative indices count from the end in both
    np.testing.assert_allclose(_run(dense, x, idx), _run(model, x, idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_nan_and_infinities_stay_in_their_rows(side):
    model = _routed(side)
    dense = experts.dense(model, experts.sites(model))
    rows = 8
    x = np.random.default_rng(1).standard_normal((rows, IN)).astype(np.float32)
    x[1, 2], x[3, 0], x[4, 4], x[5] = np.nan, np.inf, -np.inf, 3e18  # a NaN, infinities, a row near no overflow
    x[6, 1], x[6, 2] = np.inf, -np.inf  # inf - inf: NaN in its row only
    idx = np.array([0, 1, 2, 3, 0, 1, 2, 3], np.int64)
    want, got = _run(model, x, idx), _run(dense, x, idx)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5)
    assert np.isnan(want[1]).all() and np.isfinite(want[0]).all()  # the oracle saw the edge cases


@pytest.mark.parametrize("side", ["left", "right"])
def test_an_index_out_of_range_fails_in_both_forms(side):
    model = _routed(side)
    dense = experts.dense(model, experts.sites(model))
    x, idx = np.ones((3, IN), np.float32), np.array([0, EXPERTS, 1], np.int64)
    for m in (model, dense):
        with pytest.raises(Exception, match="(?i)indices|index|range|bound"):
            _run(m, x, idx)


def test_the_run_times_both_forms_and_writes_the_model_it_chose():
    model = _routed("left")
    written, notes = dense_where_faster(model, {"x": (64, IN), "idx": (64,)}, threads=1, seed=0)
    assert len(notes) == 1 and "gathered" in notes[0] and "dense" in notes[0] and "at 1 row(s)" in notes[0]
    assert ("written dense" in notes[0]) == (written is not model)
    rng = np.random.default_rng(3)
    for rows in (1, 9, 80):  # below and above where a switch may turn
        x, idx = rng.standard_normal((rows, IN)).astype(np.float32), rng.integers(0, EXPERTS, rows).astype(np.int64)
        np.testing.assert_allclose(_run(written, x, idx), _run(model, x, idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_switched_site_runs_the_users_form_below_its_rows_and_the_dense_one_from_them(side):
    model = _routed(side)
    (site,) = experts.sites(model, {"x": (16, IN), "idx": (16,)})
    switched = experts.dense(model, [site], {site.matmul: 8})
    assert [n.op_type for n in switched.graph.node if n.op_type == "If"] == ["If"]
    rng = np.random.default_rng(5)
    for rows in (0, 1, 7, 8, 30):
        x, idx = rng.standard_normal((rows, IN)).astype(np.float32), rng.integers(-EXPERTS, EXPERTS, rows)
        np.testing.assert_allclose(_run(switched, x, idx), _run(model, x, idx), rtol=1e-5, atol=1e-5)


def test_the_dense_form_runs_from_the_fewest_rows_it_was_faster_at_every_size_timed():
    assert from_rows({256: (10.0, 1.0), 64: (5.0, 1.0), 16: (1.0, 2.0), 1: (0.1, 1.0)}) == 64
    assert from_rows({256: (10.0, 1.0), 64: (5.0, 1.0), 1: (1.0, 0.5)}) == 1
    assert from_rows({256: (1.0, 1.0), 64: (5.0, 1.0), 1: (1.0, 0.5)}) is None  # not faster at the most rows
    assert ladder(256) == [1, 4, 16, 64, 256] and ladder(3) == [1, 3]


def test_a_site_whose_rows_are_unknown_is_kept_as_exported():
    model = _routed("right")
    written, notes = dense_where_faster(model, {}, threads=1, seed=0)
    assert written is model
    assert notes == [f"1 routed expert product(s) ({EXPERTS} experts of {OUT}x{IN}, ? rows): kept as exported (rows "
                     "unknown to shape inference)"]


def test_a_site_onnxruntime_cannot_time_is_kept_as_exported():
    """A bfloat16 stack and rows: onnxruntime's CPU provider has no bfloat16 MatMul, so neither form is timed; the
    model is returned as it was, the note saying why."""
    model = _routed("left")
    w = next(t for t in model.graph.initializer if t.name == "w")
    w.CopyFrom(helper.make_tensor("w", TensorProto.BFLOAT16, list(w.dims), numpy_helper.to_array(w).ravel()))
    for vi in (*model.graph.input[:1], *model.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.BFLOAT16
    written, notes = dense_where_faster(model, {"x": (8, IN), "idx": (8,)}, threads=1, seed=0)
    assert written is model and len(notes) == 1 and "could not be timed" in notes[0], notes


def test_a_site_whose_rows_inference_lost_is_timed_as_its_like():
    """Two layers of one mixture's experts, the second's router index passed through a NonZero (its rows unknown to
    shape inference, its values the same): it is timed and written as the first, whose rows are known."""
    model = _routed("left")
    g = model.graph
    w = numpy_helper.to_array(next(t for t in g.initializer if t.name == "w"))
    g.initializer.append(numpy_helper.from_array(w[::-1].copy(), "w2"))
    g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "zero_axis"))
    g.node.extend([helper.make_node("Mul", ["idx", "zero_axis"], ["zeros"]),
                   helper.make_node("Not", ["zeros_bool"], ["everywhere"]),
                   helper.make_node("NonZero", ["everywhere"], ["where"]),
                   helper.make_node("Squeeze", ["where", "zero_axis"], ["positions"]),
                   helper.make_node("Gather", ["idx", "positions"], ["idx2"]),
                   helper.make_node("Gather", ["w2", "idx2"], ["g2"], axis=0),
                   helper.make_node("MatMul", ["g2", "xu"], ["y3b"], name="routed2"),
                   helper.make_node("Squeeze", ["y3b", "axis"], ["y2"])])
    g.node.insert(len(g.node) - 7, helper.make_node("Cast", ["zeros"], ["zeros_bool"], to=TensorProto.BOOL))
    g.output.append(helper.make_tensor_value_info("y2", F, ["rows", OUT]))
    onnx.checker.check_model(model)
    shapes = {"x": (64, IN), "idx": (64,)}
    assert [s.rows for s in experts.sites(model, shapes)] == [64, None]
    written, notes = dense_where_faster(model, shapes, threads=1, seed=0)
    assert len(notes) == 2 and "64 rows as their like" in notes[1]
    assert notes[0].endswith("written dense") == notes[1].endswith("written dense")
    _assert_same_outputs(model, written, rows=9, seed=4)


def test_nodes_without_names_are_told_apart_by_their_outputs():
    """Exporters may leave node names empty: a routed product and an unrelated MatMul, both unnamed, only the routed
    one rewritten (the other's values unchanged)."""
    model = _routed("left")
    g = model.graph
    for n in g.node:
        n.name = ""
    g.initializer.append(numpy_helper.from_array(np.ones((OUT, 3), np.float32), "plain"))
    g.node.append(helper.make_node("MatMul", ["y", "plain"], ["z"]))
    g.output.append(helper.make_tensor_value_info("z", F, ["rows", 3]))
    dense = experts.dense(model, experts.sites(model, {"x": (5, IN), "idx": (5,)}))
    assert sum(n.op_type == "MatMul" for n in dense.graph.node) == 2  # the dense GEMM and the unrelated one
    _assert_same_outputs(model, dense, rows=5, seed=6)


def test_rows_that_broadcast_and_weights_the_user_may_feed_are_not_sites():
    """One expert index for every row (the MatMul broadcasts it), and a stack that is also a graph input (a default
    the user may override): neither is the dense form's function."""
    model = _routed("left")
    assert experts.sites(model, {"x": (8, IN), "idx": (1,)}) == []
    overridable = _routed("left")
    w = next(t for t in overridable.graph.initializer if t.name == "w")
    overridable.graph.input.append(helper.make_tensor_value_info("w", F, list(w.dims)))
    assert experts.sites(overridable, {"x": (8, IN), "idx": (8,)}) == []


def test_a_subgraph_reading_the_stack_and_the_gathered_weights_keeps_them():
    """An If whose branch reads the weight stack and the gathered weights (outer names): the rewrite keeps both for
    it, and the model runs as the original in onnxruntime."""
    model = _routed("left")
    then = helper.make_graph([helper.make_node("ReduceSum", ["g"], ["t"], keepdims=0)], "then", [],
                             [helper.make_tensor_value_info("t", F, [])])
    other = helper.make_graph([helper.make_node("ReduceSum", ["w"], ["e"], keepdims=0)], "else", [],
                              [helper.make_tensor_value_info("e", F, [])])
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    g.node.append(helper.make_node("If", ["cond"], ["total"], then_branch=then, else_branch=other))
    g.output.append(helper.make_tensor_value_info("total", F, []))
    dense = experts.dense(model, experts.sites(model, {"x": (6, IN), "idx": (6,)}))
    _assert_same_outputs(model, dense, rows=6, seed=7)


def test_a_rewrite_that_is_not_the_original_is_told_apart():
    """The check the run makes before it keeps the dense form: onnxruntime on both, one seeded feed."""
    model = _routed("right")
    assert disagreement(model, experts.dense(model, experts.sites(model)), {"x": (5, IN), "idx": (5,)}, 0) is None
    other = _routed("right")
    w = next(t for t in other.graph.initializer if t.name == "w")
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) + 1, "w"))
    assert "differs" in disagreement(model, other, {"x": (5, IN), "idx": (5,)}, 0)


def test_the_names_the_rewrite_makes_are_new_in_the_model():
    """A model already holding the names the rewrite would make from a site's output (``y3_dense_rows``,
    ``y3_dense_count``, ``w_dense_left``): the rewritten model is valid (every name defined once) and the original's
    function, switched and not."""
    model = _routed("left")
    g = model.graph
    taken = ["y3_dense_rows", "y3_dense_count", "y3_gathered", "w_dense_left"]
    for name in taken:
        g.initializer.append(numpy_helper.from_array(np.zeros((1,), np.float32), name))
        g.node.append(helper.make_node("Identity", [name], [name + "_out"]))
        g.output.append(helper.make_tensor_value_info(name + "_out", F, [1]))
    sites = experts.sites(model, {"x": (6, IN), "idx": (6,)})
    for switched in (None, {sites[0].matmul: 4}):
        dense = experts.dense(model, sites, switched)
        onnx.checker.check_model(dense, full_check=True)
        for rows in (2, 6):
            _assert_same_outputs(model, dense, rows=rows, seed=rows)


def test_a_site_of_no_rows_is_not_timed():
    """Tuned at 0 rows (inference then gives 0): nothing to time; the model is returned as it was."""
    model = _routed("left")
    written, notes = dense_where_faster(model, {"x": (0, IN), "idx": (0,)}, threads=1, seed=0)
    assert written is model and len(notes) == 1 and "kept as exported" in notes[0]
