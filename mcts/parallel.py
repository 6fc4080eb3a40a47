"""Root-parallel MCTS: ``workers`` trees plan each real decision from the same state, and their root children's
visit counts and values are summed before the decision (Chaslot et al., "Parallel Monte-Carlo Tree Search", 2008).

Tree 0 is the caller's (its e-graph is the real one); trees 1..N-1 each live in a process spawned once, before
the first decision, which rebuilds the e-graph from the encoded program and the rules by name (egglog e-graphs
cannot be shared, pickled or forked), and replay every real step on it. Tree i draws from a generator seeded with (seed, i), so a fixed (seed, workers)
gives the same search; workers=1 is the plain search, in this process.

The workers' start counts inside the search's time: the caller never waits for a worker past the end of a
decision's planning (its soft end, or when tree 0 stopped if later) plus :data:`LATE_GRACE_S`. A worker still
starting (spawning an interpreter, importing egglog, rebuilding its e-graph) or still planning then is left out of
that decision, and its late answer dropped when it comes; the steps it missed reach it, in order, with its next
message. At the end, a worker that does not answer within the grace is stopped.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from eqsat.egglog.egraph import EGraph, has_symbols
from eqsat.errors import EGraphError, InputError
from eqsat.ir import topo_order
from eqsat.rules import rule_set

from .config import WORKERS_CAP, SearchConfig
from .env import Env
from .stats import RootStats

LATE_GRACE_S = 0.5
"""how long after a decision's planning ends (or the search closes) the caller still waits for a worker's answer"""


class Tree(Protocol):
    """What the forest needs of a search tree (``search.MCTS``): built on an env, it plans from its root and follows
    the real e-graph's steps. The forest builds its replicas with the main tree's own class, so it needs no import of
    the search that runs it."""

    env: Env
    config: SearchConfig
    real_path: list[str]
    simulations: int

    def __init__(self, env: Env, config: SearchConfig, progress: Callable[[str], None] | None = None,
                 tree: int = 0) -> None: ...

    def start(self) -> float: ...

    def plan(self, deadline: float, soft: float | None = None) -> RootStats: ...

    def advance(self, action: str, cost: float | None = None) -> None: ...

    def refuse(self, action: str, refused: bool) -> None: ...


def _replica(payload: tuple) -> Tree:
    """A tree on a fresh e-graph built from the same program and rules as the caller's (``Forest._payload``)."""
    kind, outputs, marks, names, cost_model, config, tree, size = payload
    known = {r.name: r for r in rule_set(config.rule_set, config.portable)}
    rules = [known[n] for n in names]  # Forest._payload checked the names
    order = topo_order(outputs)
    egraph = EGraph(symbolic=has_symbols(outputs),
                    marks={mark: frozenset(id(order[k]) for k in ks) for mark, ks in marks.items()})
    egraph.add_program(outputs)
    if egraph.size().enodes != size:
        raise EGraphError(f"a rebuilt e-graph has {egraph.size().enodes} e-nodes, the original {size}")
    out: Tree = kind(Env(egraph, rules, cost_model, config), config, None, tree=tree)
    out.start()
    return out


def _serve(conn: Connection, payload: tuple) -> None:
    """A worker's loop: build its tree, then answer ``plan`` and ``close`` messages; each carries the steps the
    real e-graph took (``advance``) or refused (``refuse``) since the last one, replayed first in order. A plan's
    answer carries its sequence number (the caller drops answers that come after it stopped waiting)."""
    try:
        tree = _replica(payload)
        while True:
            msg, *args = conn.recv()
            for step, *what in args[-1] if msg in ("plan", "close") else ():
                if step == "advance":
                    tree.advance(what[0])
                else:
                    tree.refuse(what[0], what[1])
            if msg == "plan":
                seq, deadline, soft = args[0], args[1], args[2]
                conn.send(("plan", seq, tree.plan(deadline, soft)))
            else:
                conn.send(("closed", 0, (tree.simulations, tree.env.extractions, tree.env.extract_seconds)))
                return
    except BaseException as exc:  # reported to the caller, which raises it as an EGraphError
        try:
            conn.send(("error", 0, f"{type(exc).__name__}: {exc}"))
        except OSError:  # the caller stopped listening (it closed the search): nothing to report to
            pass
    finally:
        conn.close()


class Forest:
    """The trees of one search: ``main`` (in this process) and ``workers - 1`` replicas of it, one per process
    (at most :data:`~eqsat.mcts.config.WORKERS_CAP` trees)."""

    def __init__(self, main: Tree, workers: int):
        self.main = main
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        self.backlog: list[tuple] = []
        """the steps taken or refused since the workers' last message: sent with the next one"""
        self.seq = 0
        self.answered = 1
        """the trees whose roots the last :meth:`plan` merged (tree 0 and the workers that answered in time)"""
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= WORKERS_CAP:
            raise InputError(f"--workers {workers!r}: give a whole number from 1 to {WORKERS_CAP} (each worker is a "
                             "process of its own)")
        if workers > 1:
            if main.real_path or main.env.egraph.depth:
                raise EGraphError("root-parallel MCTS starts its trees from the initial e-graph, outside any push")
            # spawned, not forked: egglog's thread pool does not survive a fork (a pop in the child hangs), and a
            # forked child inherits locks held by other libraries' threads
            ctx = mp.get_context("spawn")
            try:
                pickle.dumps(main.env.cost_model)
            except Exception:
                raise InputError("--workers > 1 sends the cost model to each worker process; a timed one cannot be "
                                 "sent (nor timed fairly on shared cores): use an analytic --cost, or --workers 1"
                                 ) from None
            payloads = [self._payload(main, i) for i in range(1, workers)]  # checked before any process starts
            try:
                for payload in payloads:
                    ours, theirs = ctx.Pipe()
                    proc = ctx.Process(target=_serve, args=(theirs, payload), daemon=True)
                    self.conns.append(ours)  # closed by close() even if the start fails
                    proc.start()
                    theirs.close()
                    self.procs.append(proc)
            except BaseException:
                self.procs.extend([None] * (len(self.conns) - len(self.procs)))
                self.close()
                raise

    @staticmethod
    def _payload(main: Tree, tree: int) -> tuple:
        """What a worker needs to rebuild ``main``'s e-graph and env (egglog e-graphs cannot be pickled): the tree's
        class (pickled by reference), the encoded program's outputs and marks (by position), the rules' names, the cost
        model and the config."""
        egraph = main.env.egraph
        by_handle = {egraph.encoding.handles[id(n)]: n for n in egraph.encoding.encoded}
        outputs = [by_handle[h] for h in egraph.output_handles]
        names = list(main.env.engine.rules)  # all, registered or not; rules hold lambdas: rebuilt by name
        rebuilt = {r.name for r in rule_set(main.config.rule_set, main.config.portable)}
        missing = [n for n in names if n not in rebuilt]
        if missing:
            raise InputError(f"--workers > 1 rebuilds the rules of rule set {main.config.rule_set!r} in each worker; "
                             f"{', '.join(missing)} are not in it: use --workers 1")
        order = topo_order(outputs)
        marks = {mark: [k for k, n in enumerate(order) if id(n) in ids]  # by position
                 for mark, ids in egraph.encoding.marks.items()}
        return type(main), outputs, marks, names, main.env.cost_model, main.config, tree, egraph.size().enodes

    @staticmethod
    def _answer(conn: Connection, kind: str, seq: int, until: float) -> Any | None:
        """The worker's answer of ``kind`` (a plan's: to plan ``seq``), waiting for it until ``until`` at most
        (None then); answers to earlier plans, which came after the caller stopped waiting, are dropped."""
        while True:
            try:
                if not conn.poll(max(0.0, until - time.perf_counter())):
                    return None
                out = conn.recv()
            except (EOFError, OSError):
                raise EGraphError("a root-parallel MCTS worker died; run with --workers 1 to see its error") from None
            if out[0] == "error":
                raise EGraphError(f"a root-parallel MCTS worker failed: {out[2]}")
            if out[0] == kind and out[1] == seq:
                return out[2]

    def _send(self, message: tuple) -> None:
        try:
            for conn in self.conns:
                conn.send(message)
        except OSError:
            raise EGraphError("a root-parallel MCTS worker died; run with --workers 1 to see its error") from None

    def plan(self, deadline: float, soft: float | None = None) -> RootStats:
        """Every tree plans (the spawned ones while this one does) until ``soft`` or their budget, as
        :meth:`Tree.plan`; the roots of those that answered by the end of this one's planning (at least
        ``soft``) plus :data:`LATE_GRACE_S` merged (:attr:`answered` counts them)."""
        self.seq += 1
        backlog, self.backlog = self.backlog, []
        self._send(("plan", self.seq, deadline, soft, backlog))
        parts = [self.main.plan(deadline, soft)]
        until = max(time.perf_counter(), soft if soft is not None else deadline) + LATE_GRACE_S
        for conn in self.conns:
            got = self._answer(conn, "plan", self.seq, until)
            if got is not None:
                parts.append(got)
        self.answered = len(parts)
        return parts[0] if len(parts) == 1 else RootStats.merge(parts)

    def advance(self, action: str, cost: float) -> None:
        """The real e-graph took ``action`` (its new cost ``cost``): every tree moves on (the workers with their
        next message)."""
        if self.conns:
            self.backlog.append(("advance", action))
        self.main.advance(action, cost)

    def refuse(self, action: str, refused: bool) -> None:
        if self.conns:
            self.backlog.append(("refuse", action, refused))
        self.main.refuse(action, refused)

    def close(self) -> tuple[int, int, float]:
        """Stop the spawned trees: (simulations of every tree, their extractions and extraction seconds); a
        worker that does not answer within :data:`LATE_GRACE_S` (still starting, or planning a decision it was
        left out of) is stopped, its counts left out."""
        sims, extractions, seconds = self.main.simulations, 0, 0.0
        until = time.perf_counter() + LATE_GRACE_S
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(("close", []))
                got = self._answer(conn, "closed", 0, until)
                if got is not None:
                    s, e, t = got
                    sims, extractions, seconds = sims + s, extractions + e, seconds + t
            except (EGraphError, OSError):
                pass
            finally:
                conn.close()
                if proc is not None:
                    proc.join(timeout=max(0.0, until - time.perf_counter()))
                    if proc.is_alive():
                        proc.kill()
                        proc.join(timeout=5)
        self.conns, self.procs, self.backlog = [], [], []
        return sims, extractions, seconds
