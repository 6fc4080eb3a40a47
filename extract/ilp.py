"""Exact extraction by integer linear programming with SCIP (pyscipopt).

Formulation (TENSAT's, SPEC section 4), over the classes reachable from the roots:

* ``x_i`` binary per e-node; each root class picks one node; a picked node's child classes pick one:
  ``sum_{j in m} x_j >= x_i``; objective ``min sum cost_i x_i`` (DAG cost).
* Acyclicity, done lazily but exactly: a cycle of picked nodes lies inside one strongly connected
  component of the class graph, so integer order variables ``t_m in [0, |SCC|-1]`` exist only for classes
  in non-trivial SCCs and ``t_g(i) - t_m + |SCC| (1 - x_i) >= 1`` only for edges inside an SCC.
  Self-loops are fixed to 0. An acyclic e-graph (every initial program) gets no order constraints.
* Warm start from the greedy-dag solution; a time limit; the solution read by rounding; on timeout the
  best incumbent and its gap, or the greedy solution with a note if SCIP found none.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

from eqsat.egraph import Snapshot

from . import greedy_dag
from .base import Extraction, chosen_classes, finish

log = logging.getLogger(__name__)


def _sccs(n: int, succ: list[set[int]]) -> list[int]:
    """Tarjan's algorithm (iterative); returns the component id of every vertex."""
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    comp = [-1] * n
    stack: list[int] = []
    counter = ncomp = 0
    for v0 in range(n):
        if index[v0] != -1:
            continue
        work = [(v0, iter(succ[v0]))]
        index[v0] = low[v0] = counter
        counter += 1
        stack.append(v0)
        on[v0] = True
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, iter(succ[w])))
                    advanced = True
                    break
                if on[w]:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp[w] = ncomp
                    if w == v:
                        break
                ncomp += 1
    return comp


def extract(snap: Snapshot, costs: Sequence[float], *, time_limit: float = 60.0, warm_start: Extraction | None = None,
            log_file: str | None = None, **_: object) -> Extraction:
    from pyscipopt import Model, quicksum

    t0 = time.perf_counter()
    if warm_start is None:
        warm_start = greedy_dag.extract(snap, costs)
    reach = snap.reachable()
    classes = set(reach)
    succ: dict[int, set[int]] = {c: set() for c in reach}
    for c in reach:
        for n in snap.classes[c]:
            succ[c].update(snap.nodes[n].children)
    index = {c: i for i, c in enumerate(reach)}
    comp = _sccs(len(reach), [{index[x] for x in succ[c]} for c in reach])
    comp_size: dict[int, int] = {}
    for k in comp:
        comp_size[k] = comp_size.get(k, 0) + 1

    m = Model("extract")
    m.hideOutput()
    if log_file:
        m.setLogfile(log_file)
    m.setParam("limits/time", max(float(time_limit), 0.1))
    m.setParam("parallel/maxnthreads", 1)
    x = {}
    for c in reach:
        for n in snap.classes[c]:
            e = snap.nodes[n]
            ub = 0.0 if c in e.children or any(ch not in classes for ch in e.children) else 1.0
            x[n] = m.addVar(vtype="B", name=f"x{n}", ub=ub, obj=float(costs[n]))
    order = {}
    for c in reach:
        k = comp[index[c]]
        if comp_size[k] > 1:
            order[c] = m.addVar(vtype="I", lb=0, ub=comp_size[k] - 1, name=f"t{c}")
    for r in dict.fromkeys(snap.roots):
        m.addCons(quicksum(x[n] for n in snap.classes[r]) >= 1, name=f"root{r}")
    for c in reach:
        for n in snap.classes[c]:
            for ch in set(snap.nodes[n].children):
                if ch == c:
                    continue
                m.addCons(quicksum(x[j] for j in snap.classes[ch]) >= x[n])
                if c in order and ch in order and comp[index[c]] == comp[index[ch]]:
                    big = comp_size[comp[index[c]]]
                    m.addCons(order[c] - order[ch] + big * (1 - x[n]) >= 1)
    m.setMinimize()
    if warm_start is not None:
        sol = m.createSol()
        picked = set(warm_start.choice.values())
        for n, var in x.items():
            m.setSolVal(sol, var, 1.0 if n in picked else 0.0)
        position = {c: i for i, c in enumerate(chosen_classes(snap, warm_start.choice))}
        for c, var in order.items():
            k = comp_size[comp[index[c]]]
            m.setSolVal(sol, var, float(min(position.get(c, 0), k - 1)))
        try:
            m.addSol(sol, free=True)
        except Exception as exc:  # an infeasible hint is only a lost head start
            log.debug("warm start rejected: %s", exc)
    m.optimize()
    status = m.getStatus()
    notes: list[str] = []
    if m.getNSols() == 0:
        notes.append(f"SCIP found no solution ({status}); returning the greedy-dag solution")
        result = warm_start
        return finish(snap, result.choice, costs, time.perf_counter() - t0, "ilp", optimal=False, gap=None, notes=notes)
    best = m.getBestSol()
    choice: dict[int, int] = {}
    for c in reach:
        picked = [n for n in snap.classes[c] if round(m.getSolVal(best, x[n])) == 1]
        if picked:
            choice[c] = min(picked, key=lambda n: costs[n])
    optimal = status == "optimal"
    gap = 0.0 if optimal else float(m.getGap())
    if not optimal:
        notes.append(f"SCIP stopped with status {status}, gap {gap:.3%}")
    return finish(snap, choice, costs, time.perf_counter() - t0, "ilp", optimal=optimal, gap=gap, notes=notes,
                  estimate=float(m.getSolObjVal(best)))
