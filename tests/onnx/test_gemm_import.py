"""A Gemm that is exactly ``x @ W + b`` imports as the IR's ``linear``: no transA, alpha and beta 1,
``B`` and ``C`` constants (initializers, Constant nodes, behind an Identity) with ``C`` a bias over the columns
([n] or [1, n]); ``B`` transposed at import where transB says so. Every other Gemm keeps the matmul (+ bias)
import. Either way an unchanged Gemm is written back as the user's node, with the original initializers, so
onnxruntime runs the same graph. Oracles: numpy's Gemm (alpha A' B' + beta C, in float64), onnxruntime on the
original model, and onnxruntime's optimized graph of the original for the node count.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_graphs import ort_graph, round_trip

from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model

N = helper.make_node
F = TensorProto.FLOAT
M, K, COLS = 5, 6, 4


def _gemm(trans_a: int = 0, trans_b: int = 0, alpha: float | None = None, beta: float | None = None,
          bias: tuple[int, ...] | None = (COLS,), source: str = "initializer", weight_input: bool = False,
          ) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray | None]:
    """``y = Gemm(x, W, c)`` with x [M, K] ([K, M] under transA), W [K, COLS] ([COLS, K] under transB) and c of
    shape ``bias`` (None: no C); W and c are initializers (``source``), Constant nodes, or initializers behind
    Identity nodes; W is a graph input with ``weight_input``. Returns the model, W and c."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((COLS, K) if trans_b else (K, COLS)).astype(np.float32)
    c = rng.standard_normal(bias).astype(np.float32) if bias is not None else None
    consts = {"w": w} if not weight_input else {}
    if c is not None:
        consts["c"] = c
    nodes, inits = [], []
    for name, value in consts.items():
        if source == "constant":
            nodes.append(N("Constant", [], [name], value=numpy_helper.from_array(value, name)))
        elif source == "identity":
            inits.append(numpy_helper.from_array(value, f"{name}_init"))
            nodes.append(N("Identity", [f"{name}_init"], [name]))
        else:
            inits.append(numpy_helper.from_array(value, name))
    given = (("transA", trans_a), ("transB", trans_b), ("alpha", alpha), ("beta", beta))
    attrs: dict[str, Any] = {k: v for k, v in given if v is not None and v != 0}  # unset: the default
    nodes.append(N("Gemm", ["x", "w"] + (["c"] if c is not None else []), ["y"], name="gemm", **attrs))
    inputs = [helper.make_tensor_value_info("x", F, (K, M) if trans_a else (M, K))]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", F, w.shape))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, (M, COLS))], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model, w, c


def _feeds(model: onnx.ModelProto, w: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    if "w" in feeds:
        feeds["w"] = w
    return feeds


def _numpy_gemm(model: onnx.ModelProto, feeds: dict[str, np.ndarray], w: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """The oracle: alpha * A' @ B' + beta * C in float64, with the Gemm node's attributes."""
    (gemm,) = [n for n in model.graph.node if n.op_type == "Gemm"]
    at = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    a = feeds["x"].astype(np.float64)
    a = a.T if at.get("transA", 0) else a
    b = w.T if at.get("transB", 0) else w
    return at.get("alpha", 1.0) * (a @ b) + (0.0 if c is None else at.get("beta", 1.0) * c)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _check_values(original: onnx.ModelProto, outs: list[onnx.ModelProto], w: np.ndarray, c: np.ndarray | None) -> None:
    for seed in (0, 1):
        feeds = _feeds(original, w, seed)
        expected = _numpy_gemm(original, feeds, w, c)
        for m in [original, *outs]:
            np.testing.assert_allclose(_run(m, feeds), expected, rtol=1e-5, atol=1e-5)


def _check_written_back(original: onnx.ModelProto, out: onnx.ModelProto, w: np.ndarray, c: np.ndarray | None) -> None:
    """The round trip writes the user's Gemm: its attributes, x, and initializers holding the original W and c (not
    a transposed or reshaped copy); onnxruntime runs as many nodes of it as of the original."""
    (gemm,) = [n for n in original.graph.node if n.op_type == "Gemm"]
    assert [n.op_type for n in out.graph.node] == ["Gemm"]
    (written,) = out.graph.node
    assert list(written.attribute) == list(gemm.attribute) and written.input[0] == "x"
    assert len(written.input) == len(gemm.input)
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    graph_inputs = {i.name for i in original.graph.input}
    for name, written_name in zip(gemm.input[1:], written.input[1:]):
        if name in graph_inputs:  # a weight fed at run time stays an input
            assert written_name == name
            continue
        got, want = inits[written_name], {"w": w, "c": c}[name]
        assert want is not None and got.shape == want.shape and np.array_equal(got, want)
    assert ort_graph(out)["nodes"] == ort_graph(original)["nodes"]


LINEAR = {  # name: the _gemm arguments of a Gemm that is exactly a linear
    "bias_n": {},
    "trans_b": {"trans_b": 1},
    "row_bias": {"bias": (1, COLS)},
    "unit_alpha_beta_written": {"alpha": 1.0, "beta": 1.0, "trans_b": 1},
    "constant_nodes": {"source": "constant", "trans_b": 1},
    "behind_identity": {"source": "identity", "bias": (1, COLS)},
}


@pytest.mark.parametrize("case", sorted(LINEAR))
def test_exact_gemm_imports_as_linear_and_round_trips_verbatim(case):
    model, w, c = _gemm(**LINEAR[case])
    assert c is not None
    graph = import_model(model)
    (y,) = graph.outputs
    assert y.op == "linear" and "matmul" not in graph.op_counts()
    x, wn, bn = y.inputs
    assert x.op == "input" and wn.op == "weight" and bn.op == "weight"
    want_w = w.T if LINEAR[case].get("trans_b") else w  # the IR's W is [k, n]
    assert np.array_equal(graph.weights[wn.name], want_w) and np.array_equal(graph.weights[bn.name], c.reshape(COLS))
    own = export_model(dataclasses.replace(graph, origins=()))  # linear's own form: one Gemm of W [k, n]
    assert [n.op_type for n in own.graph.node] == ["Gemm"] and not own.graph.node[0].attribute
    out = round_trip(model)
    _check_values(model, [own, out], w, c)
    _check_written_back(model, out, w, c)


OTHER = {  # name: the _gemm arguments of a Gemm that is no linear (kept as matmul, + bias)
    "trans_a": {"trans_a": 1},
    "alpha_half": {"alpha": 0.5},
    "beta_half": {"beta": 0.5, "trans_b": 1},
    "bias_m_by_n": {"bias": (M, COLS)},
    "scalar_bias": {"bias": (1,)},
    "no_bias": {"bias": None, "trans_b": 1},
    "weight_input": {"weight_input": True},
}


@pytest.mark.parametrize("case", sorted(OTHER))
def test_other_gemm_keeps_the_matmul_import_and_round_trips_verbatim(case):
    model, w, c = _gemm(**OTHER[case])
    graph = import_model(model)
    assert "linear" not in graph.op_counts() and graph.op_counts()["matmul"] == 1
    out = round_trip(model)
    _check_values(model, [export_model(dataclasses.replace(graph, origins=())), out], w, c)
    _check_written_back(model, out, w, c)


def test_a_transposed_weight_shared_by_two_gemms_round_trips_as_one_initializer():
    """Two Gemms (transB) reading one W, with their own biases: two linears, written back as the two Gemms
    reading one initializer that holds the original W."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((COLS, K)).astype(np.float32)
    b0, b1 = (rng.standard_normal(COLS).astype(np.float32) for _ in range(2))
    inits = [numpy_helper.from_array(v, k) for k, v in (("w", w), ("b0", b0), ("b1", b1))]
    nodes = [N("Gemm", ["x", "w", "b0"], ["y0"], transB=1), N("Gemm", ["x", "w", "b1"], ["y1"], transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, (M, K))],
                              [helper.make_tensor_value_info(n, F, (M, COLS)) for n in ("y0", "y1")], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    assert [o.op for o in import_model(model).outputs] == ["linear", "linear"]
    out = round_trip(model)
    assert [(n.op_type, n.input[1]) for n in out.graph.node] == [("Gemm", "w"), ("Gemm", "w")]
    assert [t.name for t in out.graph.initializer if t.name == "w"] == ["w"]
    assert np.array_equal(numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == "w")), w)
    x = np.random.default_rng(5).standard_normal((M, K)).astype(np.float32)
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for y, b in zip(got, (b0, b1)):
        np.testing.assert_allclose(y, x.astype(np.float64) @ w.T + b, rtol=1e-5, atol=1e-5)
