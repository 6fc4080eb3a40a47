"""The pipeline and the search's env ask the extractor registry what an extractor takes, never its name: an
extractor registered here, under a name neither knows, gets a time limit only where it declares one
(``takes_time_limit``) and greedy-dag's program as a warm start only where it declares one (``takes_warm_start``).
The expected limits are computed here from the documented rules, the expected warm start by running greedy-dag."""

from __future__ import annotations

import pytest

from eqsat.app.config import search_seconds
from eqsat.app.pipeline import OptimizeConfig, extract_phase, optimize
from eqsat.cost import make, node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.extract import EXTRACTORS, ExtractOptions, ExtractorInfo, greedy_dag
from eqsat.mcts import MAIN_EXTRACTOR_SECONDS, Env, SearchConfig
from eqsat.models import build
from eqsat.snapshot import Snapshot

NAME = "recording"
CAPABILITIES = [(False, False), (True, False), (False, True), (True, True)]


def register(monkeypatch, takes_time_limit: bool, takes_warm_start: bool) -> list[ExtractOptions]:
    """Register an extractor called NAME that records the options it gets and returns greedy-dag's program."""
    seen: list[ExtractOptions] = []

    def recording(snap: Snapshot, costs, options: ExtractOptions):
        seen.append(options)
        return greedy_dag.extract(snap, costs)

    monkeypatch.setitem(EXTRACTORS, NAME, ExtractorInfo(NAME, recording, "none", takes_time_limit, takes_warm_start))
    return seen


@pytest.mark.parametrize(("takes_time_limit", "takes_warm_start"), CAPABILITIES)
@pytest.mark.parametrize("elapsed", [5.0, 15.0])
def test_the_final_extraction_gets_what_the_extractor_takes(monkeypatch, takes_time_limit, takes_warm_start, elapsed):
    seen = register(monkeypatch, takes_time_limit, takes_warm_start)
    config = OptimizeConfig.of(final_extractor=NAME, time_limit=20.0, ilp_time_limit=7.0, cost="analytic",
                               measure=False)
    egraph = EGraph.from_graph(build("squeezenet", small=True))
    cost = make("analytic")
    snap, ext = extract_phase(egraph, config, cost, elapsed)
    assert len(seen) == 1
    options = seen[0]
    # what --time-limit left after the search, at most --ilp-time-limit: 7 s after 5 s, 5 s after 15 s
    assert options.time_limit == (min(7.0, 20.0 - elapsed) if takes_time_limit else None)
    if takes_warm_start:
        assert options.warm_start is not None
        assert options.warm_start.choice == greedy_dag.extract(snap, node_costs(snap, cost)).choice
    else:
        assert options.warm_start is None
    assert ext.choice == greedy_dag.extract(snap, node_costs(snap, cost)).choice  # the registered one's program


@pytest.mark.parametrize("takes_time_limit", [False, True])
def test_the_search_leaves_time_only_to_an_extractor_that_takes_a_limit(monkeypatch, takes_time_limit):
    register(monkeypatch, takes_time_limit, False)
    config = OptimizeConfig.of(final_extractor=NAME, time_limit=20.0, ilp_time_limit=7.0)
    # the final extractor's share: min(--ilp-time-limit, a fifth of --time-limit) = 4 s
    assert search_seconds(config) == pytest.approx(16.0 if takes_time_limit else 20.0)


@pytest.mark.parametrize(("takes_time_limit", "takes_warm_start"), CAPABILITIES)
def test_optimize_runs_a_registered_final_extractor_by_its_capabilities(monkeypatch, takes_time_limit,
                                                                        takes_warm_start):
    seen = register(monkeypatch, takes_time_limit, takes_warm_start)
    result = optimize(build("squeezenet", small=True),
                      OptimizeConfig.of(scheduler="none", final_extractor=NAME, cost="analytic", measure=False,
                                        ilp_time_limit=3.0))
    assert len(seen) == 1 and result.report.extraction.extractor == "greedy-dag"
    limit = seen[0].time_limit
    if takes_time_limit:
        assert limit is not None and 0 < limit <= 3.0
    else:
        assert limit is None
    assert (seen[0].warm_start is not None) == takes_warm_start


@pytest.mark.parametrize("takes_time_limit", [False, True])
def test_the_search_prices_states_with_the_main_extractor_by_its_capabilities(monkeypatch, takes_time_limit):
    seen = register(monkeypatch, takes_time_limit, True)
    egraph = EGraph.from_graph(build("squeezenet", small=True))
    env = Env(egraph, [], make("analytic"), SearchConfig(main_extractor=NAME))
    snap = egraph.snapshot().restrict()
    assert env.cost() == pytest.approx(greedy_dag.extract(snap, node_costs(snap, make("analytic"))).dag_cost)
    assert len(seen) == 1
    assert seen[0].time_limit == (MAIN_EXTRACTOR_SECONDS if takes_time_limit else None)
    assert seen[0].warm_start is None  # the env has none to give: an extractor that takes one makes its own
