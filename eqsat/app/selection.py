"""Measured selection among candidate programs (``--candidates K``): which extractions to try, and which
measured candidate ships.

The final stage extracts up to K distinct programs (:data:`SOURCES`, in order: the final extractor's optimum of
the grown e-graph, greedy-dag's, the ILP's under another cost model, the main extractor's programs of the cheapest
states the search stood in before its last one, greedy-tree's); each is verified
and timed end to end against the original in one interleaved run (:func:`eqsat.runtimes.compare_programs`).
:func:`choose` ships the fastest candidate that is faster than the original with confidence, the intervals
widened for the number of candidates compared (Bonferroni: each at 1 - (1 - confidence) / m), else the original.

>>> other_cost_name("analytic"), other_cost_name("analytic-a100"), other_cost_name("cpu")
('analytic-a100', 'analytic', 'analytic')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eqsat.cost import CostModel
from eqsat.extract import Extraction
from eqsat.snapshot import Snapshot
from eqsat.timing import Comparison, Decision, decide

OTHER_ILP_SECONDS = 10.0
"""at most this many seconds for the ILP under the other cost model (a cheap extra candidate, not the optimum)"""
SOURCES = ("final", "greedy-dag", "ilp-other-cost", "search-path", "greedy-tree")
"""where candidates come from, in the order they are tried (duplicates of earlier ones are skipped)"""


def other_cost_name(cost_name: str) -> str:
    """The cost model the extra ILP candidate is extracted under: the other analytic roofline for an analytic
    model (both deterministic and cheap), else the analytic one (a measured model's counterpart)."""
    if cost_name == "analytic" or cost_name == "analytic-cpu":
        return "analytic-a100"
    return "analytic"


@dataclass
class Extracted:
    """One candidate: its name, how it was produced, its extraction and the cost model that extraction's DAG cost
    is under (the final cost model, or the other one), and the e-graph it was extracted from when that is not the
    grown one (a state along the search path)."""

    name: str
    source: str
    extraction: Extraction
    cost_model: CostModel
    snapshot: Snapshot | None = None


def choose(comparisons: Sequence[Comparison], names: Sequence[str], allow_slower: bool) -> tuple[int, Decision]:
    """(index of the candidate to report, the decision): the fastest (median speedup) among those faster with
    confidence ships; with none, the fastest measured is reported and the original returned (or, with
    ``allow_slower``, that fastest one kept)."""
    if not comparisons:
        raise ValueError("no candidate was measured")
    faster = [k for k, c in enumerate(comparisons) if c.faster]
    pool = faster or range(len(comparisons))
    best = max(pool, key=lambda k: comparisons[k].speedup)
    decision = decide(comparisons[best], allow_slower=allow_slower)
    if len(comparisons) > 1:
        others = ", ".join(f"{n} {c.speedup:.3f}x" for k, (n, c) in enumerate(zip(names, comparisons)) if k != best)
        decision = Decision(decision.ship, f"{names[best]}: {decision.reason}; other candidates: {others}")
    return best, decision


__all__ = ["OTHER_ILP_SECONDS", "SOURCES", "Extracted", "choose", "other_cost_name"]
