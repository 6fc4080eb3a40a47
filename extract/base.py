"""The extraction interface (its options and result types), and the validity check run on every result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from eqsat.errors import EqsatError
from eqsat.snapshot import Snapshot


class ExtractionError(EqsatError):
    """An extractor produced an invalid result or found none."""


@dataclass
class Extraction:
    """One chosen e-node per needed e-class."""

    choice: dict[int, int]
    """class index -> e-node index (only classes reachable from the roots through the choice)"""
    dag_cost: float
    tree_cost: float
    seconds: float
    extractor: str
    optimal: bool = False
    gap: float | None = None
    estimate: float | None = None
    """the extractor's own cost of the roots (tree cost, constituent cost, ...), what Table 1 reports"""
    notes: list[str] = field(default_factory=list)
    used_warm_start: bool = False
    """the ILP returned its warm start (greedy-dag's program) because SCIP found nothing better in time"""


@dataclass(frozen=True)
class ExtractOptions:
    """What a caller may tell an extractor; every extractor takes it (``extract(snap, costs, options)``) and reads
    the fields it declares in the registry (``eqsat.extract.ExtractorInfo``) or documents below."""

    time_limit: float | None = None
    """seconds the extractor may take (extractors that ``takes_time_limit``); None: its own default"""
    warm_start: Extraction | None = None
    """a valid program to start from, never returned dearer (extractors that ``takes_warm_start``); None: the
    extractor makes its own"""
    log_file: str | None = None
    """ilp: the file SCIP writes its log to"""
    stall_seconds: float | None = None
    """ilp: seconds without a better program, after the root node, at which SCIP stops (None: the ILP's default,
    ``eqsat.extract.ilp.STALL_SECONDS``; ``math.inf``: never)"""
    share: bool = True
    """greedy-dag: run the sharing pass (``share.improve``) after the greedy one"""


DEFAULT_OPTIONS = ExtractOptions()
"""every option at its default"""


def chosen_classes(snap: Snapshot, choice: dict[int, int]) -> list[int]:
    """Classes reachable from the roots through the chosen nodes, children before parents.

    Raises ExtractionError if a needed class has no choice or the choice is cyclic.
    """
    order: list[int] = []
    state: dict[int, int] = {}  # 1 = on stack, 2 = done
    for root in snap.roots:
        if state.get(root) == 2:
            continue
        stack = [(root, 0)]
        state[root] = 1
        while stack:
            c, i = stack[-1]
            if c not in choice:
                raise ExtractionError(f"e-class {c} is needed but no e-node was chosen for it")
            children = snap.nodes[choice[c]].children
            if i < len(children):
                stack[-1] = (c, i + 1)
                ch = children[i]
                s = state.get(ch)
                if s == 1:
                    raise ExtractionError(f"cyclic extraction: e-class {ch} reaches itself")
                if s is None:
                    state[ch] = 1
                    stack.append((ch, 0))
            else:
                stack.pop()
                state[c] = 2
                order.append(c)
    return order


def find_cycle(snap: Snapshot, choice: dict[int, int]) -> list[int] | None:
    """Classes of one cycle in the chosen nodes, or None."""
    state: dict[int, int] = {}
    for root in snap.roots:
        stack = [(root, 0)]
        path = [root]
        if state.get(root) == 2:
            continue
        state[root] = 1
        while stack:
            c, i = stack[-1]
            children = snap.nodes[choice[c]].children if c in choice else ()
            if i < len(children):
                stack[-1] = (c, i + 1)
                ch = children[i]
                if state.get(ch) == 1:
                    return path[path.index(ch):]
                if ch not in state:
                    state[ch] = 1
                    stack.append((ch, 0))
                    path.append(ch)
            else:
                stack.pop()
                path.pop()
                state[c] = 2
    return None


def dag_cost(snap: Snapshot, choice: dict[int, int], costs: Sequence[float],
             order: Sequence[int] | None = None) -> float:
    """Cost with every chosen e-node counted once; ``order``: the choice's :func:`chosen_classes`, if known."""
    return float(sum(costs[choice[c]] for c in (chosen_classes(snap, choice) if order is None else order)))


def tree_cost(snap: Snapshot, choice: dict[int, int], costs: Sequence[float],
              order: Sequence[int] | None = None) -> float:
    """Cost with every use of a shared subgraph counted again (egg's default cost)."""
    value: dict[int, float] = {}
    for c in chosen_classes(snap, choice) if order is None else order:
        e = snap.nodes[choice[c]]
        value[c] = costs[choice[c]] + sum(value[ch] for ch in e.children)
    return float(sum(value[r] for r in dict.fromkeys(snap.roots)))


def finish(snap: Snapshot, choice: dict[int, int], costs: Sequence[float], seconds: float, name: str,
           **extra) -> Extraction:
    """Validate a choice (every root chosen, children chosen, acyclic) and package it with its costs."""
    needed = chosen_classes(snap, choice)
    for c in needed:
        n = choice[c]
        if not 0 <= n < len(snap.nodes) or snap.nodes[n].eclass != c:
            raise ExtractionError(f"e-node {n} chosen for e-class {c} is not a member of it")
    trimmed = {c: choice[c] for c in needed}
    return Extraction(trimmed, dag_cost(snap, trimmed, costs, needed), tree_cost(snap, trimmed, costs, needed), seconds,
                      name, **extra)


Extractor = Callable[[Snapshot, Sequence[float], ExtractOptions], Extraction]
"""``extract(snapshot, costs, options) -> Extraction``: the interface of every extractor"""


def parents_index(snap: Snapshot) -> list[list[int]]:
    """class -> e-nodes that have it as a child."""
    parents: list[list[int]] = [[] for _ in range(snap.num_classes)]
    for i, e in enumerate(snap.nodes):
        for ch in set(e.children):
            parents[ch].append(i)
    return parents
