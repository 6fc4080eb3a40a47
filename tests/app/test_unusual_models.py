"""Unusual models a user brings that eqsat accepts (model-local functions, float16 and QDQ models, Dropout, a
producer's metadata): each is optimized through the command line and the written model checked against the original
in onnxruntime. The models it refuses are tests/app/test_refused_models.py's, the environments that get in the way
tests/app/test_unusual_environments.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_cases import FAST, cli, small_matmul
from onnx import TensorProto, helper, numpy_helper
from unusual_cases import OPSET, F, outputs


def _optimized_matches(capsys, tmp_path: Path, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                       *flags: str, atol: float = 1e-5) -> onnx.ModelProto:
    """Optimize ``model`` through the command line (exit 0), run the written model and the original in
    onnxruntime on ``feeds`` and compare; the written model passes the full ONNX checker."""
    path, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, path)
    rc, line = cli(capsys, "optimize-model", str(path), "-o", str(out), *(flags or FAST))
    assert rc == 0, line
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    for got, want in zip(outputs(out, feeds), outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-3)
    return written


# model-local functions ------------------------------------------------------------------------------------------------

def _with_functions(case: str) -> onnx.ModelProto:
    """x [2, 4] -> y through model-local functions: ``plain`` (one function), ``nested`` (a function calling
    another, passing an attribute down by reference)."""
    local = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    x = helper.make_tensor_value_info("x", F, [2, 4])
    y = helper.make_tensor_value_info("y", F, [2, 4])
    if case == "plain":
        body = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Add", ["r", "a"], ["b"])]
        funcs = [helper.make_function("local", "ReluAdd", ["a"], ["b"], body, [helper.make_opsetid("", 17)])]
        nodes = [helper.make_node("ReluAdd", ["x"], ["h"], domain="local"), helper.make_node("Tanh", ["h"], ["y"])]
    else:
        ref = onnx.AttributeProto(name="alpha", ref_attr_name="a", type=onnx.AttributeProto.FLOAT)
        inner_body = [helper.make_node("LeakyRelu", ["p"], ["q"])]
        inner_body[0].attribute.append(ref)
        inner = helper.make_function("local", "Leaky", ["p"], ["q"], inner_body, [helper.make_opsetid("", 17)],
                                     attributes=["a"])
        outer_ref = onnx.AttributeProto(name="a", ref_attr_name="slope", type=onnx.AttributeProto.FLOAT)
        call = helper.make_node("Leaky", ["u"], ["v"], domain="local")
        call.attribute.append(outer_ref)
        outer_body = [call, helper.make_node("Mul", ["v", "u"], ["w"])]
        outer = helper.make_function("local", "Outer", ["u"], ["w"], outer_body, local, attributes=["slope"])
        funcs = [inner, outer]
        nodes = [helper.make_node("Outer", ["x"], ["h"], domain="local", slope=0.3),
                 helper.make_node("Sigmoid", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=local, functions=funcs)


@pytest.mark.parametrize("case", ["plain", "nested"])
def test_model_local_functions_are_inlined(capsys, tmp_path, case):
    model = _with_functions(case)
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, model, {"x": x}, *FAST, "--allow-slower")  # the exported program
    assert not written.functions and all(n.domain != "local" for n in written.graph.node)


def test_torchscript_modules_exported_as_functions(capsys, tmp_path):
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.lin(x)) + x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    path = tmp_path / "ts.onnx"
    torch.onnx.export(Net().eval(), (torch.randn(2, 8),), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, export_modules_as_functions={Block}, dynamo=False)
    model = onnx.load(path)
    assert model.functions  # the case under test: the exporter wrote Block as a function
    x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, model, {"x": x}, *FAST, "--allow-slower")
    assert not written.functions


# float16 LayerNorm as the TorchScript exporter decomposes it, float16 layout operators --------------------------------

def _layernorm16(upcast: int | None) -> onnx.ModelProto:
    """x float16 [2, 4, 8] -> ReduceMean, Sub, (Cast to ``upcast``), Pow 2, ReduceMean, Add eps, Sqrt, Div, (Cast
    back), Mul weight, Add bias: the decomposed LayerNorm the TorchScript exporter writes below opset 17."""
    h = TensorProto.FLOAT16
    inner = np.dtype(helper.tensor_dtype_to_np_dtype(upcast)) if upcast else np.float16
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "b"),
             numpy_helper.from_array(np.array(2.0, inner), "two"), numpy_helper.from_array(np.array(1e-5, inner), "eps")]
    n = helper.make_node
    nodes = [n("ReduceMean", ["x"], ["m"], axes=[-1]), n("Sub", ["x", "m"], ["c"])]
    if upcast:
        nodes.append(n("Cast", ["c"], ["c32"], to=upcast))
    c = "c32" if upcast else "c"
    nodes += [n("Pow", [c, "two"], ["p"]), n("ReduceMean", ["p"], ["v"], axes=[-1]), n("Add", ["v", "eps"], ["ve"]),
              n("Sqrt", ["ve"], ["s"]), n("Div", [c, "s"], ["d"])]
    if upcast:
        nodes.append(n("Cast", ["d"], ["d16"], to=h))
    nodes += [n("Mul", ["d16" if upcast else "d", "w"], ["sc"]), n("Add", ["sc", "b"], ["y"])]
    graph = helper.make_graph(nodes, "ln16", [helper.make_tensor_value_info("x", h, [2, 4, 8])],
                              [helper.make_tensor_value_info("y", h, [2, 4, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("upcast", [None, TensorProto.FLOAT, TensorProto.DOUBLE])
def test_float16_decomposed_layernorm_round_trips(capsys, tmp_path, upcast):
    x = np.random.default_rng(7).standard_normal((2, 4, 8)).astype(np.float16)
    written = _optimized_matches(capsys, tmp_path, _layernorm16(upcast), {"x": x}, *FAST, "--allow-slower",
                                 atol=1e-2)
    types = {i.name: i.type.tensor_type.elem_type for i in written.graph.input}
    assert types == {"x": TensorProto.FLOAT16}


def _transposed16() -> onnx.ModelProto:
    """x float16 [2, 64, 128] -> Transpose, Transpose back, MatMul by a float16 weight, Transpose -> y [2, 128, 64]:
    the layout operators are the e-graph's own at float16 (the MatMul is opaque), and the search rewrites them."""
    h = TensorProto.FLOAT16
    w = numpy_helper.from_array(np.random.default_rng(9).standard_normal((128, 128)).astype(np.float16) / 8, "w")
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["t1"], perm=[0, 2, 1]), n("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             n("MatMul", ["t2", "w"], ["m"]), n("Transpose", ["m"], ["y"], perm=[0, 2, 1])]
    graph = helper.make_graph(nodes, "t16", [helper.make_tensor_value_info("x", h, [2, 64, 128])],
                              [helper.make_tensor_value_info("y", h, [2, 128, 64])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_float16_program_is_searched_and_priced_at_float16(capsys, tmp_path):
    """The search and the ILP price the float16 transposes (timed in onnxruntime, where float16 and float32
    differ) as the program decoded from them is priced: at their element type, not float32's (they disagreed, and
    the run stopped on an assertion); the written model equals the original in onnxruntime."""
    x = np.random.default_rng(10).standard_normal((2, 64, 128)).astype(np.float16)
    written = _optimized_matches(capsys, tmp_path, _transposed16(), {"x": x}, "--budget", "4", "--cost", "ort-cpu",
                                 "--no-measure", "--allow-slower", "-q", atol=1e-2)
    assert sum(node.op_type == "Transpose" for node in written.graph.node) < 3  # the pair cancelled
    assert {i.name: i.type.tensor_type.elem_type for i in written.graph.input} == {"x": TensorProto.FLOAT16}


# QDQ models and Dropout -----------------------------------------------------------------------------------------------

def _qdq_conv() -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(int8 weight)) -> Q -> DQ: a statically quantized Conv in QDQ form."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ws"), numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.uint8), "xz"),
             numpy_helper.from_array(np.array(0.1, np.float32), "ys"), numpy_helper.from_array(np.array(128, np.uint8), "yz")]
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]), n("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             n("QuantizeLinear", ["c", "ys", "yz"], ["cq"]), n("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_qdq_weights_stay_quantized_and_the_conv_verifies(capsys, tmp_path):
    x = np.random.default_rng(8).uniform(0, 10, (1, 3, 8, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, _qdq_conv(), {"x": x}, *FAST, "--allow-slower", atol=0)
    weights = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    assert any(w.dtype == np.int8 and w.shape == (4, 3, 3, 3) for w in weights.values())
    assert all(w.size <= 1 for w in weights.values() if w.dtype.kind == "f"), "a weight was dequantized into floats"
    assert sum(n.op_type == "DequantizeLinear" for n in written.graph.node) == 3


def _dropout(case: str) -> onnx.ModelProto:
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "r"), numpy_helper.from_array(np.array(False), "f")]
    if case == "mask-used":
        nodes = [n("Relu", ["x"], ["h"]), n("Dropout", ["h"], ["d", "mask"]), n("Cast", ["mask"], ["m"], to=F),
                 n("Mul", ["d", "m"], ["y"])]
    else:
        nodes = [n("Relu", ["x"], ["h"]), n("Dropout", ["h", "r", "f"], ["y"])]
    graph = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


@pytest.mark.parametrize("case", ["mask-used", "inference"])
def test_dropout_is_removed_only_in_inference(capsys, tmp_path, case):
    # (one in training mode draws random numbers: refused, tests/app/test_random_models.py)
    x = np.random.default_rng(9).standard_normal((2, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, _dropout(case), {"x": x}, *FAST, "--allow-slower", atol=0)
    assert any(n.op_type == "Dropout" for n in written.graph.node) == (case != "inference")


# metadata -------------------------------------------------------------------------------------------------------------

def test_the_written_model_keeps_the_inputs_metadata(capsys, tmp_path):
    model = small_matmul()
    model.producer_name, model.producer_version = "pytorch", "2.9.0"
    model.doc_string, model.graph.doc_string, model.model_version = "a model", "its graph", 7
    helper.set_model_props(model, {"author": "someone", "license": "MIT"})
    x = np.random.default_rng(10).standard_normal((2, 8)).astype(np.float32)
    written = _optimized_matches(capsys, tmp_path, model, {"x": x}, *FAST, "--allow-slower")
    assert (written.producer_name, written.producer_version, written.doc_string, written.graph.doc_string,
            written.model_version) == ("pytorch", "2.9.0", "a model", "its graph", 7)
    assert {p.key: p.value for p in written.metadata_props} == {"author": "someone", "license": "MIT"}
