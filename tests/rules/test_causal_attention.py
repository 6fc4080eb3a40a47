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
from eqsat.generic import import_generic
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
    program shipped runs one Attention with ``is_causal`` over the grouped key/value heads and no Trilu, keeps the
    dynamic axes, and onnxruntime finds the original's outputs at several batch sizes and sequence lengths."""
    import zoo

    from eqsat.cost.analytic import AnalyticCost
    priced = AnalyticCost.op_cost
    monkeypatch.setattr(AnalyticCost, "op_cost",
                        lambda self, key: priced(self, key) * (0.1 if key.op == "sdpa_causal" else 1))
    original = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    eg = EGraph.from_graph(import_generic(original, shapes))
    assert len(eg.encoding.marks["Causal"]) == 1
    config = OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False, input_shapes=shapes)
    result = optimize(original, config)
    assert result.report.to_json()["verified"]
    out = result.optimized
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("Attention") == 1 and "Trilu" not in ops, ops
    (att,) = [n for n in out.graph.node if n.op_type == "Attention"]
    assert {a.name: helper.get_attribute_value(a) for a in att.attribute}["is_causal"] == 1
    made = {o: n for n in out.graph.node for o in n.output}
    for kv in att.input[1:3]:  # the grouped heads, not repeated by a Reshape of an Expand (repeat_kv)
        assert not (made[kv].op_type == "Reshape" and made[made[kv].input[0]].op_type == "Expand"), made[kv]
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in out.graph.input]
    assert dims == [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in original.graph.input]
    rng = np.random.default_rng(7)
    for b, s in ((1, 16), (2, 1), (3, 37), (1, 64)):
        feeds = {i.name: rng.integers(0, 50, size=(b, s)).astype(np.int64) for i in original.graph.input}
        np.testing.assert_allclose(session(out).run(None, feeds)[0], session(original).run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-5)


def _attr(name: str, value) -> bytes:
    return helper.make_attribute(name, value).SerializeToString()


def _trilu(fill: float = float(LOWEST), k: int = 1, upper: int | None = 1, square: bool = True):
    """A shape-generic import's mask as the IR holds it: opaque Trilu(ConstantOfShape(shape, fill), k) over
    [1, 1, s, s] (or [1, 1, s, 4]), and the weights it reads."""
    from eqsat import ir
    from eqsat.dims import Dim

    s = Dim.symbol("seq", 6)
    shape = (1, 1, s, s if square else 4)
    size = ir.input_("size", (4,), "int64")
    full = ir.opaque("ConstantOfShape", [size], shape, attr_bytes=(
        _attr("value", numpy_helper.from_array(np.array([fill], np.float32))),))
    diag = ir.weight("k", ())
    attrs = () if upper is None else (_attr("upper", upper),)
    return ir.opaque("Trilu", [full, diag], shape, attr_bytes=attrs), {"k": np.array(k, np.int64)}


@pytest.mark.parametrize("case,causal", [({}, True), ({"upper": None}, True), ({"upper": 0}, False),
                                         ({"k": 0}, False), ({"fill": 1.0}, False), ({"fill": -1e4}, False),
                                         ({"square": False}, False)])
def test_a_generic_imports_trilu_is_marked_causal_only_when_it_is(case, causal):
    """Only Trilu(ConstantOfShape(lowest), k=1, upper=1 or its default) over one symbol squared is causal at every
    size; below and on the diagonal of the others there is a value, or above it too little."""
    from eqsat import ir
    from eqsat.ops.attention import causal_masks
    from eqsat.ops.composite import float_bits

    mask, weights = _trilu(**case)
    s, keys = mask.shape[-2], mask.shape[-1]
    q, kt, v = ir.input_("q", (1, 2, s, 8)), ir.input_("kt", (1, 2, 8, keys)), ir.input_("v", (1, 2, keys, 8))
    att = ir.make("attention", [q, kt, v, mask], (float_bits(0.5),))
    assert (causal_masks([att], weights) == {id(mask)}) is causal


def test_a_zero_mask_of_one_entry_is_no_causal_mask_in_a_generic_program_sized_one():
    """At a representative sequence length of 1 a [1, 1, 1] zero mask looks causal, but broadcast over more
    queries it masks nothing: the rule must not make the attention causal."""
    from eqsat import ir
    from eqsat.dims import Dim
    from eqsat.ops.composite import float_bits

    s = Dim.symbol("s", 1)
    q, kt, v = ir.input_("q", (2, s, 4)), ir.input_("kt", (2, 4, s)), ir.input_("v", (2, s, 4))
    att = ir.make("attention", [q, kt, v, ir.weight("m", (1, 1, 1))], (float_bits(0.5),))
    eg = EGraph.from_graph(ir.Graph((q, kt, v), (att,), ("y",), weights={"m": np.zeros((1, 1, 1), np.float32)}))
    assert not eg.encoding.marks["Causal"]
    assert not RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed


def _repeat_kv(x, r: int, unsqueeze: bool = True, axis: int = 2):
    """transformers' repeat_kv as the IR holds it: reshape(Expand(Unsqueeze(x) or reshape(x))) [B, H * r, S, D]."""
    from eqsat import ir

    b, h, s, d = x.shape
    inserted = [b, h, s, d]
    inserted.insert(axis, 1)
    u = ir.opaque("Unsqueeze", [x, ir.weight("axes", (1,), "int64")], inserted) if unsqueeze \
        else ir.make("reshape", [x], tuple(inserted))
    expanded = list(inserted)
    expanded[axis] = r
    e = ir.opaque("Expand", [u, ir.weight("target", (5,), "int64")], expanded)
    return ir.make("reshape", [e], (b, h * r, s, d))


@pytest.mark.parametrize("unsqueeze", [True, False])
def test_repeated_heads_are_read_where_and_only_where_the_shapes_say_so(unsqueeze):
    """The grouped form's pattern (eqsat.onnx.forms): heads repeated in turn along a new axis 2, by a constant
    factor; not a repetition along another axis, nor one by a symbolic factor."""
    from eqsat import ir
    from eqsat.dims import Dim
    from eqsat.onnx.forms import _repeated

    s = Dim.symbol("seq", 16)
    x = ir.input_("x", (1, 2, s, 8))
    assert _repeated(_repeat_kv(x, 2, unsqueeze)) is x
    assert _repeated(_repeat_kv(x, 1, unsqueeze)) is None  # no repetition: nothing to save
    along_seq = _repeat_kv(x, 2, unsqueeze, axis=3)  # [1, 2, s, 2, 8]: repeats positions, not heads
    assert _repeated(along_seq) is None
    y = ir.input_("y", (1, 2, 3, 8))
    r = Dim.symbol("r", 2)
    assert _repeated(_repeat_kv(y, r, unsqueeze)) is None


@pytest.mark.parametrize("name,exporter,opset", [("llama_s128", "torchscript", 17), ("qwen2", "dynamo", 18)])
def test_a_causal_kernel_over_repeated_heads_reads_the_grouped_heads(name, exporter, opset):
    """LLaMA's and Qwen2's grouped key/value heads, repeated for each query head before the attention: the causal
    kernel is written over the unrepeated ones (opset 23's Attention takes fewer key/value heads), so onnxruntime
    runs no Expand; eqsat's verification finds the original's outputs."""
    import zoo

    from eqsat.decode import build_program
    from eqsat.verification import verify

    original = zoo.build(name, exporter, opset)
    graph = import_model(original)
    eg = EGraph.from_graph(graph)
    assert RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed
    snap = eg.snapshot().restrict()
    choice = {c: ([n for n in nodes if snap.nodes[n].op == "sdpa_causal"] or nodes)[0]
              for c, nodes in enumerate(snap.classes)}
    program = export_model(build_program(snap, choice, graph))
    ran = runtime_nodes(program)
    assert ran.count("Attention") == 1 and "Expand" not in ran, ran
    (att,) = [n for n in program.graph.node if n.op_type == "Attention"]
    assert len(att.input) == 3
    check = verify(original, program, seed=0, draws=3)
    assert check.passed, check.detail


def test_the_kernels_candidate_takes_the_kernel_the_estimate_passed_over():
    """Under the analytic estimate the causal kernel costs a little more than its decomposition (its flops count
    the mask), so the extraction keeps the decomposition; the ``kernels`` candidate (eqsat.cost.favoured) takes
    the kernel, is priced consistently by its own cost model (export_phase's check), and computes what the
    original computes in onnxruntime."""
    from eqsat import extract as extractors
    from eqsat.app.candidates import export_phase
    from eqsat.app.selection import candidates_phase
    from eqsat.cost import make, node_costs
    from eqsat.cost.favoured import KernelsFavoured

    original = _model("causal")
    eg, changed = _applied(original)
    assert changed
    snap, cost = eg.snapshot(), make("analytic")
    first = extractors.extract("greedy-dag", snap, node_costs(snap, cost))
    graph = import_model(original)
    main_program = export_phase(snap, first, graph, cost).program
    assert "sdpa_causal" not in main_program.op_counts()
    found = {e.name: e for e in candidates_phase(snap, first, OptimizeConfig.of(cost="analytic", candidates=4), cost,
                                                0.0)}
    kernels_ = found["kernels"]
    assert isinstance(kernels_.cost_model, KernelsFavoured)
    program, model, _ = export_phase(snap, kernels_.extraction, graph, kernels_.cost_model)
    assert program.op_counts().get("sdpa_causal") == 1
    for seed in (0, 1):
        feeds = _feeds(original, seed)
        np.testing.assert_allclose(session(model).run(None, feeds)[0], session(original).run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


def test_every_operator_the_kernel_rules_write_is_one_the_kernels_candidate_favours():
    """The ``kernels`` candidate's set (eqsat.cost.favoured.KERNEL_OPS, read off ``OpDef.kernel``) holds the
    operator each kernel rule writes (the right-hand side of its statement), so a new kernel rule is favoured too."""
    from eqsat.cost.favoured import KERNEL_OPS
    from eqsat.rules import KERNEL_RULES

    rules = by_name()
    written = {rules[name].statement.split("->")[1].strip().split("(")[0] for name in KERNEL_RULES}
    assert written and written <= KERNEL_OPS, (written, KERNEL_OPS)
