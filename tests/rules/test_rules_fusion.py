"""The rule family of fusions (rules/ours/fusion.py): an activation fused into the convolution or the product
before it, a batch norm folded into the convolution before it. Each rule fires on a tiny graph made for it, not on
a near miss, and the fused program computes the original's outputs (onnxruntime on both exported programs)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from rule_cases import apply, attrs_of, check_same, choose, graph_of, op_counts, optimized

from eqsat import ir


def test_conv_relu_fusion_and_bn_fold():
    rng = np.random.default_rng(1)
    x = ir.input_("x", (1, 3, 8, 8))
    w = ir.weight("w", (4, 3, 3, 3))
    params = {n: ir.weight(n, (4,)) for n in ("s", "b", "m", "v")}
    weights = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
               **{n: rng.standard_normal(4).astype(np.float32) for n in ("s", "b", "m")},
               "v": rng.uniform(0.5, 1.5, 4).astype(np.float32)}
    conv = ir.make("conv2d", [x, w], (2, 2, -1, -1, 0))
    bn = ir.make("batchnorm", [conv, *params.values()], (10_000_000,))
    relu = ir.make("relu", [ir.make("conv2d", [x, w], (1, 1, 0, 0, 0))])
    g = ir.Graph((x,), (ir.make("relu", [bn]), relu), ("y", "z"), weights)
    eg, reports = apply(g, "fold_bn_conv", "fuse_relu_conv")
    assert reports[0].changed and reports[1].changed
    new = optimized(g, eg)
    check_same(g, new)
    ops = Counter(n.op for n in new.nodes())
    assert ops["batchnorm"] == 0
    assert any(n.op == "conv2d" and n.attrs[4] == 2 for n in new.nodes())
    # negative: an activation already fused, and a batch norm whose statistics are not weights
    xin = ir.input_("m", (4,))
    bn2 = ir.make("batchnorm", [conv, params["s"], params["b"], xin, params["v"]], (10_000_000,))
    _, reps = apply(ir.Graph((x, xin), (bn2, ir.make("conv2d", [x, w], (1, 1, 0, 0, 2))), ("a", "b")),
                    "fold_bn_conv", "fuse_relu_conv")
    assert not reps[0].changed and not reps[1].changed


# -- fuse_act_matmul --------------------------------------------------------------------------------------
ACT_CODES = {"relu": 2, "sigmoid": 1, "tanh": 3}
"""activation -> the code matmul's ``act`` attribute gives it (eqsat.ops.ACT_RELU, ACT_SIGMOID, ACT_TANH)"""


def _matmul(batch: tuple[int, ...] = (), act: int = 0) -> ir.Node:
    a, b = ir.input_("a", (*batch, 4, 5)), ir.weight("b", (*batch, 5, 6))
    return ir.make("matmul", [a, b], (act,))


@pytest.mark.parametrize("batch", [(), (3,)], ids=["2d", "3d"])
@pytest.mark.parametrize("act", sorted(ACT_CODES))
def test_fuse_act_matmul_fuses_each_activation(act, batch):
    g = graph_of(ir.make(act, [_matmul(batch)]))
    eg, (report,) = apply(g, "fuse_act_matmul")
    assert report.changed and report.matches == 1
    assert attrs_of(eg, "matmul") == {(0,), (ACT_CODES[act],)}
    fused = choose(eg, g, "matmul")
    assert op_counts(fused) == {"matmul": 1}
    assert [n.attrs for n in fused.nodes() if n.op == "matmul"] == [(ACT_CODES[act],)]
    check_same(g, fused)


FUSE_ACT_MATMUL_MISSES = {  # name: a root the rule must leave alone
    "activation_already_fused": lambda: ir.make("relu", [_matmul(act=ACT_CODES["sigmoid"])]),
    "relu_of_a_sum": lambda: ir.make("relu", [ir.make("ewadd", [ir.input_("a", (4, 6)), ir.weight("c", (4, 6))])]),
    "not_an_activation": lambda: ir.make("ewadd", [_matmul(), ir.weight("c", (4, 6))]),
}


@pytest.mark.parametrize("case", sorted(FUSE_ACT_MATMUL_MISSES))
def test_fuse_act_matmul_leaves_near_misses_alone(case):
    eg, (report,) = apply(graph_of(FUSE_ACT_MATMUL_MISSES[case]()), "fuse_act_matmul")
    assert report.matches == 0 and not report.changed
    assert not attrs_of(eg, "matmul") - {(0,), (ACT_CODES["sigmoid"],)}


@pytest.mark.parametrize("gate_first", [False, True])
def test_fuse_silu_fuses_a_product_with_the_sigmoid_of_its_operand(gate_first):
    x = ir.input_("x", (2, 3, 5))
    gate = ir.make("sigmoid", [x])
    prod = ir.make("ewmul", [gate, x] if gate_first else [x, gate])
    eg, (step,) = apply(prod, "fuse_silu")
    assert step.changed
    fused = choose(eg, prod, "silu")
    assert op_counts(fused) == {"silu": 1}
    check_same(graph_of(prod), fused)


def test_fuse_silu_leaves_the_gate_of_another_value_alone():
    x, y = ir.input_("x", (2, 3, 5)), ir.input_("y", (2, 3, 5))
    prod = ir.make("ewmul", [y, ir.make("sigmoid", [x])])
    eg, (step,) = apply(prod, "fuse_silu")
    assert not step.changed and "silu" not in {e.op for e in eg.snapshot().nodes}


def test_the_verifier_passes_fuse_silu():
    from eqsat.rules import by_name
    from eqsat.rules.verify import check_rule

    check = check_rule(by_name()["fuse_silu"], seed=2)
    assert check.passed and not check.thin, check.detail
    assert 0 < check.fired < check.instances  # the near misses (another value gated) do not fire
