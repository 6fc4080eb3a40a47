"""Helpers for extraction tests: crafted and random e-graphs, cycle detection on a snapshot."""

from __future__ import annotations


def has_cycle(snap) -> bool:
    """True if some e-class can reach itself through some e-nodes."""
    succ = {c: set() for c in range(snap.num_classes)}
    for e in snap.nodes:
        succ[e.eclass].update(e.children)
    state: dict[int, int] = {}

    def dfs(c) -> bool:
        state[c] = 1
        for d in succ[c]:
            if state.get(d) == 1 or (d not in state and dfs(d)):
                return True
        state[c] = 2
        return False

    return any(c not in state and dfs(c) for c in succ)


def snapshot(spec, roots):
    """A crafted e-graph: ``spec`` is a list of (class, op, children classes, cost)."""
    from eqsat.snapshot import ENode, Snapshot

    n_classes = 1 + max(max([c, *ch]) for c, _op, ch, _cost in spec)
    classes = [[] for _ in range(n_classes)]
    nodes, costs = [], []
    for i, (c, op, ch, cost) in enumerate(spec):
        nodes.append(ENode(op, (i,), tuple(ch), c))
        classes[c].append(i)
        costs.append(float(cost))
    snap = Snapshot(nodes, classes, [(1,)] * n_classes, [False] * n_classes, list(roots))
    return snap, costs


def random_egraph(rng, n_classes=30, cycles=False):
    spec = []
    for c in range(n_classes):
        for _ in range(int(rng.integers(1, 4)) if c else 1):
            k = int(rng.integers(0, 3)) if c else 0
            children = sorted({int(rng.integers(0, c)) for _ in range(k)}) if c else []
            if cycles and c > 2 and rng.random() < 0.15:
                children.append(int(rng.integers(c, n_classes)))
            spec.append((c, "op", children, int(rng.integers(0, 10))))
    # make sure every class has an acyclic option
    for c in range(1, n_classes):
        spec.append((c, "leaf", [], 20))
    return snapshot(spec, [n_classes - 1])


def random_cyclic_spec(rng, n_classes: int, max_nodes: int = 3, p_back: float = 0.25, p_self: float = 0.1,
                       p_zero: float = 0.3):
    """A random e-graph spec (see :func:`snapshot`) with back edges (cycles), self-loops, zero costs and
    children shared between nodes and repeated within one node. ``rng`` is a ``random.Random``. Class 0
    always has a leaf; other classes may have no acyclic option at all."""
    spec = [(0, "leaf", [], rng.choice([0, rng.randint(1, 9)]))]
    for c in range(n_classes):
        for _ in range(rng.randint(1, max_nodes) - (c == 0)):
            kids = [rng.randrange(c) for _ in range(rng.randint(0, 3))] if c else []
            if rng.random() < p_back:
                kids.append(rng.randrange(c, n_classes))
            if rng.random() < p_self:
                kids.append(c)
            cost = 0 if rng.random() < p_zero else rng.randint(1, 9)
            spec.append((c, "op", kids, cost))
    return spec


def dense_cyclic_egraph(rng, n_classes: int, nodes_per_class: int = 3):
    """Every class: ``nodes_per_class`` nodes with 1-2 children anywhere, plus a dear leaf; roots 0, 1, 2.
    SCIP cannot close the gap on 60 classes within 20 s (a long ILP for interrupt tests)."""
    spec = []
    for c in range(n_classes):
        for _ in range(nodes_per_class):
            kids = sorted({int(rng.integers(0, n_classes)) for _ in range(int(rng.integers(1, 3)))})
            spec.append((c, "op", kids, int(rng.integers(0, 10))))
        spec.append((c, "leaf", [], 50))
    return snapshot(spec, [0, 1, 2])
