"""The rule family ``kernels`` (rules/ours/kernels.py): ``attention_kernel`` relates the decomposed attention core
to opset 23's ``Attention``, written into older models through an opset upgrade (eqsat/onnx/kernels.py).
Oracles: onnxruntime's outputs on the original (decomposed, opset 17) model, onnxruntime's own optimized graph
(which kernel it runs), numpy, and the rule verifier's random instances."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rule_cases import choose

from eqsat import ir
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost.base import OpKey
from eqsat.cost.ort import op_model, runtime_nodes
from eqsat.decode import build_program
from eqsat.egglog.egraph import EGraph
from eqsat.onnx import export, kernels, session
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.ops.composite import float_bits
from eqsat.rules import KERNEL_RULES, RuleEngine, by_name, rule_set
from eqsat.rules.verify import check_rule
from eqsat.verification import verify

RULE = "attention_kernel"
SCALE = 0.125


def _attention_model(rank: int = 4, mask: tuple[int, ...] | None = None, mask_weight: bool = False,
                     opset: int = 17, batch: int = 2) -> onnx.ModelProto:
    """softmax(q @ Transpose(k) / 8 [+ mask]) @ v as torch's exporters write it, q, k, v [B, (H,) S, D]."""
    lead = [batch, 3][: rank - 2]
    shape = [*lead, 6, 8]
    perm = [*range(rank - 2), rank - 1, rank - 2]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    inits = [numpy_helper.from_array(np.array(8.0, np.float32), "c")]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=perm), helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "c"], ["sc"])]
    scores = "sc"
    if mask is not None:
        if mask_weight:  # a causal mask, as the exporters fold it
            causal = np.triu(np.full((6, 6), -1e4, np.float32), 1).reshape(mask)
            inits.append(numpy_helper.from_array(causal, "m"))
        else:
            inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, list(mask)))
        nodes.append(helper.make_node("Add", ["sc", "m"], ["sm"]))
        scores = "sm"
    nodes += [helper.make_node("Softmax", [scores], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                         shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in dims.items()}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return session(model).run(None, feeds)[0]


def _kernel_program(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model imported, its attention e-class written as the rule's right-hand side (sdpa), exported."""
    graph = import_model(model)
    eg = EGraph.from_graph(graph, finite_masks=True)  # a mask read from an input: vouched for
    assert RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed
    return export_model(choose(eg, graph, "sdpa"))


CASES = {"4d": (4, None, False), "4d-padding-mask": (4, (2, 1, 1, 6), False), "4d-full-mask": (4, (2, 3, 6, 6), False),
         "4d-causal-weight": (4, (1, 1, 6, 6), True), "3d": (3, None, False), "3d-mask": (3, (2, 6, 6), False),
         "3d-row-mask": (3, (1, 1, 6), False)}


@pytest.mark.parametrize("case", list(CASES))
def test_the_kernel_is_what_onnxruntime_runs_and_computes_the_same(case):
    """An opset-17 model's attention written as the kernel: the model is upgraded to opset 23, onnxruntime runs
    one Attention where it ran FusedMatMul + Softmax + MatMul, with the original's outputs."""
    rank, mask, weight = CASES[case]
    original = _attention_model(rank, mask, weight)
    assert "Attention" not in runtime_nodes(original)
    program = _kernel_program(original)
    assert {o.domain: o.version for o in program.opset_import}[""] == 23
    ran = runtime_nodes(program)
    assert ran.count("Attention") == 1 and "Softmax" not in ran and "FusedMatMul" not in ran, ran
    for seed in (0, 1):
        feeds = _feeds(original, seed)
        np.testing.assert_allclose(_run(program, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_a_fully_masked_row_computes_as_the_decomposition_does():
    """transformers' padding masks hold float32's lowest value, for which onnxruntime's kernel writes a fully
    masked query row as zeros; the decomposition averages v there. The kernel is written so that both agree."""
    original = _attention_model(4, (2, 1, 6, 6))
    program = _kernel_program(original)
    feeds = _feeds(original)
    lowest = np.finfo(np.float32).min
    feeds["m"] = np.where(np.random.default_rng(5).random((2, 1, 6, 6)) < 0.5, lowest, 0).astype(np.float32)
    feeds["m"][:, :, 2, :] = lowest  # query row 2 sees no key
    expected = _run(original, feeds)
    assert np.abs(expected[:, :, 2]).max() > 0.01  # the decomposition's average, not zeros
    np.testing.assert_allclose(_run(program, feeds), expected, rtol=1e-5, atol=1e-5)


def test_a_model_of_opset_23_takes_the_kernel_as_is():
    original = _attention_model(4, (2, 1, 1, 6), opset=23)
    program = _kernel_program(original)
    assert [o.version for o in program.opset_import if o.domain == ""] == [23]
    assert "Attention" in [n.op_type for n in program.graph.node]
    feeds = _feeds(original)
    np.testing.assert_allclose(_run(program, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_where_the_upgrade_fails_the_kernel_is_written_decomposed(monkeypatch):
    def refuse(model):
        raise kernels.UpgradeError("no adapter")
    monkeypatch.setattr(export, "upgrade", refuse)
    original = _attention_model(4, (2, 1, 1, 6))
    program = _kernel_program(original)
    assert [o.version for o in program.opset_import if o.domain == ""] == [17]
    assert not kernels.pending(program) and "Attention" not in [n.op_type for n in program.graph.node]
    feeds = _feeds(original)
    np.testing.assert_allclose(_run(program, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_the_rule_fires_on_attention_only():
    graph = import_model(_attention_model(4, (2, 1, 1, 6)))
    assert graph.op_counts()["attention"] == 1
    eg = EGraph.from_graph(graph, finite_masks=True)
    assert RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed
    snap = eg.snapshot()
    (root,) = snap.roots
    assert {snap.nodes[n].op for n in snap.classes[root]} == {"attention", "sdpa"}
    q, kt, v = (ir.input_(n, s) for n, s in (("q", (2, 6, 8)), ("kt", (2, 8, 6)), ("v", (2, 6, 8))))
    parts = ir.make("matmul", [ir.make("softmax", [ir.make("matmul", [q, kt], (0,))], (2,)), v], (0,))
    apart = EGraph.from_graph(ir.Graph((q, kt, v), (parts,), ("y",)))
    assert not RuleEngine(apart, [by_name()[RULE]]).apply(RULE).changed


def test_the_ort_cost_times_the_kernel_as_the_runtime_runs_it():
    bits = float_bits(SCALE)
    shapes = ((1, 6, 128, 64), (1, 6, 64, 128), (1, 6, 128, 64), (1, 1, 1, 128))
    kernel = op_model(OpKey("sdpa", (bits,), shapes, (1, 6, 128, 64)))
    core = op_model(OpKey("attention", (bits,), shapes, (1, 6, 128, 64)))
    assert kernel is not None and core is not None
    assert "Attention" in runtime_nodes(kernel[0]) and "Attention" not in runtime_nodes(core[0])
    np.testing.assert_allclose(_run(kernel[0], kernel[1]), _run(core[0], core[1]), rtol=1e-4, atol=1e-5)


def test_portable_leaves_the_kernel_rules_out():
    names = {r.name for r in rule_set("default", portable=True)}
    assert KERNEL_RULES == {RULE, "attention_causal", "attention_grouped", "rotary_kernel", "rotary_part_kernel",
                            "attention_nz_kernel"} \
        and not names & KERNEL_RULES
    assert kernels.runtime_runs_kernels()  # onnxruntime 1.32 runs opset 23's Attention on the CPU
    assert KERNEL_RULES <= {r.name for r in rule_set("default")}


def test_the_portable_flag_reaches_the_search_config():
    from eqsat.app.cli import build_parser, config_from_args

    def parsed(*flags: str) -> bool:
        args = build_parser().parse_args(["optimize-model", "--model", "bert", "-o", "o.onnx", *flags])
        return config_from_args(args).search.portable
    assert parsed("--portable") and not parsed()


@pytest.mark.parametrize("portable", [False, True])
def test_a_portable_run_keeps_the_models_opset_and_operators(portable, monkeypatch):
    """Under a cost that prices the kernel at a tenth of the decomposition, a default run ships it (upgraded to
    opset 23, verified); a portable run keeps opset 17 and the decomposed attention."""
    from eqsat.cost.analytic import AnalyticCost
    priced = AnalyticCost.op_cost
    monkeypatch.setattr(AnalyticCost, "op_cost", lambda self, key: priced(self, key) * (0.1 if key.op == "sdpa" else 1))
    original = _attention_model(4, (2, 1, 1, 6))
    config = OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False, portable=portable,
                               assume_finite_masks=True)
    result = optimize(original, config)
    assert result.report.to_json()["verified"]
    out = result.optimized
    assert [o.version for o in out.opset_import if o.domain == ""] == [17 if portable else 23]
    assert ("Attention" in [n.op_type for n in out.graph.node]) is not portable
    assert result.report.to_json()["kernels"] == ({} if portable else {"Attention (opset 23)": 1})
    feeds = _feeds(original)
    np.testing.assert_allclose(_run(out, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_the_sdpa_shape_and_values_are_attentions():
    rng = np.random.default_rng(3)
    q, kt, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 4, 7)), rng.standard_normal((2, 7, 3))
    mask = rng.standard_normal((1, 5, 7))
    leaves = [ir.input_(n, a.shape) for n, a in zip(("q", "kt", "v", "m"), (q, kt, v, mask))]
    node = ir.make("sdpa", leaves, (float_bits(0.5),))
    assert node.shape == (2, 5, 3)
    s = q @ kt * 0.5 + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    expected = (p / p.sum(-1, keepdims=True)) @ v
    graph = ir.Graph(tuple(leaves), (node,), ("y",))
    model = export_model(dataclasses.replace(graph))
    feeds = {n: a.astype(np.float32) for n, a in zip(("q", "kt", "v", "m"), (q, kt, v, mask))}
    np.testing.assert_allclose(_run(model, feeds), expected, rtol=1e-4, atol=1e-5)


def test_the_verifier_passes_the_rule():
    check = check_rule(by_name()[RULE], seed=2)
    assert check.passed and not check.thin and 0 < check.fired < check.instances, check.detail
    ranks = {s.split("]")[0].count(",") + 1 for s in check.shapes}
    assert ranks == {3, 4}, check.shapes
    # it fired on the unmasked and the finite-weight masked ones, never on a mask read from an input
    assert any("fmask[" in s for s in check.shapes) and not any(re.search(r"(^|, )mask\[", s) for s in check.shapes)


@pytest.mark.parametrize("name, exporter, opset", [("bert", "torchscript", 17), ("gpt2", "torchscript", 17),
                                                   ("llama", "torchscript", 17), ("llama", "dynamo", 18),
                                                   ("vit", "dynamo", 18), ("qwen2", "torchscript", 17),
                                                   ("qwen2", "dynamo", 18), ("bert_s128", "torchscript", 17),
                                                   ("llama_s128", "torchscript", 17)])
def test_every_attention_of_a_real_export_as_the_kernel(name, exporter, opset):
    """Each attention of a torch export (BERT's padding mask, GPT-2's causal and padding mask, LLaMA's causal
    mask over grouped KV heads repeated, ViT without a mask; Qwen2; sequence 128) and each rotary embedding
    (LLaMA's and Qwen2's on q and k)
    written as the kernel: the model upgraded to opset 23, onnxruntime runs one Attention per attention and one
    RotaryEmbedding per rotary, and eqsat's verification (random inputs, masks of 0/1) finds the original's
    outputs."""
    import zoo

    original = zoo.build(name, exporter, opset)
    graph = import_model(original)
    eg = EGraph.from_graph(graph, finite_masks=True)  # the padding masks made additive: vouched for
    engine = RuleEngine(eg, [by_name()[r] for r in sorted(KERNEL_RULES)])
    assert engine.apply(RULE).changed
    rotary = 2 if name in ("llama", "qwen2", "llama_s128") else 0  # LLaMA's and Qwen2's on q and k
    assert engine.apply("rotary_kernel").changed == (rotary > 0)
    snap = eg.snapshot().restrict()
    choice = {c: ([n for n in nodes if snap.nodes[n].op in ("sdpa", "rope")] or nodes)[0]
              for c, nodes in enumerate(snap.classes)}
    program = export_model(build_program(snap, choice, graph))
    assert [o.version for o in program.opset_import if o.domain == ""] == [23]
    ran = runtime_nodes(program)
    assert ran.count("Attention") == graph.op_counts()["attention"] > 0
    assert ran.count("RotaryEmbedding") == graph.op_counts()["rotary"] == rotary
    check = verify(original, program, seed=0, draws=3)
    assert check.passed, check.detail


# -- rotary_kernel ------------------------------------------------------------------------------------------------------
ROTARY = "rotary_kernel"


def _rotary_model(table_shape: tuple[int, ...] = (1, 1, 6, 8), repeated: bool = True, folded: bool = False,
                  x_shape: tuple[int, ...] = (2, 3, 6, 8)) -> onnx.ModelProto:
    """y = x * cos + rotate_half(x) * sin as LLaMA's exports write it (opset 17), cos and sin initializers whose
    halves repeat (as rotary caches do; or not), or (``folded``) computed by an Unsqueeze of [S, D] tables, as
    TorchScript's exports leave them before folding."""
    rng = np.random.default_rng(1)
    d, h = table_shape[-1], table_shape[-1] // 2
    half = rng.standard_normal((2, *table_shape[:-1], h)).astype(np.float32)
    tables = np.concatenate([half, half if repeated else half[:, ..., ::-1] + 1], axis=-1)
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("zero", [0]), ("h", [h]), ("big", [2 ** 62]), ("last", [-1]), ("one", [1]), ("heads", [1]))]
    nodes = []
    names = ["cos", "sin"]
    for k, n in enumerate(names):
        if folded:
            inits.append(numpy_helper.from_array(tables[k].reshape(table_shape[2:]), f"{n}_table"))
            nodes.append(helper.make_node("Unsqueeze", [f"{n}_table", "zero"], [f"{n}_1"]))
            nodes.append(helper.make_node("Unsqueeze", [f"{n}_1", "heads"], [n]))
        else:
            inits.append(numpy_helper.from_array(tables[k], n))
    nodes += [helper.make_node("Slice", ["x", "zero", "h", "last", "one"], ["x1"]),
              helper.make_node("Slice", ["x", "h", "big", "last", "one"], ["x2"]),
              helper.make_node("Neg", ["x2"], ["nx2"]), helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
              helper.make_node("Mul", ["x", "cos"], ["a"]), helper.make_node("Mul", ["rot", "sin"], ["b"]),
              helper.make_node("Add", ["a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "rotary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert d == x_shape[-1]
    return model


@pytest.mark.parametrize("folded", [False, True])
def test_the_rotary_decomposition_imports_as_rotary_and_round_trips(folded):
    original = _rotary_model(folded=folded)
    assert import_model(original).op_counts()["rotary"] == 1
    out = optimize(original, OptimizeConfig.of(scheduler="none", cost="analytic", measure=False)).optimized
    feeds = _feeds(original)
    np.testing.assert_allclose(_run(out, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_tables_whose_halves_differ_are_no_rotary_caches():
    for folded in (False, True):
        original = _rotary_model(repeated=False, folded=folded)
        counts = import_model(original).op_counts()
        assert counts["rotary"] == 0 and counts["ewadd"] == 1, counts
        out = optimize(original, OptimizeConfig.of(scheduler="none", cost="analytic", measure=False)).optimized
        feeds = _feeds(original)
        np.testing.assert_allclose(_run(out, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("table", [(1, 1, 6, 8), (2, 1, 6, 8), (1, 1, 1, 8)])
def test_the_rotary_kernel_is_what_onnxruntime_runs_and_computes_the_same(table):
    original = _rotary_model(table)
    graph = import_model(original)
    eg = EGraph.from_graph(graph)
    assert RuleEngine(eg, [by_name()[ROTARY]]).apply(ROTARY).changed
    program = export_model(choose(eg, graph, "rope"))
    assert [o.version for o in program.opset_import if o.domain == ""] == [23]
    assert runtime_nodes(program) == ["RotaryEmbedding"]  # the caches' slices fold
    assert runtime_nodes(original).count("Mul") == 2  # the decomposition, which onnxruntime does not fuse
    for seed in (0, 1):
        feeds = _feeds(original, seed)
        np.testing.assert_allclose(_run(program, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_the_rotary_rule_fires_on_tables_shared_by_the_heads_only():
    per_head = import_model(_rotary_model((1, 3, 6, 8)))
    assert per_head.op_counts()["rotary"] == 1
    assert not RuleEngine(EGraph.from_graph(per_head), [by_name()[ROTARY]]).apply(ROTARY).changed
    rank3 = import_model(_rotary_model((1, 6, 8), x_shape=(3, 6, 8)))
    assert rank3.op_counts()["rotary"] == 1
    assert not RuleEngine(EGraph.from_graph(rank3), [by_name()[ROTARY]]).apply(ROTARY).changed


def test_the_ort_cost_times_the_rotary_kernel_as_the_runtime_runs_it():
    x, table = (1, 6, 128, 64), (1, 1, 128, 64)
    kernel, parts = (op_model(OpKey(op, (), (x, table, table), x)) for op in ("rope", "rotary"))
    assert kernel is not None and parts is not None
    assert runtime_nodes(kernel[0]) == ["RotaryEmbedding"] and "RotaryEmbedding" not in runtime_nodes(parts[0])


def test_the_verifier_passes_the_rotary_rule():
    check = check_rule(by_name()[ROTARY], seed=2)
    assert check.passed and not check.thin, check.detail
    assert 0 < check.fired < check.instances  # the near misses (rank 3, tables per head) do not fire
