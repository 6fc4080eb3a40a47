"""The rule family ``fold_scale_matmul`` (rules/ours/scale.py): a constant scale over a product's output features
(ConvNeXt's layer scale, ``gamma * Linear(x)``) folded into the product's weights. It fires on the IR's product
form and on a ``linear``, in either operand order, for x of rank 1-4; a scale over more than the features, or one
that is not a weight, is left alone; the folded program drops the element-wise product and computes the same.
Oracles: numpy and onnxruntime on the exported programs, and the rule verifier.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rule_cases import apply, graph_of, optimized, ort_run

from eqsat import ir
from eqsat.cost import AnalyticCost, graph_cost
from eqsat.rules import by_name
from eqsat.rules.verify import check_rule

RULE = "fold_scale_matmul"


def _scaled(x_shape: tuple[int, ...], n: int, linear: bool, g_first: bool, g_shape: tuple[int, ...] | None = None,
            g_input: bool = False) -> ir.Node:
    """g * (x @ W [+ b]) as the importer makes it (x flattened to 2-D for the product, reshaped back)."""
    x, w = ir.input_("x", x_shape), ir.weight("w", (x_shape[-1], n))
    if linear:
        product = ir.make("linear", [x, w, ir.weight("b", (n,))])
    else:
        rows = int(np.prod(x_shape[:-1]))
        flat = ir.make("reshape", [x], (rows, x_shape[-1])) if len(x_shape) != 2 else x
        product = ir.make("matmul", [flat, w], (0,))
        if len(x_shape) != 2:
            product = ir.make("reshape", [product], x_shape[:-1] + (n,))
    shape = g_shape or (1,) * (len(x_shape) - 1) + (n,)
    g = ir.input_("g", shape) if g_input else ir.weight("g", shape)
    return ir.make("ewmul", [g, product] if g_first else [product, g])


CASES = [((1, 4, 4, 8), 6, False, False), ((1, 4, 4, 8), 6, False, True), ((2, 5, 8), 3, True, False),
         ((4, 8), 5, True, True), ((8,), 4, False, False), ((2, 3, 8), 6, False, True)]


@pytest.mark.parametrize("x_shape,n,linear,g_first", CASES)
def test_the_scale_folds_into_the_weights_and_the_program_computes_the_same(x_shape, n, linear, g_first):
    root = _scaled(x_shape, n, linear, g_first)
    graph = graph_of(root, seed=1)
    eg, (report,) = apply(graph, RULE)
    assert report.changed
    folded = optimized(graph, eg)
    ops = folded.op_counts()
    # the element-wise product now only scales weights (computed once at export): none on x's path
    on_data = [n for n in folded.nodes() if n.op == "ewmul" and not all(i.op in ("weight", "reshape") for i in n.inputs)]
    assert not on_data, ops
    cost = AnalyticCost()
    assert graph_cost(folded, cost) < graph_cost(graph, cost)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    w, g = graph.weights["w"].astype(np.float64), graph.weights["g"].astype(np.float64)
    expected = np.matmul(feeds["x"].astype(np.float64), w)
    if linear:
        expected = expected + graph.weights["b"]
    expected = expected * g.reshape((1,) * (expected.ndim - 1) + (n,))
    np.testing.assert_allclose(ort_run(folded, feeds), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ort_run(graph, feeds), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["scale_over_rows", "scale_is_an_input"])
def test_a_scale_that_is_not_over_the_features_or_not_a_weight_is_left_alone(case):
    if case == "scale_over_rows":
        root = _scaled((2, 3, 8), 4, False, False, g_shape=(1, 3, 4))
    else:
        root = _scaled((2, 3, 8), 4, True, True, g_input=True)
    eg, (report,) = apply(root, RULE)
    assert report.matches == 0 and not report.changed


def test_the_verifier_passes_the_rule_and_near_misses_stay_apart():
    check = check_rule(by_name()[RULE], seed=3)
    assert check.passed and not check.thin, check.detail
    assert check.fired < check.instances  # the near misses (a scale that is an input) did not fire
    assert any("linear" in s for s in check.shapes) and any("matmul" in s for s in check.shapes)


def test_the_verifier_refuses_a_wrong_variant():
    """The bias left unscaled: g * (xW + b) is not xWg + b."""
    rule = by_name()[RULE]
    bodies = tuple((q, a.replace("(Ewmul b (Reshape (S1 n) g))", "b")) for q, a in rule.bodies)
    assert bodies != rule.bodies
    check = check_rule(dataclasses.replace(rule, name=f"{RULE}_wrong", bodies=bodies), seed=3)
    assert not check.passed
