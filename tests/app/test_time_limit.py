"""``--time-limit`` end to end: it bounds the import, the search and the extraction of a whole run, the
operators outside repeated blocks included, and a short limit still returns the prelude's program (our rules
saturated first). Tolerances are generous: a loaded CI machine runs these."""

from __future__ import annotations

import time

import onnx_builders as ob
import pytest
from ort_check import outputs_match

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.models.encoder import encoder
from eqsat.onnx import export_model

pytestmark = pytest.mark.timing

SLACK = 6.0
"""seconds a loaded machine may add past a limit (the step or simulation under way ends first)"""


def test_the_time_limit_bounds_search_and_extraction_of_a_run_with_repeated_blocks():
    model = export_model(encoder(layers=4, seq=16, hidden=32))
    limit = 6.0
    start = time.perf_counter()
    result = optimize(model, OptimizeConfig.of(time_limit=limit, measure_budget=2.0, seed=0))
    wall = time.perf_counter() - start
    r = result.report
    assert r.blocks is not None and r.blocks["found"] is not None  # the rest and one copy searched
    bounded = sum(r.times.get(p, 0.0) for p in ("import", "rest", "search", "extract"))
    assert bounded <= limit + SLACK, r.times
    # the rest is import, export, verification and a measurement of at most its budget plus minimum rounds
    assert wall <= limit + 2.0 + 30.0, r.times
    assert r.search.prelude_steps > 0
    assert outputs_match(model, result.optimized)


def test_a_short_time_limit_returns_the_programme_of_the_whole_prelude():
    """The prelude may take the whole time limit: at a limit four times what it took, it is not cut short (it
    was, when it had a quarter of the limit), so the program is at least as cheap as the prelude's."""
    model = ob.attention()
    options = dict(cost="analytic", budget=8, depth=3, measure=False, final_extractor="greedy-dag", seed=0)
    full = optimize(model, OptimizeConfig.of(**options)).report
    k = full.search.prelude_steps
    assert k > 0
    took = sum(st.seconds for st in full.search.steps[:k])
    short = optimize(model, OptimizeConfig.of(**options, time_limit=max(0.5, 4 * took))).report
    assert [(st.rule, st.enodes) for st in short.search.steps[:short.search.prelude_steps]] == \
        [(st.rule, st.enodes) for st in full.search.steps[:k]]
    assert short.optimized_cost <= full.search.steps[k - 1].cost_us + 1e-9
    assert short.optimized_cost < short.original_cost


def test_the_import_counts_against_the_time_limit_up_to_half_of_it():
    """The search's own limit (the report's ``config.search.time_limit``; greedy-dag's extraction takes no time of
    its own) is what the limit leaves after the import the phase timer clocked, at least half of the limit."""
    model = export_model(encoder(layers=2, seq=16, hidden=32))
    options = dict(cost="analytic", budget=2, depth=1, measure=False, blocks=False, final_extractor="greedy-dag",
                   seed=0)
    for limit in (30.0, 0.02):  # an import of a few hundredths of a second: the second limit's half is left
        r = optimize(model, OptimizeConfig.of(time_limit=limit, **options)).report
        took = r.times["import"]
        assert took > 0.0
        searched = r.to_json()["config"]["search"]["time_limit"]
        assert searched == pytest.approx(max(limit / 2, limit - took), rel=1e-9), (limit, took, searched)
