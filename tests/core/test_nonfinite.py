"""The equivalence contract on inputs that are not finite (docs/robustness.md): where the original gives NaN or an
infinity on an input a user can feed, the written model gives the same, or the rewrite that would change it does
not fire unless the user vouches (``--assume-finite-masks``, named in the report). Oracles: onnxruntime running the
original model, and brute force over the values an interval claims to bound."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat import ir
from eqsat.app.cli import main
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost.analytic import AnalyticCost
from eqsat.egglog.egraph import EGraph
from eqsat.onnx import session
from eqsat.onnx.importer import import_model
from eqsat.ops.bounds import finite_masks, value_range
from eqsat.rules import RuleEngine, by_name
from eqsat.verification import Verifier
from eqsat.verification.feeds import EDGES, edge_cases, edge_inputs, edge_label

LOWEST = np.finfo(np.float32).min
S, D = 8, 4


def _attention(mask_nodes: list[onnx.NodeProto], mask_inputs: list[onnx.ValueInfoProto],
               inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """softmax(q @ Transpose(k) * 0.125 + mask) @ v, q, k, v [1, 2, S, D] inputs, ``mask`` made by ``mask_nodes``
    (or an input of that name)."""
    qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, S, D]) for n in "qkv"]
    nodes = [*mask_nodes, helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["sc"]),
             helper.make_node("Add", ["sc", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "attention", [*qkv, *mask_inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, S, D])],
                              [numpy_helper.from_array(np.array(0.125, np.float32), "c"), *inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _float_mask_model() -> onnx.ModelProto:
    """The issue's model: the additive mask a float input [1, 1, S, S]."""
    return _attention([], [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, S, S])])


def _bool_mask_model() -> onnx.ModelProto:
    """The mask made from a boolean input: Where(keep, 0, float32's lowest), finite whatever is fed."""
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(LOWEST, np.float32), "lowest")]
    return _attention([helper.make_node("Where", ["keep", "zero", "lowest"], ["mask"])],
                      [helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, 1, S, S])], inits)


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.random(shape) < 0.7 if i.type.tensor_type.elem_type == TensorProto.BOOL \
            else rng.standard_normal(shape).astype(np.float32)
    return out


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return session(model).run(None, feeds)[0]


@pytest.fixture
def kernel_priced_low(monkeypatch):
    """The analytic cost with the runtime's attention kernel at a tenth of its price: a search that may write
    the kernel writes it."""
    priced = AnalyticCost.op_cost
    monkeypatch.setattr(AnalyticCost, "op_cost", lambda self, key: priced(self, key) * (0.1 if key.op == "sdpa" else 1))


def _optimized(model: onnx.ModelProto, **options) -> tuple[onnx.ModelProto, dict]:
    result = optimize(model, OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False, **options))
    return result.optimized, result.report.to_json()


def test_an_attention_masked_by_a_float_input_keeps_the_originals_nan_rows(kernel_priced_low):
    """Query rows masked with -inf throughout give NaN in the original (a padded row); the kernel would give the
    average of v there. With the mask read from a float input, eqsat cannot rule that out: no kernel."""
    original = _float_mask_model()
    out, report = _optimized(original)
    assert "Attention" not in [n.op_type for n in out.graph.node] and report["assumptions"] == []
    feeds = _feeds(original)
    feeds["mask"][..., ::2, :] = -np.inf  # every other query sees no key
    expected = _run(original, feeds)
    assert np.isnan(expected[..., ::2, :]).all() and np.isfinite(expected[..., 1::2, :]).all()
    np.testing.assert_allclose(_run(out, feeds), expected, rtol=1e-5, atol=1e-6)  # NaN where the original's are


def test_vouching_for_the_masks_lets_the_kernel_in_and_the_report_names_it(kernel_priced_low):
    original = _float_mask_model()
    out, report = _optimized(original, assume_finite_masks=True)
    assert "Attention" in [n.op_type for n in out.graph.node]
    assert len(report["assumptions"]) == 1 and report["assumptions"][0].startswith("--assume-finite-masks")
    feeds = _feeds(original)  # finite masks: the same values
    np.testing.assert_allclose(_run(out, feeds), _run(original, feeds), rtol=1e-5, atol=1e-5)


def test_a_mask_made_from_a_boolean_input_is_finite_and_takes_the_kernel(kernel_priced_low):
    """Where(keep, 0, lowest) is finite on every input: the kernel is written, and on rows that keep no key
    (float32's lowest throughout) it gives what the original gives."""
    original = _bool_mask_model()
    out, report = _optimized(original)
    assert "Attention" in [n.op_type for n in out.graph.node] and report["assumptions"] == []
    feeds = _feeds(original)
    feeds["keep"][..., 3, :] = False
    expected = _run(original, feeds)
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(_run(out, feeds), expected, rtol=1e-5, atol=1e-5)


def test_the_rule_fires_on_finite_masks_only():
    rule = by_name()["attention_kernel"]
    for model, fires in ((_float_mask_model(), False), (_bool_mask_model(), True)):
        graph = import_model(model)
        eg = EGraph.from_graph(graph)
        assert len(eg.encoding.marks["Finite"]) == int(fires)
        assert RuleEngine(eg, [rule]).apply(rule.name).changed is fires
        vouched = EGraph.from_graph(graph, finite_masks=True)
        assert RuleEngine(vouched, [rule]).apply(rule.name).changed


def test_the_cli_flag_reaches_the_report(tmp_path, kernel_priced_low):
    src, out, report = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "r.json"
    onnx.save(_float_mask_model(), src)
    assert main(["optimize-model", str(src), "-o", str(out), "--report", str(report), "--scheduler", "tensat",
                 "--cost", "analytic", "--no-measure", "-q", "--assume-finite-masks"]) == 0
    data = json.loads(report.read_text())
    assert data["config"]["assume_finite_masks"] is True and data["assumptions"]


def _kernel_program(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s attention written as the runtime's kernel whatever its mask (vouched for)."""
    from rule_cases import choose

    from eqsat.onnx.export import export_model
    graph = import_model(model)
    eg = EGraph.from_graph(graph, finite_masks=True)
    assert RuleEngine(eg, [by_name()["attention_kernel"]]).apply("attention_kernel").changed
    return export_model(choose(eg, graph, "sdpa"))


def test_the_output_verifier_draws_masked_rows_and_catches_a_nan_made_finite():
    """The verifier's edge draws (rows of -inf in each float input in turn) find the kernel's finite values where
    the original gives NaN; the same program passes the random draws alone."""
    original = _float_mask_model()
    program = _kernel_program(original)
    check = Verifier(original, seed=0).check(program)
    assert not check.passed and "rows of -inf in 'mask'" in check.detail and "NaN" in check.detail, check.detail
    assert Verifier(original, seed=0, edges=()).check(program).passed
    assert Verifier(original, seed=0).check(original).passed  # the original against itself, every edge draw


def edge_draws(feeds: dict[str, np.ndarray], rng: np.random.Generator) -> list[tuple[dict[str, np.ndarray], str]]:
    """The edge draws made from ``feeds``, each with its label, as :class:`Verifier` first makes them."""
    out = []
    for edge, name in edge_cases(feeds):
        drawn = edge_inputs(feeds, edge, rng, name)
        if drawn is not None:
            out.append((drawn, edge_label(edge, name)))
    return out


def test_edge_draws_hold_what_they_say():
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3, 5)).astype(np.float32), "ids": np.arange(4, dtype=np.int64)}
    draws = dict((label, f) for f, label in edge_draws(feeds, np.random.default_rng(1)))
    assert set(draws) == {"rows of -inf in 'x'", "a NaN in 'x'", "near the range"} and len(EDGES) == 3
    rows = draws["rows of -inf in 'x'"]["x"].reshape(-1, 5)
    assert np.isneginf(rows[::3]).all() and np.isfinite(rows[1]).any()
    assert np.isnan(draws["a NaN in 'x'"]["x"]).sum() == 1
    big = np.abs(draws["near the range"]["x"])
    assert np.isfinite(big).all() and big.min() > 1e30
    assert all(np.array_equal(f["ids"], feeds["ids"]) for f in draws.values())


# -- value ranges, against brute force -----------------------------------------------------------------------------
def _cast(x: ir.Node, to: int, dtype: str) -> ir.Node:
    return ir.opaque("Cast", [x], x.shape, dtype, attr_bytes=(helper.make_attribute("to", to).SerializeToString(),))


def _hf_mask(source: ir.Node) -> ir.Node:
    """transformers' additive padding mask: (1 - mask.float()) * lowest."""
    inverted = ir.opaque("Sub", [ir.weight("one", (1, 1, 1, 1)), _cast(source, TensorProto.FLOAT, "float32")],
                         source.shape)
    return ir.make("ewmul", [inverted, ir.weight("lowest", (1, 1, 1, 1))])


WEIGHTS = {"one": np.ones((1, 1, 1, 1), np.float32), "lowest": np.full((1, 1, 1, 1), LOWEST, np.float32)}


def _hf_mask_values(values: np.ndarray) -> np.ndarray:
    """The same mask computed by onnxruntime, for ``values`` of the source's type."""
    kind = {np.dtype(bool): TensorProto.BOOL, np.dtype(np.int64): TensorProto.INT64}[values.dtype]
    nodes = [helper.make_node("Cast", ["m"], ["f"], to=TensorProto.FLOAT), helper.make_node("Sub", ["one", "f"], ["i"]),
             helper.make_node("Mul", ["i", "lowest"], ["y"])]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("m", kind, list(values.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(values.shape))],
                              [numpy_helper.from_array(v, n) for n, v in WEIGHTS.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return session(model).run(None, {"m": values})[0]


def test_a_boolean_padding_mask_is_finite_and_its_range_holds_every_value():
    source = ir.input_("m", (1, 1, 1, 4), "bool")
    lo, hi = value_range(_hf_mask(source), WEIGHTS)
    every = np.array([[[[a, b, c, d]]] for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)], bool)
    values = np.concatenate([_hf_mask_values(m) for m in every])
    assert np.isfinite(values).all() and lo <= values.min() and values.max() <= hi


def test_an_int64_padding_mask_is_not_finite_and_onnxruntime_agrees():
    """mask = -1 (an int64 a user can feed) makes (1 - mask) * lowest -inf: no finiteness is claimed."""
    source = ir.input_("m", (1, 1, 1, 4), "int64")
    assert value_range(_hf_mask(source), WEIGHTS) is None
    assert np.isneginf(_hf_mask_values(np.array([[[[1, 0, -1, 1]]]], np.int64))).any()


def is_finite(node, weights, finite_inputs: bool = False) -> bool:
    """Whether the analysis claims every element of ``node`` finite: it gives an interval (None: unknown)."""
    return value_range(node, weights, finite_inputs) is not None


def test_inputs_weights_and_where():
    shape = (1, 2, 3)
    x = ir.input_("x", shape)
    assert not is_finite(x, {}) and is_finite(x, {}, finite_inputs=True)
    weights = {"bad": np.array([[[0, -np.inf, 1]] * 2], np.float32), "good": np.zeros(shape, np.float32)}
    good = ir.weight("good", shape)
    assert not is_finite(ir.weight("bad", shape), weights) and is_finite(good, weights)
    keep = ir.input_("c", shape, "bool")
    assert is_finite(ir.opaque("Where", [keep, good, good], shape), weights)
    where = ir.opaque("Where", [keep, good, x], shape)
    assert not is_finite(where, weights)
    big = ir.make("ewadd", [ir.weight("top", shape), ir.weight("top", shape)])
    assert not is_finite(big, {"top": np.full(shape, np.finfo(np.float32).max, np.float32)})  # overflows
    q, kt, v = ir.input_("q", (1, 2, 4)), ir.input_("kt", (1, 4, 3)), ir.input_("v", (1, 3, 4))
    att = ir.make("attention", [q, kt, v, where], (0x3E000000,))
    assert finite_masks([att], weights) == frozenset() and finite_masks([att], weights, vouched=True) == {id(where)}


# -- the rule verifier's edge draws (rules/edges.py) --------------------------------------------------------------
def test_the_rule_verifier_fails_the_kernel_rule_without_its_finite_guard():
    """Without ``(Finite mk)`` the kernel rule fires on masks read from inputs; its rows of -inf give the kernel's
    finite values where the decomposition's are NaN. The guarded rule passes the same draws."""
    import dataclasses

    from eqsat.rules.verify import check_rule
    rule = by_name()["attention_kernel"]
    unguarded = dataclasses.replace(rule, name="attention_kernel_unguarded",
                                    bodies=tuple((q.replace(" (Finite mk)", ""), a) for q, a in rule.bodies))
    assert unguarded.bodies != rule.bodies
    check = check_rule(unguarded, seed=3)
    assert not check.passed and "rows of -inf" in check.detail and "NaN" in check.detail, check.detail
    assert check_rule(rule, seed=3).passed


def _detour(factor: float):
    """a * b -> ((a * factor) * b) / factor: an identity of real numbers (a deliberately wasteful rule)."""
    from eqsat.ops.composite import float_bits
    from eqsat.rules.rule import Rule

    def example(rng):
        shape = tuple(int(d) for d in rng.integers(1, 4, size=2))
        return [ir.make("ewmul", [ir.input_("a", shape), ir.input_("b", shape)])]
    up, down = float_bits(factor), float_bits(1 / factor)
    return Rule(f"mul_detour_{factor:g}", "single", "ours", f"a * b -> ((a * {factor:g}) * b) / {factor:g}",
                (("(= root (Ewmul a b))", f"(Pend root (Scale {down} (Ewmul (Scale {up} a) b)))"),), example=example)


def test_the_rule_verifier_fails_a_rule_that_overflows_within_the_contracts_magnitude():
    """Through 2^40 the middle term overflows float32 where the original's values stay within 2^-12 of the
    range; through 2^4 it stays within it."""
    from eqsat.rules.verify import check_rule
    check = check_rule(_detour(2.0 ** 40), seed=3)
    assert not check.passed and "near the range" in check.detail, check.detail
    assert check_rule(_detour(2.0 ** 4), seed=3).passed


def test_distributing_a_product_keeps_finite_outputs_within_the_contracts_magnitude(tmp_path):
    """The issue's Y = A @ W + B @ W, written (A + B) @ W (taso_s021): within the contract's magnitude (every value
    at most 2^-12 of float32's largest) both are finite and agree; the rule passes the verifier's draws near the
    range. At 2.55e38 (A + B past the range) the contract makes no claim (docs/robustness.md)."""
    from eqsat.rules.verify import check_rule
    from eqsat.verification.feeds import RANGE_HEADROOM
    assert check_rule(by_name()["taso_s021"], seed=3).passed
    n = 4
    nodes = [helper.make_node("MatMul", ["a", "w"], ["aw"]), helper.make_node("MatMul", ["b", "w"], ["bw"]),
             helper.make_node("Add", ["aw", "bw"], ["y"])]
    rng = np.random.default_rng(0)
    w = (rng.uniform(-1, 1, (n, n)) / n).astype(np.float32)
    graph = helper.make_graph(nodes, "distribute", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n])
                                                    for x in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out, _report = _optimized(model)
    assert [n.op_type for n in out.graph.node].count("MatMul") == 1  # distributed
    top = np.float32(RANGE_HEADROOM * np.finfo(np.float32).max)
    feeds = {"a": np.full((n, n), top, np.float32), "b": np.full((n, n), top, np.float32)}
    expected = _run(model, feeds)
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(_run(out, feeds), expected, rtol=1e-5)


def test_a_mask_computed_once_outside_repeated_blocks_stays_finite_inside_them():
    """Four layers of attention (each with a weight of its own) read one mask, Where(keep, 0, lowest), computed
    once: the copy searched sees the mask as an input, whose interval comes from the whole model."""
    from eqsat.app.pipeline import encode_phase
    from eqsat.blocks import DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, DEFAULT_MIN_WEIGHTS, find_blocks
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(LOWEST, np.float32), "lowest"),
             numpy_helper.from_array(np.array(0.5, np.float32), "c")]
    nodes = [helper.make_node("Where", ["keep", "zero", "lowest"], ["mask"])]
    x = "x"
    for k in range(4):
        inits.append(numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"h{k}"]),
                  helper.make_node("Transpose", [f"h{k}"], [f"ht{k}"], perm=[0, 1, 3, 2]),
                  helper.make_node("MatMul", [f"h{k}", f"ht{k}"], [f"s{k}"]),
                  helper.make_node("Mul", [f"s{k}", "c"], [f"sc{k}"]),
                  helper.make_node("Add", [f"sc{k}", "mask"], [f"sm{k}"]),
                  helper.make_node("Softmax", [f"sm{k}"], [f"p{k}"], axis=-1),
                  helper.make_node("MatMul", [f"p{k}", f"h{k}"], [f"y{k}"])]
        x = f"y{k}"
    graph = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, S, D]),
                                                helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, 1, S, S])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, S, D])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    whole = import_model(model)
    blocks = find_blocks(whole, DEFAULT_MIN_COPIES, DEFAULT_MIN_COVER, DEFAULT_MIN_WEIGHTS)
    assert blocks is not None and blocks.copies >= 3
    known = blocks.external_ranges()
    assert list(known.values()) == [(float(LOWEST), 0.0)]
    config = OptimizeConfig.of(cost="analytic")
    alone, _ = encode_phase(blocks.representative, config)
    assert not alone.encoding.marks["Finite"]  # an input, unknown without the whole model
    searched, _ = encode_phase(blocks.representative, config, blocks.copies, known)
    assert len(searched.encoding.marks["Finite"]) == 1
    assert RuleEngine(searched, [by_name()["attention_kernel"]]).apply("attention_kernel").changed


@pytest.mark.parametrize("seed", range(12))
def test_claimed_ranges_hold_on_every_input_onnxruntime_computes(seed):
    """Random expressions of Add, Sub, Mul, Neg, Max, Min, Where and Cast over a boolean input, an int8 input and
    float weights (float32's lowest among them), imported as eqsat imports any model: wherever eqsat claims an
    interval, onnxruntime's values on 300 random inputs (int8 over its whole range) lie in it, none NaN."""
    rng = np.random.default_rng(seed)
    shape = [2, 3]
    inits = [numpy_helper.from_array(np.array(LOWEST, np.float32), "lowest"),
             numpy_helper.from_array(rng.uniform(-4, 4, shape).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    nodes = [helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["i"], ["if"], to=TensorProto.FLOAT)]
    values = ["bf", "if", "lowest", "w", "one"]
    for k in range(6):
        op = str(rng.choice(["Add", "Sub", "Mul", "Neg", "Max", "Min", "Where"]))
        a, c = (values[int(rng.integers(len(values)))] for _ in range(2))
        out = f"v{k}"
        nodes.append(helper.make_node("Neg", [a], [out]) if op == "Neg" else
                     helper.make_node("Where", ["b", a, c], [out]) if op == "Where" else
                     helper.make_node(op, [a, c], [out]))
        values.append(out)
    graph = helper.make_graph(nodes, "ranges", [helper.make_tensor_value_info("b", TensorProto.BOOL, shape),
                                                helper.make_tensor_value_info("i", TensorProto.INT8, shape)],
                              [helper.make_tensor_value_info(f"v{k}", TensorProto.FLOAT, None) for k in range(6)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    imported = import_model(model)
    claims = [value_range(out, imported.weights) for out in imported.outputs]
    assert any(c is not None for c in claims)
    feeds_rng = np.random.default_rng(seed + 100)
    sess = session(model)
    with np.errstate(all="ignore"):
        for _ in range(300):
            feeds = {"b": feeds_rng.random(shape) < 0.5,
                     "i": feeds_rng.integers(-128, 128, shape).astype(np.int8)}
            for claim, got in zip(claims, sess.run(None, feeds)):
                if claim is not None:
                    assert not np.isnan(got).any() and claim[0] <= got.min() and got.max() <= claim[1], (claim, got)


def test_compare_outputs_lets_a_fed_nan_spread_but_never_vanish():
    from eqsat.verification import compare_outputs
    ref = np.array([1.0, np.nan, 3.0, -np.inf], np.float32)
    spread = np.array([np.nan, np.nan, 3.0, -np.inf], np.float32)
    vanished = np.array([1.0, 2.0, 3.0, -np.inf], np.float32)
    assert not compare_outputs(ref, spread)[0] and compare_outputs(ref, spread, nan_spreads=True)[0]
    assert not compare_outputs(ref, vanished, nan_spreads=True)[0]
    assert not compare_outputs(ref, np.array([1.0, np.nan, 3.0, np.inf], np.float32), nan_spreads=True)[0]
    assert compare_outputs(ref, np.array([1.0, np.nan, 3.0, np.nan], np.float32), nan_spreads=True)[0]  # inf x 0
    assert not compare_outputs(ref, np.array([1.5, np.nan, 3.0, -np.inf], np.float32), nan_spreads=True)[0]
