"""TASO's rules (rules/taso.py), by representatives of their kinds: a learned single-pattern rule (``taso_s000``,
matmul re-association), a hand-written one (``taso_s120``, a grouped conv's weights merged to half as many groups)
and a multi-pattern one (``taso_m03``, two relus as slices of one relu of their concat). Each fires on a tiny
graph made for it, not on a near miss, and the rewritten program computes the original's outputs (onnxruntime on
both exported programs). tests/rules/test_rules.py checks the whole set (counts, soundness on random instances)."""

from __future__ import annotations

import pytest
from rule_cases import apply, check_same, choose, graph_of, op_counts, ops_of, optimized

from eqsat import ir
from eqsat.snapshot import ENode, Snapshot


# -- taso_s000: (a b) c -> a (b c) -------------------------------------------------------------------------
def _chain(right_first: bool = False) -> ir.Node:
    """a [2, 64], b [64, 64], c [64, 1]: a (b c) costs a quarter of (a b) c."""
    a, b, c = ir.input_("a", (2, 64)), ir.weight("b", (64, 64)), ir.weight("c", (64, 1))
    if right_first:
        return ir.make("matmul", [a, ir.make("matmul", [b, c], (0,))], (0,))
    return ir.make("matmul", [ir.make("matmul", [a, b], (0,)), c], (0,))


def test_s000_reassociates_a_matmul_chain():
    g = graph_of(_chain())
    eg, (report,) = apply(g, "taso_s000")
    assert report.changed and report.matches == 1
    new = optimized(g, eg)  # the cheaper association, which only the rule puts in the e-graph
    (top,) = new.outputs
    assert top.op == "matmul" and top.inputs[0].name == "a" and top.inputs[1].op == "matmul"
    assert [i.name for i in top.inputs[1].inputs] == ["b", "c"]
    check_same(g, new)


def test_s000_does_not_fire_on_the_other_association():
    eg, (report,) = apply(graph_of(_chain(right_first=True)), "taso_s000")
    assert report.matches == 0 and not report.changed
    assert eg.snapshot().num_classes == 5  # a, b, c, b c, a (b c): nothing added


# -- taso_s120: conv(x, w) -> conv(x, merge(w, 2)) (stride 1, SAME, no activation) ------------------------
def _merged_weight(snap: Snapshot, e: ENode) -> bool:
    return any(snap.nodes[n].op == "merge" for n in snap.classes[e.children[1]])


def _conv(weight: tuple[int, int, int, int], attrs: tuple[int, ...] = (1, 1, -1, -1, 0)) -> ir.Node:
    x = ir.input_("x", (1, 4, 6, 6))
    return ir.make("conv2d", [x, ir.weight("w", weight)], attrs)


@pytest.mark.parametrize("weight", [(4, 1, 3, 3), (8, 2, 3, 3)], ids=["depthwise", "two_groups"])
def test_s120_merges_the_groups_of_a_grouped_conv(weight):
    g = graph_of(_conv(weight))
    eg, (report,) = apply(g, "taso_s120")
    assert report.changed and report.matches == 1
    groups = 4 // weight[1]
    new = choose(eg, g, "conv2d", _merged_weight)
    assert [n.attrs for n in new.nodes() if n.op == "merge"] == [(groups, 2)]
    check_same(g, new)


S120_MISSES = {  # name: a conv the rule must leave alone
    "ungrouped": lambda: _conv((4, 4, 3, 3)),
    "stride_2": lambda: _conv((4, 1, 3, 3), (2, 2, -1, -1, 0)),  # taso_s121's
    "relu_fused": lambda: _conv((4, 1, 3, 3), (1, 1, -1, -1, 2)),  # taso_s122's
    "explicit_padding": lambda: _conv((4, 1, 3, 3), (1, 1, 1, 1, 0)),
}


@pytest.mark.parametrize("case", sorted(S120_MISSES))
def test_s120_leaves_near_misses_alone(case):
    eg, (report,) = apply(graph_of(S120_MISSES[case]()), "taso_s120")
    assert report.matches == 0 and not report.changed and "merge" not in ops_of(eg)


# -- taso_m03: relu(a), relu(b) -> the halves of relu(concat(a, b)) -----------------------------------------
def test_m03_computes_two_relus_as_one():
    p, q = ir.input_("p", (2, 3)), ir.input_("q", (2, 5))
    g = graph_of([ir.make("relu", [p]), ir.make("relu", [q])])
    eg, (report,) = apply(g, "taso_m03")
    assert report.changed
    new = choose(eg, g, "slice")
    assert op_counts(new) == {"concat": 1, "relu": 1, "slice": 2}
    assert [(y.op, y.attrs[0], y.attrs[2] - y.attrs[1]) for y in new.outputs] == [("slice", 1, 3), ("slice", 1, 5)]
    check_same(g, new)


def test_m03_needs_two_relus_that_concatenate():
    """One relu alone; two whose first dimensions differ (no concat along axis 1: the match's terms get no shape
    and nothing is merged); two of rank 1 (no axis 1)."""
    for shapes in ([(2, 3)], [(2, 3), (4, 3)], [(3,), (3,)]):
        eg, (report,) = apply(graph_of([ir.make("relu", [ir.input_(f"p{i}", s)]) for i, s in enumerate(shapes)]),
                              "taso_m03")
        assert not report.changed, shapes
        snap = eg.snapshot()
        assert [{snap.nodes[n].op for n in snap.classes[c]} for c in snap.roots] == [{"relu"}] * len(shapes)
