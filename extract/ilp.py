"""Exact extraction by integer linear programming with SCIP (pyscipopt).

Formulation (TENSAT's, SPEC section 4), over the classes reachable from the roots:

* ``x_i`` binary per e-node; each root class picks one node; a picked node's child classes pick one:
  ``sum_{j in m} x_j >= x_i``; objective ``min sum cost_i x_i`` (DAG cost).
* Acyclicity, done lazily but exactly: a cycle of picked nodes lies inside one strongly connected
  component of the class graph, so integer order variables ``t_m in [0, |SCC|-1]`` exist only for classes
  in non-trivial SCCs and ``t_g(i) - t_m + |SCC| (1 - x_i) >= 1`` only for edges inside an SCC.
  Self-loops are fixed to 0. An acyclic e-graph (every initial program) gets no order constraints.
* Warm start from the greedy-dag solution, checked feasible (order values rank each SCC's chosen classes
  children first); a time limit; the solution read by rounding; on timeout the best incumbent and its
  gap. The result is never dearer than the warm start: if SCIP found nothing or something dearer, the
  warm start is returned with ``used_warm_start`` set and a note.
* A stall limit (:data:`STALL_SECONDS`): SCIP stops where its best program has not improved for that long, counted
  from the end of the root node at the earliest (status ``stalled``, its gap said). On the models measured (the zoo's convolutional and
  transformer models, Swin, ConvNeXt, MobileViT, TASO's exports) the greedy-dag warm start was already the best
  program SCIP found; where the root did not close the gap (MobileViT: 9% after the root, 2.2% after 120 s, the
  warm start never improved on) the rest of ``--time-limit`` went to branching that found nothing (17 s of a
  70 s run; 2 s of stall since).
* Ctrl-C while SCIP solves (SCIP catches SIGINT, status ``userinterrupt``) raises KeyboardInterrupt.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyscipopt import SCIP_EVENTTYPE, Eventhdlr, Model, quicksum

from eqsat.snapshot import Snapshot

from . import greedy_dag
from .base import DEFAULT_OPTIONS, Extraction, ExtractionError, ExtractOptions, chosen_classes, finish

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


@dataclass
class IlpModel:
    """The SCIP model of one extraction and the handles needed to seed and read it."""

    model: Any
    x: dict[int, Any]
    """e-node -> its binary pick variable"""
    order: dict[int, Any]
    """class -> its integer order variable (classes in non-trivial SCCs only)"""
    component: dict[int, int]
    """class -> its SCC id (classes in non-trivial SCCs only)"""
    reach: list[int]


DEFAULT_TIME_LIMIT = 60.0
"""seconds SCIP may take when no time limit is given (``ExtractOptions.time_limit`` None)"""

STALL_SECONDS = 2.0
"""seconds after the root node without a better program at which SCIP stops (``ExtractOptions.stall_seconds``
None; ``math.inf``: never). Of 22 ILPs of real runs solved again with 120 s, none found a better program after its
root node (5 s, the first limit, took 3 s of each of two ILPs of a MobileViT run that then went past a minute)."""


class _Stall(Eventhdlr):
    """Stops SCIP where its best program has not improved for ``seconds``, counted from the later of the last better
    program and the end of the root node (the branching gets ``seconds`` of its own)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.last = 0.0
        """SCIP's solving time at the last better program, or at the root node's end where that is later"""
        self.root: float | None = None
        """SCIP's solving time when the root node was solved"""
        self.stalled = False

    def eventinit(self) -> None:
        self.model.catchEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
        self.model.catchEvent(SCIP_EVENTTYPE.NODESOLVED, self)

    def eventexit(self) -> None:
        self.model.dropEvent(SCIP_EVENTTYPE.BESTSOLFOUND, self)
        self.model.dropEvent(SCIP_EVENTTYPE.NODESOLVED, self)

    def eventexec(self, event: Any) -> None:
        now = self.model.getSolvingTime()
        if event.getType() == SCIP_EVENTTYPE.BESTSOLFOUND:
            self.last = now
        elif self.root is None:  # the root node solved: the branching has its own stall from here
            self.root = self.last = max(self.last, now)
        elif now - self.last >= self.seconds and not self.stalled:
            self.stalled = True
            self.model.interruptSolve()


def build_model(snap: Snapshot, costs: Sequence[float], time_limit: float = DEFAULT_TIME_LIMIT,
                log_file: str | None = None) -> IlpModel:
    """The ILP of the module docstring over the classes reachable from the roots."""
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
    component = {c: comp[index[c]] for c in reach if comp_size[comp[index[c]]] > 1}

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
    order = {c: m.addVar(vtype="I", lb=0, ub=comp_size[k] - 1, name=f"t{c}") for c, k in component.items()}
    for r in dict.fromkeys(snap.roots):
        m.addCons(quicksum(x[n] for n in snap.classes[r]) >= 1, name=f"root{r}")
    for c in reach:
        for n in snap.classes[c]:
            for ch in set(snap.nodes[n].children):
                if ch == c:
                    continue
                m.addCons(quicksum(x[j] for j in snap.classes[ch]) >= x[n])
                if c in component and component.get(ch) == component[c]:
                    big = comp_size[component[c]]
                    m.addCons(order[c] - order[ch] + big * (1 - x[n]) >= 1)
    m.setMinimize()
    return IlpModel(m, x, order, component, reach)


def warm_start_solution(ilp: IlpModel, snap: Snapshot, choice: dict[int, int]):
    """A SCIP solution for an acyclic ``choice``: its nodes picked, and order values that rank the chosen
    classes of each SCC children first (0, 1, 2, ... in a post-order of the chosen program), so every
    picked edge inside an SCC has ``t_parent - t_child >= 1``. Unchosen classes get 0 (their constraints
    are relaxed by the big-M term)."""
    m = ilp.model
    sol = m.createSol()
    picked = {choice[c] for c in chosen_classes(snap, choice)}
    for n, var in ilp.x.items():
        m.setSolVal(sol, var, 1.0 if n in picked else 0.0)
    rank: dict[int, int] = {}
    used: dict[int, int] = {}
    for c in chosen_classes(snap, choice):
        k = ilp.component.get(c)
        if k is not None:
            rank[c] = used.get(k, 0)
            used[k] = rank[c] + 1
    for c, var in ilp.order.items():
        m.setSolVal(sol, var, float(rank.get(c, 0)))
    return sol


def _gap(primal: float, dual: float) -> float:
    """SCIP's gap: |primal - dual| / min(|primal|, |dual|), 0 when equal, inf when the minimum is 0."""
    if abs(primal - dual) <= 1e-9 * max(1.0, abs(primal)):
        return 0.0
    low = min(abs(primal), abs(dual))
    return abs(primal - dual) / low if low > 0 else math.inf


def extract(snap: Snapshot, costs: Sequence[float], options: ExtractOptions = DEFAULT_OPTIONS) -> Extraction:
    """Solve the ILP within ``options.time_limit`` (default :data:`DEFAULT_TIME_LIMIT`); never return a program
    dearer than ``options.warm_start`` (greedy-dag's unless given): the one place that guarantee is kept.
    ``options.log_file``: SCIP's log.

    Raises KeyboardInterrupt when SCIP stops because of Ctrl-C (SCIP catches SIGINT itself while solving).
    """
    t0 = time.perf_counter()
    time_limit = DEFAULT_TIME_LIMIT if options.time_limit is None else options.time_limit
    warm_start = options.warm_start
    notes: list[str] = []
    if warm_start is None:
        try:
            warm_start = greedy_dag.extract(snap, costs)
        except ExtractionError as exc:  # its cycle breaking can fail where an acyclic program exists
            notes.append(f"no greedy-dag warm start: {exc}")
    ilp = build_model(snap, costs, time_limit, options.log_file)
    m = ilp.model
    stall = _Stall(STALL_SECONDS if options.stall_seconds is None else options.stall_seconds)
    if math.isfinite(stall.seconds):
        m.includeEventhdlr(stall, "stall", "stops where the best program has not improved for a while")
    if warm_start is not None:
        sol = warm_start_solution(ilp, snap, warm_start.choice)
        if m.checkSol(sol, printreason=False):
            m.addSol(sol, free=True)
        else:  # a bug, not an expected case: say so, and still return the warm start if SCIP does worse
            notes.append("SCIP rejected the warm start as infeasible")
            log.warning("SCIP rejected the greedy-dag warm start as infeasible")
    m.optimize()
    status = "stalled" if stall.stalled else m.getStatus()
    if status == "userinterrupt":
        raise KeyboardInterrupt("the ILP extraction was interrupted (SCIP stopped on Ctrl-C)")

    def keep_warm_start(why: str) -> Extraction:
        if warm_start is None:
            raise ExtractionError(f"{why} and there is no warm start to fall back on: the roots have no acyclic "
                                  "program, or give the ILP a longer time limit (--ilp-time-limit)")
        notes.append(f"{why}; kept the greedy-dag warm start (DAG cost {warm_start.dag_cost:.6g})")
        gap = _gap(warm_start.dag_cost, m.getDualbound())
        return finish(snap, warm_start.choice, costs, time.perf_counter() - t0, "ilp", optimal=gap == 0.0, gap=gap,
                      notes=notes, estimate=warm_start.dag_cost, used_warm_start=True)

    if m.getNSols() == 0:
        return keep_warm_start(f"SCIP found no solution ({status})")
    best = m.getBestSol()
    choice: dict[int, int] = {}
    for c in ilp.reach:
        picked = [n for n in snap.classes[c] if round(m.getSolVal(best, ilp.x[n])) == 1]
        if picked:
            choice[c] = min(picked, key=lambda n: costs[n])
    result = finish(snap, choice, costs, time.perf_counter() - t0, "ilp", estimate=float(m.getSolObjVal(best)))
    if warm_start is not None and result.dag_cost > warm_start.dag_cost + 1e-9 * max(1.0, abs(warm_start.dag_cost)):
        return keep_warm_start(f"SCIP's best program (DAG cost {result.dag_cost:.6g}, status {status}) is dearer")
    result.optimal = status == "optimal"
    result.gap = 0.0 if result.optimal else float(m.getGap())
    if stall.stalled:
        notes.append(f"SCIP stopped after {stall.seconds:g} s without a better program, gap {result.gap:.3%}")
    elif not result.optimal:
        notes.append(f"SCIP stopped with status {status}, gap {result.gap:.3%}")
    result.notes = notes
    return result
