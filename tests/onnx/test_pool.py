"""The run's weight pool (eqsat.onnx.pool): every session reads one copy of the weights, candidates refer to it,
and the outputs stay those of onnxruntime on the original model built without the pool (the oracle)."""

from __future__ import annotations

import gc
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.measurement.clock import timing_session
from eqsat.measurement.timing import session_count
from eqsat.onnx import io as onnx_io
from eqsat.onnx import pool as weight_pool
from eqsat.verification import verify


def mlp(seed: int = 0, second: np.ndarray | None = None) -> onnx.ModelProto:
    """x (4, 128) -> relu(x @ W1 + b) @ W2: two large weights (64 KiB each and more), one small."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((128, 256)).astype(np.float32)
    w2 = rng.standard_normal((256, 128)).astype(np.float32) if second is None else second
    b = rng.standard_normal(256).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b, "b"),
                           numpy_helper.from_array(w2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def plain_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The oracle: onnxruntime on the serialized model, no pool."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


X = np.random.default_rng(1).standard_normal((4, 128)).astype(np.float32)


def test_sessions_share_one_copy_and_compute_as_without_the_pool() -> None:
    a = mlp(0)
    w2_other = np.random.default_rng(9).standard_normal((256, 128)).astype(np.float32)
    b = mlp(0, second=w2_other)  # w1 and b the same as a's, w2 different under the same name
    with weight_pool.pooled() as pool:
        ya = onnx_io.session(a).run(None, {"x": X})[0]
        yb = timing_session(b, threads=1).run(None, {"x": X})[0]
        # w1 once (shared), w2 twice (same name, other content); b is small and stays in the models
        assert sorted((k[0], len(v)) for k, v in pool.entries.items()) == [("w1", 1), ("w2", 2)]
        assert pool.held == 128 * 256 * 4 + 2 * 256 * 128 * 4
        assert os.path.getsize(pool.path) >= pool.held
        assert pool.sessions == 2
    np.testing.assert_allclose(ya, plain_run(a, X), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(yb, plain_run(b, X), rtol=1e-5, atol=1e-5)
    assert not np.allclose(ya, yb)  # w2 really differs: a pool that mixed them up would fail above
    assert not os.path.exists(pool.folder)  # removed on exit


def test_a_slim_candidate_refers_to_the_pool_file_and_restores_exactly() -> None:
    a = mlp(3)
    before = {t.name: t.raw_data for t in a.graph.initializer}
    with weight_pool.pooled() as pool:
        onnx_io.session(a)
        cand = pool.slim(a)
        assert {t.name: t.raw_data for t in a.graph.initializer} == before  # a copy: a itself unchanged
        refs = {t.name: {e.key: e.value for e in t.external_data} for t in cand.graph.initializer
                if t.data_location == TensorProto.EXTERNAL}
        assert set(refs) == {"w1", "w2"}
        assert {r["location"] for r in refs.values()} == {weight_pool.FILE}
        assert len(pool.entries) == 2  # the candidate's weights are the original's entries, not new ones
        assert cand.ByteSize() < 4096 < a.ByteSize()
        assert onnx_io.weight_bytes(cand) == onnx_io.weight_bytes(a)
        y = onnx_io.session(cand).run(None, {"x": X})[0]
        pool.restore(cand)
    np.testing.assert_array_equal(y, plain_run(a, X))
    assert {t.name: t.raw_data for t in cand.graph.initializer} == before
    assert all(t.data_location != TensorProto.EXTERNAL for t in cand.graph.initializer)


def test_a_model_read_from_external_data_is_pooled_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """onnx.load reads external data into the tensors and marks them DEFAULT (the field set, so present): they are
    the model's data like any other, and go to the pool (not copied into each session)."""
    a = mlp(5)
    path = str(tmp_path / "m.onnx")
    onnx.save(mlp(5), path, save_as_external_data=True, location="m.onnx.data", size_threshold=1024)  # (in place)
    loaded = onnx.load(path)
    assert any(t.HasField("data_location") for t in loaded.graph.initializer)  # what the bug keyed on
    with weight_pool.pooled() as pool:
        slim = pool.slim(loaded)
        refs = {t.name for t in slim.graph.initializer if t.data_location == TensorProto.EXTERNAL}
        assert refs == {"w1", "w2"}
        assert slim.ByteSize() < 4096
        y = onnx_io.session(loaded).run(None, {"x": X})[0]
        assert pool.held == 2 * 128 * 256 * 4  # the session read them from the pool
    np.testing.assert_array_equal(y, plain_run(a, X))


def test_session_count_counts_a_slim_models_weights() -> None:
    """A slim candidate holds no bytes, but its sessions hold (prepacked) copies: it counts as its weights."""
    big = mlp(0)
    with weight_pool.pooled() as pool:
        slim = pool.slim(onnx.ModelProto.FromString(big.SerializeToString()))
        held = onnx_io.weight_bytes(big)
        limit = held * 4 + 1  # room for two sessions of each of the two programs
        import eqsat.measurement.timing as timing
        old = timing.SESSIONS_WEIGHT_LIMIT
        timing.SESSIONS_WEIGHT_LIMIT = limit
        try:
            assert session_count([big, slim], 10, 0.0, 10.0) == session_count([big, big], 10, 0.0, 10.0) == 2
        finally:
            timing.SESSIONS_WEIGHT_LIMIT = old


def test_verification_leaves_no_session_alive() -> None:
    a, b = mlp(0), mlp(0)
    import weakref
    made: list[weakref.ref] = []
    with weight_pool.pooled() as pool:
        real = pool.session

        def tracked(*args, **kwargs):  # type: ignore[no-untyped-def]
            s = real(*args, **kwargs)
            made.append(weakref.ref(s))
            return s

        pool.session = tracked  # type: ignore[method-assign]
        check = verify(a, b, seed=0, draws=2)
        gc.collect()
        assert check.passed and len(made) == 2
        assert all(r() is None for r in made)


@pytest.mark.parametrize("measure", [False, True])
def test_optimize_through_the_pool_matches_onnxruntime_and_reports_memory(measure: bool) -> None:
    model = mlp(5)
    config = eqsat.OptimizeConfig.of(cost="analytic", measure=measure, measure_budget=0.5, budget=2, depth=1,
                                     final_extractor="greedy-dag", allow_slower=True)  # measured even if unchanged
    result = eqsat.optimize(model, config)
    assert weight_pool.current() is None  # the run's pool is gone with the run
    out = result.optimized
    assert all(t.data_location != TensorProto.EXTERNAL for t in out.graph.initializer)  # self-contained
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, plain_run(model, X), rtol=1e-4, atol=1e-4)
    assert (result.report.measured is not None) == measure
    mem = result.report.memory_mb
    assert set(mem) == set(result.report.times)
    assert all(0 < v < 64 * 1024 for v in mem.values())


def test_the_callers_model_is_left_exactly_as_it_was() -> None:
    """The run never changes the caller's model (a model read from a path it holds slim, its weights in the pool,
    and gives back whole)."""
    model = mlp(7)
    before = model.SerializeToString()
    config = eqsat.OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1, final_extractor="greedy-dag")
    result = eqsat.optimize(model, config)
    assert model.SerializeToString() == before
    assert result.original.SerializeToString() == before
    with pytest.raises(eqsat.errors.InputError):
        eqsat.optimize(model, eqsat.OptimizeConfig.of(input_shapes={"nope": (1,)}))
    assert model.SerializeToString() == before


def test_a_model_read_from_a_path_is_returned_whole(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = mlp(8)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(model, path)
    config = eqsat.OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1, final_extractor="greedy-dag")
    result = eqsat.optimize(path, config)
    assert result.original.SerializeToString() == model.SerializeToString()
    for out in (result.original, result.optimized):
        assert all(t.data_location != TensorProto.EXTERNAL for t in out.graph.initializer)
        np.testing.assert_allclose(plain_run(out, X), plain_run(model, X), rtol=1e-4, atol=1e-4)


def test_the_exporter_writes_the_pools_weights_as_references() -> None:
    """Inside a run the IR's weights are the pool's arrays, and an exported program refers to them (no copy)."""
    from eqsat.onnx import export_model, import_model

    model = mlp(4)
    with weight_pool.pooled() as pool:
        graph = import_model(model)
        out = export_model(graph)
        refs = [t.name for t in out.graph.initializer if t.data_location == TensorProto.EXTERNAL]
        assert sorted(refs) == ["w1", "w2"] and len(pool.entries) == 2
        assert out.ByteSize() < 4096
        onnx_io.check(out)  # the checker reads it where the references resolve
        y = onnx_io.session(out).run(None, {"x": X})[0]
    np.testing.assert_allclose(y, plain_run(model, X), rtol=1e-5, atol=1e-5)
    plain = export_model(import_model(model))  # no pool: a self-contained model, as before
    assert all(t.data_location != TensorProto.EXTERNAL for t in plain.graph.initializer)
    np.testing.assert_allclose(plain_run(plain, X), y, rtol=1e-6, atol=1e-6)


def test_a_shape_generic_rewrite_reads_pooled_constants() -> None:
    """An exported candidate's large folded constants are references into the pool: the shape-generic rewrite
    reads them through the pool (an And with an all-true [1, 1, s, s] mask of 64 KiB and more is dropped as it is
    inline), and the written model computes what the original does in onnxruntime at other sizes."""
    from eqsat.generic import make_generic

    s = 256  # a [1, 1, 256, 256] bool mask: 64 KiB, pooled
    nodes = [helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.BOOL),
             helper.make_node("And", ["true", "m"], ["both"]),
             helper.make_node("Where", ["both", "x", "zero"], ["y"])]
    inits = [numpy_helper.from_array(np.ones((1, 1, s, s), bool), "true"),
             numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", 1, s, s])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, s, s])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, s, s])
    model = helper.make_model(helper.make_graph(nodes, "g", [mask, x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    with weight_pool.pooled() as shared:
        slim = shared.slim(model)
        ref = next(t for t in slim.graph.initializer if t.name == "true")
        assert ref.data_location == TensorProto.EXTERNAL  # the case: a reference, not the data
        with pytest.raises(onnx.checker.ValidationError):  # onnx reads external data from a file beside it
            numpy_helper.to_array(ref)
        assert weight_pool.array_of(ref).shape == (1, 1, s, s) and weight_pool.array_of(ref).all()
        written = make_generic(slim, model, {"batch": 1}).model
        assert "And" not in [n.op_type for n in written.graph.node]
        shared.restore(written)
    got = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for b in (1, 3):
        feeds = {"mask": rng.integers(0, 2, (b, 1, s, s)).astype(np.int64),
                 "x": rng.standard_normal((b, 1, s, s)).astype(np.float32)}
        np.testing.assert_array_equal(got.run(None, feeds)[0], want.run(None, feeds)[0])


@pytest.mark.parametrize("rows", [128, 160])
def test_a_table_the_transpose_optimizer_rewrites_is_not_shared(rows: int) -> None:
    """``Transpose -> Add(table) -> Transpose back``: onnxruntime's transpose optimizer cancels the two and transposes
    the table in place under its name. Handed over as a shared value, the session ran with the untransposed table:
    wrong values where it is square (128), a shape error where not (160; YOLOS's detection position table).
    Pooled, the session now computes what numpy and onnxruntime without the pool do."""
    table = np.random.default_rng(1).standard_normal((1, rows, 128)).astype(np.float32)  # 64 KiB and more: pooled
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), helper.make_node("Add", ["t", "table"], ["a"]),
             helper.make_node("Transpose", ["a"], ["y"], perm=[0, 2, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 128, rows])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 128, rows])],
                              [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((2, 128, rows)).astype(np.float32)
    want = (x.transpose(0, 2, 1) + table).transpose(0, 2, 1)
    with weight_pool.pooled() as pool:
        got = onnx_io.session(model).run(None, {"x": x})[0]
        timed = timing_session(model, threads=1).run(None, {"x": x})[0]
        assert [k[0] for k in pool.entries] == ["table"]  # pooled all the same: one copy in the pool's file
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(timed, want, rtol=1e-6, atol=1e-6)
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(plain.run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)


def test_only_initializers_read_as_weights_are_shared() -> None:
    """A MatMul's weight is shared; one also read by an Add, one read in a subgraph, or one that is an output, not."""
    big = np.zeros((128, 128), np.float32)
    inner = helper.make_graph([helper.make_node("Identity", ["w_sub"], ["o"])], "then", [],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [128, 128])])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "w_add"], ["h2"]),
             helper.make_node("Add", ["h2", "w_add"], ["h3"]), helper.make_node("MatMul", ["h3", "w_sub"], ["h4"]),
             helper.make_node("If", ["c"], ["o"], then_branch=inner, else_branch=inner),
             helper.make_node("MatMul", ["h4", "w_out"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128]),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128]),
                               helper.make_tensor_value_info("o", TensorProto.FLOAT, [128, 128]),
                               helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [128, 128])],
                              [numpy_helper.from_array(big, n) for n in ("w", "w_add", "w_sub", "w_out")])
    assert weight_pool.weights_only(graph) == {"w"}
