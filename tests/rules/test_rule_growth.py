"""A rule's growth (the most e-nodes one match can add, which the node-limit guard multiplies by the match count)
is derived from its bodies, never written by hand: it must equal the distinct tensor terms of its largest body's
actions. The oracle counts them another way: innermost parentheses are reduced to numbered placeholders
(``#k``), one per distinct sub-term, until no parenthesis is left; constructor names come from the operator
table's entries, not from the schema."""

from __future__ import annotations

import re

from eqsat import ir, ops
from eqsat.egglog.egraph import EGraph
from eqsat.rules import RuleEngine, all_rules, by_name

_INNERMOST = re.compile(r"\(([^()]*)\)")
_TENSOR_CTORS = {c.name for d in ops.OPS.values() for c in d.ctors}


def _distinct_tensor_terms(actions: str) -> int:
    ids: dict[str, str] = {}
    tensors: set[str] = set()

    def reduce(m: re.Match) -> str:
        inner = " ".join(m.group(1).split())
        key = ids.setdefault(inner, f"#{len(ids)}")
        if inner.split(" ")[0] in _TENSOR_CTORS:
            tensors.add(key)
        return f" {key} "

    text, previous = actions, None
    while text != previous:
        previous, text = text, _INNERMOST.sub(reduce, text)
    assert "(" not in text and ")" not in text, text
    return len(tensors)


def test_growth_is_the_term_count_of_the_largest_body_for_every_rule():
    rules = [r for nasrnn in (False, True) for r in all_rules(nasrnn)]  # NASRNN's taso_m04 is another body
    assert len({r.name for r in rules}) == 162  # 139 TASO, 23 ours
    for rule in rules:
        expected = max(_distinct_tensor_terms(actions) for _query, actions in rule.bodies)
        assert rule.growth == expected, (rule.name, rule.growth, expected)
    named = by_name()
    # the bodies, read by hand: a sub-term written twice (the merged product in both halves) is built once
    assert named["merge_matmul_bias"].growth == 7  # the 3-D body: Slice x2, Ewadd, Reshape, Matmul, Concat x2
    assert named["taso_m04"].growth == 4  # Slice x2, Matmul, Concat
    assert named["transpose_cancel"].growth == 0  # it proposes an existing term


def test_one_match_adds_at_most_growth_enodes():
    """On an e-graph where a rule matches once, applying it adds no more e-nodes than its growth, and the
    bound is reached when none of the right-hand side's terms exist yet (the oracle: egglog's own count)."""
    x = ir.input_("x", (4, 6))
    w1, w2 = ir.weight("w1", (6, 3)), ir.weight("w2", (6, 5))
    b1, b2 = ir.weight("b1", (1, 3)), ir.weight("b2", (1, 5))
    outs = (ir.make("ewadd", [ir.make("matmul", [x, w1], (0,)), b1]),
            ir.make("ewadd", [ir.make("matmul", [x, w2], (0,)), b2]))
    egraph = EGraph.from_graph(ir.Graph((x,), outs, ("a", "b")))
    rule = by_name()["merge_matmul_bias"]
    engine = RuleEngine(egraph, [rule])
    assert engine.probe(rule.name) == 1
    before = egraph.size().enodes
    assert engine.apply(rule.name).changed
    # the 2-D body: Slice x2, Ewadd, Matmul, Concat x2, all new
    assert egraph.size().enodes - before == 6 <= rule.growth
