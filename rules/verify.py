"""The rule verifier: every rule, applied by egglog to concrete instances, must only union terms that
compute the same values.

For each rule, many distinct random instances are drawn (TASO rules: variable shapes drawn until the
source pattern is well-shaped; our rules: their instance generator ``example``, which draws shapes,
axes, groups, strides, padding and reshapes, near misses included), each encoded into a fresh e-graph
(a push on one e-graph per rule) and the compiled rule applied once. On every instance where it fires,
every e-node is evaluated with numpy on seeded random leaves, in float64 (normal, then positive values)
and, where every operator is multi-linear, also in the integers modulo a prime (Schwartz-Zippel: a
wrong multi-linear identity survives one random test with probability at most degree / p). A rule
passes if it fired on at least one instance and every e-class's e-nodes agree; it is reported as
``thin`` when it fired on fewer than MIN_FIRED distinct instances.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from eqsat import ir, ops
from eqsat.egglog.egraph import EGraph
from eqsat.errors import ShapeError
from eqsat.ops import NotEvaluable
from eqsat.snapshot import Snapshot

from . import sexpr
from .edges import edge_check
from .engine import RuleEngine
from .rule import Rule

PRIME = 1_000_003


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
    """the instances it fired on, described"""
    thin: bool = False
    """it fired on fewer than MIN_FIRED distinct instances"""


def _to_ir(p, leaves: dict[str, ir.Node]) -> ir.Node:
    """The IR term of a TENSAT pattern (each operator's ``taso`` form in :mod:`eqsat.ops`)."""
    if sexpr.is_var(p):
        return leaves[p]
    entry = ops.get(p[0])
    if entry.taso is None:
        raise ValueError(f"operator {p[0]!r} not supported in TASO rules")
    attrs, operands, _rank = entry.taso(p[1:])
    return ir.make(p[0], [_to_ir(x, leaves) for x in operands], attrs)


def _var_ranks(rule: Rule) -> list[int]:
    ops = set().union(*(sexpr.ops(p) for p in rule.lhs))
    if "conv2d" in ops:
        return [4]
    nd = [p for p in _concat_ndims(rule.lhs)]
    if nd:
        return [max(nd)]
    if "matmul" in ops:
        return [2, 3, 4]  # 4-D: batched attention scores (attention_split)
    return [2, 4]


def _concat_ndims(patterns) -> list[int]:
    out = []
    for p in patterns:
        if isinstance(p, tuple):
            if p[0] == "concat":
                out.append(int(p[2]))
            out += _concat_ndims(p[1:])
    return out


DIMS = (1, 2, 3, 4, 5, 6)


def taso_instances(rule: Rule, rng: np.random.Generator, wanted: int = 4, tries: int = 400) -> list[list[ir.Node]]:
    """Source terms of a TASO rule at distinct random well-shaped assignments: all variables of one
    shape (each size in DIMS) first, then each dimension drawn from a small random palette of DIMS (so
    that the equalities the pattern needs come up often; sizes above 4 included)."""
    variables = sexpr.variables(("pair", *rule.lhs))
    ranks = _var_ranks(rule)
    out: list[list[ir.Node]] = []
    seen: set = set()

    def candidates():
        for rank in ranks:
            for d in (3, 2, 5, 1, 4, 6):
                yield {v: (d,) * rank for v in variables}
        for _ in range(tries):
            rank = ranks[int(rng.integers(len(ranks)))]
            palette = rng.choice(DIMS, size=int(rng.integers(1, 4)), replace=False)
            drawn = palette[rng.integers(0, len(palette), size=(len(variables), rank))]
            yield {v: tuple(int(x) for x in row) for v, row in zip(variables, drawn)}

    for shapes in candidates():
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


def instance_key(roots: list[ir.Node]) -> tuple:
    """What makes two instances the same: every node's operator, attributes, shape and leaf name."""
    index: dict[int, int] = {}
    key = []
    for n in ir.topo_order(roots):
        index[id(n)] = len(index)
        key.append((n.op, n.attrs, n.shape, n.name, tuple(index[id(i)] for i in n.inputs)))
    return tuple(key), tuple(index[id(r)] for r in roots)


def our_instances(rule: Rule, rng: np.random.Generator, draws: int) -> list[list[ir.Node]]:
    """Distinct instances among ``draws`` draws of the rule's generator."""
    assert rule.example is not None
    out, seen = [], set()
    for _ in range(draws):
        roots = list(rule.example(rng))
        key = instance_key(roots)
        if key not in seen:
            seen.add(key)
            out.append(roots)
    return out


def _evaluate_classes(snap: Snapshot, leaf_value, modulus: int | None) -> tuple[str | None, bool, int | None]:
    """Evaluate every e-node; return (first disagreement or None, whether every node was evaluable, the
    e-class that disagrees)."""
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
                try:
                    val = ops.evaluate(e.op, e.attrs, [values[ch] for ch in e.children], modulus)
                except NotEvaluable:
                    complete = False
                    continue
            c = e.eclass
            if c not in values:
                values[c] = val
                continue
            ref = values[c]
            if ref.shape != val.shape:
                return f"e-class {c}: {e.op} has shape {val.shape}, the class {ref.shape}", complete, c
            if modulus is not None:
                same = np.array_equal(ref, val)
            else:
                scale = float(np.nanmax(np.abs(ref), initial=0.0)) if ref.size else 0.0
                same = np.allclose(ref, val, rtol=1e-9, atol=1e-9 * max(1.0, scale), equal_nan=True)
            if not same:
                return f"e-class {c}: {e.op}{e.attrs} computes different values", complete, c
    return None, complete, None


DEFAULT_INSTANCES = 40
"""instances drawn per rule (TASO rules: distinct well-shaped assignments wanted)"""
MIN_FIRED = 5
"""a rule that fires on fewer distinct instances than this is reported as thinly tested"""


def _leaf_values(snap: Snapshot, seed: int, fixed: Mapping[str, np.ndarray] | None = None
                 ) -> list[tuple[dict[int, np.ndarray], int | None]]:
    """Leaf values keyed by leaf-node id: float64 normal, float64 positive (a batch norm's variance under
    a square root) and integers modulo PRIME; a weight named in ``fixed`` holds that value in each."""
    rng = np.random.default_rng(seed)
    leaves = list(snap.leaves.values())
    fixed = fixed or {}

    def draw(n: ir.Node, values: np.ndarray) -> np.ndarray:
        return np.asarray(fixed[n.name], dtype=np.float64) if n.op == "weight" and n.name and n.name in fixed \
            else values
    return [({id(n): draw(n, rng.standard_normal(n.shape)) for n in leaves}, None),
            ({id(n): draw(n, rng.uniform(0.5, 2.0, n.shape)) for n in leaves}, None),
            ({id(n): draw(n, rng.integers(0, PRIME, n.shape, dtype=np.int64)) for n in leaves}, PRIME)]


def _describe(roots: list[ir.Node]) -> str:
    parts = []
    for n in ir.topo_order(roots):
        if n.op in ("input", "weight"):
            parts.append(f"{n.name}{list(n.shape)}")
        else:
            parts.append(f"{n.op}{list(n.attrs)}->{list(n.shape)}")
    return ", ".join(parts)


def _renamed(roots: list[ir.Node], prefix: str) -> list[ir.Node]:
    """A copy of the instance whose leaves are named ``prefix + name`` (instances then share no term)."""
    new: dict[int, ir.Node] = {}
    for n in ir.topo_order(roots):
        name = prefix + n.name if n.op in ("input", "weight") and n.name else n.name
        new[id(n)] = ir.Node(n.op, tuple(new[id(i)] for i in n.inputs), n.attrs, n.shape, n.dtype, name)
    return [new[id(r)] for r in roots]


def _fixed(rule: Rule, groups: list[list[ir.Node]]) -> dict[str, np.ndarray]:
    """The values the rule holds fixed (:attr:`Rule.fixed`), keyed by the weights' names in the e-graph (each
    instance's leaves renamed as :func:`_renamed` does)."""
    out: dict[str, np.ndarray] = {}
    if rule.fixed is None:
        return out
    for k, g in enumerate(groups):
        for n in ir.topo_order(g):
            value = rule.fixed(n) if n.op == "weight" else None
            if value is not None:
                out[f"k{k}_{n.name}"] = value
    return out


def _reach(snap: Snapshot, roots: list[int]) -> set[int]:
    seen, stack = set(roots), list(roots)
    while stack:
        for i in snap.classes[stack.pop()]:
            for ch in snap.nodes[i].children:
                if ch not in seen:
                    seen.add(ch)
                    stack.append(ch)
    return seen


def check_rule(rule: Rule, seed: int = 0, instances: int = DEFAULT_INSTANCES, min_fired: int = MIN_FIRED) -> RuleCheck:
    """Apply ``rule`` once to ``instances`` random instances (distinct ones only; all in one e-graph under
    distinct leaf names, so that they share no term) and evaluate every e-node. An instance fired when an
    e-class reachable from its roots got a second e-node. Fails on a disagreement and when the rule fires
    on no instance; ``thin`` when it fires on fewer than ``min(min_fired, instances)`` instances."""
    t = time.perf_counter()
    rng = np.random.default_rng(seed)
    groups = our_instances(rule, rng, instances) if rule.example is not None else taso_instances(rule, rng, instances)
    encoded = [_renamed(g, f"k{k}_") for k, g in enumerate(groups)]
    roots = [r for g in encoded for r in g]
    fixed = _fixed(rule, groups)
    eg = EGraph.from_graph(ir.Graph((), tuple(roots), tuple(f"o{i}" for i in range(len(roots))), weights=fixed))
    RuleEngine(eg, [rule]).apply(rule.name)
    snap = eg.snapshot()
    owner: dict[int, int] = {}
    fired_at: list[int] = []
    start = 0
    for k, g in enumerate(groups):
        reach = _reach(snap, snap.roots[start:start + len(g)])
        start += len(g)
        for c in reach:
            owner.setdefault(c, k)
        if any(len(snap.classes[c]) > 1 for c in reach):
            fired_at.append(k)
    shapes = [_describe(groups[k]) for k in fired_at]
    modular_all, err, bad = True, None, None
    for values, modulus in _leaf_values(snap, seed + 1, fixed) if fired_at else ():
        with np.errstate(all="ignore"):
            err, complete, bad = _evaluate_classes(snap, lambda n, values=values: values[id(n)], modulus)
        if modulus is not None:
            modular_all = complete
        if err is not None:
            break
    if err is None and fired_at:
        err = edge_check(snap, encoded, owner, fixed, seed + 2)
    seconds = time.perf_counter() - t
    fired = len(fired_at)
    if err is not None:
        where = _describe(groups[owner[bad]]) if bad in owner else "(an e-class no instance reaches)" if bad is not None \
            else "(the edge draws)"
        return RuleCheck(rule.name, False, len(groups), fired, modular_all, seconds,
                         f"unsound on instance {where}: {err}", shapes)
    if fired == 0:
        return RuleCheck(rule.name, False, len(groups), 0, False, seconds,
                         f"fired on none of {len(groups)} well-shaped instances; widen its instance generator",
                         shapes)
    need = min(min_fired, instances)
    thin = fired < need
    detail = (f"fired on only {fired} distinct instances (< {need}): its soundness is thinly tested; "
              "widen its instance generator or draw more (--instances)") if thin else ""
    return RuleCheck(rule.name, True, len(groups), fired, modular_all, seconds, detail, shapes, thin)
