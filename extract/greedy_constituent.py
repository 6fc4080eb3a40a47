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
from typing import Sequence

from eqsat.egraph import Snapshot

from .base import Extraction, finish
from .cycles import without_cycles


def _choice(snap: Snapshot, costs: Sequence[float], banned: set[int]) -> dict[int, int]:
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
                total = costs[n]
                h: dict[int, float] = {}
                for ch in e.children:
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
                if total < best:
                    best, best_hist, best_node = total, h, n
            if best_hist:
                hist[c] = best_hist
            if best_node >= 0 and best < cost[c]:
                cost[c] = best
                choice[c] = best_node
                changed = True
    return choice


def extract(snap: Snapshot, costs: Sequence[float], **_: object) -> Extraction:
    t = time.perf_counter()
    choice = without_cycles(snap, lambda banned: _choice(snap, costs, banned))
    return finish(snap, choice, costs, time.perf_counter() - t, "greedy-constituent")
