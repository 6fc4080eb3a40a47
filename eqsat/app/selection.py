"""Measured selection among candidate programs (``--candidates K``): which extractions to try, and which
measured candidate ships.

The final stage extracts up to K distinct programs (:func:`eqsat.app.pipeline.candidates_phase`, in order: the final extractor's optimum of
the grown e-graph, greedy-dag's, greedy-dag's favouring the runtime's kernels (:mod:`eqsat.cost.favoured`), the
ILP's under another cost model, the main extractor's programs of the cheapest
states the search stood in before its last one, greedy-tree's); each is verified
and timed end to end against the original in one interleaved run (:func:`eqsat.runtimes.compare_programs`).
:func:`choose` ships a candidate faster than the original with confidence under the sequential gate
(:mod:`eqsat.gate`: Bonferroni over the candidates and the looks), else the original: the first such in order,
unless a later one is faster than it with confidence. Where the timed sessions of all the programs would not fit the
memory budget, they are timed in groups (:mod:`eqsat.grouping`) and the rule applies across them (:func:`choose`).

>>> other_cost_name("analytic"), other_cost_name("analytic-a100"), other_cost_name("cpu")
('analytic-a100', 'analytic', 'analytic')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from eqsat.cost import CostModel
from eqsat.extract import Extraction
from eqsat.gate import Gate, trimmed_interval
from eqsat.snapshot import Snapshot
from eqsat.timing import Comparison, Decision, decide

OTHER_ILP_SECONDS = 10.0
"""at most this many seconds for the ILP under the other cost model (a cheap extra candidate, not the optimum)"""


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


def choose(comparisons: Sequence[Comparison], names: Sequence[str], allow_slower: bool,
           gate: Gate | None = None, groups: Sequence[int] | None = None,
           duel: Callable[[int, int], Comparison] | None = None) -> tuple[int, Decision]:
    """(index of the candidate to report, the decision): among those faster with confidence, the fastest (median
    speedup); with ``gate`` and the rounds at hand, the first in order instead, unless a later one is faster than
    it with confidence over the same paired rounds (so that candidates equally fast ship the same one run to run).
    With none faster, the fastest measured is reported and the original returned (or, with ``allow_slower``, that
    fastest one kept).

    A measurement split into memory-bounded groups (:mod:`eqsat.grouping`; ``groups``: each candidate's group)
    applies the same rule: each candidate faster with confidence was so against the original in its group's
    paired rounds (the gate's correction counting every group's candidates); a later one replaces the one chosen
    so far if it is faster than it with confidence, over their shared rounds where they were timed together, else
    over the rounds of ``duel(chosen, later)``, a paired run of the two alone (its speedup: chosen / later), whose
    interval at the same confidence must lie above the gate's futility bound: a duel times one session of each
    (what the budget holds), so that what differs between two sessions of one program (memory placement, a few
    tenths of a percent) is not taken for a gain. Without ``duel``, candidates of different groups are not
    compared (the first stays)."""
    if not comparisons:
        raise ValueError("no candidate was measured")
    faster = [k for k, c in enumerate(comparisons) if c.faster]
    if faster and gate is not None and all(len(comparisons[k].round_optimized_ms) >= 2 for k in faster):
        best = faster[0]
        confidence = gate.confidence(len(faster))
        for k in faster[1:]:
            if groups is not None and groups[k] != groups[best]:
                if duel is not None and _faster_in_duel(duel(best, k), confidence, gate.futility):
                    best = k
                continue
            x = np.log(np.divide(comparisons[best].round_optimized_ms, comparisons[k].round_optimized_ms))
            if trimmed_interval(x, None, confidence).ci_low > 1:
                best = k
    else:
        best = max(faster or range(len(comparisons)), key=lambda k: comparisons[k].speedup)
    decision = decide(comparisons[best], allow_slower=allow_slower)
    if len(comparisons) > 1:
        others = ", ".join(f"{n} {c.speedup:.3f}x" for k, (n, c) in enumerate(zip(names, comparisons)) if k != best)
        decision = Decision(decision.ship, f"{names[best]}: {decision.reason}; other candidates: {others}")
    return best, decision


def _faster_in_duel(cmp: Comparison, confidence: float, margin: float) -> bool:
    """Whether the second program of a duel is faster than the first by more than ``margin`` with ``confidence``
    (over its paired rounds)."""
    x = np.log(np.divide(cmp.round_original_ms, cmp.round_optimized_ms))
    return len(x) >= 2 and trimmed_interval(x, None, confidence).ci_low > margin


__all__ = ["OTHER_ILP_SECONDS", "Extracted", "choose", "other_cost_name"]
