"""The MCTS paper's "constituent cost" greedy (SPEC section 5), reproduced with its quirks.

Each e-class keeps a history ``hist[class]``: constituent e-class -> attributed cost. A node's cost is
its own cost plus, per child, the child's cost minus the *largest* overlap with what earlier children
already brought in. Only one shared constituent is subtracted per child, so the cost is exact on
one-node-per-class DAGs whose shared parts do not overlap in several places, and too high elsewhere
(NASNet-A's five-input concats).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from eqsat.snapshot import Snapshot

from .base import DEFAULT_OPTIONS, Extraction, ExtractOptions, finish
from .cycles import without_cycles


def _constituent(own: float, children, cost, hist) -> tuple[float, dict[int, float]]:
    """The paper's cost of a node: own cost plus each child's cost less its largest known overlap."""
    total = own
    h: dict[int, float] = {}
    for ch in children:
        if not h:
            h = dict(hist.get(ch, {}))
            contrib = cost[ch]
        elif ch in h:
            contrib = 0.0
        elif ch in hist:
            vmax = 0.0
            for k, v in hist[ch].items():
                if k in h:
                    vmax = max(vmax, v)
                else:
                    h[k] = v
            contrib = max(cost[ch] - vmax, 0.0)
        else:
            contrib = cost[ch]
        total += contrib
        if contrib > 0:
            h[ch] = contrib
    return total, h


def _choice(snap: Snapshot, costs: Sequence[float], banned: set[int]) -> tuple[dict[int, int], float]:
    cost = [math.inf] * snap.num_classes
    hist: dict[int, dict[int, float]] = {}
    choice: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for c, members in enumerate(snap.classes):
            best, best_hist, best_node = math.inf, None, -1
            for n in members:
                if n in banned:
                    continue
                e = snap.nodes[n]
                if any(cost[ch] == math.inf for ch in e.children):
                    continue
                total, h = _constituent(costs[n], e.children, cost, hist)
                if total < best:
                    best, best_hist, best_node = total, h, n
            if best_hist:
                hist[c] = best_hist
            if best_node >= 0 and best < cost[c]:
                cost[c] = best
                choice[c] = best_node
                changed = True
    roots = list(dict.fromkeys(snap.roots))
    if len(roots) == 1:
        return choice, float(cost[roots[0]])
    # several outputs: cost them as TENSAT's zero-cost noop node joining them
    return choice, float(_constituent(0.0, roots, cost, hist)[0])


def extract(snap: Snapshot, costs: Sequence[float], options: ExtractOptions = DEFAULT_OPTIONS) -> Extraction:
    """Reads no option (no time limit, no warm start, no sharing pass)."""
    t = time.perf_counter()
    choice, estimate = without_cycles(snap, lambda banned: _choice(snap, costs, banned))
    return finish(snap, choice, costs, time.perf_counter() - t, "greedy-constituent", estimate=estimate)
