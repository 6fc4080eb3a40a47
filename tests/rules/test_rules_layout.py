"""The rule family of layout cancellations (rules/ours/layout.py): a transpose undone by the next one, and reshapes
of reshapes. Each rule fires on a tiny graph made for it, not on a near miss, and the cheapest program after it
(the layout operators gone) computes the original's outputs (onnxruntime on both exported programs)."""

from __future__ import annotations

import numpy as np
import pytest
from rule_cases import apply, check_same, graph_of, op_counts, optimized

from eqsat import ir
from eqsat.ops import MAX_RANK

PERMS = {2: (1, 0), 3: (2, 0, 1), 4: (0, 2, 3, 1)}
"""a permutation other than the identity per rank the rule covers (2 to MAX_RANK)"""


def _inverse(p: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(p)), key=lambda i: p[i]))


def _transposed_twice(p: tuple[int, ...], q: tuple[int, ...]) -> ir.Node:
    x = ir.input_("x", tuple(range(2, 2 + len(p))))
    return ir.make("relu", [ir.make("transpose", [ir.make("transpose", [x], p)], q)])


def test_the_cases_cover_every_rank_of_the_rule():
    assert sorted(PERMS) == list(range(2, MAX_RANK + 1))


@pytest.mark.parametrize("rank", sorted(PERMS))
def test_transpose_cancel_removes_a_transpose_and_its_inverse(rank):
    p = PERMS[rank]
    g = graph_of(_transposed_twice(p, _inverse(p)))
    eg, (report,) = apply(g, "transpose_cancel")
    assert report.changed and report.matches == 1
    new = optimized(g, eg, price_layout=True)
    assert op_counts(new) == {"relu": 1} and new.outputs[0].inputs[0].name == "x"
    check_same(g, new)


TRANSPOSE_MISSES = {  # name: (p, q) with q o p not the identity, or a rank the rule does not cover
    "same_cycle_twice": ((2, 0, 1), (2, 0, 1)),
    "other_permutation": ((0, 2, 3, 1), (0, 2, 3, 1)),
    "rank_5": ((4, 0, 1, 2, 3), (1, 2, 3, 4, 0)),  # the inverse, but above MAX_RANK
}


@pytest.mark.parametrize("case", sorted(TRANSPOSE_MISSES))
def test_transpose_cancel_leaves_near_misses_alone(case):
    p, q = TRANSPOSE_MISSES[case]
    g = graph_of(_transposed_twice(p, q))
    eg, (report,) = apply(g, "transpose_cancel")
    assert report.matches == 0 and not report.changed
    assert op_counts(optimized(g, eg, price_layout=True))["transpose"] == 2


@pytest.mark.parametrize("shapes", [((6, 4), (2, 3, 4)), ((24,), (4, 6)), ((2, 2, 6), (2, 3, 4))])
def test_reshape_cancel_folds_a_reshape_of_a_reshape(shapes):
    s1, s2 = shapes
    x = ir.input_("x", (2, 3, 4))
    g = graph_of(ir.make("relu", [ir.make("reshape", [ir.make("reshape", [x], s1)], s2)]))
    eg, reports = apply(g, "reshape_cancel", rounds=2)  # the second round drops a reshape of x to x's shape
    assert reports[0].changed
    new = optimized(g, eg, price_layout=True)
    reshapes = [n for n in new.nodes() if n.op == "reshape"]
    assert len(reshapes) == (0 if s2 == x.shape else 1)
    assert all(n.inputs[0].name == "x" and n.shape == s2 for n in reshapes)
    check_same(g, new)


def test_reshape_cancel_drops_a_reshape_to_the_same_shape():
    x = ir.input_("x", (2, 3, 4))
    g = graph_of(ir.make("relu", [ir.make("reshape", [x], (2, 3, 4))]))
    eg, (report,) = apply(g, "reshape_cancel")
    assert report.changed
    new = optimized(g, eg, price_layout=True)
    assert op_counts(new) == {"relu": 1}
    check_same(g, new)


def test_reshape_cancel_leaves_a_lone_reshape_and_a_reshape_of_a_transpose_alone():
    x = ir.input_("x", (2, 3, 4))
    lone = ir.make("relu", [ir.make("reshape", [x], (6, 4))])
    of_transpose = ir.make("relu", [ir.make("reshape", [ir.make("transpose", [x], (2, 0, 1))], (4, 6))])
    for root in (lone, of_transpose):
        eg, (report,) = apply(graph_of(root), "reshape_cancel")
        assert report.matches == 0 and not report.changed


UNIT_MOVES = {  # name: (x's shape, p) where p moves only axes of size 1
    "heads_of_one_query": ((2, 1, 3, 4), (0, 2, 1, 3)),
    "row_vector": ((1, 5), (1, 0)),
    "two_units_swapped": ((3, 1, 1, 4), (0, 2, 1, 3)),
    "unit_to_the_end": ((1, 4, 6), (1, 2, 0)),
}


@pytest.mark.parametrize("case", sorted(UNIT_MOVES))
def test_transpose_unit_writes_a_transpose_of_unit_axes_as_a_reshape(case):
    """x [n] reshaped to ``shape`` then transposed (a projection's heads split, then moved): one reshape after
    ``transpose_unit`` and ``reshape_cancel`` (the reshape and the transpose priced alike, two cost more than one)."""
    shape, p = UNIT_MOVES[case]
    x = ir.input_("x", (int(np.prod(shape)),))
    g = graph_of(ir.make("relu", [ir.make("transpose", [ir.make("reshape", [x], shape)], p)]))
    eg, reports = apply(g, "transpose_unit", "reshape_cancel")
    assert reports[0].changed  # (one match per least set of unit axes: two where both moved axes are 1)
    new = optimized(g, eg, price_layout=True)
    assert op_counts(new) == {"relu": 1, "reshape": 1}
    (reshape,) = [n for n in new.nodes() if n.op == "reshape"]
    assert reshape.inputs[0].name == "x" and reshape.shape == tuple(shape[i] for i in p)
    check_same(g, new)


@pytest.mark.parametrize("shape, p", [((2, 3, 5, 4), (0, 2, 1, 3)), ((2, 1, 3, 4), (0, 3, 2, 1)), ((1, 5, 6), (0, 2, 1))])
def test_transpose_unit_leaves_a_transpose_that_moves_a_longer_axis_alone(shape, p):
    g = graph_of(ir.make("relu", [ir.make("transpose", [ir.input_("x", shape)], p)]))
    eg, (report,) = apply(g, "transpose_unit")
    assert report.matches == 0 and not report.changed
