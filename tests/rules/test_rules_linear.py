"""The rule family of ``linear`` (rules/ours/linear.py): ``linear_split`` relates linear(x, W, b) to its parts in
the IR's form (a matmul, 2-D after a reshape for ranks above 2, plus a bias reshaped to the product's rank), both
ways. It fires on tiny graphs made for it, in each direction and for every rank it covers, not on near misses, and
the rewritten program computes the original's outputs (onnxruntime on both exported programs)."""

from __future__ import annotations

import pytest
from rule_cases import apply, check_same, choose, evaluated_matches_ort, graph_of, op_counts, ops_of

from eqsat import ir
from eqsat.ops import MAX_RANK

K, N = 5, 6
SHAPES = {1: (K,), 2: (3, K), 3: (2, 3, K), 4: (2, 1, 3, K)}
"""x's shape per rank the rule covers"""


def _linear(rank: int) -> ir.Node:
    return ir.make("linear", [ir.input_("x", SHAPES[rank]), ir.weight("w", (K, N)), ir.weight("b", (N,))])


def _parts(shape: tuple[int, ...], bias: tuple[int, ...], act: int = 0, bias_first: bool = False) -> ir.Node:
    """x W + b in the importer's form for an x of ``shape`` (2-D: no reshapes), a bias weight of shape ``bias``."""
    x = ir.input_("x", shape)
    rows = 1
    for d in shape[:-1]:
        rows *= d
    flat = x if len(shape) == 2 else ir.make("reshape", [x], (rows, K))
    product = ir.make("matmul", [flat, ir.weight("w", (K, N))], (act,))
    if len(shape) != 2:
        product = ir.make("reshape", [product], shape[:-1] + (N,))
    terms = [product, ir.weight("b", bias)]
    return ir.make("ewadd", terms[::-1] if bias_first else terms)


def test_the_cases_cover_every_rank_of_the_rule():
    assert sorted(SHAPES) == list(range(1, MAX_RANK + 1))


@pytest.mark.parametrize("rank", sorted(SHAPES))
def test_linear_splits_into_a_product_and_a_bias(rank):
    g = graph_of(_linear(rank))
    eg, (report,) = apply(g, "linear_split")
    assert report.changed and report.matches == 1
    parts = choose(eg, g, "ewadd")
    counts = op_counts(parts)
    assert "linear" not in counts and counts["matmul"] == 1 and counts["ewadd"] == 1
    assert [len(n.shape) for n in parts.nodes() if n.op == "matmul"] == [2]  # x flattened to rows of K
    if rank == 1:  # the exporter fails on a rank-1 add of a constant (eqsat/onnx/forms.py, _with_constant)
        evaluated_matches_ort(g, parts)
    else:
        check_same(g, parts)


@pytest.mark.parametrize("bias_first", [False, True], ids=["product_first", "bias_first"])
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_parts_recombine_into_a_linear(rank, bias_first):
    shape = SHAPES[rank]
    g = graph_of(_parts(shape, (1,) * (rank - 1) + (N,), bias_first=bias_first))
    eg, (report,) = apply(g, "linear_split")
    assert report.changed
    whole = choose(eg, g, "linear")
    (node,) = [n for n in whole.nodes() if n.op == "linear"]
    assert node.inputs[0].name == "x" and node.inputs[1].name == "w" and node.inputs[2].shape == (N,)
    check_same(g, whole)


PARTS_MISSES = {  # name: a parts form that is no linear
    "bias_over_rows": lambda: _parts((3, K), (3, N)),  # the bias broadcasts over more than the last axis
    "bias_over_rows_3d": lambda: _parts((2, 3, K), (1, 3, N)),
    "relu_fused": lambda: _parts((3, K), (1, N), act=2),
}


@pytest.mark.parametrize("case", sorted(PARTS_MISSES))
def test_near_misses_are_not_recombined(case):
    eg, (report,) = apply(graph_of(PARTS_MISSES[case]()), "linear_split")
    assert report.matches == 0 and not report.changed and "linear" not in ops_of(eg)
