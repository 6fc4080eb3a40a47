"""Helpers for the rule-family tests (``tests/rules/test_rules_<family>.py``): a tiny graph around hand-built roots,
the rules applied to its e-graph, a program taken out of the e-graph (a chosen e-node at the output, or the cheapest
program), and the independent check that two programs compute the same: both exported and run by onnxruntime
(:func:`ort_check.outputs_match`), besides eqsat's own verifier."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from ort_check import outputs_match

from eqsat import ir
from eqsat.cost import AnalyticCost, OpKey, node_costs
from eqsat.decode import build_program
from eqsat.egglog.egraph import EGraph
from eqsat.evaluate import evaluate
from eqsat.extract import extract
from eqsat.onnx.export import export_model
from eqsat.rules import RuleEngine, StepReport, by_name
from eqsat.snapshot import ENode, Snapshot
from eqsat.verification import verify


def leaves(roots: Iterable[ir.Node], op: str) -> list[ir.Node]:
    """The leaves of ``op`` (``input`` or ``weight``) under ``roots``, in topological order."""
    return [n for n in ir.topo_order(list(roots)) if n.op == op]


def graph_of(roots: ir.Node | Sequence[ir.Node], seed: int = 0) -> ir.Graph:
    """The graph of ``roots`` (outputs ``y0``, ``y1``, ..., or ``y`` for one root): its ``input`` leaves are its
    inputs, its ``weight`` leaves get seeded standard-normal values."""
    outs = (roots,) if isinstance(roots, ir.Node) else tuple(roots)
    names = ("y",) if len(outs) == 1 else tuple(f"y{i}" for i in range(len(outs)))
    rng = np.random.default_rng(seed)
    weights = {str(w.name): rng.standard_normal(w.shape).astype(np.float32) for w in leaves(outs, "weight")}
    return ir.Graph(tuple(leaves(outs, "input")), outs, names, weights)


def apply(graph: ir.Graph | ir.Node, *names: str, rounds: int = 1) -> tuple[EGraph, list[StepReport]]:
    """The e-graph of ``graph`` (or of the graph of one root) after the rules ``names`` are applied in turn,
    ``rounds`` times; and each application's report."""
    g = graph_of(graph) if isinstance(graph, ir.Node) else graph
    eg = EGraph.from_graph(g)
    engine = RuleEngine(eg, [by_name()[n] for n in dict.fromkeys(names)])
    return eg, [engine.apply(n) for _ in range(rounds) for n in names]


def ops_of(eg: EGraph) -> set[str]:
    """The operators of the e-graph's e-nodes."""
    return {e.op for e in eg.snapshot().nodes}


def attrs_of(eg: EGraph, op: str) -> set[tuple]:
    """The attributes of the e-graph's ``op`` e-nodes."""
    return {e.attrs for e in eg.snapshot().nodes if e.op == op}


def choose(eg: EGraph, graph: ir.Graph | ir.Node, root_op: str,
           where: Callable[[Snapshot, ENode], bool] | None = None) -> ir.Graph:
    """The program whose output e-classes take their ``root_op`` e-node (the first one for which ``where(snapshot,
    e-node)`` holds, if given) and every other e-class its first e-node (the original's, in encoding order: the
    e-graphs here hold no cycle through first e-nodes)."""
    g = graph_of(graph) if isinstance(graph, ir.Node) else graph
    snap = eg.snapshot().restrict()
    choice = {c: nodes[0] for c, nodes in enumerate(snap.classes)}
    for root in snap.roots:
        picks = [n for n in snap.classes[root] if snap.nodes[n].op == root_op
                 and (where is None or where(snap, snap.nodes[n]))]
        assert picks, f"no such {root_op} in an output's e-class: {[snap.nodes[n].op for n in snap.classes[root]]}"
        choice[root] = picks[0]
    return build_program(snap, choice, g)


def as_kernels(graph: ir.Graph, ops: dict[str, str]) -> ir.Graph:
    """``graph`` with each node of an operator in ``ops`` written as the operator it maps to (a decomposition as
    the runtime kernel a rule rewrites it to: ``{"rotary": "rope"}``), the same operands and attributes."""
    built: dict[int, ir.Node] = {}
    for node in ir.topo_order(list(graph.outputs)):
        ins = tuple(built[id(i)] for i in node.inputs)
        op = ops.get(node.op, node.op)
        built[id(node)] = node if op == node.op and ins == node.inputs else \
            ir.Node(op, ins, node.attrs, node.shape, node.dtype, node.name)
    return dataclasses.replace(graph, outputs=tuple(built[id(o)] for o in graph.outputs), origins=())


class _PricedLayout:
    """The analytic cost with the operators TASO counts as free (reshape, transpose, slice, ...) priced too (only
    the leaves stay free): an extraction under it drops the layout operators a rule made redundant."""

    name = "analytic-priced-layout"
    free_ops = frozenset({"input", "weight"})

    def __init__(self) -> None:
        self._analytic = AnalyticCost()

    def op_cost(self, key: OpKey) -> float:
        return self._analytic.op_cost(key)


def optimized(graph: ir.Graph, eg: EGraph, price_layout: bool = False) -> ir.Graph:
    """The cheapest program of the e-graph under the analytic cost (ILP extraction); ``price_layout``: with the
    layout operators priced too (see :class:`_PricedLayout`)."""
    snap = eg.snapshot().restrict()
    ext = extract("ilp", snap, node_costs(snap, _PricedLayout() if price_layout else AnalyticCost()))
    return build_program(snap, ext.choice, graph)


def ort_run(graph: ir.Graph, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of ``graph`` exported and run by onnxruntime on ``feeds`` (those it takes)."""
    sess = ort.InferenceSession(export_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}})[0]


def check_same(graph: ir.Graph, new_graph: ir.Graph) -> None:
    """``new_graph`` exports to a valid model that computes ``graph``'s outputs: by onnxruntime on seeded random
    inputs (no eqsat code in the comparison), and by eqsat's verifier."""
    a, b = export_model(graph), export_model(new_graph)
    onnx.checker.check_model(b, full_check=True)
    assert outputs_match(a, b, seed=0), "onnxruntime gives different outputs for the rewritten program"
    assert verify(a, b, seed=0).passed


def evaluated_matches_ort(graph: ir.Graph, new_graph: ir.Graph, seed: int = 0) -> None:
    """``new_graph`` evaluated by eqsat's numpy evaluator gives what onnxruntime computes for ``graph`` exported,
    on seeded random inputs (for a rewritten program that cannot be exported itself)."""
    rng = np.random.default_rng(seed)
    feeds = {str(n.name): rng.standard_normal(n.shape).astype(np.float32) for n in graph.inputs}
    values = {**feeds, **graph.weights}
    got = evaluate(list(new_graph.outputs), lambda n: values[str(n.name)])
    sess = ort.InferenceSession(export_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    for value, expected in zip(got, sess.run(None, feeds), strict=True):
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5)


def op_counts(graph: ir.Graph) -> dict[str, int]:
    """Operator -> how many nodes of it ``graph`` has (leaves left out)."""
    out: dict[str, int] = {}
    for n in graph.nodes():
        if n.op not in ("input", "weight"):
            out[n.op] = out.get(n.op, 0) + 1
    return out
