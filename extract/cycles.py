"""Cycle handling shared by the greedy extractors.

An e-graph grown by split/concat rules can make an e-class reachable from itself. Self-loops (a node
whose child is its own class) are never chosen; if a greedy choice still closes a cycle, the cycle's
newest e-node (highest index, as TENSAT blacklists) is banned and the greedy pass rerun.
"""

from __future__ import annotations

from collections.abc import Callable

from eqsat.snapshot import Snapshot

from .base import ExtractionError, find_cycle


def self_loops(snap: Snapshot) -> set[int]:
    return {i for i, e in enumerate(snap.nodes) if e.eclass in e.children}


def without_cycles(snap: Snapshot, choose: Callable[[set[int]], tuple[dict[int, int], float]],
                   max_rounds: int = 1000) -> tuple[dict[int, int], float]:
    """Run ``choose(banned) -> (choice, estimate)`` until its choice is acyclic."""
    banned = self_loops(snap)
    for _ in range(max_rounds):
        choice, estimate = choose(banned)
        missing = [r for r in snap.roots if r not in choice]
        if missing:
            raise ExtractionError(f"no acyclic program found for root e-classes {missing}")
        cycle = find_cycle(snap, choice)
        if cycle is None:
            return choice, estimate
        banned.add(max(choice[c] for c in cycle))
    raise ExtractionError("could not remove cycles from the greedy choice")
