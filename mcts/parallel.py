"""Root-parallel MCTS: ``workers`` trees plan each real decision from the same state, and their root children's
visit counts and values are summed before the decision (Chaslot et al., "Parallel Monte-Carlo Tree Search", 2008).

Tree 0 is the caller's (its e-graph is the real one); trees 1..N-1 each live in a process spawned once, before
the first decision, which rebuilds the e-graph from the encoded program and the rules by name (egglog e-graphs
cannot be shared, pickled or forked), and replay every real step on it. Tree i draws from a generator seeded with (seed, i), so a fixed (seed, workers)
gives the same search; workers=1 is the plain search, in this process.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from eqsat.egglog.egraph import EGraph, has_symbols
from eqsat.errors import EGraphError, InputError
from eqsat.ir import topo_order
from eqsat.rules import rule_set

from .config import SearchConfig
from .env import Env
from .stats import RootStats


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
    """A worker's loop: build its tree, then answer ``plan``, ``advance``, ``refuse`` and ``close`` messages."""
    try:
        tree = _replica(payload)
        while True:
            msg, *args = conn.recv()
            if msg == "plan":
                conn.send(tree.plan(args[0], args[1]))
            elif msg == "advance":
                tree.advance(args[0])
            elif msg == "refuse":
                tree.refuse(args[0], args[1])
            else:
                conn.send((tree.simulations, tree.env.extractions, tree.env.extract_seconds))
                return
    except BaseException as exc:  # reported to the caller, which raises it as an EGraphError
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class Forest:
    """The trees of one search: ``main`` (in this process) and ``workers - 1`` replicas of it, one per process."""

    def __init__(self, main: Tree, workers: int):
        self.main = main
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
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
            for payload in payloads:
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(theirs, payload), daemon=True)
                proc.start()
                theirs.close()
                self.conns.append(ours)
                self.procs.append(proc)

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

    def _recv(self, conn: Connection) -> Any:
        try:
            out = conn.recv()
        except EOFError:
            raise EGraphError("a root-parallel MCTS worker died; run with --workers 1 to see its error") from None
        if isinstance(out, tuple) and out and out[0] == "error":
            raise EGraphError(f"a root-parallel MCTS worker failed: {out[1]}")
        return out

    def plan(self, deadline: float, soft: float | None = None) -> RootStats:
        """Every tree plans (the forked ones while this one does) until ``soft`` or their budget, as
        :meth:`Tree.plan`; their roots merged."""
        for conn in self.conns:
            conn.send(("plan", deadline, soft))
        parts = [self.main.plan(deadline, soft)]
        parts += [self._recv(conn) for conn in self.conns]
        return parts[0] if len(parts) == 1 else RootStats.merge(parts)

    def advance(self, action: str, cost: float) -> None:
        """The real e-graph took ``action`` (its new cost ``cost``): every tree moves on."""
        for conn in self.conns:
            conn.send(("advance", action))
        self.main.advance(action, cost)

    def refuse(self, action: str, refused: bool) -> None:
        for conn in self.conns:
            conn.send(("refuse", action, refused))
        self.main.refuse(action, refused)

    def close(self) -> tuple[int, int, float]:
        """Stop the forked trees: (simulations of every tree, their extractions and extraction seconds)."""
        sims, extractions, seconds = self.main.simulations, 0, 0.0
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(("close",))
                s, e, t = self._recv(conn)
                sims, extractions, seconds = sims + s, extractions + e, seconds + t
            except (EGraphError, OSError):
                pass
            finally:
                conn.close()
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
        self.conns, self.procs = [], []
        return sims, extractions, seconds
