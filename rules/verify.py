"""The rule verifier: every rule, applied by egglog to concrete instances, must only union terms that
compute the same values.

For each rule, instances are built at several concrete shape assignments (TASO rules: drawn at random
until the source pattern is well-shaped; our rules: their ``example``), encoded into an e-graph, and
the compiled rule is applied once. Then every e-node of the e-graph is evaluated with numpy on seeded
random leaves, in float64 and, where every operator is multi-linear, also in the integers modulo a
prime (Schwartz-Zippel: a wrong multi-linear identity survives one random test with probability at most
degree / p). A rule passes if it fired on at least one instance and every e-class's e-nodes agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from eqsat import ir
from eqsat.egraph import EGraph, Snapshot
from eqsat.errors import ShapeError
from eqsat.evaluate import NotEvaluable, apply_op

from . import sexpr
from .engine import RuleEngine
from .rule import Rule

PRIME = 1_000_003
PAD = {0: (-1, -1), 1: (0, 0)}


@dataclass
class RuleCheck:
    rule: str
    passed: bool
    instances: int
    fired: int
    modular: bool
    seconds: float
    detail: str = ""
    shapes: list[str] = field(default_factory=list)


def _to_ir(p, leaves: dict[str, ir.Node]) -> ir.Node:
    if sexpr.is_var(p):
        return leaves[p]
    op, args = p[0], p[1:]
    if op == "matmul":
        return ir.make("matmul", [_to_ir(args[1], leaves), _to_ir(args[2], leaves)], (args[0],))
    if op == "conv2d":
        sh, sw, pad, act, x, w = args
        return ir.make("conv2d", [_to_ir(x, leaves), _to_ir(w, leaves)], (sh, sw, *PAD[pad], act))
    if op == "concat":
        return ir.make("concat", [_to_ir(args[2], leaves), _to_ir(args[3], leaves)], (args[0],))
    return ir.make(op, [_to_ir(a, leaves) for a in args])


def _var_ranks(rule: Rule) -> list[int]:
    ops = set().union(*(sexpr.ops(p) for p in rule.lhs))
    if "conv2d" in ops:
        return [4]
    nd = [p for p in _concat_ndims(rule.lhs)]
    if nd:
        return [max(nd)]
    if "matmul" in ops:
        return [2, 3]
    return [2, 4]


def _concat_ndims(patterns) -> list[int]:
    out = []
    for p in patterns:
        if isinstance(p, tuple):
            if p[0] == "concat":
                out.append(int(p[2]))
            out += _concat_ndims(p[1:])
    return out


def taso_instances(rule: Rule, rng: np.random.Generator, wanted: int = 4, tries: int = 600) -> list[list[ir.Node]]:
    """Source terms of a TASO rule at random well-shaped assignments (equal dimensions tried first)."""
    variables = sexpr.variables(("pair", *rule.lhs))
    out, seen = [], set()
    candidates = []
    for rank in _var_ranks(rule):
        for d in (3, 2):
            candidates.append({v: (d,) * rank for v in variables})
    for _ in range(tries):
        rank = int(rng.choice(_var_ranks(rule)))
        candidates.append({v: tuple(int(x) for x in rng.choice([1, 2, 3, 4], size=rank)) for v in variables})
    for shapes in candidates:
        key = tuple(sorted(shapes.items()))
        if key in seen:
            continue
        seen.add(key)
        leaves = {v: ir.input_(v.lstrip("?"), s) for v, s in shapes.items()}
        try:
            roots = [_to_ir(p, leaves) for p in rule.lhs]
        except ShapeError:
            continue
        out.append(roots)
        if len(out) >= wanted:
            break
    return out


def _evaluate_classes(snap: Snapshot, leaf_value, modulus: int | None) -> tuple[str | None, bool]:
    """Evaluate every e-node; return (first disagreement or None, whether every node was evaluable)."""
    values: dict[int, np.ndarray] = {}
    done: set[int] = set()
    complete = True
    progress = True
    while progress:
        progress = False
        for i, e in enumerate(snap.nodes):
            if i in done or snap.shapes[e.eclass] is None or any(ch not in values for ch in e.children):
                continue
            done.add(i)
            progress = True
            if e.op in ("input", "weight"):
                val = leaf_value(snap.leaves[e.attrs[0]])
            else:
                args = [values[ch] for ch in e.children]
                fake_inputs = tuple(ir.Node("input", (), (), tuple(a.shape)) for a in args)
                node = ir.Node(e.op, fake_inputs, e.attrs, tuple(snap.shapes[e.eclass]))
                try:
                    val = apply_op(node, args, modulus)
                except NotEvaluable:
                    complete = False
                    continue
            c = e.eclass
            if c not in values:
                values[c] = val
                continue
            ref = values[c]
            if ref.shape != val.shape:
                return f"e-class {c}: {e.op} has shape {val.shape}, the class {ref.shape}", complete
            if modulus is not None:
                same = np.array_equal(ref, val)
            else:
                scale = float(np.nanmax(np.abs(ref), initial=0.0)) if ref.size else 0.0
                same = np.allclose(ref, val, rtol=1e-9, atol=1e-9 * max(1.0, scale), equal_nan=True)
            if not same:
                return f"e-class {c}: {e.op}{e.attrs} computes different values", complete
    return None, complete


def check_rule(rule: Rule, seed: int = 0, instances: int = 6) -> RuleCheck:
    t = time.perf_counter()
    rng = np.random.default_rng(seed)
    cases = rule.example(rng) if rule.example is not None else None
    groups = [cases] if cases is not None else taso_instances(rule, rng, instances)
    fired, modular_all = 0, True
    shapes = []
    for roots in groups:
        graph = ir.Graph(tuple(n for n in ir.topo_order(roots) if n.op == "input"), tuple(roots),
                         tuple(f"o{i}" for i in range(len(roots))))
        eg = EGraph.from_graph(graph)
        engine = RuleEngine(eg, [rule])
        report = engine.apply(rule.name)
        if not report.changed:
            continue
        fired += 1
        shapes.append(", ".join(str(list(n.shape)) for n in ir.topo_order(roots) if n.op in ("input", "weight")))
        snap = eg.snapshot()
        leaf_rng = np.random.default_rng(seed + 1)
        floats = {k: leaf_rng.standard_normal(n.shape) for k, n in snap.leaves.items()}
        ints = {k: leaf_rng.integers(0, PRIME, n.shape, dtype=np.int64) for k, n in snap.leaves.items()}
        key = {id(n): k for k, n in snap.leaves.items()}
        with np.errstate(all="ignore"):
            err, _ = _evaluate_classes(snap, lambda n: floats[key[id(n)]], None)
        if err is None:
            err, complete = _evaluate_classes(snap, lambda n: ints[key[id(n)]], PRIME)
            modular_all = modular_all and complete
        if err is not None:
            return RuleCheck(rule.name, False, len(groups), fired, modular_all, time.perf_counter() - t,
                             f"unsound at inputs {shapes[-1]}: {err}", shapes)
    if fired == 0:
        return RuleCheck(rule.name, False, len(groups), 0, False, time.perf_counter() - t,
                         "no well-shaped instance on which the rule fires was found", shapes)
    return RuleCheck(rule.name, True, len(groups), fired, modular_all, time.perf_counter() - t, "", shapes)
