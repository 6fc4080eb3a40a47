"""Distinct programs drawn from an e-graph by random extraction choices (seeded), for calibrating cost models.

Each draw perturbs the e-nodes' costs by a seeded log-normal factor whose spread is itself drawn (from
near the cost model's optimum to close to uniformly random choices) and extracts with greedy-dag, whose
result is validated (every needed class chosen, acyclic). Draws whose decoded program has the structure of
an earlier one (:func:`structure_key`) are dropped.

>>> from eqsat.snapshot import ENode, Snapshot
>>> snap = Snapshot([ENode("input", ("i:x",), (), 0), ENode("relu", (), (0,), 1), ENode("tanh", (), (0,), 1)],
...                 [[0], [1, 2]], [(2,), (2,)], [False, False], [1])
>>> sorted(c[1] for c in sample_choices(snap, [0.0, 1.0, 1.0], 5, seed=0))
[1, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from eqsat.ir import Graph
from eqsat.snapshot import Snapshot

from . import greedy_dag

MAX_SPREAD = 3.0
"""the largest standard deviation of the log-normal cost perturbation (3: choices close to random)"""


def structure_key(graph: Graph, table: dict[tuple, int] | None = None) -> Hashable:
    """A key equal for two programs exactly when they hold the same operators on the same operands (compared
    by structure, bottom-up, ignoring node identity) and the same outputs. Keys compare only when made with
    one shared ``table``."""
    ids = table if table is not None else {}
    memo: dict[int, int] = {}
    for n in graph.nodes():  # children first
        base = (n.op, n.attrs, tuple(n.shape), n.dtype)
        key = (*base, n.name) if n.op in ("input", "weight") else (*base, tuple(memo[id(c)] for c in n.inputs))
        memo[id(n)] = ids.setdefault(key, len(ids))
    return frozenset(memo.values()), tuple(memo[id(o)] for o in graph.outputs)


def sample_choices(snap: Snapshot, costs: Sequence[float], count: int, seed: int,
                   decode: Callable[[dict[int, int]], Hashable] | None = None,
                   max_draws: int | None = None) -> list[dict[int, int]]:
    """Up to ``count`` extraction choices (class -> e-node) of distinct programs, drawn with ``seed``.

    ``decode`` maps a choice to its program's identity (default: the set of chosen e-nodes, which tells
    programs apart only up to e-graph sharing; pass ``structure_key`` of the decoded program to compare by
    structure). Stops after ``max_draws`` draws (default ``20 * count``): a small e-graph may hold fewer
    programs than asked for."""
    rng = np.random.default_rng(seed)
    base = np.asarray(costs, float)
    floor = max(float(base[base > 0].mean()) if np.any(base > 0) else 1.0, 1e-9) * 1e-3
    identity = decode or (lambda choice: frozenset(choice.items()))
    seen: set[Hashable] = set()
    out: list[dict[int, int]] = []
    for _ in range(max_draws if max_draws is not None else 20 * count):
        if len(out) >= count:
            break
        spread = rng.uniform(0.0, MAX_SPREAD)
        noisy = (base + floor) * np.exp(spread * rng.standard_normal(base.size))
        choice = greedy_dag.extract(snap, noisy.tolist()).choice
        key = identity(choice)
        if key not in seen:
            seen.add(key)
            out.append(choice)
    return out
