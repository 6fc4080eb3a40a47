"""Valid ONNX models that once failed at import or changed their interface (issues 14 and 16).

Every case builds its model with the onnx helper API (or torch.onnx.export), optimizes it, and checks the
result in onnxruntime against the original model (the independent oracle) and the interface.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from eqsat.app.cli import main as cli_main
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.errors import InputError, ModelRefused
from eqsat.onnx.importer import import_model

# allow_slower: return the exported program even where it equals the original (the round trip is under test)
CONFIG = OptimizeConfig(scheduler="none", cost="analytic", measure=False, allow_slower=True)
SEARCH = OptimizeConfig.of(scheduler="mcts", cost="analytic", measure=False, budget=2, depth=1,
                           final_extractor="greedy-dag", allow_slower=True)
F = TensorProto.FLOAT


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def make(nodes, inputs, outputs, inits=(), opset: int = 17, domains=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "robust", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def interface(m: onnx.ModelProto) -> tuple:
    """Input and output names, order and types, and the overridable initializers with their values."""
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    ins = [(v.name, v.type.SerializeToString()) for v in m.graph.input]
    outs = [(v.name, v.type.SerializeToString()) for v in m.graph.output]
    defaults = {v.name: inits[v.name].tobytes() for v in m.graph.input if v.name in inits}
    return ins, outs, defaults


def run_ort(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def same_outputs(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict, tol: float = 1e-5) -> None:
    for a, b in zip(run_ort(original, feeds), run_ort(optimized, feeds), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)


def optimized(m: onnx.ModelProto, config: OptimizeConfig = CONFIG) -> onnx.ModelProto:
    result = optimize(m, config)
    assert result.report.returned.program == "optimized"  # the re-exported program, not the input model
    out = result.optimized
    onnx.checker.check_model(out, full_check=True)
    assert interface(out) == interface(m)
    return out


RNG = np.random.default_rng(0)
X23 = RNG.standard_normal((2, 3)).astype(np.float32)


# -- 16.4: subgraphs that read outer-scope values ---------------------------------------------------
def if_reading_outer(nested: bool = False) -> onnx.ModelProto:
    """y = relu(If(c, a + 1, a * 2)) with a = relu(x) read by both branches from the outer scope."""
    then_nodes = [helper.make_node("Add", ["a", "one"], ["t_out"])]
    if nested:  # the then-branch holds another If that reads ``a`` two scopes up
        inner_then = helper.make_graph([helper.make_node("Neg", ["a"], ["it"])], "it", [], [vi("it", F, [2, 3])])
        inner_else = helper.make_graph([helper.make_node("Abs", ["a"], ["ie"])], "ie", [], [vi("ie", F, [2, 3])])
        then_nodes = [helper.make_node("If", ["c"], ["inner"], then_branch=inner_then, else_branch=inner_else),
                      helper.make_node("Add", ["inner", "one"], ["t_out"])]
    then_g = helper.make_graph(then_nodes, "then", [], [vi("t_out", F, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Mul", ["a", "two"], ["e_out"])], "else", [], [vi("e_out", F, [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("If", ["c"], ["b"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Relu", ["b"], ["y"])]
    return make(nodes, [vi("x", F, [2, 3]), vi("c", TensorProto.BOOL, [])], [vi("y", F, [2, 3])],
                [const("one", np.float32(1)), const("two", np.float32(2))])


@pytest.mark.parametrize("nested", [False, True])
def test_if_reading_outer_value(nested):
    m = if_reading_outer(nested)
    out = optimized(m, SEARCH if nested else CONFIG)  # the nested case also goes through a search
    for c in (True, False):
        same_outputs(m, out, {"x": X23, "c": np.array(c)})
    # the subgraphs read the outer value by the name it has on export (renamed with it where it got a new one)
    (outer,) = [n.output[0] for n in out.graph.node if n.op_type == "Relu" and list(n.input) == ["x"]]
    (branch,) = [n for n in out.graph.node if n.op_type == "If"]
    assert outer in {i for a in branch.attribute if a.name == "else_branch" for n in a.g.node for i in n.input}


def loop_reading_outer(trip_count: bool = True) -> onnx.ModelProto:
    """Three iterations of v <- v + relu(x) (read from the outer scope), with a scan output of each v."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "r"], ["v_out"]),
         helper.make_node("Identity", ["v_out"], ["scan"])],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("v_in", F, [2, 3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out", F, [2, 3]), vi("scan", F, [2, 3])])
    ins = ["M", ""] if trip_count else ["", "cond"]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Loop", ins + ["x"], ["v_final", "scans"], body=body),
             helper.make_node("Sigmoid", ["v_final"], ["y"])]
    inits = [const("M", np.int64(3))] if trip_count else [const("cond", np.array(False))]
    return make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("scans", F, ["iterations", 2, 3])], inits)


@pytest.mark.parametrize("trip_count", [True, False])
def test_loop_with_omitted_input_reading_outer_value(trip_count):
    m = loop_reading_outer(trip_count)
    out = optimized(m)
    same_outputs(m, out, {"x": X23})


def test_scan_reading_outer_value():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "row"], ["s_mid"]),
                              helper.make_node("Mul", ["s_mid", "w"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["emit"])],
                             "body", [vi("s_in", F, [3]), vi("row", F, [3])],
                             [vi("s_out", F, [3]), vi("emit", F, [3])])
    nodes = [helper.make_node("Tanh", ["init"], ["w"]),
             helper.make_node("Scan", ["init", "x"], ["final", "rows"], body=body, num_scan_inputs=1)]
    m = make(nodes, [vi("x", F, [2, 3]), vi("init", F, [3])], [vi("final", F, [3]), vi("rows", F, [2, 3])])
    out = optimized(m)
    same_outputs(m, out, {"x": X23, "init": RNG.standard_normal(3).astype(np.float32)})


# -- 16.8: the interface is kept exactly --------------------------------------------------------------
def test_output_that_is_an_input():
    m = make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("x", F, [2, 3])])
    same_outputs(m, optimized(m), {"x": X23})


def test_unsqueeze_axes_given_as_a_scalar_constant():
    """torch's dynamo exporter writes an Unsqueeze's axes as a 0-d constant (Sapiens2): onnx's checker and onnxruntime
    accept it (onnxruntime refuses a Squeeze's so); the import once failed on it (iteration over a 0-d array)."""
    rng = np.random.default_rng(1)
    shape_in, shape_out = [2, 8, 16], [2, 8, 1, 16]
    m = make([helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Relu", ["mm"], ["r"]),
              helper.make_node("Unsqueeze", ["r", "ax"], ["y"])], [vi("x", F, shape_in)], [vi("y", F, shape_out)],
             [const("w", rng.standard_normal((16, 16)).astype(np.float32)), const("ax", np.int64(2))], opset=18)
    same_outputs(m, optimized(m, SEARCH), {"x": rng.standard_normal(shape_in).astype(np.float32)})


def test_graph_without_nodes():
    m = make([], [vi("x", F, [2, 3]), vi("z", TensorProto.INT64, [4])],
             [vi("z", TensorProto.INT64, [4]), vi("w", F, [3]), vi("x", F, [2, 3])],
             [const("w", np.arange(3, dtype=np.float32))])
    same_outputs(m, optimized(m), {"x": X23, "z": np.arange(4)})


def test_overridable_initializer_stays_an_input():
    bias = np.full((2, 3), 0.5, np.float32)
    nodes = [helper.make_node("Add", ["x", "bias"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = make(nodes, [vi("bias", F, [2, 3]), vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [const("bias", bias)])
    out = optimized(m)
    same_outputs(m, out, {"x": X23})  # the default value
    same_outputs(m, out, {"x": X23, "bias": -bias})  # overridden: must not have been folded away


def test_output_names_that_look_like_exported_names_do_not_collide():
    # the exporter names its values <op>_<counter>: outputs already holding such names must keep them
    nodes = [helper.make_node("MatMul", ["x", "w"], ["matmul_2"]), helper.make_node("Relu", ["matmul_2"], ["relu_3"])]
    w = const("w", RNG.standard_normal((3, 4)).astype(np.float32))
    m = make(nodes, [vi("x", F, [2, 3])], [vi("relu_3", F, [2, 4]), vi("matmul_2", F, [2, 4]), vi("x", F, [2, 3])], [w])
    same_outputs(m, optimized(m), {"x": X23})


# -- 16.9: bfloat16 ---------------------------------------------------------------------------------
def test_bfloat16_cast_roundtrip_is_supported():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=F)]
    m = make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    same_outputs(m, optimized(m), {"x": X23}, tol=0)


@pytest.mark.parametrize("where", ["interface", "operator"])
def test_bfloat16_unsupported_exits_2_naming_the_dtype(tmp_path, capsys, where):
    if where == "interface":
        m = make([helper.make_node("Cast", ["x"], ["y"], to=F)], [vi("x", TensorProto.BFLOAT16, [2, 3])],
                 [vi("y", F, [2, 3])])
    else:
        nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
                 helper.make_node("Relu", ["b"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=F)]
        m = make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])
    path, out = tmp_path / "bf16.onnx", tmp_path / "out.onnx"
    onnx.save(m, path)
    rc = cli_main(["optimize-model", str(path), "-o", str(out), "--cost", "analytic", "--no-measure"])
    err = capsys.readouterr().err
    assert rc == 2 and "bfloat16" in err and not out.exists()
    assert "Traceback" not in err


# -- 16.11: import-side messages ---------------------------------------------------------------------
def test_missing_external_data_is_named(tmp_path, capsys):
    w = const("w", RNG.standard_normal((64, 64)).astype(np.float32))
    m = make([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", F, [2, 64])], [vi("y", F, [2, 64])], [w])
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, path, save_as_external_data=True, location="ext.weights", size_threshold=0)
    os.remove(tmp_path / "ext.weights")
    rc = cli_main(["optimize-model", str(path), "-o", str(tmp_path / "out.onnx"), "--cost", "analytic", "--no-measure"])
    err = capsys.readouterr().err
    assert rc == 2 and "ext.weights" in err and "missing" in err and "truncated" not in err


def test_custom_domain_operator_is_carried_opaque():
    # com.microsoft operators are valid ONNX that onnx's shape inference does not know; onnxruntime runs them
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Gelu", ["m"], ["g"], domain="com.microsoft"),
             helper.make_node("Relu", ["g"], ["y"])]
    m = make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 4])],
             [const("w", RNG.standard_normal((3, 4)).astype(np.float32))], domains=["com.microsoft"])
    g = import_model(m)
    gelu = [n for n in g.nodes() if n.op == "opaque"]
    assert [(n.attrs[0], n.attrs[1], n.shape) for n in gelu] == [("Gelu", "com.microsoft", (2, 4))]
    same_outputs(m, optimized(m), {"x": X23})


def test_operators_shape_inference_cannot_type_are_typed_in_few_runs(monkeypatch):
    # eight com.microsoft Gelus, one after another: each asks for a run of its part of the model (2, 4, 6, 8
    # nodes) until those runs ran more nodes than the model has (17); the next runs the whole model, which types
    # the rest (each part ran the one before it again: Swin V2's windows asked 48 times); the shapes are
    # onnxruntime's own (every value of the original an output, the oracle)
    from eqsat.onnx import folding

    nodes, weights, last = [], [], "x"
    for k in range(8):
        nodes += [helper.make_node("MatMul", [last, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Gelu", [f"m{k}"], [f"g{k}"], domain="com.microsoft")]
        weights.append(const(f"w{k}", RNG.standard_normal((3 + k, 4 + k)).astype(np.float32)))
        last = f"g{k}"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    m = make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 11])], weights, domains=["com.microsoft"])
    runs = []
    real = folding.ModelRuns._run_all
    monkeypatch.setattr(folding.ModelRuns, "_run_all", lambda self, node, whole=False: (
        runs.append(whole), real(self, node, whole))[1])
    g = import_model(m)
    assert runs == [False] * 4 + [True]
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(f"g{k}") for k in range(8))
    want = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        [f"g{k}" for k in range(8)], {"x": X23})
    gelus = [n for n in g.nodes() if n.op == "opaque"]
    assert [n.shape for n in gelus] == [w.shape for w in want]
    same_outputs(m, optimized(m), {"x": X23})


def test_operator_onnxruntime_cannot_run_is_named():
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], domain="example.custom")]
    m = make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], domains=["example.custom"])
    with pytest.raises(InputError, match="Frobnicate.*example.custom"):
        import_model(m)


# -- 14.3: constant folding that real exports survive ---------------------------------------------------
class BertEmbeddings(nn.Module):
    """HF-style embeddings: token_type_ids from a registered zeros buffer (expand + gather), positions buffer."""

    def __init__(self, vocab: int = 50, d: int = 16, max_pos: int = 96):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.tok = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, max_pos, dtype=torch.long), persistent=False)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        position_ids = self.position_ids[:, :seq]
        buffered = self.token_type_ids.expand(position_ids.shape[0], -1)
        token_type_ids = torch.gather(buffered, dim=1, index=position_ids)
        h = self.word(input_ids) + self.tok(token_type_ids) + self.pos(position_ids)
        h = self.ln(h).reshape(input_ids.shape[0], seq, -1)  # a Shape -> Gather -> Concat -> Reshape chain
        return torch.relu(self.proj(h))


def test_bert_embeddings_with_buffer_token_types(tmp_path):
    torch.manual_seed(0)
    module = BertEmbeddings().eval()
    ids = torch.randint(0, 50, (1, 70))
    path = str(tmp_path / "emb.onnx")
    torch.onnx.export(module, (ids,), path, input_names=["input_ids"], output_names=["y"], opset_version=17,
                      dynamo=False)
    m = onnx.load(path)
    assert "GatherElements" in {n.op_type for n in m.graph.node}
    g = import_model(m)
    kinds = {n.attrs[0] for n in g.nodes() if n.op == "opaque"}
    assert not kinds & {"Shape", "GatherElements", "Concat", "Unsqueeze", "Expand"}  # folded to constants
    out = optimized(m)
    feeds = {"input_ids": ids.numpy()}
    same_outputs(m, out, feeds)
    np.testing.assert_allclose(run_ort(out, feeds)[0], module(ids).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_gather_elements_with_many_choices_folds():
    data = RNG.standard_normal((1, 100)).astype(np.float32)
    idx = RNG.integers(0, 100, (1, 100)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["d", "i"], ["g"], axis=1), helper.make_node("Add", ["x", "g"], ["y"])]
    m = make(nodes, [vi("x", F, [1, 100])], [vi("y", F, [1, 100])], [const("d", data), const("i", idx)])
    g = import_model(m)
    (w,) = [n for n in g.nodes() if n.op == "weight"]
    np.testing.assert_array_equal(g.weights[w.name], np.take_along_axis(data, idx, axis=1))
    same_outputs(m, optimized(m), {"x": data})


# -- bad input: operators and patterns carried or read exactly -------------------------------------------
def test_seeded_random_operator_is_neither_folded_nor_accepted():
    # a random draw from constant inputs is not a constant: onnxruntime draws it (seeded) at run time, anew at each
    # call of a session; a model drawing random numbers is refused (tests/app/test_random_models.py)
    nodes = [helper.make_node("RandomUniformLike", ["c"], ["r"], seed=3.0), helper.make_node("Add", ["x", "r"], ["y"])]
    m = make(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [const("c", np.zeros((2, 3), np.float32))])
    with pytest.raises(ModelRefused, match="draws random numbers"):
        optimized(m)


def test_sparse_initializer_and_constant_attribute_forms():
    dense = np.zeros((2, 3), np.float32)
    dense[0, 1], dense[1, 2] = 2.0, -1.0
    sparse = helper.make_sparse_tensor(const("sw", np.array([2.0, -1.0], np.float32)),
                                       const("sw_idx", np.array([1, 5], np.int64)), [2, 3])
    nodes = [helper.make_node("Constant", [], ["k"], value_floats=[0.5, 1.5, 2.5]),
             helper.make_node("Constant", [], ["s"], value_float=3.0),
             helper.make_node("Add", ["x", "sw"], ["a"]), helper.make_node("Mul", ["a", "k"], ["b"]),
             helper.make_node("Mul", ["b", "s"], ["y"])]
    g = helper.make_graph(nodes, "sparse", [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], sparse_initializer=[sparse])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)  # onnxruntime densifies sparse initializers; onnx's shape inference types them sparse
    out = optimized(m)
    expected = (X23 + dense) * np.array([0.5, 1.5, 2.5], np.float32) * np.float32(3.0)
    np.testing.assert_allclose(run_ort(out, {"x": X23})[0], expected, rtol=1e-6)
    same_outputs(m, out, {"x": X23})
