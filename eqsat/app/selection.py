"""The candidate programs of a run (``--candidates K``) and their order: which extractions are tried.

The final stage extracts up to K distinct programs (:func:`candidates_phase`, in order: the final extractor's optimum of
the grown e-graph, greedy-dag's, greedy-dag's favouring the runtime's kernels (:mod:`eqsat.cost.favoured`), the
ILP's under another cost model, the main extractor's programs of the cheapest
states the search stood in before its last one, greedy-tree's); each is verified
and timed end to end against the original in one interleaved run (:func:`eqsat.measurement.runtimes.compare_programs`).
:func:`eqsat.measurement.decision.choose` ships a candidate faster than the original with confidence under the
sequential gate (:mod:`eqsat.measurement.gate`: Bonferroni over the candidates and the looks), else the original: the
first such in this order, unless a later one is faster than it with confidence.

>>> other_cost_name("analytic"), other_cost_name("analytic-a100"), other_cost_name("cpu")
('analytic-a100', 'analytic', 'analytic')
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from eqsat import extract as extractors
from eqsat.cost import CostModel, make, node_costs
from eqsat.cost.favoured import KERNEL_OPS, KernelsFavoured
from eqsat.cost.measure import timing_until
from eqsat.extract import Extraction, ExtractOptions
from eqsat.mcts import PathState
from eqsat.snapshot import Snapshot

from .config import OptimizeConfig, ilp_seconds

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


def candidates_phase(snap: Snapshot, first: Extraction, config: OptimizeConfig, cost_model: CostModel,
                     elapsed: float, path: Sequence[PathState] = ()) -> list[Extracted]:
    """The candidate extractions, in this order: of the grown e-graph the final
    extractor's (``first``, named ``extracted``), then greedy-dag's, greedy-dag's favouring the runtime's kernels
    where the e-graph holds one (:class:`~eqsat.cost.favoured.KernelsFavoured`, named ``kernels``), the ILP's
    under the other cost model (cheap: at
    most OTHER_ILP_SECONDS, half the first's time and what ``--time-limit`` left); the programs of the states
    along the search path (``path``: ``SearchReport.states``, cheapest first, named ``step-N`` or
    ``iteration-N``); greedy-tree's of the grown e-graph. Only the first without measurement or with
    ``--candidates 1``; duplicates are removed later, by program (:func:`build_candidates`)."""
    out = [Extracted("extracted", f"{first.extractor} under {cost_model.name}", first, cost_model)]
    if config.candidates < 2 or not config.measure:
        return out
    with timing_until(cost_model, time.perf_counter() + max(0.0, config.search.time_limit - elapsed)):
        return out + _more_candidates(snap, first, config, cost_model, elapsed, path)


def _more_candidates(snap: Snapshot, first: Extraction, config: OptimizeConfig, cost_model: CostModel,
                     elapsed: float, path: Sequence[PathState]) -> list[Extracted]:
    """The candidates after the first (:func:`candidates_phase`)."""
    out: list[Extracted] = []
    costs = node_costs(snap, cost_model)
    if first.extractor != "greedy-dag":
        out.append(Extracted("greedy-dag", f"greedy-dag under {cost_model.name}",
                             extractors.extract("greedy-dag", snap, costs), cost_model))
    if any(e.op in KERNEL_OPS for e in snap.nodes):  # the program taking the runtime's kernels, measured too
        favoured = KernelsFavoured(cost_model)
        out.append(Extracted("kernels", f"greedy-dag under {favoured.name}",
                             extractors.extract("greedy-dag", snap, node_costs(snap, favoured)), favoured))
    other = make(other_cost_name(cost_model.name))
    other_costs = node_costs(snap, other)
    # what --time-limit left after the search and the first extraction (``elapsed`` is the search's time: the
    # extract phase is still running); a first ILP that used it all leaves this one SCIP's floor (its warm start)
    seconds = min(OTHER_ILP_SECONDS, ilp_seconds(config, elapsed + first.seconds), max(1.0, first.seconds / 2))
    warm = extractors.extract("greedy-dag", snap, other_costs)
    options = ExtractOptions(time_limit=seconds, warm_start=warm)
    out.append(Extracted(f"ilp-{other.name}", f"ilp under {other.name}",
                         extractors.extract("ilp", snap, other_costs, options), other))
    out += [Extracted(state.label.replace(" ", "-"), f"{state.extraction.extractor} at search {state.label} under "
                                                      f"{cost_model.name}", state.extraction, cost_model, state.snapshot)
            for state in path]
    out.append(Extracted("greedy-tree", f"greedy-tree under {cost_model.name}",
                         extractors.extract("greedy-tree", snap, costs), cost_model))
    return out


__all__ = ["OTHER_ILP_SECONDS", "Extracted", "candidates_phase", "other_cost_name"]
