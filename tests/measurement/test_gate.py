"""The shipping gate's statistics (eqsat.measurement.gate) on synthetic paired rounds, no timing: an A/A series ships at most
at the designed rate over many seeded draws, a program truly 2% faster ships, the sequential rule stops; the
t quantiles against published tables; the timing protocol runs the gate on callables of known latency."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from timing_cases import SESSIONS, busy, paired_rounds

from eqsat.measurement.gate import Gate, look_schedule, replay, rounds_for_power, t_cdf, t_quantile, trimmed_interval
from eqsat.measurement.timing import Protocol, compare_many, decide


def ship_rate(ratio: float, n: int, draws: int, gate: Gate | None = None, **kw: float) -> tuple[float, float]:
    """(how often the gate ships, the mean rounds it used) over ``draws`` seeded synthetic comparisons."""
    ships, used = 0, []
    for seed in range(draws):
        a, b, pairs = paired_rounds(np.random.default_rng(seed), ratio, n, **kw)
        stop, [(_, state)] = replay(a, [b], gate or Gate(), [pairs])
        ships += state == "faster"
        used.append(stop)
    return ships / draws, float(np.mean(used))


@pytest.mark.parametrize("p, df, table", [(0.975, 9, 2.262), (0.995, 9, 3.250), (0.999, 19, 3.579),
                                          (0.9995, 4, 8.610), (0.95, 1, 6.314), (0.99, 100, 2.364)])
def test_t_quantiles_match_the_published_table(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=1e-3)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=1e-3)


def test_t_quantile_tends_to_the_normal_one():
    assert t_quantile(0.999, 1e6) == pytest.approx(NormalDist().inv_cdf(0.999), abs=1e-3)


def test_an_aa_series_ships_at_most_at_the_designed_rate():
    """1,000 seeded A/A comparisons of 200 rounds: the gate (alpha 1% over 4 looks) ships at most 1% of them,
    however the session offsets and spikes fall; the 95% bootstrap of the old gate shipped about 2.5%."""
    rate, _ = ship_rate(1.0, 200, 1000)
    assert rate <= Gate().alpha
    stricter, _ = ship_rate(1.0, 200, 1000, Gate(alpha=0.002))
    assert stricter <= rate


def test_a_program_two_percent_faster_ships_at_the_designed_power():
    """On rounds 3% noisy on each side, with session offsets and spikes, 300 rounds ship a true 2% gain in >= 90%
    of draws, and mostly before the last look; rounds_for_power (10 session pairs) asks for no more than that."""
    gate = Gate()
    assert 100 <= rounds_for_power(0.03 * math.sqrt(2), 1.02, 0.9, gate, units=SESSIONS) <= 300
    assert rounds_for_power(0.03 * math.sqrt(2), 1.02, 0.9, gate) < rounds_for_power(0.03 * math.sqrt(2), 1.01, 0.9, gate)
    rate, used = ship_rate(1.02, 300, 400, gate)
    assert rate >= 0.9 and used < 250


def test_a_slower_program_never_ships_and_stops_early():
    rate, used = ship_rate(1 / 1.02, 200, 200)
    assert rate == 0 and used <= 100


def test_the_sequential_rule_stops_at_the_first_resolved_look_and_runs_on_while_open():
    a, b, pairs = paired_rounds(np.random.default_rng(0), 1.3, 200)
    stop, [(iv, state)] = replay(a, [b], Gate(), [pairs])
    assert (stop, state) == (look_schedule(200, Gate())[0], "faster") and iv.ci_low > 1.2
    a, b, pairs = paired_rounds(np.random.default_rng(1), 1.0, 200, noise=0.2)  # very noisy A/A: open to the end
    stop, [(iv, state)] = replay(a, [b], Gate(), [pairs])
    assert (stop, state) == (200, "open") and iv.ci_low < 1 < iv.ci_high
    # with several candidates the run goes on until each one is resolved
    c = b * 1.3
    stop, verdicts = replay(a, [a / 1.3, c], Gate(), [pairs, pairs])
    assert stop == look_schedule(200, Gate())[0] and [s for _, s in verdicts] == ["faster", "not faster"]


def test_look_schedule_is_fixed_by_the_plan_and_never_exceeds_the_looks():
    assert look_schedule(100, Gate(looks=4)) == [25, 50, 75, 100]
    assert look_schedule(3, Gate(looks=4)) == [2, 3]
    assert look_schedule(10, Gate(looks=1)) == [10]


def test_the_interval_widens_for_session_pairs_that_differ():
    """Rounds of 10 session pairs, each pair offset by 3%: the cluster-robust interval is wider than the rounds'
    and covers the truth (1.0) more often than the rounds' interval does."""
    covered = {"pairs": 0, "rounds": 0}
    for seed in range(300):
        a, b, pairs = paired_rounds(np.random.default_rng(seed), 1.0, 60, noise=0.01, session=0.03, spikes=0)
        x = np.log(a / b)
        by_pair = trimmed_interval(x, pairs, 0.95)
        by_round = trimmed_interval(x, None, 0.95)
        assert by_pair.units == SESSIONS and by_round.units == 60
        covered["pairs"] += by_pair.ci_low <= 1 <= by_pair.ci_high
        covered["rounds"] += by_round.ci_low <= 1 <= by_round.ci_high
    assert covered["pairs"] / 300 >= 0.9 and covered["rounds"] / 300 < 0.8


def test_trimming_resists_a_spike():
    x = np.full(40, 0.01) + np.random.default_rng(0).normal(0, 0.002, 40)
    x[3] = 2.0  # one round where the candidate's block was hit by the load
    iv = trimmed_interval(x, None, 0.95)
    assert iv.speedup == pytest.approx(math.exp(0.01), rel=2e-3) and iv.ci_low > 1


def test_gate_rejects_nonsense():
    with pytest.raises(ValueError, match="alpha"):
        Gate(alpha=0.7)
    with pytest.raises(ValueError, match="looks"):
        Gate(looks=0)
    with pytest.raises(ValueError, match="at least 2"):
        trimmed_interval([0.1], None, 0.95)


@pytest.mark.timing
def test_compare_many_with_a_gate_stops_once_a_clear_winner_is_resolved():
    """Callables of known latency (1 ms against 0.5 ms and 2 ms): the gated protocol resolves both at the
    first look, well inside the budget, and reports the gate's confidence and its looks."""
    protocol = Protocol(budget_s=3.0, min_rounds=6, gate=Gate())
    faster, slower = compare_many([busy(1.0), busy(0.5), busy(2.0)], protocol)
    assert faster.looks == slower.looks == 1 and faster.seconds < 3.0
    assert faster.ci_low > 1.5 and decide(faster).ship
    assert slower.speedup < 0.7 and slower.ci_high < 1 and not decide(slower).ship
    assert faster.confidence == pytest.approx(Gate().confidence(2))
