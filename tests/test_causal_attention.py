"""``attention_causal`` (rules/ours/kernels.py): an attention whose mask is a causal triangle becomes opset 23's
``Attention`` with ``is_causal``, which reads no mask. Oracles: a per-entry loop for what a causal mask is,
onnxruntime's outputs on the original models (static and dynamic axes, at several sizes), onnxruntime's optimized
graph (which kernels it runs), and the rule verifier's random instances."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rule_cases import choose

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost.ort import runtime_nodes
from eqsat.egglog.egraph import EGraph
from eqsat.onnx import export, kernels, session
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.ops.attention import CAUSAL_FLOOR, is_causal_mask
from eqsat.rules import RuleEngine, by_name
from eqsat.rules.verify import check_rule

RULE = "attention_causal"
LOWEST = np.finfo(np.float32).min


def _brute_causal(a: np.ndarray) -> bool:
    """The definition, entry by entry: a float mask whose every matrix along the leading axes is n x n, 0 where
    the key is not after the query, at or below the floor where it is."""
    if a.dtype.kind != "f" or a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.size == 0:
        return False
    for idx in np.ndindex(*a.shape):
        i, j = idx[-2], idx[-1]
        if (j <= i and a[idx] != 0) or (j > i and not a[idx] <= CAUSAL_FLOOR):
            return False
    return True


def test_a_causal_mask_is_what_the_definition_says():
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for _ in range(300):
        n, m = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        lead = tuple(int(x) for x in rng.integers(1, 3, size=rng.integers(0, 3)))
        cols = n if rng.random() < 0.8 else m
        upper = np.triu(np.ones((n, cols), dtype=bool), 1)
        fill = rng.choice([LOWEST, -np.inf, -1e4, -1e31])
        a = np.broadcast_to(np.where(upper, fill, 0.0), lead + (n, cols)).astype(np.float32).copy()
        r = rng.random()
        if r < 0.15 and a.size:  # one entry changed
            a[tuple(int(rng.integers(0, s)) for s in a.shape)] = rng.choice([0.0, 1.0, LOWEST])
        elif r < 0.2:
            a = a.astype(np.int64) if np.abs(a).max(initial=0) < 1e9 else a
        assert is_causal_mask(a) == _brute_causal(a), a
        seen[_brute_causal(a)] += 1
    assert seen[True] > 30 and seen[False] > 30, seen


def _model(mask: str, opset: int = 17, rank: int = 4) -> onnx.ModelProto:
    """softmax(q @ Transpose(k) / 4 + m) @ v, q, k, v [2, (3,) 5, 8]; the mask ``m`` a [1, (1,) 5, 5] initializer:
    causal with float32's lowest (``causal``) or with -1e4 (``soft``), or a model input (``input``)."""
    lead = [2, 3][: rank - 2]
    shape = [*lead, 5, 8]
    perm = [*range(rank - 2), rank - 1, rank - 2]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"]
    inits = [numpy_helper.from_array(np.array(4.0, np.float32), "c")]
    mask_shape = [1] * (rank - 2) + [5, 5]
    if mask == "input":
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, mask_shape))
    else:
        fill = LOWEST if mask == "causal" else -1e4
        inits.append(numpy_helper.from_array(np.triu(np.full((5, 5), fill, np.float32), 1).reshape(mask_shape), "m"))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=perm), helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "c"], ["sc"]), helper.make_node("Add", ["sc", "m"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                         shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _applied(model: onnx.ModelProto) -> tuple[EGraph, bool]:
    graph = import_model(model)
    eg = EGraph.from_graph(graph)
    return eg, RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed


@pytest.mark.parametrize("rank", [3, 4])
def test_a_causal_mask_becomes_the_causal_kernel_and_computes_the_same(rank):
    original = _model("causal", rank=rank)
    eg, changed = _applied(original)
    assert changed
    program = export_model(choose(eg, import_model(original), "sdpa_causal"))
    assert {o.domain: o.version for o in program.opset_import}[""] == 23
    (node,) = [n for n in program.graph.node if n.op_type == "Attention"]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["is_causal"] == 1 and len(node.input) == 3
    ran = runtime_nodes(program)
    assert ran.count("Attention") == 1 and "Softmax" not in ran and "Add" not in ran, ran
    for seed in (0, 1):
        feeds = _feeds(original, seed)
        np.testing.assert_allclose(session(program).run(None, feeds)[0], session(original).run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask", ["soft", "input"])
def test_a_mask_that_is_not_surely_causal_is_left_alone(mask):
    """-1e4 above the diagonal lets a score of 1e4 through; a mask the user feeds may be anything."""
    _eg, changed = _applied(_model(mask))
    assert not changed


def test_where_the_upgrade_fails_the_causal_kernel_is_written_decomposed(monkeypatch):
    def refuse(model):
        raise kernels.UpgradeError("no adapter")
    monkeypatch.setattr(export, "upgrade", refuse)
    original = _model("causal")
    eg, changed = _applied(original)
    assert changed
    program = export_model(choose(eg, import_model(original), "sdpa_causal"))
    assert [o.version for o in program.opset_import if o.domain == ""] == [17]
    ops = [n.op_type for n in program.graph.node]
    assert "Attention" not in ops and "CumSum" in ops and "m" not in {i.name for i in program.graph.initializer}
    for seed in (0, 1):
        feeds = _feeds(original, seed)
        np.testing.assert_allclose(session(program).run(None, feeds)[0], session(original).run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


def test_the_verifier_passes_the_rule_and_it_fires_only_on_causal_masks():
    check = check_rule(by_name()[RULE], seed=3, instances=60)
    assert check.passed and not check.thin, check.detail
    assert all("causal[" in s for s in check.shapes), check.shapes  # never on the -1e4 or random masks
    assert 0 < check.fired < check.instances
    ranks = {s.split("]")[0].count(",") + 1 for s in check.shapes}
    assert ranks == {3, 4}, check.shapes


@pytest.mark.parametrize("name,exporter", [("llama", "torchscript"), ("llama", "dynamo"), ("qwen2", "torchscript")])
def test_a_dynamic_decoders_causal_mask_is_marked_and_the_kernel_keeps_the_interface(name, exporter, tmp_path,
                                                                                      monkeypatch):
    """A decoder exported with dynamic batch and sequence axes (its causal mask computed from the sequence length):
    the shape-generic import's mask is marked ``Causal``; under a cost that prices the kernel at a tenth, the
    program shipped runs one Attention with ``is_causal`` and no Trilu, keeps the dynamic axes, and onnxruntime
    finds the original's outputs at several batch sizes and sequence lengths."""
    import zoo

    from eqsat.cost.analytic import AnalyticCost
    priced = AnalyticCost.op_cost
    monkeypatch.setattr(AnalyticCost, "op_cost",
                        lambda self, key: priced(self, key) * (0.1 if key.op == "sdpa_causal" else 1))
    original = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    eg = EGraph.from_graph(import_model(original, shapes, generic=True))
    assert len(eg.encoding.causal) == 1
    config = OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False, input_shapes=shapes)
    result = optimize(original, config)
    assert result.report.to_json()["verified"]
    out = result.optimized
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("Attention") == 1 and "Trilu" not in ops, ops
    (att,) = [n for n in out.graph.node if n.op_type == "Attention"]
    assert {a.name: helper.get_attribute_value(a) for a in att.attribute}["is_causal"] == 1
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in out.graph.input]
    assert dims == [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in original.graph.input]
    rng = np.random.default_rng(7)
    for b, s in ((1, 16), (2, 1), (3, 37), (1, 64)):
        feeds = {i.name: rng.integers(0, 50, size=(b, s)).astype(np.int64) for i in original.graph.input}
        np.testing.assert_allclose(session(out).run(None, feeds)[0], session(original).run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-5)
