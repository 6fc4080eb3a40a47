"""A dense layer's all-zero bias is not written (eqsat/onnx/neutral.py): onnxruntime runs the written model to the
original's values on random inputs and on the edges (NaN, infinities, values near float32's range); the additions
that are not a dense layer's bias (one that broadcasts up, one after a non-dense node, an output's own node) stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from zoo_cases import zoo_model

from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.onnx.neutral import without_neutral
from eqsat.verification import verify

F = TensorProto.FLOAT
N = helper.make_node


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((16, 16)).astype(np.float32), "zb": np.zeros(16, np.float32),
        "w2": rng.standard_normal((16, 16)).astype(np.float32), "zc": np.zeros((1, 16), np.float32),
        "k": rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "zk": np.zeros(4, np.float32),
        "zwide": np.zeros((2, 8, 16), np.float32), "nb": np.full(16, 0.5, np.float32),
        "zn": np.full(16, -0.0, np.float32),
    }
    nodes = [
        N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "zb"], ["mb"]),       # dense, 3-D: dropped
        N("Relu", ["mb"], ["r"]),
        N("Sub", ["r", "zb"], ["rs"]),                                       # after a Relu: stays
        N("MatMul", ["rs", "w"], ["m2"]), N("Add", ["zb", "m2"], ["m2b"]),   # zero first: dropped
        N("Add", ["m2b", "zwide"], ["wide"]),                                # broadcasts [1,8,16] up: stays
        N("MatMul", ["rs", "w"], ["m3"]), N("Add", ["m3", "nb"], ["m3b"]),   # a real bias: stays
        N("MatMul", ["rs", "w2"], ["m4"]), N("Sub", ["m4", "zn"], ["m4b"]),  # minus -0.0: dropped
        N("Add", ["m4b", "m3b"], ["sum"]),
        N("Gemm", ["x2", "w2", "zc"], ["g"]),                                # Gemm's zero C: dropped
        N("Conv", ["img", "k", "zk"], ["c"], pads=[1, 1, 1, 1]),             # Conv's zero B: dropped
        N("MatMul", ["sum", "w"], ["m5"]), N("Add", ["m5", "zb"], ["last"]),  # an output's own node: stays
    ]
    graph = helper.make_graph(
        nodes, "neutral",
        [helper.make_tensor_value_info("x", F, [1, 8, 16]), helper.make_tensor_value_info("x2", F, [5, 16]),
         helper.make_tensor_value_info("img", F, [1, 1, 6, 6])],
        [helper.make_tensor_value_info(n, F, s) for n, s in
         (("wide", [2, 8, 16]), ("g", [5, 16]), ("c", [1, 4, 6, 6]), ("last", [1, 8, 16]))],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model as written
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _edges(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    a = rng.standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    picks = rng.choice(flat.size, size=min(6, flat.size), replace=False)
    flat[picks] = [np.nan, np.inf, -np.inf, 3e38, -3e38, -0.0][:len(picks)]
    return a


def test_only_dense_zero_biases_go_and_the_values_stay():
    original = _model()
    out = without_neutral(_model())
    onnx.checker.check_model(out)
    kinds = [n.op_type for n in out.graph.node]
    assert kinds.count("Add") == 4 and kinds.count("Sub") == 1, kinds  # mb, m2b, m4b gone
    gemm = next(n for n in out.graph.node if n.op_type == "Gemm")
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert list(gemm.input) == ["x2", "w2"] and list(conv.input) == ["img", "k"]
    assert {t.name for t in out.graph.initializer} == {"w", "zb", "w2", "k", "zwide", "nb"}  # unread ones removed
    assert [o.name for o in out.graph.output] == [o.name for o in original.graph.output]
    rng = np.random.default_rng(1)
    for edge in (False, True):
        feeds = {i.name: (_edges if edge else lambda r, s: r.standard_normal(s).astype(np.float32))(
            rng, tuple(d.dim_value for d in i.type.tensor_type.shape.dim)) for i in original.graph.input}
        for got, want in zip(_run(out, feeds), _run(original, feeds)):
            np.testing.assert_array_equal(got, want)  # NaN where NaN; +0.0 and -0.0 compare equal


def test_a_model_without_neutral_operands_is_unchanged():
    model = _model()
    del model.graph.node[:]
    model.graph.node.extend([N("MatMul", ["x", "w"], ["wide"]), N("Gemm", ["x2", "w2"], ["g"]),
                             N("Conv", ["img", "k"], ["c"]), N("Add", ["wide", "nb"], ["last"])])
    before = model.SerializeToString()
    assert without_neutral(model).SerializeToString() == before


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_a_written_zoo_model_keeps_no_zero_bias_and_its_values(name):
    """The zoo's BERT (MatMul + Add) and GPT-2 (Gemm) take transformers' init, zero biases: written by the
    exporter, no dense layer's output gets an all-zero initializer added, and the values are the original's."""
    original = zoo_model(name, "torchscript", 17)
    zero = {t.name for t in original.graph.initializer if not numpy_helper.to_array(t).any()}
    before = sum(n.op_type in ("Add", "Gemm") and any(i in zero for i in n.input[:3]) for n in original.graph.node)
    assert before > 0, f"the zoo's {name} has no zero bias: the test checks nothing"
    out = export_model(import_model(original))
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    dense = {o for n in out.graph.node if n.op_type in ("MatMul", "Gemm") for o in n.output}
    assert not [n.name for n in out.graph.node if n.op_type == "Add" and any(i in dense for i in n.input)
                and any(i in inits and not inits[i].any() for i in n.input)]
    assert not [n.name for n in out.graph.node if n.op_type == "Gemm" and len(n.input) > 2
                and n.input[2] in inits and not inits[n.input[2]].any()]
    check = verify(original, out, seed=0)
    assert check.passed, check.detail
