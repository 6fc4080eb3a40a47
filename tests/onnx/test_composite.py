"""Composite operators: the recognizer (eqsat.onnx.patterns) finds the GELU, LayerNorm,
Softmax, SiLU and RMSNorm that torch's two exporters write in the zoo models and in small hand-built graphs,
refuses a composite whose inner value is used outside it, and the importer makes each one IR node
(eqsat.ops.composite); the imported models, exported with the composites' own ONNX forms, compute what
onnxruntime computes on the original; those forms are the ones onnxruntime fuses; the rule verifier still
passes every rule with the new constructors in the e-graph schema; merge_linear_qkv merges three ``linear``
on one input into one.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper

from eqsat import OptimizeConfig, ir, ops, optimize
from eqsat.cost import AnalyticCost, node_costs
from eqsat.decode import build_program
from eqsat.egglog.egraph import EGraph
from eqsat.extract import extract
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.onnx.patterns import find_composites
from eqsat.ops.composite import float_bits
from eqsat.rules import RuleEngine, by_name
from eqsat.rules.registry import all_rules
from eqsat.rules.verify import check_rule
from eqsat.verification import verify

COMPOSITES = ("gelu", "layernorm", "addnorm", "softmax", "silu", "rmsnorm", "attention", "rotary")
TRANSFORMER = {"gelu": 2, "layernorm": 4, "addnorm": 1, "attention": 2}  # 2 layers: a GELU each, 2 LayerNorms each + 1,
# attention; pre-LN (GPT-2, ViT): the first LayerNorm alone reads its Add (the embeddings' sum), an addnorm
# (the attention's Softmax is inside the attention node: tests/onnx/test_attention.py)
EXPECTED = {
    # (counts, GELU form); BERT and ViT: 6 MatMuls with a bias per layer (Q, K, V, output, MLP in and out);
    # GPT-2's Conv1D projections are Gemms (linear too, made by the importer, not the recognizer)
    "bert": ({"gelu": 2, "addnorm": 5, "attention": 2, "linear": 12}, 0),  # post-LN: each LayerNorm reads its Add
    "vit": ({**TRANSFORMER, "linear": 12}, 0), "gpt2": (TRANSFORMER, 1),
    "llama": ({"rmsnorm": 3, "silu": 1, "attention": 1, "rotary": 2}, None),  # 1 layer: 2 RMSNorms + final, gated
    # SiLU MLP, the rotary embedding of q and k
    "efficientnet": ({"silu": 22}, None),  # 29 Sigmoids: 22 SiLU, 7 squeeze-excite gates (not SiLU)
    "resnet": ({}, None), "mobilenetv2": ({}, None),
}
FAST = [(n, "torchscript", 17) for n in ("bert", "gpt2", "llama", "efficientnet")] + \
    [("bert", "dynamo", 18), ("llama", "dynamo", 18)]
UNSUPPORTED = {(n, "dynamo", 17) for n in ("gpt2", "resnet", "mobilenetv2", "efficientnet", "llama")}
SLOW = [(n, e, o) for n in zoo.NAMES for e in zoo.EXPORTERS for o in zoo.OPSETS
        if (n, e, o) not in FAST and (n, e, o) not in UNSUPPORTED]
ROUND_TRIP = OptimizeConfig.of(scheduler="none", cost="analytic", measure=False, allow_slower=True)
FUSED = ("Gelu", "FastGelu", "QuickGelu", "SimplifiedLayerNormalization", "LayerNorm")
"""onnxruntime's fused kinds compared (LayerNorm: LayerNormalization and SkipLayerNormalization together)"""
GAINS = {("bert", "dynamo"): {"Gelu": 2}, ("vit", "dynamo"): {"Gelu": 2},
         ("llama", "dynamo"): {"SimplifiedLayerNormalization": 3}}
"""fused operators onnxruntime finds in the composites' own ONNX forms and not in the original: dynamo writes
erf-GELU with the 0.5 in the middle and RMSNorm with Reciprocal, forms onnxruntime (1.32, CPU) does not fuse.
The round trip writes a decomposed composite in its own form too (only one-node composites are origin records,
written back verbatim), so it gains the same fusions."""


def _ids(cases):
    return [f"{n}-{e}-{o}" for n, e, o in cases]


def _consts(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _optimized_op_types(model: onnx.ModelProto) -> list[str]:
    """The operators of onnxruntime's optimized graph (ORT_ENABLE_EXTENDED: the fusions, not the layouts)."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        opts.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]


def _fused(model: onnx.ModelProto) -> collections.Counter:
    counts = collections.Counter(_optimized_op_types(model))
    counts["LayerNorm"] = counts["LayerNormalization"] + counts["SkipLayerNormalization"]
    return counts


def check_zoo_model(name: str, exporter: str, opset: int) -> None:
    model = zoo.build(name, exporter, opset)
    counts, gelu_form = EXPECTED[name]
    matches = find_composites(model.graph, _consts(model))
    assert dict(collections.Counter(m.op for m in matches)) == counts
    assert all(m.attrs == (gelu_form,) for m in matches if m.op == "gelu")
    covered = [m.nodes[k].output[0] for m in matches for k in range(len(m.nodes))]
    assert len(covered) == len(set(covered)), "a node in two matches"
    graph = import_model(model)
    # and the importer's: torch writes a Linear (GPT-2's Conv1D: addmm) on a 2-D input as a Gemm of a constant
    # weight and bias, which is exactly a linear (tests/onnx/test_gemm_import.py)
    gemms = sum(n.op_type == "Gemm" and len(n.input) > 2 and bool(n.input[2]) for n in model.graph.node)
    imported = {**counts, "linear": counts.get("linear", 0) + gemms} if gemms else counts
    assert {op: graph.op_counts()[op] for op in imported} == imported
    # the composites' own ONNX forms (origins dropped: nothing written back verbatim) compute the original
    own = export_model(dataclasses.replace(graph, origins=()))
    check = verify(model, own, seed=1)
    assert check.passed, check.detail
    result = optimize(model, ROUND_TRIP)
    report = result.report if isinstance(result.report, dict) else result.report.to_json()
    assert report["verified"] and report["returned"] == "optimized", report
    before = _fused(model)
    gains = GAINS.get((name, exporter), {})
    for out in (own, result.optimized):
        after = _fused(out)
        assert {k: after[k] - before[k] for k in FUSED if after[k] != before[k]} == gains


@pytest.mark.parametrize("name,exporter,opset", FAST, ids=_ids(FAST))
def test_zoo_composites_are_found_and_the_import_verifies(name, exporter, opset):
    check_zoo_model(name, exporter, opset)


@pytest.mark.slow
@pytest.mark.parametrize("name,exporter,opset", SLOW, ids=_ids(SLOW))
def test_zoo_composites_full_matrix(name, exporter, opset):
    check_zoo_model(name, exporter, opset)


# -- small hand-built graphs ----------------------------------------------------------------------------
X = (2, 3, 8)


def _model(nodes: list[onnx.NodeProto], consts: dict[str, object], outputs: tuple[str, ...] = ("y",),
           opset: int = 17, gamma_shape: tuple[int, ...] = (X[-1],)) -> onnx.ModelProto:
    """x [2, 3, 8] -> nodes -> outputs; ``consts`` are scalar initializers, except g and b (of gamma_shape)."""
    rng = np.random.default_rng(0)
    inits = []
    for k, v in consts.items():
        if k in ("g", "b"):
            arr = rng.uniform(0.5, 1.5, gamma_shape).astype(np.float32)
        else:
            arr = np.asarray(v, dtype=np.int64 if isinstance(v, list) else np.float32)
        inits.append(numpy_helper.from_array(arr, k))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, X) for o in outputs],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


N = helper.make_node
GELU_C = {"r2": math.sqrt(2.0), "one": 1.0, "half": 0.5}
TANH_C = {"half": 0.5, "three": 3.0, "k": 0.044715, "s": math.sqrt(2 / math.pi), "one": 1.0}
RMS_C = {"two": 2.0, "eps": 1e-6, "g": None, "one": 1.0}
LN_C = {"two": 2.0, "eps": 1e-5, "g": None, "b": None}


def _rms(tail: list[onnx.NodeProto], axes: list | None = None) -> list[onnx.NodeProto]:
    mean = N("ReduceMean", ["p", "axes"], ["m"], keepdims=1) if axes else N("ReduceMean", ["p"], ["m"], axes=[-1])
    return [N("Pow", ["x", "two"], ["p"]), mean, N("Add", ["m", "eps"], ["a"]), N("Sqrt", ["a"], ["s"]), *tail]


CASES = {  # name: (nodes, constants, opset, expected op, expected attrs, covered node count)
    "gelu_erf_torchscript": ([N("Div", ["x", "r2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["a"]),
                              N("Mul", ["x", "a"], ["m"]), N("Mul", ["m", "half"], ["y"])], GELU_C, 17, "gelu", (0,), 5),
    "gelu_erf_dynamo": ([N("Div", ["x", "r2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["one", "e"], ["a"]),
                         N("Mul", ["half", "a"], ["m"]), N("Mul", ["x", "m"], ["y"])], GELU_C, 18, "gelu", (0,), 5),
    "gelu_erf_by_inverse": ([N("Mul", ["ir2", "x"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["a"]),
                             N("Mul", ["x", "half"], ["xh"]), N("Mul", ["a", "xh"], ["y"])],
                            {"ir2": math.sqrt(0.5), "one": 1.0, "half": 0.5}, 17, "gelu", (0,), 5),
    "gelu_tanh_gpt2": ([N("Mul", ["x", "half"], ["h"]), N("Pow", ["x", "three"], ["p"]), N("Mul", ["p", "k"], ["pk"]),
                        N("Add", ["x", "pk"], ["i"]), N("Mul", ["i", "s"], ["is"]), N("Tanh", ["is"], ["t"]),
                        N("Add", ["t", "one"], ["t1"]), N("Mul", ["h", "t1"], ["y"])], TANH_C, 17, "gelu", (1,), 8),
    "gelu_node_opset20": ([N("Gelu", ["x"], ["y"], approximate="tanh")], {}, 20, "gelu", (1,), 1),
    "silu": ([N("Sigmoid", ["x"], ["s"]), N("Mul", ["s", "x"], ["y"])], {}, 17, "silu", (), 2),
    "rmsnorm_llama_torchscript": (_rms([N("Div", ["one", "s"], ["r"]), N("Mul", ["x", "r"], ["n"]),
                                        N("Cast", ["n"], ["c"], to=TensorProto.FLOAT), N("Mul", ["g", "c"], ["y"])]),
                                  RMS_C, 17, "rmsnorm", (float_bits(1e-6),), 8),
    "rmsnorm_llama_dynamo": (_rms([N("Reciprocal", ["s"], ["r"]), N("Mul", ["x", "r"], ["n"]),
                                   N("Mul", ["g", "n"], ["y"])], axes=[-1]),
                             {**RMS_C, "axes": [-1]}, 18, "rmsnorm", (float_bits(1e-6),), 7),
    "rmsnorm_div": (_rms([N("Div", ["x", "s"], ["n"]), N("Mul", ["n", "g"], ["y"])]), RMS_C, 17, "rmsnorm",
                    (float_bits(1e-6),), 6),
    "layernorm_node": ([N("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)], LN_C, 17, "layernorm",
                       (float_bits(1e-5),), 1),
    "layernorm_opset16": ([N("ReduceMean", ["x"], ["mu"], axes=[-1]), N("Sub", ["x", "mu"], ["d"]),
                           N("Pow", ["d", "two"], ["p"]), N("ReduceMean", ["p"], ["v"], axes=[-1]),
                           N("Add", ["v", "eps"], ["a"]), N("Sqrt", ["a"], ["s"]), N("Div", ["d", "s"], ["n"]),
                           N("Mul", ["n", "g"], ["gn"]), N("Add", ["gn", "b"], ["y"])], LN_C, 16, "layernorm",
                          (float_bits(1e-5),), 9),
    "softmax_negative_axis": ([N("Softmax", ["x"], ["y"], axis=-2)], {}, 17, "softmax", (-2,), 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hand_built_composite_is_found_imported_and_verifies(case):
    nodes, consts, opset, op, attrs, covered = CASES[case]
    model = _model(nodes, consts, opset=opset)
    (match,) = find_composites(model.graph, _consts(model))
    assert (match.op, match.attrs, match.output, len(match.nodes)) == (op, attrs, "y", covered)
    graph = import_model(model)
    (y,) = graph.outputs
    assert y.op == op and y.inputs[0].op == "input"
    if op == "softmax":
        assert y.attrs == (1,)  # axis -2 of a rank-3 input
    assert graph.op_counts().total() - len(graph.weights) == 2, graph.op_counts()  # the input and the composite
    check = verify(model, export_model(dataclasses.replace(graph, origins=())), seed=2)
    assert check.passed, check.detail


def _gelu_erf(extra: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    return CASES["gelu_erf_torchscript"][0] + extra


NEGATIVE = {  # name: (nodes, constants, outputs, opset): a value inside is used outside, or a condition fails
    "erf_output_is_a_graph_output": (_gelu_erf([]), GELU_C, ("y", "e"), 17),
    "div_output_read_by_another_node": (_gelu_erf([N("Relu", ["d"], ["z"])]), GELU_C, ("y", "z"), 17),
    "sigmoid_read_twice": ([N("Sigmoid", ["x"], ["s"]), N("Mul", ["x", "s"], ["y"]), N("Add", ["s", "s"], ["z"])], {},
                           ("y", "z"), 17),
    "sigmoid_of_another_value": ([N("Relu", ["x"], ["r"]), N("Sigmoid", ["r"], ["s"]), N("Mul", ["x", "s"], ["y"])],
                                 {}, ("y",), 17),
    "gelu_wrong_constant": ([N("Div", ["x", "r2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["a"]),
                             N("Mul", ["x", "a"], ["m"]), N("Mul", ["m", "half"], ["y"])],
                            {**GELU_C, "r2": 1.5}, ("y",), 17),
    "rmsnorm_not_over_the_last_axis": ([N("Pow", ["x", "two"], ["p"]), N("ReduceMean", ["p"], ["m"], axes=[1]),
                                        N("Add", ["m", "eps"], ["a"]), N("Sqrt", ["a"], ["s"]),
                                        N("Div", ["x", "s"], ["n"]), N("Mul", ["n", "g"], ["y"])], RMS_C, ("y",), 17),
    "layernorm_over_another_axis": ([N("LayerNormalization", ["x", "g", "b"], ["y"], axis=1)], LN_C, ("y",), 17),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_composite_with_an_outside_use_or_a_wrong_part_is_not_matched(case):
    nodes, consts, outputs, opset = NEGATIVE[case]
    model = _model(nodes, consts, outputs, opset, gamma_shape=(3, 8) if case.startswith("layernorm") else (8,))
    assert find_composites(model.graph, _consts(model)) == []
    graph = import_model(model)
    assert not set(graph.op_counts()) & set(COMPOSITES)
    check = verify(model, export_model(graph), seed=3)
    assert check.passed, check.detail


def test_a_match_the_operator_refuses_is_imported_node_by_node():
    """gamma of shape [1] (broadcast): recognized, but rmsnorm needs gamma [C], so each node is imported."""
    model = _model(CASES["rmsnorm_div"][0], RMS_C, gamma_shape=(1,))
    assert [m.op for m in find_composites(model.graph, _consts(model))] == ["rmsnorm"]
    graph = import_model(model)
    assert "rmsnorm" not in graph.op_counts() and graph.op_counts()["Sqrt"] == 1
    assert verify(model, export_model(graph), seed=4).passed


def test_a_silu_of_a_scalar_is_imported_node_by_node():
    """silu needs x of rank 1 or more: on a rank-0 x the match stays Sigmoid and Mul, with the same values."""
    nodes = [N("Sigmoid", ["x"], ["s"]), N("Mul", ["x", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    assert [m.op for m in find_composites(model.graph)] == ["silu"]
    imported = import_model(model)
    assert "silu" not in imported.op_counts() and imported.op_counts()["sigmoid"] == 1
    assert verify(model, export_model(imported), seed=5).passed


# -- the ONNX forms written back --------------------------------------------------------------------------
def _one_op_model(op: str, attrs: tuple, n_params: int, opset: int) -> onnx.ModelProto:
    x = ir.input_("x", (1, 16, 32))
    params = [ir.weight(f"p{i}", (32,)) for i in range(n_params)]
    weights = {f"p{i}": np.linspace(0.5, 1.5, 32, dtype=np.float32) for i in range(n_params)}
    return export_model(ir.Graph((x,), (ir.make(op, [x, *params], attrs),), ("y",), weights, opset=opset))




FORMS = [  # op, attrs, parameters, opset, written op types, what onnxruntime makes of them
    ("gelu", (0,), 0, 17, ["Div", "Erf", "Add", "Mul", "Mul"], ["Gelu"]),
    ("gelu", (0,), 0, 20, ["Gelu"], ["Gelu"]),
    ("gelu", (1,), 0, 20, ["Gelu"], ["Gelu"]),
    ("silu", (), 0, 17, ["Sigmoid", "Mul"], ["QuickGelu"]),
    ("rmsnorm", (float_bits(1e-6),), 1, 17, ["Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul"],
     ["SimplifiedLayerNormalization"]),
    ("rmsnorm", (float_bits(1e-6),), 1, 18, ["Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul"],
     ["SimplifiedLayerNormalization"]),
    ("layernorm", (float_bits(1e-5),), 2, 17, ["LayerNormalization"], ["LayerNormalization"]),
    ("softmax", (2,), 0, 17, ["Softmax"], ["Softmax"]),
]


@pytest.mark.parametrize("op,attrs,n_params,opset,written,fused", FORMS,
                         ids=[f"{f[0]}{f[1]}-opset{f[3]}" for f in FORMS])
def test_written_form_is_the_one_onnxruntime_fuses(op, attrs, n_params, opset, written, fused):
    model = _one_op_model(op, attrs, n_params, opset)
    assert [n.op_type for n in model.graph.node] == written
    assert _optimized_op_types(model) == fused


@pytest.mark.parametrize("opset", [13, 16])
def test_layernorm_before_opset_17_is_decomposed_and_exact(opset):
    model = _one_op_model("layernorm", (float_bits(1e-5),), 2, opset)
    assert "LayerNormalization" not in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(5).standard_normal((1, 16, 32)).astype(np.float32)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    gamma = np.linspace(0.5, 1.5, 32)
    np.testing.assert_allclose(got, ops.evaluate("layernorm", (float_bits(1e-5),), [x, gamma, gamma]), rtol=1e-4,
                               atol=1e-5)


def test_rule_verifier_passes_every_rule_with_the_composites_in_the_schema():
    failed = [(r.name, c.detail) for r in all_rules() for c in [check_rule(r, seed=0, instances=8)] if not c.passed]
    assert failed == []


def _three_linears(shared: bool) -> ir.Graph:
    """q, k, v = linear(x, W_i, b_i) of widths 8, 8, 4 on x [2, 5, 8]; unless ``shared``, v reads another x."""
    x, x2 = ir.input_("x", (2, 5, 8)), ir.input_("x2", (2, 5, 8))
    rng = np.random.default_rng(7)
    outs, weights = [], {}
    for i, n in enumerate((8, 8, 4)):
        weights[f"w{i}"] = rng.standard_normal((8, n)).astype(np.float32)
        weights[f"b{i}"] = rng.standard_normal(n).astype(np.float32)
        src = x if shared or i < 2 else x2
        outs.append(ir.make("linear", [src, ir.weight(f"w{i}", (8, n)), ir.weight(f"b{i}", (n,))]))
    return ir.Graph((x,) if shared else (x, x2), tuple(outs), ("q", "k", "v"), weights)


@pytest.mark.parametrize("shared", [True, False])
def test_merge_linear_qkv_makes_one_linear_of_three(shared):
    graph = _three_linears(shared)
    eg = EGraph.from_graph(graph)
    report = RuleEngine(eg, [by_name()["merge_linear_qkv"]]).apply("merge_linear_qkv")
    assert (report.matches, report.changed) == ((1, True) if shared else (0, False))
    snap = eg.snapshot().restrict()
    merged = build_program(snap, extract("ilp", snap, node_costs(snap, AnalyticCost())).choice, graph)
    linears = [n for n in merged.nodes() if n.op == "linear"]
    assert sorted(n.shape for n in linears) == ([(2, 5, 20)] if shared else [(2, 5, 4), (2, 5, 8), (2, 5, 8)])
    check = verify(export_model(graph), export_model(merged), seed=6)
    assert check.passed, check.detail


# -- linear made by the importer, and reached by the rules ------------------------------------------------
def _projections(form: str, count: int = 3) -> onnx.ModelProto:
    """``count`` projections of one x [2, 3, 8] (widths 8, 8, 4, ...): ``MatMul(x, W) + b`` (``matmul``; the bias
    first in the Add for the second, and behind an Identity, as torch's deduplicated initializers are), or a 2-D
    ``Gemm`` (``gemm``, x [6, 8]), or near misses: the weight an input (``input_weight``), a [1, n] bias
    (``row_bias``), the product read by another node too (``shared_product``)."""
    rng = np.random.default_rng(11)
    x_shape = (6, 8) if form == "gemm" else (2, 3, 8)
    inits, nodes, outs = [], [], []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    for i, n in enumerate((8, 8, 4, 6)[:count]):
        w, b = f"w{i}", f"b{i}"
        bias = rng.standard_normal((1, n) if form == "row_bias" else n).astype(np.float32)
        inits.append(numpy_helper.from_array(bias, b if i != 1 else "b_shared"))
        if form == "input_weight":
            inputs.append(helper.make_tensor_value_info(w, TensorProto.FLOAT, (8, n)))
        else:
            inits.append(numpy_helper.from_array(rng.standard_normal((8, n)).astype(np.float32), w))
        if i == 1:
            nodes.append(N("Identity", ["b_shared"], [b]))
        if form == "gemm":
            nodes.append(N("Gemm", ["x", w, b], [f"y{i}"]))
        else:
            nodes.append(N("MatMul", ["x", w], [f"p{i}"]))
            nodes.append(N("Add", [b, f"p{i}"] if i == 1 else [f"p{i}", b], [f"y{i}"]))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, x_shape[:-1] + (n,)))
    if form == "shared_product":
        nodes.append(N("Relu", ["p0"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, x_shape[:-1] + (8,)))
    graph = helper.make_graph(nodes, "g", inputs, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def test_matmul_with_a_bias_is_one_linear_written_back_verbatim():
    model = _projections("matmul")
    matches = find_composites(model.graph, _consts(model))
    assert [m.op for m in matches] == ["linear"] * 3 and all(len(m.nodes) == 2 for m in matches)
    assert matches[1].inputs == ("x", "w1", "b1")  # the bias behind the Identity, either operand order
    graph = import_model(model)
    assert graph.op_counts()["linear"] == 3 and "matmul" not in graph.op_counts()
    assert [o.op for o in graph.outputs] == ["linear"] * 3
    out = export_model(graph)  # the user's MatMul and Add nodes, as they were (origin records)
    assert [(n.op_type, list(n.input)) for n in out.graph.node if n.op_type != "Identity"] == \
        [(n.op_type, list(n.input)) for n in model.graph.node if n.op_type != "Identity"]
    check = verify(model, out, seed=7)
    assert check.passed, check.detail
    own = export_model(dataclasses.replace(graph, origins=()))  # linear's own form: MatMul then Add
    assert collections.Counter(n.op_type for n in own.graph.node) == {"MatMul": 3, "Add": 3}
    check = verify(model, own, seed=8)
    assert check.passed, check.detail


@pytest.mark.parametrize("form", ["input_weight", "row_bias", "shared_product"])
def test_matmul_that_is_not_a_linear_is_imported_node_by_node(form):
    model = _projections(form)
    linears = [m for m in find_composites(model.graph, _consts(model)) if m.op == "linear"]
    assert len(linears) == (2 if form == "shared_product" else 0)  # the product read twice stays apart
    graph = import_model(model)
    assert graph.op_counts()["linear"] == len(linears)
    check = verify(model, export_model(graph), seed=9)
    assert check.passed, check.detail


def _apply(engine: RuleEngine, names: list[str]) -> list[tuple[int, bool]]:
    return [(r.matches, r.changed) for r in (engine.apply(n) for n in names)]


def _engine(eg: EGraph, *names: str) -> RuleEngine:
    rules = by_name()
    return RuleEngine(eg, [rules[n] for n in names])


def _extract_ilp(eg: EGraph, graph: ir.Graph) -> ir.Graph:
    snap = eg.snapshot().restrict()
    return build_program(snap, extract("ilp", snap, node_costs(snap, AnalyticCost())).choice, graph)


def test_linear_split_lets_the_taso_rules_reach_the_product():
    """On an imported linear, linear_split adds the IR's parts form (reshape -> matmul -> reshape, + bias), on
    which the matmul rules (here merge_matmul_bias, on the 3-D form the importer gives) fire; the extracted
    program computes what onnxruntime computes on the original."""
    model = _projections("matmul", count=2)
    graph = import_model(model)
    eg = EGraph.from_graph(graph)
    engine = _engine(eg, "linear_split", "merge_matmul_bias")
    assert _apply(engine, ["merge_matmul_bias"]) == [(0, False)]  # nothing to merge while the products are linear
    assert _apply(engine, ["linear_split", "merge_matmul_bias"]) == [(2, True), (1, True)]
    snap = eg.snapshot()
    assert [e for e in snap.nodes if e.op == "matmul" and snap.shapes[e.eclass] == (6, 16)]  # x [W0 W1]
    for root in snap.roots:  # each output's e-class holds the linear and its parts
        assert {"linear", "ewadd"} <= {snap.nodes[e].op for e in snap.classes[root]}
    check = verify(model, export_model(_extract_ilp(eg, graph)), seed=10)
    assert check.passed, check.detail


def test_parallel_gemms_import_as_linears_and_merge():
    """Three Gemms on one x (2-D, constant weights and [n] biases, one behind an Identity) import as three linears
    (tests/onnx/test_gemm_import.py: which Gemms do), written back as the user's Gemms; merge_linear_qkv merges them
    into one at once; values against onnxruntime on the original."""
    model = _projections("gemm")
    graph = import_model(model)
    assert graph.op_counts()["linear"] == 3 and "matmul" not in graph.op_counts()
    out = export_model(graph)
    assert [(n.op_type, list(n.input)) for n in out.graph.node] == \
        [(n.op_type, list(n.input)) for n in model.graph.node if n.op_type != "Identity"]
    eg = EGraph.from_graph(graph)
    engine = _engine(eg, "linear_split", "merge_linear_qkv")
    assert _apply(engine, ["merge_linear_qkv"]) == [(1, True)]
    merged = _extract_ilp(eg, graph)
    assert [n.shape for n in merged.nodes() if n.op in ("linear", "matmul")] == [(6, 20)]  # one product, 3 slices
    check = verify(model, export_model(merged), seed=11)
    assert check.passed, check.detail


def test_search_merges_the_imported_qkv_linears_of_bert():
    """MCTS (budget 8, depth 4, seed 0, analytic cost) on the BERT-like zoo export applies merge_linear_qkv to the
    projections the importer made linear; the program verifies and onnxruntime runs fewer nodes of it."""
    model = zoo.build("bert", "torchscript", 17)
    result = optimize(model, ROUND_TRIP.updated(scheduler="mcts", budget=8, depth=4, seed=0))
    report = result.report if isinstance(result.report, dict) else result.report.to_json()
    assert report["verified"] and report["rules_applied"].get("merge_linear_qkv", 0) >= 1, report["rules_applied"]
    assert collections.Counter(n.op_type for n in result.optimized.graph.node)["Split"] >= 1
    assert len(_optimized_op_types(result.optimized)) < len(_optimized_op_types(model))


def test_rule_verifier_refuses_a_wrong_linear_split():
    """The same bodies with the bias added as a product instead: the verifier's instances show it unsound."""
    rule = by_name()["linear_split"]
    wrong = dataclasses.replace(rule, name="linear_split_wrong",
                                bodies=tuple((q, a.replace("(Pend r (Ewadd ", "(Pend r (Ewmul ")) for q, a in rule.bodies))
    assert wrong.bodies != rule.bodies
    check = check_rule(wrong, seed=0, instances=16)
    assert not check.passed and "ewmul" in check.detail
