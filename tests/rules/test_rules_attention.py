"""The rule family ``attention_split`` (rules/ours/attention.py) and the operators its parts need:
4-D ``matmul`` and ``scale``. An attention splits into its parts and the parts recombine, for ranks 3 and 4,
with and without a mask; near misses (softmax over another axis, a fused activation, a mask that broadcasts the
scores up) are not rewritten; the TASO matmul rules reach the parts (V's projection moves inside the attention);
the rule verifier passes the rule and refuses wrong variants. Oracles: numpy's own attention (written here), numpy's
matmul broadcasting and onnxruntime on the exported programs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from ort_graphs import fused, ort_graph
from rule_cases import apply, choose, ort_run

from eqsat import ir, ops
from eqsat.egglog.egraph import EGraph
from eqsat.errors import ShapeError
from eqsat.evaluate import evaluate
from eqsat.onnx.export import export_model
from eqsat.ops.composite import float_bits
from eqsat.rules import by_name, rule_set
from eqsat.rules.reach import ReachEngine
from eqsat.rules.verify import check_rule

SCALE = 0.35355338  # 1 / sqrt(8) as a float32
RULE = "attention_split"


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _numpy_attention(q, kt, v, scale: float, mask=None) -> np.ndarray:
    """The oracle, in float64."""
    s = np.matmul(q.astype(np.float64), kt) * float(np.float32(scale))
    return np.matmul(_softmax(s if mask is None else s + mask), v)


def _leaves(lead: tuple[int, ...], rows: int = 4, d: int = 3, keys: int = 5, dv: int = 2,
            mask: tuple[int, ...] | None = None) -> list[ir.Node]:
    out = [ir.input_("q", lead + (rows, d)), ir.input_("kt", lead + (d, keys)), ir.input_("v", lead + (keys, dv))]
    return out + ([ir.input_("mask", mask)] if mask is not None else [])


def _parts(leaves: list[ir.Node], axis: int | None = None, acts: tuple[int, int] = (0, 0),
           mask_first: bool = False) -> ir.Node:
    """The parts form of the attention of ``leaves`` (q, kt, v[, mask]), written by hand (near misses through
    ``axis`` and ``acts``)."""
    q, kt, v = leaves[:3]
    mask = leaves[3] if len(leaves) == 4 else None
    scores = ir.make("scale", [ir.make("matmul", [q, kt], (acts[0],))], (float_bits(SCALE),))
    if mask is not None:
        scores = ir.make("ewadd", [mask, scores] if mask_first else [scores, mask])
    axis = len(q.shape) - 1 if axis is None else axis
    return ir.make("matmul", [ir.make("softmax", [scores], (axis,)), v], (acts[1],))


def _values(leaves: list[ir.Node], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {str(n.name): rng.standard_normal(n.shape).astype(np.float32) for n in leaves}


def _ops(graph: ir.Graph) -> list[str]:
    return sorted(n.op for n in graph.nodes() if n.op != "input")


# -- the operators the parts need ---------------------------------------------------------------------
@pytest.mark.parametrize("a,b", [((2, 3, 4, 5), (2, 3, 5, 6)), ((1, 1, 1, 1), (1, 1, 1, 7)), ((3, 4, 5), (3, 5, 2)),
                                 ((4, 5), (5, 2))])
def test_matmul_of_rank_2_to_4_has_numpy_s_shape(a, b):
    assert ops.infer_shape("matmul", (0,), [a, b]) == np.matmul(np.zeros(a), np.zeros(b)).shape


@pytest.mark.parametrize("a,b", [((2, 3, 4, 5), (2, 3, 6, 6)),  # inner dimensions differ
                                 ((1, 3, 4, 5), (2, 3, 5, 6)),  # numpy broadcasts the batch: the IR does not
                                 ((2, 3, 4, 5), (2, 1, 5, 6)),
                                 ((2, 3, 4, 5), (3, 5, 6)),  # ranks differ
                                 ((1, 2, 3, 4, 5), (1, 2, 3, 5, 6))])  # rank 5
def test_matmul_refuses_what_it_does_not_take(a, b):
    with pytest.raises(ShapeError):
        ops.infer_shape("matmul", (0,), [a, b])


def test_scale_refuses_a_factor_that_is_not_positive_and_finite():
    for bits in (0, float_bits(float("inf")), float_bits(float("nan")), float_bits(-0.5)):
        with pytest.raises(ShapeError, match="positive finite scale"):
            ops.infer_shape("scale", (bits,), [(2, 3)])
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(ops.evaluate("scale", (float_bits(0.25),), [x]), x / 4)


def test_egglog_gives_no_shape_to_a_scale_or_a_4d_matmul_the_python_side_refuses():
    """(tests/core/test_ops.py checks agreement on random valid draws and one-dimension near misses.)"""
    eg = EGraph()
    for h, shape in (("x", (2, 3, 4, 5)), ("w", (2, 3, 5, 6)), ("u", (1, 3, 5, 6))):
        eg.run_program(f'(set (node "{h}") (Input "i:{h}")) (set (shape (node "{h}")) {ops.shape_term(shape)})')
    terms = {"mm": '(Matmul 0 (node "x") (node "w"))', "mm_bad": '(Matmul 0 (node "x") (node "u"))',
             "scale": f'(Scale {float_bits(0.25)} (node "x"))', "scale_zero": '(Scale 0 (node "x"))',
             "scale_inf": f'(Scale {float_bits(float("inf"))} (node "x"))'}
    for k, term in terms.items():
        eg.run_program(f'(set (node "{k}") {term})')
        eg.output_handles.append(k)
    eg.saturate_analysis()
    snap = eg.snapshot()
    got = dict(zip(terms, (snap.shapes[c] for c in snap.roots)))
    assert got == {"mm": (2, 3, 4, 6), "mm_bad": None, "scale": (2, 3, 4, 5), "scale_zero": None, "scale_inf": None}


# -- the rule --------------------------------------------------------------------------------------------
CASES = {  # name: (leading dimensions, mask shape or None)
    "rank3": ((2,), None), "rank3_masked": ((2,), (1, 4, 5)), "rank4": ((2, 3), None),
    "rank4_masked": ((2, 3), (2, 1, 1, 5)), "rank4_full_mask": ((1, 2), (1, 2, 4, 5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_splits_into_parts_that_compute_it(case):
    lead, mask = CASES[case]
    leaves = _leaves(lead, mask=mask)
    att = ir.make("attention", leaves, (float_bits(SCALE),))
    eg, (report,) = apply(att, RULE)
    assert report.changed
    parts = choose(eg, att, "matmul")
    masked = ["ewadd"] if mask else []
    assert _ops(parts) == sorted(["matmul", "matmul", "scale", "softmax", *masked])
    feeds = _values(leaves)
    expected = _numpy_attention(*(feeds[n.name] for n in leaves[:3]), SCALE, feeds.get("mask"))
    np.testing.assert_allclose(evaluate(list(parts.outputs), feeds)[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ort_run(parts, feeds), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case,mask_first", [(c, first) for c in sorted(CASES)
                                             for first in ((False, True) if CASES[c][1] else (False,))])
def test_parts_recombine_into_attention(case, mask_first):
    lead, mask = CASES[case]
    leaves = _leaves(lead, mask=mask)
    parts = _parts(leaves, mask_first=mask_first)
    eg, (report,) = apply(parts, RULE)
    assert report.changed
    whole = choose(eg, parts, "attention")
    (node,) = [n for n in whole.nodes() if n.op == "attention"]
    assert node.attrs == (float_bits(SCALE),) and [i.name for i in node.inputs] == [n.name for n in leaves]
    feeds = _values(leaves, seed=1)
    expected = _numpy_attention(*(feeds[n.name] for n in leaves[:3]), SCALE, feeds.get("mask"))
    np.testing.assert_allclose(ort_run(whole, feeds), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ort_run(ir.Graph(whole.inputs, (parts,), ("y",)), feeds), expected, rtol=1e-4, atol=1e-5)


def test_both_forms_export_alike_and_onnxruntime_fuses_the_scale():
    """The parts are written as attention's own emitter writes it: MatMul, Mul by a scalar, Add, Softmax, MatMul,
    and onnxruntime fuses the product and the scale into one FusedMatMul in both."""
    leaves = _leaves((1, 2), mask=(1, 1, 4, 5))
    att = ir.make("attention", leaves, (float_bits(SCALE),))
    models = [export_model(ir.Graph(tuple(leaves), (y,), ("y",))) for y in (att, _parts(leaves))]
    assert [[n.op_type for n in m.graph.node] for m in models] == [["MatMul", "Mul", "Add", "Softmax", "MatMul"]] * 2
    assert [fused(ort_graph(m))["FusedMatMul"] for m in models] == [1, 1]


@pytest.mark.parametrize("lead,bias,mask,mask_first", [((1, 2), (1, 2, 4, 5), (1, 1, 1, 5), False),
                                                        ((1, 2), (1, 2, 4, 5), (1, 1, 1, 5), True),
                                                        ((2,), (1, 4, 5), (2, 1, 5), False)])
def test_unscaled_scores_with_two_masks_recombine(lead, bias, mask, mask_first):
    """T5's spelling: the scores not scaled, its position bias then the padding mask added in turn
    (``(q @ kt + bias) + mask``): one attention of scale 1 whose mask is the sum of the two."""
    leaves = _leaves(lead)
    q, kt, v = leaves
    b, m = ir.input_("bias", bias), ir.input_("mask", mask)
    inner = ir.make("ewadd", [ir.make("matmul", [q, kt], (0,)), b])
    scores = ir.make("ewadd", [m, inner] if mask_first else [inner, m])
    parts = ir.make("matmul", [ir.make("softmax", [scores], (len(lead) + 1,)), v], (0,))
    eg, (report,) = apply(parts, RULE)
    assert report.changed
    whole = choose(eg, parts, "attention")
    (node,) = [n for n in whole.nodes() if n.op == "attention"]
    assert node.attrs == (float_bits(1.0),) and node.inputs[3].op == "ewadd"
    assert {i.name for i in node.inputs[3].inputs} == {"bias", "mask"}
    feeds = _values([*leaves, b, m], seed=3)
    expected = _numpy_attention(feeds["q"], feeds["kt"], feeds["v"], 1.0, feeds["bias"] + feeds["mask"])
    np.testing.assert_allclose(ort_run(whole, feeds), expected, rtol=1e-4, atol=1e-5)


def test_unscaled_scores_without_a_mask_recombine():
    leaves = _leaves((2, 3))
    q, kt, v = leaves
    parts = ir.make("matmul", [ir.make("softmax", [ir.make("matmul", [q, kt], (0,))], (3,)), v], (0,))
    eg, (report,) = apply(parts, RULE)
    whole = choose(eg, parts, "attention")
    (node,) = [n for n in whole.nodes() if n.op == "attention"]
    assert report.changed and node.attrs == (float_bits(1.0),) and len(node.inputs) == 3
    feeds = _values(leaves, seed=4)
    expected = _numpy_attention(feeds["q"], feeds["kt"], feeds["v"], 1.0)
    np.testing.assert_allclose(ort_run(whole, feeds), expected, rtol=1e-4, atol=1e-5)


NEAR_MISSES = {  # name: a builder of a parts form that is no attention
    "softmax_axis_rank3": lambda: _parts(_leaves((2,)), axis=1),
    "softmax_axis_rank4": lambda: _parts(_leaves((2, 3)), axis=2),
    "relu_on_scores": lambda: _parts(_leaves((2,)), acts=(2, 0)),
    "relu_on_output": lambda: _parts(_leaves((2, 3), mask=(1, 1, 4, 5)), acts=(0, 2)),
    "mask_broadcasts_rows": lambda: _parts(_leaves((2,), rows=1, mask=(2, 3, 5))),  # one query row, three mask rows
    "mask_broadcasts_rows_first": lambda: _parts(_leaves((2, 3), rows=1, mask=(1, 1, 3, 5)), mask_first=True),
    "rank2": lambda: _parts([ir.input_("q", (4, 3)), ir.input_("kt", (3, 5)), ir.input_("v", (5, 2))]),
}


@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_near_misses_are_not_recombined(case):
    parts = NEAR_MISSES[case]()
    eg, (report,) = apply(parts, RULE)
    assert report.matches == 0 and not report.changed
    assert "attention" not in {e.op for e in eg.snapshot().nodes}


def test_taso_rules_reach_the_parts_and_the_result_recombines():
    """matmul(attention(q, kt, v), W): split, re-associate the output product (TASO's s000), recombine: the
    e-graph then holds attention(q, kt, v @ W), which computes the same."""
    leaves = _leaves((2, 3), mask=(2, 1, 1, 5))
    w = ir.input_("w", (2, 3, 2, 6))
    top = ir.make("matmul", [ir.make("attention", leaves, (float_bits(SCALE),)), w], (0,))
    eg, reports = apply(top, RULE, "taso_s000", RULE)
    assert all(r.changed for r in reports)
    moved = choose(eg, top, "attention")
    (node,) = [n for n in moved.nodes() if n.op == "attention"]
    assert node.inputs[2].op == "matmul" and node.inputs[2].inputs[1].name == "w"  # V projected first
    feeds = _values([*leaves, w], seed=2)
    expected = np.matmul(_numpy_attention(feeds["q"], feeds["kt"], feeds["v"], SCALE, feeds["mask"]), feeds["w"])
    np.testing.assert_allclose(ort_run(moved, feeds), expected, rtol=1e-4, atol=1e-5)


def test_reach_includes_the_parts_constructors():
    """On an e-graph of one attention, the rules that can fire include the split and, through the constructors
    its actions create, TASO's matmul re-association; without the split, that one cannot fire."""
    att = ir.make("attention", _leaves((2,)), (float_bits(SCALE),))
    graph = ir.Graph(tuple(att.inputs), (att,), ("y",))
    rules = rule_set("default")
    with_split = ReachEngine(EGraph.from_graph(graph), rules)
    assert {RULE, "taso_s000"} <= set(with_split.registered)
    without = ReachEngine(EGraph.from_graph(graph), [r for r in rules if r.name != RULE])
    assert without.idle("taso_s000")
    assert with_split.apply(RULE).changed


# -- the verifier -----------------------------------------------------------------------------------------
def test_the_verifier_passes_the_rule():
    check = check_rule(by_name()[RULE], seed=4)
    assert check.passed and not check.thin, check.detail
    q_ranks = {s.split("]")[0].count(",") + 1 for s in check.shapes}  # each description starts with q[...]
    assert q_ranks == {3, 4} and any("ewadd" in s for s in check.shapes), check.shapes


@pytest.mark.parametrize("direction", ["split", "recombine"])
def test_each_direction_alone_passes_the_verifier_on_many_instances(direction):
    """Every instance holds an attention, which always splits; the recombining bodies alone fire only on the
    parts forms that are no near miss, with and without a mask."""
    rule = by_name()[RULE]
    bodies = tuple(b for b in rule.bodies if ("(Pend root (Attention" in b[1]) == (direction == "recombine"))
    assert 0 < len(bodies) < len(rule.bodies)
    check = check_rule(dataclasses.replace(rule, name=f"{RULE}_{direction}", bodies=bodies), seed=4)
    assert check.passed and check.fired >= 10, check.detail
    if direction == "recombine":
        assert check.fired < check.instances  # the near misses stay apart
        assert any("ewadd" in s for s in check.shapes) and any("ewadd" not in s for s in check.shapes)


def test_the_unscaled_and_two_mask_bodies_alone_pass_the_verifier():
    rule = by_name()[RULE]
    bodies = tuple(b for b in rule.bodies if str(float_bits(1.0)) in b[1] or "m1" in b[0])
    assert 0 < len(bodies) < len(rule.bodies)
    check = check_rule(dataclasses.replace(rule, name=f"{RULE}_t5", bodies=bodies), seed=5)
    assert check.passed and check.fired >= 5, check.detail
    assert any("bias2" in s for s in check.shapes), check.shapes


def _variant(name: str, edit) -> object:
    """The rule with ``edit`` applied to what its bodies write (the split direction's parts)."""
    rule = by_name()[RULE]
    bodies = tuple((q, edit(a)) for q, a in rule.bodies)
    assert bodies != rule.bodies
    return dataclasses.replace(rule, name=name, bodies=bodies)


def _wrong_axis(text: str) -> str:
    """softmax over the axis before the last."""
    rank = 4 if "(Softmax 3 " in text else 3
    return text.replace(f"(Softmax {rank - 1} ", f"(Softmax {rank - 2} ")


WRONG = {
    "wrong_axis": _wrong_axis,
    "scale_forgotten": lambda text: text.replace("(Scale c (Matmul 0 q kt))", "(Matmul 0 q kt)"),
    "scale_off_by_one_ulp": lambda text: text.replace("(Scale c (Matmul", "(Scale (+ c 1) (Matmul"),
    "mask_after_softmax": lambda text: text.replace("(Softmax 2 (Ewadd (Scale c (Matmul 0 q kt)) mk))",
                                                    "(Ewadd (Softmax 2 (Scale c (Matmul 0 q kt))) mk)")
                                           .replace("(Softmax 3 (Ewadd (Scale c (Matmul 0 q kt)) mk))",
                                                    "(Ewadd (Softmax 3 (Scale c (Matmul 0 q kt))) mk)"),
}


@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_the_verifier_refuses_a_wrong_variant(wrong):
    check = check_rule(_variant(f"{RULE}_{wrong}", WRONG[wrong]), seed=0)
    assert not check.passed and "computes different values" in check.detail, check.detail
