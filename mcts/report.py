"""What a search reports: its real steps, why it stopped, the states along its path, and the whole report."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from eqsat.extract import Extraction
from eqsat.snapshot import Snapshot


@dataclass
class Step:
    """One real step: a rule applied to the e-graph the final extraction sees."""

    rule: str
    reward_us: float
    """the main extractor's cost decrease of this step (never negative), microseconds"""
    cost_us: float | None
    """the main extractor's cost after this step, microseconds; None where the step was not priced (TENSAT prices
    each iteration once, after its last step)"""
    enodes: int
    seconds: float
    simulations: int = 0


class StopReason(StrEnum):
    """Why a search ended; reports carry the value (a plain string)."""

    SATURATED = "saturated"
    """no action changes the e-graph any more"""
    NODE_LIMIT = "node_limit"
    """the e-graph reached the node limit, or the limit refused every rule that still changes it"""
    TIME_LIMIT = "time_limit"
    STEP_LIMIT = "step_limit"
    """``max_iterations`` real steps (TENSAT: iterations) were taken"""
    BUDGET = "budget"
    """MCTS had no simulation budget (budget 0), so it could not plan a step"""
    NO_GAIN = "no_gain"
    """MCTS: no simulation found a cost decrease in ``no_gain_steps`` consecutive real decisions that spent their
    budget, or in ``no_gain_short`` that their share of the time cut short"""
    NO_SEARCH = "no_search"
    """no scheduler ran (``--scheduler none``)"""


@dataclass
class PathState:
    """A state the search stood in after a real step (MCTS: a step; TENSAT: an iteration), with the main
    extractor's program of it: a candidate for measured selection (a program with fewer rewrites than the final
    one, which the runtime may run faster than the estimate says)."""

    label: str
    """where on the path: ``step 3`` (MCTS, random) or ``iteration 2`` (TENSAT)"""
    cost_us: float
    snapshot: Snapshot
    extraction: Extraction


@dataclass
class SearchReport:
    """What a scheduler did; costs are the main extractor's estimates in microseconds."""

    stop_reason: StopReason
    steps: list[Step] = field(default_factory=list)
    initial_cost_us: float = 0.0
    best_cost_us: float = 0.0
    seconds: float = 0.0
    simulations: int = 0
    extractions: int = 0
    """main-extractor runs that priced states"""
    extraction_seconds: float = 0.0
    prelude_steps: int = 0
    """of ``steps``, those of MCTS's prelude (the first ones: our rules saturated before the tree search)"""
    finish_steps: int = 0
    """of ``steps``, those of MCTS's finishing phase (the last ones)"""
    states: list[PathState] = field(default_factory=list, repr=False)
    """the cheapest states along the path before the final one, cheapest first (kept only when asked:
    ``run_scheduler(keep_states=)``); not part of the JSON report"""

    @property
    def simulations_per_second(self) -> float:
        """MCTS simulations per second of search (0 for the other schedulers)."""
        return self.simulations / self.seconds if self.seconds > 0 else 0.0

    def rules_applied(self) -> dict[str, int]:
        """How many real steps applied each rule."""
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.rule] = counts.get(s.rule, 0) + 1
        return counts
