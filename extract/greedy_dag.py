"""Ours: a DAG-aware greedy. cost(node) = own cost + cost of the exact union of the children's sub-DAGs.

Each e-class keeps the set of e-classes its best sub-DAG uses (a dict class -> own cost of the node
chosen there), so a shared subgraph is counted once however many paths reach it. On an e-graph with
one node per class this is the exact DAG cost; a node whose children's sub-DAGs contain its own class
would close a cycle and is not chosen (a cycle that stale sets, below, still let through is broken by
``cycles.without_cycles``). A worklist re-evaluates only
the parents of classes whose cost improved.

A parent's stored set is a snapshot: when a child class later switches to a cheaper e-node, the parent
is re-evaluated but keeps its old set unless the new one is cheaper, so the sets can go stale. The
returned choice is therefore costed afresh: ``estimate`` is the DAG cost of the program returned.

The greedy pass prices each class alone, so it never picks a node worth having only when shared (a merged
convolution read by two slices); the sharing pass (``share.improve``) then switches the users of one class
together where that lowers the program's DAG cost. ``ExtractOptions(share=False)`` leaves it out (the greedy pass alone).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence

from eqsat.snapshot import Snapshot

from . import share as sharing
from .base import DEFAULT_OPTIONS, Extraction, ExtractOptions, finish, parents_index
from .cycles import without_cycles


def extract(snap: Snapshot, costs: Sequence[float], options: ExtractOptions = DEFAULT_OPTIONS) -> Extraction:
    """Reads ``options.share``."""
    t = time.perf_counter()
    parents = parents_index(snap)
    choice, _unused = without_cycles(snap, lambda banned: (_choice(snap, costs, banned, parents), math.nan))
    if options.share:
        choice = sharing.improve(snap, costs, choice, choice, parents)
    result = finish(snap, choice, costs, time.perf_counter() - t, "greedy-dag")
    result.estimate = result.dag_cost
    return result


def _choice(snap: Snapshot, costs: Sequence[float], banned: set[int],
            parents: list[list[int]] | None = None) -> dict[int, int]:
    nclass = snap.num_classes
    best = [math.inf] * nclass
    sets: list[dict[int, float] | None] = [None] * nclass
    choice: dict[int, int] = {}
    parents = parents_index(snap) if parents is None else parents
    queue = deque(i for i, e in enumerate(snap.nodes) if not e.children)
    queued = set(queue)
    nodes = snap.nodes
    while queue:
        n = queue.popleft()
        queued.discard(n)
        if n in banned:
            continue
        e = nodes[n]
        c = e.eclass
        kids = e.children
        if kids:
            if any(sets[ch] is None for ch in kids):
                continue
            uniq = sorted(set(kids), key=lambda ch: -len(sets[ch]))  # type: ignore[arg-type]
            s = dict(sets[uniq[0]])  # type: ignore[arg-type]
            for ch in uniq[1:]:
                s.update(sets[ch])  # type: ignore[arg-type]
            if c in s:
                continue  # would reach its own class: a cycle
            s[c] = costs[n]
            total = sum(s.values())
        else:
            s = {c: costs[n]}
            total = costs[n]
        if total < best[c] - 1e-9 * max(1.0, abs(total)):
            best[c] = total
            sets[c] = s
            choice[c] = n
            for p in parents[c]:
                if p not in queued:
                    queued.add(p)
                    queue.append(p)
    return choice
