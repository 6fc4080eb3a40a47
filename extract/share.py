"""The sharing pass after a greedy extraction: switch the users of one e-class together.

A greedy extractor prices each e-class alone, so it never picks a node whose worth lies in being shared: a
merged convolution ``conv(x, concat(w1, w2))`` read by two ``slice`` nodes costs more than either convolution it
replaces, and pays only when both consumers read it. TASO's multi-pattern rules (and ours: merged Q/K/V, merged
matmuls) produce exactly such nodes, so a greedy reward never valued them; only the ILP did.

The pass takes a valid program (a choice per needed e-class) and, for every e-class ``m``, tries the move that
makes each selected e-class with a node reading ``m`` (other than its chosen one) switch to its cheapest such node;
``m``'s own sub-DAG and any other newly needed class come from the greedy's choice for every class (``full``).
Switches that do not pay on their own are then undone one by one. A move is kept when the program's DAG cost
drops, checked by a walk from the roots (which also refuses a move that closes a cycle); passes repeat until no
move pays. Costs of a trial move are tracked by reference counts (what a switch newly needs, and what it leaves
unused), so a trial costs what it touches, not the whole program.

The result is never dearer than the input. On the e-graphs TENSAT grows from NASNet-A and NASRNN (analytic-a100
cost, 2,000 e-nodes) it reaches the ILP's optimum (3,720 and 604 us, against greedy-dag's 3,795 and 659) in
about 20 and 10 ms.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, Sequence

from eqsat.snapshot import Snapshot

from .base import ExtractionError, chosen_classes, parents_index


class _Program:
    """A choice with the reference count of every e-class (root uses plus chosen parents' child slots)."""

    def __init__(self, snap: Snapshot, costs: Sequence[float], choice: dict[int, int], order: Sequence[int]):
        self.snap, self.costs = snap, costs
        self.choice = {c: choice[c] for c in order}
        self.refs = [0] * snap.num_classes
        for r in snap.roots:
            self.refs[r] += 1
        for c in order:
            for ch in snap.nodes[choice[c]].children:
                self.refs[ch] += 1
        self.cost = float(sum(costs[choice[c]] for c in order))

    def copy(self) -> _Program:
        other = _Program.__new__(_Program)
        other.snap, other.costs = self.snap, self.costs
        other.choice, other.refs, other.cost = dict(self.choice), list(self.refs), self.cost
        return other

    def switch(self, p: int, n: int, full: Mapping[int, int]) -> bool:
        """Class ``p`` (selected) takes node ``n``: newly needed classes take ``full``'s choice, classes no
        longer used leave. False (the program then unusable) if a needed class has no choice. A cycle is not
        detected here (its classes keep each other's counts up): :func:`improve` checks moves it keeps."""
        nodes, costs, refs, choice = self.snap.nodes, self.costs, self.refs, self.choice
        old = choice[p]
        delta = costs[n] - costs[old]
        choice[p] = n
        stack = list(nodes[n].children)
        while stack:
            c = stack.pop()
            refs[c] += 1
            if refs[c] == 1:
                m = full.get(c)
                if m is None:
                    return False
                choice[c] = m
                delta += costs[m]
                stack.extend(nodes[m].children)
        stack = list(nodes[old].children)
        while stack:
            c = stack.pop()
            refs[c] -= 1
            if refs[c] == 0:
                m = choice.pop(c)
                delta -= costs[m]
                stack.extend(nodes[m].children)
        self.cost += delta
        return True


def improve(snap: Snapshot, costs: Sequence[float], choice: dict[int, int], full: dict[int, int],
            parents: list[list[int]] | None = None, max_passes: int = 20) -> dict[int, int]:
    """``choice`` (a valid program: every needed class chosen, acyclic) improved by shared-class moves (module
    docstring); ``full``: a choice for every class that has one (the greedy pass's, before trimming); ``parents``: the
snapshot's ``parents_index``, if known.

    A pass keeps every move that pays by the reference counts and walks the result once; only when that walk finds
    a cycle is the pass run again from where it began, walking after every move (cycles are rare: a move must
    read, below its shared class, a class it switched)."""
    parents = parents_index(snap) if parents is None else parents
    prog = _Program(snap, costs, choice, chosen_classes(snap, choice))
    for _ in range(max_passes):
        before = prog
        prog, improved = _pass(snap, costs, parents, before, full, walk=False)
        if improved:
            try:
                prog = _Program(snap, costs, prog.choice, chosen_classes(snap, prog.choice))
            except ExtractionError:
                prog, improved = _pass(snap, costs, parents, before, full, walk=True)
        if not improved:
            break
    return prog.choice


def _cheaper(a: float, b: float) -> bool:
    return a < b - 1e-9 * max(1.0, abs(b))


def _pass(snap: Snapshot, costs: Sequence[float], parents: list[list[int]], prog: _Program, full: dict[int, int],
          walk: bool) -> tuple[_Program, bool]:
    """One move per e-class, each kept if it pays; ``walk``: check every kept move from the roots (acyclic, its
    true DAG cost). Returns the program and whether a move was kept."""
    nodes = snap.nodes
    improved = False
    for m in range(snap.num_classes):
        users: dict[int, int] = {}
        for n in parents[m]:
            p = nodes[n].eclass
            if prog.refs[p] > 0 and p != m and prog.choice[p] != n and (p not in users or costs[n] < costs[users[p]]):
                users[p] = n
        if len(users) < (1 if prog.refs[m] > 0 else 2):
            continue  # an unused class read by one switch alone is what the greedy already weighed
        trial, known = prog.copy(), ChainMap(prog.choice, full)  # a class needed again keeps its choice
        if not all(trial.refs[p] == 0 or trial.switch(p, n, known) for p, n in users.items()):
            continue
        for p in users:  # undo the switches that do not pay on their own
            if trial.refs[p] == 0 or trial.choice[p] == prog.choice[p]:
                continue
            back = trial.copy()
            if back.switch(p, prog.choice[p], known) and _cheaper(back.cost, trial.cost):
                trial = back
        if not _cheaper(trial.cost, prog.cost):
            continue
        if walk:
            try:
                trial = _Program(snap, costs, trial.choice, chosen_classes(snap, trial.choice))
            except ExtractionError:
                continue  # the move closes a cycle
            if not _cheaper(trial.cost, prog.cost):
                continue
        prog, improved = trial, True
    return prog, improved
