"""The ship decision's parts that read no timing (:mod:`eqsat.measurement.decision`): which candidates are timed, and
what a model of measured branches returns. Each expected answer is written out by hand from the rule's statement."""

from __future__ import annotations

import itertools

from eqsat.app.config import OptimizeConfig
from eqsat.measurement.decision import Measurement, returned, timed


def test_the_verified_candidates_other_than_the_original_are_timed_and_none_else():
    for verified, same, allow in itertools.product(itertools.product((False, True), repeat=3),
                                                   itertools.product((False, True), repeat=3), (False, True)):
        got = timed(verified, same, allow)
        want = [k for k in range(3) if verified[k] and not same[k]]
        if not want and allow and verified[0]:
            want = [0]  # --allow-slower: the first, where verified, though it is the original's program
        assert got == want, (verified, same, allow)
    assert timed([], [], True) == []


def _measured(low: float, high: float, decision: str = "original") -> Measurement:
    return Measurement(4.0, 3.8, 1.05, low, high, 0.995, 600, 1, 10.0, {}, decision, "not faster with confidence",
                       "imported")


def test_measured_branches_ship_unless_the_whole_model_is_slower_with_confidence():
    config = OptimizeConfig.of(cost="analytic")
    unresolved = _measured(0.97, 1.12)
    assert returned(False, unresolved, config).program == "original"
    kept = returned(False, unresolved, config, branches=True)
    assert kept.program == "optimized" and kept.candidate == "imported"
    assert returned(False, _measured(0.90, 0.98), config, branches=True).program == "original"
    assert returned(True, None, config, branches=True).program == "original"  # nothing found: nothing vouched for
