"""egg's default greedy extractor: cost(node) = own cost + sum of the children's best costs (tree cost).

A shared subgraph is counted once per use, so on residual networks the estimate explodes; it is here
to reproduce the paper's Table 1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from eqsat.snapshot import Snapshot

from .base import DEFAULT_OPTIONS, Extraction, ExtractOptions, finish
from .cycles import without_cycles

CAP = 1e300
"""the largest tree cost counted: a subterm shared along a chain of a thousand steps (torch's unrolled recurrence)
is counted 2**1000 times, past a float's range, where every choice would tie at infinity and none be made"""


def _tree_choice(snap: Snapshot, costs: Sequence[float], banned: set[int]) -> tuple[dict[int, int], float]:
    best = [math.inf] * snap.num_classes
    choice: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for c, members in enumerate(snap.classes):
            for n in members:
                if n in banned:
                    continue
                e = snap.nodes[n]
                total = costs[n]
                for ch in e.children:
                    total += best[ch]
                total = min(total, CAP)  # (a child's class with no choice yet stays inf: this node waits)
                if total < best[c] and all(best[ch] < math.inf for ch in e.children):
                    best[c] = total
                    choice[c] = n
                    changed = True
    return choice, float(sum(best[r] for r in dict.fromkeys(snap.roots)))


def extract(snap: Snapshot, costs: Sequence[float], options: ExtractOptions = DEFAULT_OPTIONS) -> Extraction:
    """Reads no option (no time limit, no warm start, no sharing pass)."""
    t = time.perf_counter()
    choice, estimate = without_cycles(snap, lambda banned: _tree_choice(snap, costs, banned))
    return finish(snap, choice, costs, time.perf_counter() - t, "greedy-tree", estimate=estimate)
