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
