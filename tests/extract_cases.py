"""Helpers for extraction tests: cycle detection on a snapshot."""

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
    from eqsat.egraph import ENode, Snapshot

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
