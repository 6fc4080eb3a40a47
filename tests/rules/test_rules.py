"""Rules as a whole: the TASO set and ours are complete and sound (verified on random instances), the command line
lists and verifies them, extraction stays acyclic after a rewrite that closes a cycle, and the node limit guard
refuses a blow-up. Each family's firing, near misses and numeric equality: tests/rules/test_rules_<family>.py."""

from __future__ import annotations

from collections import Counter

import onnx_builders as ob
import pytest
from rule_cases import apply, check_same

from eqsat import ir
from eqsat.app.cli import main
from eqsat.cost import AnalyticCost, node_costs
from eqsat.decode import build_program
from eqsat.egglog.egraph import EGraph
from eqsat.extract import extract, find_cycle
from eqsat.onnx.importer import import_model
from eqsat.rules import RuleEngine, all_rules, by_name, taso_rules
from eqsat.rules.rule import Rule
from eqsat.rules.verify import check_rule

ALL = all_rules()


def test_rule_counts():
    taso = [r for r in ALL if r.source == "taso"]
    kinds = Counter(r.kind for r in taso)
    assert kinds == {"single": 124, "multi": 15}
    assert sum(r.duplicate_of is not None for r in taso) == 4
    assert len({r.name for r in ALL}) == len(ALL)
    ours = [r for r in ALL if r.source == "ours"]
    assert {r.name for r in ours} >= {"fold_bn_conv", "fuse_relu_conv", "merge_matmul_bias", "merge_conv_shared_input",
                                      "transpose_cancel", "reshape_cancel"}
    nasrnn = {r.name: r for r in taso_rules(nasrnn=True)}
    assert nasrnn["taso_m04"].statement == by_name()["taso_m00"].statement


@pytest.mark.parametrize("rule", ALL, ids=[r.name for r in ALL])
def test_rule_is_sound(rule):
    check = check_rule(rule, seed=0)
    assert check.passed, check.detail
    assert check.fired >= 1


def test_verifier_catches_a_wrong_rule():
    from eqsat.rules.rule import compile_single
    from eqsat.rules.sexpr import parse

    wrong = compile_single("wrong_mul_add", parse("(ewmul ?input_1 ?input_2)"), parse("(ewadd ?input_1 ?input_2)"))
    check = check_rule(wrong)
    assert not check.passed and "different values" in check.detail
    # a subtly wrong one: transposition forgotten in a re-association
    wrong2 = compile_single("wrong_assoc", parse("(matmul 0 (matmul 0 ?input_1 ?input_4) ?input_5)"),
                            parse("(matmul 0 ?input_1 (matmul 0 ?input_5 ?input_4))"))
    assert not check_rule(wrong2).passed


def test_verify_cli(capsys):
    assert main(["rules", "verify", "--rule", "taso_s000"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    assert main(["rules", "verify", "--rule", "nope"]) == 2


def test_rules_list_cli(capsys):
    assert main(["rules", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(ALL)
    assert any(line.startswith("taso_m04") and "multi" in line for line in out)


def test_split_concat_cycle_never_extracted():
    """relu(a), relu(b) -> halves of relu(concat(a, b)); then relu(concat(a, b)) = concat(relu a, relu b)
    closes a cycle through the slices. Every extractor must still return an acyclic program."""
    a, b = ir.input_("a", (2, 3)), ir.input_("b", (2, 3))
    ra, rb = ir.make("relu", [a]), ir.make("relu", [b])
    g = ir.Graph((a, b), (ir.make("concat", [ra, rb], (1,)), ir.make("concat", [rb, ra], (1,)), ra), ("c", "e", "d"))
    eg, reports = apply(g, "taso_m03")
    assert reports[0].changed
    # handles in encoding order: n0 a, n1 relu(a), n2 b, n3 relu(b), n4 concat(n1, n3), n5 concat(n3, n1)
    eg.run_program('(union (node "n4") (Relu (Concat 1 (node "n0") (node "n2"))))')
    eg.run_program('(union (node "n5") (Relu (Concat 1 (node "n2") (node "n0"))))')
    snap = eg.snapshot().restrict()
    costs = node_costs(snap, AnalyticCost())
    # the e-graph does hold a cycle
    from extract_cases import has_cycle

    assert has_cycle(snap)
    for name in ("greedy-tree", "greedy-constituent", "greedy-dag", "ilp"):
        result = extract(name, snap, costs)
        assert find_cycle(snap, result.choice) is None
        check_same(g, build_program(snap, result.choice, g))


def test_node_limit_guard_refuses_blowup():
    g = ob and import_model(ob.attention())
    eg = EGraph.from_graph(g)
    engine = RuleEngine(eg, [by_name()["taso_m07"], by_name()["merge_linear_qkv"]])
    size = eg.size().enodes
    report = engine.apply("merge_linear_qkv", node_limit=size + 1)
    assert report.skipped and "node limit" in report.skipped and not report.changed
    assert eg.size().enodes == size


def test_node_limit_guard_keeps_a_rule_that_fits():
    """The match bound passes the limit, but the matches rebuild existing e-nodes: a trial shows it fits."""
    g = import_model(ob.attention())
    eg = EGraph.from_graph(g)
    engine = RuleEngine(eg, [by_name()["reshape_cancel"], by_name()["taso_m04"], by_name()["linear_split"]])
    assert engine.apply("linear_split").changed  # the imported linear projections' matmul parts
    assert engine.apply("reshape_cancel").changed and engine.apply("taso_m04").changed
    size = eg.size().enodes
    assert engine.probe("reshape_cancel") * engine.rules["reshape_cancel"].growth > 0  # the bound would refuse
    again = engine.apply("reshape_cancel", node_limit=size)
    assert again.skipped is None and not again.changed and eg.size().enodes == size
    refused = engine.apply("taso_m04", node_limit=size + 1)  # new matches among the merged matmuls: grows
    assert refused.skipped and "after it" in refused.skipped and not refused.changed
    assert eg.size().enodes == size and engine.probe("taso_m04") == refused.matches  # rolled back


def test_custom_rule_object_is_usable():
    r = Rule("double_relu", "single", "ours", "relu(relu(x)) -> relu(x)",
             (("(= root (Relu (Relu x))) (= root_shape (shape root))", "(Pend root (Relu x))"),),
             example=lambda rng: [ir.make("relu", [ir.make("relu", [ir.input_("x", (3,))])])])
    assert check_rule(r).passed
