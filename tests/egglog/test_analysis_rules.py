"""Analysis rules (shapes, AllW) registered per constructor, on demand (eqsat/egglog/egraph.py ``ensure_analysis``):
the oracle is an e-graph with every constructor's analysis rules registered up front, as before, which must
reach the same snapshot under the same rewrites; shapes are checked against :func:`eqsat.ops.infer_shape`."""

from __future__ import annotations

import pytest

from eqsat import ir, ops
from eqsat.egglog import schema
from eqsat.egglog.egraph import EGraph
from eqsat.errors import EGraphError
from eqsat.models import MODELS, build
from eqsat.rules import RuleEngine, by_name, rule_set
from eqsat.rules.reach import ReachEngine, present_constructors
from eqsat.snapshot import ENode, Snapshot


def _everything(egraph: EGraph) -> EGraph:
    egraph.ensure_analysis(schema.CONSTRUCTORS)
    return egraph


def _frozen(egraph: EGraph) -> tuple:
    s = egraph.snapshot()
    return s.nodes, s.classes, s.shapes, s.all_weights, s.roots, s.handle_classes


def test_analysis_rules_split_the_old_ruleset_by_constructor():
    """Each shape and AllW rule comes exactly once, when the last constructor it names arrives, and all of
    them, in the old order, when every constructor is asked for at once."""
    every = ops.shape_rules() + schema._allw_rules()
    assert schema.analysis_rules(set(), set(schema.CONSTRUCTORS)) == every
    have: set[str] = set()
    seen: list[str] = []
    for ctor in reversed(list(schema.CONSTRUCTORS)):
        got = schema.analysis_rules(have, {ctor})
        assert all(ctor in schema.constructors(r) for r in got)
        seen += got
        have.add(ctor)
    assert sorted(seen) == sorted(every)
    relu = schema.analysis_rules(set(), {"Relu"})
    assert len(relu) == 2 and all(r.count("(Relu ") == 1 for r in relu)
    assert not any(":ruleset analysis" in f for f in schema.program())


def test_an_encoded_program_gets_the_rules_of_its_constructors_only():
    for model in ("squeezenet", "bert"):
        egraph = EGraph.from_graph(build(model, small=True))
        assert egraph.analysed == present_constructors(egraph)  # egglog's own tables are the oracle
        assert len(egraph.analysed) < len(schema.CONSTRUCTORS) // 2


def test_a_rewrite_creating_a_new_constructor_commits_with_its_shape(monkeypatch):
    """taso_m04 turns two matmuls sharing an operand into a matmul by a Concat of the weights, and the program
    holds no Concat: its shape rule must come with the rule, or the rewrite can never commit."""
    x, w1, w2 = ir.input_("x", (3, 4)), ir.weight("w1", (4, 5)), ir.weight("w2", (4, 6))
    graph = ir.Graph((x,), (ir.make("matmul", [x, w1], (0,)), ir.make("matmul", [x, w2], (0,))), ("a", "b"))
    rule = by_name()["taso_m04"]

    def grown() -> tuple:
        egraph = EGraph.from_graph(graph)
        assert "Concat" not in egraph.analysed
        changed = RuleEngine(egraph, [rule]).apply(rule.name).changed
        return changed, egraph.snapshot()

    changed, snap = grown()
    assert changed
    concat = [n for n in snap.nodes if n.op == "concat"]
    assert len(concat) == 1
    operands = [snap.shapes[c] for c in concat[0].children]
    assert snap.shapes[concat[0].eclass] == ops.infer_shape("concat", concat[0].attrs, operands) == (4, 11)
    assert snap.all_weights[concat[0].eclass]
    # without its shape rule the same rewrite silently fails to commit: the guard above is what keeps it
    ensure = EGraph.ensure_analysis
    monkeypatch.setattr(EGraph, "ensure_analysis", lambda self, ctors: ensure(self, set(ctors) - {"Concat"}))
    assert grown()[0] is False


@pytest.mark.parametrize("model", ["squeezenet", "bert"])
def test_on_demand_analysis_grows_the_same_egraph_as_all_rules(model):
    """The same seeded rewrites on an e-graph with every analysis rule registered and on one with the rules
    of the reachable constructors only: identical snapshots, and every constructor that appeared has its
    rules."""
    rules = rule_set(MODELS[model].rule_set)
    graph = build(model, small=True)
    frozen = []
    for full in (True, False):
        egraph = EGraph.from_graph(graph)
        if full:
            _everything(egraph)
        engine = ReachEngine(egraph, rules)
        engine.grow_randomly(engine.registered, 3 * egraph.size().enodes, seed=1)
        assert present_constructors(egraph) <= egraph.analysed
        frozen.append(_frozen(egraph))
        if not full:
            assert len(egraph.analysed) < len(schema.CONSTRUCTORS)
    assert frozen[0] == frozen[1]
    assert len(frozen[0][0]) > len(EGraph.from_graph(graph).snapshot().nodes)  # the rules grew it


def test_every_constructor_a_registered_rule_can_create_has_its_rules():
    """Over every rule, whatever the e-graph holds: the constructors named by a registered rule's actions
    (all it can ever create) have their analysis rules."""
    x, w = ir.input_("x", (4, 4)), ir.weight("w", (4, 4))
    graph = ir.Graph((x,), (ir.make("matmul", [x, w], (0,)),), ("y",))
    for rule in by_name(nasrnn=True).values():
        egraph = EGraph.from_graph(graph)
        RuleEngine(egraph, [rule])
        made = set().union(*(schema.constructors(a) for _q, a in rule.bodies))
        assert made <= egraph.analysed, (rule.name, made - egraph.analysed)


def test_raw_program_text_ensures_its_constructors():
    """A term written as egglog text gets its shape (the path tests and the op table checks use)."""
    egraph = EGraph()
    egraph.run_program('(set (node "x") (Input "i:x")) (set (shape (node "x")) (S2 3 4))')
    egraph.run_program('(set (node "y") (Transpose (S2 1 0) (Relu (node "x"))))')
    egraph.saturate_analysis()
    snap = egraph.snapshot()
    assert {"Input", "Relu", "Transpose"} == egraph.analysed
    assert snap.shapes[snap.handle_classes["y"]] == ops.infer_shape("transpose", (1, 0), [(3, 4)]) == (4, 3)


def test_no_analysis_rule_is_registered_inside_a_push():
    egraph = EGraph.from_graph(ir.Graph((x := ir.input_("x", (2, 3)),), (ir.make("relu", [x]),), ("y",)))
    egraph.push()
    egraph.ensure_analysis({"Relu"})  # already there: nothing to do
    with pytest.raises(EGraphError, match="outside any push"):
        egraph.ensure_analysis({"Tanh"})
    with pytest.raises(EGraphError, match="outside any push"):
        egraph.run_program('(set (node "t") (Tanh (node "n1")))')
    egraph.pop()
    assert "Tanh" not in egraph.analysed
    with pytest.raises(EGraphError, match="no such tensor constructor"):
        egraph.ensure_analysis({"Nope"})
    egraph.ensure_analysis({"Tanh"})
    assert "Tanh" in egraph.analysed


# -- EGraph.snapshot, rewritten for speed: the oracle is the plain loop it replaced --------------------------

def _plain_snapshot(egraph: EGraph) -> tuple:
    """The snapshot's e-nodes, classes, shapes, AllW flags, roots and handle classes, decoded row by row."""
    eg = egraph._eg
    fns = eg.freeze().functions
    shape_of: dict = {}
    for r in range(schema.MAX_RANK + 1):
        for row in fns[f"S{r}"].rows:
            shape_of[row.output] = tuple(eg.value_to_i64(v) for v in row.inputs)
    for row in fns["SN"].rows:
        shape_of[row.output] = tuple(int(x) for x in eg.value_to_string(row.inputs[0]).split("_"))
    cons = {row.output: (row.inputs[0], row.inputs[1]) for row in fns["TCons"].rows}
    class_index: dict = {}

    def cls(v) -> int:
        return class_index.setdefault(v, len(class_index))

    nodes = []
    for ctor, (op, kinds) in schema.CONSTRUCTORS.items():
        for row in fns[ctor].rows:
            if row.subsumed:
                continue
            attrs: list = []
            children: list[int] = []
            for k, v in zip(kinds, row.inputs):
                if k == "i":
                    attrs.append(eg.value_to_i64(v))
                elif k == "s":
                    attrs.append(eg.value_to_string(v))
                elif k == "h":
                    attrs.extend(shape_of[v])
                elif k == "t":
                    children.append(cls(v))
                else:
                    while v in cons:
                        head, v = cons[v]
                        children.append(cls(head))
            nodes.append(ENode(op, tuple(attrs), tuple(children), cls(row.output)))
    classes: list[list[int]] = [[] for _ in class_index]
    for i, n in enumerate(nodes):
        classes[n.eclass].append(i)
    shapes = [None] * len(classes)
    for row in fns["shape"].rows:
        if row.inputs[0] in class_index:
            shapes[class_index[row.inputs[0]]] = shape_of[row.output]
    allw = [False] * len(classes)
    for row in fns["AllW"].rows:
        if row.inputs[0] in class_index:
            allw[class_index[row.inputs[0]]] = True
    handles = {eg.value_to_string(row.inputs[0]): row.output for row in fns["node"].rows}
    return (nodes, classes, shapes, allw, [class_index[handles[h]] for h in egraph.output_handles],
            {h: class_index[v] for h, v in handles.items() if v in class_index})


@pytest.mark.parametrize("model", ["squeezenet", "nasneta", "bert", "nasrnn"])
def test_snapshot_equals_the_plain_decoding_on_grown_egraphs(model):
    """Models whose e-graphs hold list (ConcatN), shape-valued (Transpose, Reshape) and i64-then-tensor
    constructors, grown by their rules; the restricted snapshot's e-nodes are ENodes equal to ENode(...)."""
    egraph = EGraph.from_graph(build(model, small=True))
    engine = ReachEngine(egraph, rule_set(MODELS[model].rule_set))
    engine.grow_randomly(engine.registered, 3 * egraph.size().enodes, seed=2)
    snap = egraph.snapshot()
    assert _frozen(egraph) == _plain_snapshot(egraph)
    assert len({n.op for n in snap.nodes}) >= 4 and any(len(c) > 1 for c in snap.classes)
    small = snap.restrict()
    assert all(type(n) is ENode and n == ENode(n.op, n.attrs, n.children, n.eclass) and hash(n) == hash(
        ENode(n.op, n.attrs, n.children, n.eclass)) for n in small.nodes)
    assert [[small.nodes[i].eclass for i in c] for c in small.classes] == [[k] * len(c)
                                                                         for k, c in enumerate(small.classes)]


def test_snapshot_of_list_string_and_wide_shape_constructors():
    """ConcatN of three, an opaque operator, a rank-5 (SN) reshape: the decoding paths no model above takes."""
    x = ir.input_("x", (2, 3, 1, 1, 2))
    flat = ir.make("reshape", [x], (6, 2))
    leaky = ir.opaque("LeakyRelu", [flat, flat], (6, 2))
    cat = ir.make("concat", [flat, leaky, ir.make("relu", [flat])], (0,))
    wide = ir.make("reshape", [cat], (3, 2, 1, 3, 2))
    egraph = EGraph.from_graph(ir.Graph((x,), (wide,), ("y",)))
    snap = egraph.snapshot()
    assert _frozen(egraph) == _plain_snapshot(egraph)
    assert {n.op for n in snap.nodes} == {"input", "reshape", "concat", "relu", "opaque"}
    assert [len(n.children) for n in snap.nodes if n.op == "opaque"] == [2]
    assert snap.shapes[snap.roots[0]] == (3, 2, 1, 3, 2)
    assert [len(n.children) for n in snap.nodes if n.op == "concat"] == [3]


def _plain_restrict(snap: Snapshot) -> tuple:
    """The reachable sub-e-graph, re-indexed: a fixpoint over every e-node (not a search from the roots), each
    e-node rebuilt."""
    keep = set(snap.roots)
    while True:
        more = {ch for c in keep for n in snap.classes[c] for ch in snap.nodes[n].children} - keep
        if not more:
            break
        keep |= more
    order = sorted(keep)
    index = {c: i for i, c in enumerate(order)}
    nodes, classes = [], []
    for c in order:
        classes.append(list(range(len(nodes), len(nodes) + len(snap.classes[c]))))
        nodes += [ENode(snap.nodes[n].op, snap.nodes[n].attrs, tuple(index[ch] for ch in snap.nodes[n].children),
                        index[c]) for n in snap.classes[c]]
    return (nodes, classes, [snap.shapes[c] for c in order], [snap.all_weights[c] for c in order],
            [index[r] for r in snap.roots], {h: index[c] for h, c in snap.handle_classes.items() if c in index})


def _restricted(snap: Snapshot) -> tuple:
    r = snap.restrict()
    return r.nodes, r.classes, r.shapes, r.all_weights, r.roots, r.handle_classes


@pytest.mark.parametrize("model", ["squeezenet", "nasneta"])
def test_restrict_equals_the_plain_fixpoint(model):
    egraph = EGraph.from_graph(build(model, small=True))
    engine = ReachEngine(egraph, rule_set(MODELS[model].rule_set))
    engine.grow_randomly(engine.registered, 3 * egraph.size().enodes, seed=3)
    snap = egraph.snapshot()
    assert _restricted(snap) == _plain_restrict(snap)
    # a class no root reaches (a relu of the output no one uses), and every class reached: both paths
    dangling = Snapshot(snap.nodes + [ENode("relu", (), (snap.roots[0],), snap.num_classes)],
                        snap.classes + [[len(snap.nodes)]], snap.shapes + [snap.shapes[snap.roots[0]]],
                        snap.all_weights + [False], snap.roots, handle_classes={"x": snap.num_classes, "y": 0})
    assert len(dangling.reachable()) < dangling.num_classes
    assert _restricted(dangling) == _plain_restrict(dangling)
    whole = Snapshot(dangling.nodes, dangling.classes, dangling.shapes, dangling.all_weights,
                     list(range(dangling.num_classes))[::-1])
    assert len(whole.reachable()) == whole.num_classes and _restricted(whole) == _plain_restrict(whole)
