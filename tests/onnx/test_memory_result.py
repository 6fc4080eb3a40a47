"""The models a run returns are restored from its weight pool only when asked, and written
from the pool a tensor at a time (the bytes onnx writes for the restored model, the oracle); the weights the exporter
folds are held once, in the pool, and shared by every program that folds them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.ir import Graph, input_, make, weight
from eqsat.onnx import export_model
from eqsat.onnx import io as onnx_io
from eqsat.onnx import pool as weight_pool
from eqsat.onnx.external import save_external, save_streamed

RNG = np.random.default_rng(3)
W1 = RNG.standard_normal((128, 256)).astype(np.float32)  # 128 KiB: pooled
W2 = RNG.standard_normal((256, 128)).astype(np.float32)
X = RNG.standard_normal((4, 128)).astype(np.float32)


def mlp() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128])],
                          [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2"),
                           numpy_helper.from_array(np.arange(4, dtype=np.float32), "small")])
    g.initializer[0].doc_string = "fields after raw_data"  # written after the data: the byte order must hold
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="t")
    m.graph.initializer[1].metadata_props.add(key="k", value="v")
    return m


def plain_run(model: onnx.ModelProto) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": X})[0]


def test_a_slim_model_is_written_from_the_pool_as_its_restored_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = mlp()
    with weight_pool.pooled() as pool:
        slim = pool.slim(model)
        assert pool.refers(slim) and slim.ByteSize() < 4096
        streamed, external = str(tmp_path / "s.onnx"), str(tmp_path / "e.onnx")
        save_streamed(slim, streamed, pool)
        save_external(slim, external, pool)
        assert onnx_io.writes_data_file(slim, True, pool) and not onnx_io.writes_data_file(slim, False, pool)
        assert not onnx_io.is_large(slim, pool)
        restored = pool.restore(onnx.ModelProto.FromString(slim.SerializeToString()))
    with open(streamed, "rb") as f:
        assert f.read() == restored.SerializeToString() == model.SerializeToString()  # onnx's own bytes
    back = onnx.load(external)  # its data file resolved by onnx's loader
    assert [t.name for t in back.graph.initializer] == [t.name for t in model.graph.initializer]
    for got, want in zip(back.graph.initializer, model.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(got), numpy_helper.to_array(want))
    assert back.graph.initializer[0].doc_string == "fields after raw_data"


def _config(**kw: object) -> eqsat.OptimizeConfig:
    return eqsat.OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1, final_extractor="greedy-dag",
                                   **kw)


@pytest.mark.parametrize("allow_slower", [False, True])
def test_the_result_is_restored_only_when_asked_and_writes_what_onnx_would(tmp_path, allow_slower) -> None:  # type: ignore[no-untyped-def]
    model = mlp()
    path = str(tmp_path / "in.onnx")
    onnx.save_model(model, path)
    result = eqsat.optimize(path, _config(allow_slower=allow_slower))
    assert result.weights is not None and result.weights.refers(result._optimized)  # not restored yet
    out = str(tmp_path / "out.onnx")
    result.write(out)
    assert result.weights.refers(result._optimized)  # written from the pool, still not restored
    optimized = result.optimized  # restored now
    assert all(t.data_location != TensorProto.EXTERNAL for t in optimized.graph.initializer)
    with open(out, "rb") as f:
        assert f.read() == optimized.SerializeToString()  # onnx's serializer on the restored model: the oracle
    assert result.original.SerializeToString() == model.SerializeToString()
    np.testing.assert_allclose(plain_run(optimized), plain_run(model), rtol=1e-4, atol=1e-4)
    ext = str(tmp_path / "ext.onnx")
    result.write(ext, external=True)
    np.testing.assert_allclose(plain_run(onnx.load(ext)), plain_run(model), rtol=1e-4, atol=1e-4)


def test_folded_weights_are_pooled_once_and_shared() -> None:
    """A value the exporter folds from weights (here the concatenation of two) is the pool's, not a heap copy in
    the model: two exports of it add it once, and both refer to it."""
    a, b = weight("a", (128, 128)), weight("b", (128, 128))
    x = input_("x", (4, 128))
    y = make("matmul", [x, make("concat", [a, b], (1,))], (0,))
    wa, wb = RNG.standard_normal((128, 128)).astype(np.float32), RNG.standard_normal((128, 128)).astype(np.float32)
    graph = Graph((x,), (y,), ("y",), {"a": wa, "b": wb})
    expected = X @ np.concatenate([wa, wb], axis=1)
    with weight_pool.pooled() as pool:
        first, second = export_model(graph), export_model(graph)
        assert len(pool.folded) == 1 and sum(map(len, pool.folded.values())) == 1
        for m in (first, second):
            (t,) = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
            np.testing.assert_array_equal(pool.data(t), np.concatenate([wa, wb], axis=1))
            got = onnx_io.session(m).run(None, {"x": X})[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
    plain = export_model(graph)  # without a pool: the value in the model, as before
    np.testing.assert_allclose(plain_run(plain), expected, rtol=1e-4, atol=1e-3)


def test_a_result_pickles_and_copies_self_contained(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A Result crosses a pickle (a worker process's return value) and copy.deepcopy as it did when it was a
    dataclass of self-contained models: the pool's mapped arrays and onnxruntime values stay behind, the models
    go with their data."""
    import copy
    import pickle

    model = mlp()
    path = str(tmp_path / "in.onnx")
    onnx.save_model(model, path)
    result = eqsat.optimize(path, _config(allow_slower=True))
    assert result.weights is not None and result.weights.refers(result._optimized)
    expected = str(tmp_path / "expected.onnx")
    result.write(expected)
    for other in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert other.weights is None
        assert other.original.SerializeToString() == model.SerializeToString()
        assert other.optimized.SerializeToString() == result.optimized.SerializeToString()
        assert other.report == result.report and other.graph.name == result.graph.name
        out = str(tmp_path / "out.onnx")
        other.write(out)
        with open(out, "rb") as f, open(expected, "rb") as g:
            assert f.read() == g.read()
    same = eqsat.optimize(path, _config(allow_slower=False, scheduler="none"))
    if same.report.returned.program == "original":  # one model returned twice stays one after a pickle
        again = pickle.loads(pickle.dumps(same))
        assert again.optimized is again.original
