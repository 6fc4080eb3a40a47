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

from collections.abc import Mapping, Sequence

from eqsat.snapshot import Snapshot

from .base import ExtractionError, chosen_classes, parents_index


class _Program:
    """A choice with the reference count of every e-class (root uses plus chosen parents' child slots), changed in
    place by :meth:`switch` and restored to a :meth:`mark` by :meth:`rollback` (a journal of what changed)."""

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
        self.journal: list[tuple[int, int, int]] = []
        """(class, reference-count change, its choice before the change or -1), newest last"""
        self.dropped: dict[int, int] = {}
        """classes this trial left unused -> their choice before (a class needed again takes it back)"""

    def mark(self) -> tuple[int, float]:
        return len(self.journal), self.cost

    def rollback(self, mark: tuple[int, float]) -> None:
        size, self.cost = mark
        journal, refs, choice = self.journal, self.refs, self.choice
        while len(journal) > size:
            c, change, before = journal.pop()
            refs[c] -= change
            if before < 0:
                choice.pop(c, None)
            else:
                choice[c] = before

    def commit(self) -> None:
        """The moves since the last commit stay: forget how to undo them."""
        self.journal.clear()
        self.dropped.clear()

    def switch(self, p: int, n: int, full: Mapping[int, int]) -> bool:
        """Class ``p`` (selected) takes node ``n``: a newly needed class takes back its choice from before this trial,
        else ``full``'s; classes no longer used leave. False (roll back to a mark taken before) if a needed class has
        no choice. A cycle is not detected here (its classes keep each other's counts up): :func:`improve` checks
        moves it keeps."""
        nodes, costs, refs, choice, journal = self.snap.nodes, self.costs, self.refs, self.choice, self.journal
        old = choice[p]
        delta = costs[n] - costs[old]
        journal.append((p, 0, old))
        self.dropped.setdefault(p, old)  # if p leaves and is needed again in this trial, its choice from before
        choice[p] = n
        stack = list(nodes[n].children)
        while stack:
            c = stack.pop()
            refs[c] += 1
            if refs[c] == 1:
                journal.append((c, 1, -1))
                m = self.dropped.get(c, full.get(c))
                if m is None:
                    return False
                choice[c] = m
                delta += costs[m]
                stack.extend(nodes[m].children)
            else:
                journal.append((c, 1, choice[c]))
        stack = list(nodes[old].children)
        while stack:
            c = stack.pop()
            refs[c] -= 1
            if refs[c] == 0:
                m = choice.pop(c)
                journal.append((c, -1, m))
                self.dropped.setdefault(c, m)
                delta -= costs[m]
                stack.extend(nodes[m].children)
            else:
                journal.append((c, -1, choice[c]))
        self.cost += delta
        return True


def improve(snap: Snapshot, costs: Sequence[float], choice: dict[int, int], full: Mapping[int, int],
            parents: list[list[int]] | None = None, max_passes: int = 20) -> dict[int, int]:
    """``choice`` (a valid program: every needed class chosen, acyclic; classes the roots do not reach are dropped)
    improved by shared-class moves (module docstring); ``full``: a choice for every class that has one (the greedy pass's, before trimming); ``parents``: the
    snapshot's ``parents_index``, if known.

    A pass keeps every move that pays by the reference counts and walks the result once; only when that walk finds
    a cycle is the pass run again from where it began, walking after every move (cycles are rare: a move must
    read, below its shared class, a class it switched). Every pass starts from a program rebuilt from its walk, whose
    counts hold no unreachable cycle: within a pass such a cycle only overstates the cost, so the pass's end is
    never dearer than its start."""
    parents = parents_index(snap) if parents is None else parents
    prog = _Program(snap, costs, choice, chosen_classes(snap, choice))
    for _ in range(max_passes):
        start = dict(prog.choice)
        improved = _pass(snap, costs, parents, prog, full, walk=False)
        if improved:
            try:
                prog = _Program(snap, costs, prog.choice, chosen_classes(snap, prog.choice))
            except ExtractionError:
                prog = _Program(snap, costs, start, chosen_classes(snap, start))
                improved = _pass(snap, costs, parents, prog, full, walk=True)
                prog = _Program(snap, costs, prog.choice, chosen_classes(snap, prog.choice))
        if not improved:
            break
    return prog.choice


def _cheaper(a: float, b: float) -> bool:
    return a < b - 1e-9 * max(1.0, abs(b))


def _pass(snap: Snapshot, costs: Sequence[float], parents: list[list[int]], prog: _Program, full: Mapping[int, int],
          walk: bool) -> bool:
    """One move per e-class on ``prog`` (in place), each kept if it pays; ``walk``: check every kept move from the
    roots (acyclic, its true DAG cost). Returns whether a move was kept."""
    nodes = snap.nodes
    improved = False
    true_cost = prog.cost  # walk: the program's DAG cost (prog.cost may count an unreachable cycle a move left)
    for m in range(snap.num_classes):
        users: dict[int, int] = {}
        for n in parents[m]:
            p = nodes[n].eclass
            if prog.refs[p] > 0 and p != m and prog.choice[p] != n and (p not in users or costs[n] < costs[users[p]]):
                users[p] = n
        if len(users) < (1 if prog.refs[m] > 0 else 2):
            continue  # an unused class read by one switch alone is what the greedy already weighed
        before = {p: prog.choice[p] for p in users}
        cost, start = prog.cost, prog.mark()
        if not all(prog.refs[p] == 0 or prog.switch(p, n, full) for p, n in users.items()):
            prog.rollback(start)
            prog.commit()
            continue
        for p in users:  # undo the switches that do not pay on their own
            if prog.refs[p] == 0 or prog.choice[p] == before[p]:
                continue
            here = prog.mark()
            if not (prog.switch(p, before[p], full) and _cheaper(prog.cost, here[1])):
                prog.rollback(here)
        walked = _dag_cost(snap, costs, prog) if walk and _cheaper(prog.cost, cost) else None
        if _cheaper(prog.cost, cost) and (not walk or (walked is not None and _cheaper(walked, true_cost))):
            improved = True
            true_cost = walked if walked is not None else true_cost
        else:
            prog.rollback(start)
        prog.commit()
    return improved


def _dag_cost(snap: Snapshot, costs: Sequence[float], prog: _Program) -> float | None:
    """The DAG cost of ``prog``'s program from the roots, or None if it closes a cycle."""
    try:
        order = chosen_classes(snap, prog.choice)
    except ExtractionError:
        return None
    return float(sum(costs[prog.choice[c]] for c in order))
