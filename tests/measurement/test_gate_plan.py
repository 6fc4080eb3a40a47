"""The gate's rounds sized to the variance seen (eqsat.measurement.gate.Sequential), on synthetic paired rounds from a seeded
RNG whose true ratio and noise are known (the oracle), no timing: the pilot's spread estimates the noise and is
blind to the ratio, the planner asks for more rounds as the noise grows and never more than the cap, an A/A
comparison ships no more often than the design allows (a binomial bound over many draws), a program truly 2%
faster ships in at least 90% of draws with the planned rounds; and the timing protocol follows the plan
(a synthetic block clock: the rounds cost no time), and the pipeline extends it only into the time the search
left."""

from __future__ import annotations

import math

import numpy as np
import onnx_builders as ob
import pytest
from timing_cases import SESSIONS, VirtualTime, paired_rounds

from eqsat.app.config import OptimizeConfig
from eqsat.measurement import decision, runtimes
from eqsat.measurement.gate import (
    Gate,
    Sequential,
    assess,
    look_schedule,
    replay,
    replay_plan,
    rounds_for_power,
    settled,
    spread,
    spread_bound,
)
from eqsat.measurement.timing import EPOCH_LABELS, EXTENSION, Protocol, compare_many

BASE = 100
"""the rounds a budget plans before any data (the pilot is its first look)"""
CAP = 600
"""the rounds the extended budget affords"""


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed exactly."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def plan_of(noise: float, ratio: float = 1.0, seed: int = 0) -> Sequential:
    a, b, pairs = paired_rounds(np.random.default_rng(seed), ratio, CAP, noise=noise)
    _, _, seq = replay_plan(a, [b], Gate(), [pairs], base=BASE)
    return seq


def test_spread_estimates_the_noise_and_ignores_the_ratio():
    """Normal rounds of known standard deviation: the spread finds it; shifting every round (any true speedup)
    leaves it unchanged; rare spikes count for what they cost the trimmed mean, far less than in the raw
    standard deviation."""
    rng = np.random.default_rng(0)
    for sigma in (0.01, 0.05, 0.2):
        x = rng.normal(0.0, sigma, 4000)
        assert spread(x) == pytest.approx(sigma, rel=0.08)
        assert spread(x + math.log(1.02)) == pytest.approx(spread(x), rel=1e-9)
    x = rng.normal(0.0, 0.03, 4000)
    x[rng.random(4000) < 0.03] += 1.0  # a load spike hits one side of 3% of the rounds
    assert spread(x) < 0.5 * float(np.std(x)) and spread(x) < 0.06
    assert spread_bound(0.05, 30) > spread_bound(0.05, 300) > 0.05


def test_the_planner_asks_for_more_rounds_as_the_spread_grows_never_past_the_cap():
    """Same seed, noisier rounds: a plan of at least as many rounds each time, from the budget's (a quiet machine
    needs no extension) to the cap (a loaded one), with the looks fixed after the pilot."""
    plans = [plan_of(noise) for noise in (0.005, 0.01, 0.02, 0.03, 0.05, 0.2)]
    planned = [s.planned for s in plans]
    assert planned == sorted(planned) and planned[0] == BASE and planned[-1] == CAP
    assert all(BASE <= n <= CAP for n in planned) and BASE < planned[3] < CAP
    spreads = [s.spread for s in plans]
    assert spreads == sorted(spreads)
    for s in plans:
        assert s.looks[0] == BASE // Gate().looks and len(s.looks) <= Gate().looks
        assert s.looks == sorted(s.looks) and s.looks[-1] == s.planned
    assert plans[-1].wanted is not None and plans[-1].wanted > CAP  # what the spread asked for, before the cap


def test_the_plan_is_blind_to_the_true_ratio():
    """The same noise draws with the candidate 0%, 2% and 10% faster: the pilot's spread and the plan are the
    same (the ratio scales one side of every round; the plan reads only the rounds' deviations)."""
    plans = [plan_of(0.03, ratio, seed=3) for ratio in (1.0, 1.02)]
    assert plans[0].spread == pytest.approx(plans[1].spread, rel=1e-9)
    assert plans[0].looks == plans[1].looks


def test_an_aa_comparison_with_planned_rounds_ships_at_most_at_the_designed_rate():
    """1,000 seeded A/A comparisons whose rounds are planned from the pilot (noise from quiet to loaded): the
    ships are not more than Binomial(1000, alpha) makes likely (tail probability above 0.1%)."""
    gate, draws, ships = Gate(), 1000, 0
    for seed in range(draws):
        noise = (0.01, 0.03, 0.06)[seed % 3]
        a, b, pairs = paired_rounds(np.random.default_rng(seed), 1.0, CAP, noise=noise)
        _, [(_, state)] = replay(a, [b], gate, [pairs], base=BASE)
        ships += state == "faster"
    assert binomial_tail(ships, draws, gate.alpha) > 1e-3, f"{ships} A/A ships in {draws}"


@pytest.mark.parametrize("noise", [0.02, 0.035])
def test_a_program_two_percent_faster_ships_with_the_planned_rounds(noise):
    """On rounds noisy enough that the budget's rounds fall short (a loaded machine), the plan from the pilot's
    spread ships a true 2% gain in at least 90% of 300 seeded draws; the budget's rounds alone ship it less
    often. The oracle is the known ratio of the series."""
    gate, draws = Gate(), 300
    planned, unplanned, rounds = 0, 0, []
    for seed in range(draws):
        a, b, pairs = paired_rounds(np.random.default_rng(seed), gate.gain, CAP, noise=noise)
        used, [(_, state)], seq = replay_plan(a, [b], gate, [pairs], base=BASE)
        planned += state == "faster"
        rounds.append(seq.planned)
        _, [(_, fixed)] = replay(a[:BASE], [b[:BASE]], gate, [pairs[:BASE]])
        unplanned += fixed == "faster"
    assert planned / draws >= gate.power
    assert unplanned < planned and np.median(rounds) > BASE
    assert max(rounds) <= rounds_for_power(0.2, gate.gain, gate.power, gate, units=SESSIONS)  # bounded by the cap


def synthetic_clock(monkeypatch, ratio: float, noise: float, seed: int):
    """A block clock for callables that do nothing: program 0 (the original) takes ``ratio`` ms a call and
    program 1 takes 1 ms, each block's median lognormally noisy; the protocol's seconds are the clock's
    (:class:`VirtualTime`), not the host's."""
    rng = np.random.default_rng(seed)

    def clock(call, repeats: int) -> float:
        return float(call() * math.exp(rng.normal(0.0, noise)))

    return VirtualTime().install(monkeypatch, clock), [lambda: ratio, lambda: 1.0]


def test_compare_many_follows_the_plan_up_to_the_extended_budget(monkeypatch):
    """A noisy 5% gain timed on a synthetic clock, four seeds: every comparison still open at the pilot extends
    its plan past the budget's rounds (at most EXTENSION times them) and ships; with max_budget_s = budget_s the
    plan stays the budget's."""
    gate, extended = Gate(), 0
    for seed in range(4):
        clock, programs = synthetic_clock(monkeypatch, 1.05, 0.25, seed)
        [fixed] = compare_many(programs, Protocol(budget_s=2.0, max_budget_s=2.0, gate=gate, seed=seed), clock=clock)
        clock, programs = synthetic_clock(monkeypatch, 1.05, 0.25, seed)
        [c] = compare_many(programs, Protocol(budget_s=2.0, gate=gate, seed=seed), clock=clock)
        base = fixed.planned
        assert fixed.rounds <= base and fixed.looks <= gate.looks
        assert c.rounds <= c.planned <= EXTENSION * (base + 1) and c.looks <= gate.looks
        if c.looks > 1:  # open at the pilot
            extended += 1
            assert c.planned > base and c.ci_low > 1
    assert extended >= 2


def test_max_budget_below_the_budget_is_refused():
    with pytest.raises(ValueError, match="max_budget_s"):
        Protocol(budget_s=10.0, max_budget_s=5.0)
    assert Protocol(budget_s=4.0).extended_budget_s == EXTENSION * 4.0
    with pytest.raises(ValueError, match="power"):
        Gate(power=0.3)


class Captured(Exception):
    """Raised by a stand-in for the timing: the protocol the pipeline asked for, nothing timed."""


def test_the_pipeline_extends_the_measurement_only_into_what_the_search_left(monkeypatch):
    """The measurement's protocol (decision.measure): the budget is --measure-budget; its extension is what the search and extraction
    left of --time-limit (none when they used it all), at most EXTENSION x the budget in all."""
    seen: list[Protocol] = []

    def capture(original, candidates, runtime, protocol, **kw):
        seen.append(protocol)
        raise Captured

    monkeypatch.setattr(decision.runtimes, "compare_programs", capture)
    model, config = ob.mlp(), OptimizeConfig.of(measure_budget=4.0)
    for spare in (0.0, 2.0, 100.0, -5.0):
        with pytest.raises(Captured):
            decision.measure(model, model, config, runtime=runtimes.make("ort-cpu"), spare_s=spare)
    assert [p.extended_budget_s for p in seen] == [4.0, 6.0, EXTENSION * 4.0, 4.0]
    assert all(p.budget_s == 4.0 and p.gate is not None for p in seen)
    # a slow program's floor of rounds, whatever is spare (compare_many applies it once a call is timed)
    assert all(p.floor_rounds == decision.GATE_FLOOR_ROUNDS and p.floor_max_s == EXTENSION * 4.0 for p in seen)


def test_a_slow_programs_gate_may_always_reach_its_floor_of_rounds():
    """Two programs of 250 ms a call on a synthetic clock (an A/A, noisy: open at every look, the pilot asks for
    far more rounds than any cap): without spare time the budget's 10 s plan 20 rounds; with a floor of 40 rounds
    up to 30 s the gate plans 40 (20 s), up to 15 s 30; a 1 ms program's floor is within its budget and changes
    nothing."""
    def planned(ms: float, programs: int = 2, **floor) -> int:
        rng = np.random.default_rng(0)

        def clock(call, repeats):  # no noise in the warm-up's calls (5 passes): the per-call estimate is exact
            clock.calls += 1
            return float(call() * (1.0 if clock.calls <= 5 * programs else math.exp(rng.normal(0.0, 0.1))))
        clock.calls = 0
        cs = compare_many([lambda: ms] * programs, Protocol(budget_s=10.0, max_budget_s=10.0, gate=Gate(), **floor),
                          clock=clock)
        assert all(c.rounds == c.planned == cs[0].planned for c in cs)  # every planned round ran
        assert cs[0].looks == Gate().looks  # open throughout
        return cs[0].planned

    assert planned(250.0) == 20
    assert planned(250.0, floor_rounds=40, floor_max_s=30.0) == 40
    assert planned(250.0, floor_rounds=40, floor_max_s=15.0) == 30
    assert planned(250.0, floor_rounds=10, floor_max_s=30.0) == 20  # the budget affords more than the floor
    assert planned(1.0, floor_rounds=40, floor_max_s=30.0) == planned(1.0)
    assert planned(100.0, programs=3, floor_rounds=40, floor_max_s=30.0) == 40  # 30 / 0.3 s: rounds, not 39.99
    with pytest.raises(ValueError, match="floor_rounds"):
        Protocol(floor_rounds=-1)



def test_renewed_rounds_share_a_label_exactly_when_they_ran_on_the_same_pair_of_sessions(monkeypatch):
    """Programs renewed with a different number of sessions each epoch (3, then 4, 2, 3, 4): the gate's clusters
    are the session pairs the rounds actually ran on (the oracle: the clock's record of which instance each timed
    call was), so that two rounds share a label exactly when they ran on the same pair; and there are at most
    EPOCHS epochs (EPOCHS - 1 renewals) however far the rounds extend."""
    from eqsat.measurement import gate as gate_mod
    from eqsat.measurement.timing import EPOCHS

    class Call:
        made = 0

        def __init__(self, program: int):
            Call.made += 1
            self.program, self.uid, self.calls = program, Call.made, 0

        def __call__(self) -> float:
            self.calls += 1
            return 1.05 if self.program == 0 else 1.0

    renewals = iter([4, 2, 3, 4, 2, 3, 4, 2, 3])
    renewed = []
    first = [[Call(0) for _ in range(3)], [Call(1) for _ in range(3)]]
    created_by_renew: set[int] = set()
    ran: list[tuple[int, int]] = []  # (program, instance) of every call the rounds timed
    warm = 2 * 6  # the warm-up's calls: 2 passes over the 6 first instances
    rng = np.random.default_rng(0)

    def clock(call: Call, repeats: int) -> float:
        renewal_warm = call.uid in created_by_renew and call.calls == 0  # _renew's untimed first call
        value = call() * math.exp(rng.normal(0.0, 0.4))
        if not renewal_warm:
            ran.append((call.program, call.uid))
        return value

    asked: list[int | None] = []

    def renew(sessions):
        asked.append(sessions)
        n = next(renewals)
        renewed.append(n)
        out = [[Call(0) for _ in range(n)], [Call(1) for _ in range(n)]]
        created_by_renew.update(c.uid for side in out for c in side)
        return out

    seen: dict[str, list[int]] = {}
    look = gate_mod.Sequential.look

    def spy(self, original_ms, candidates_ms, clusters, cap=None):
        seen["clusters"] = list(clusters[0])
        return look(self, original_ms, candidates_ms, clusters, cap=cap)
    monkeypatch.setattr(gate_mod.Sequential, "look", spy)
    timed = VirtualTime().install(monkeypatch, clock)  # the rounds' seconds are the clock's, not the host's
    [c] = compare_many(first, Protocol(budget_s=2.0, gate=Gate(), seed=0, warmup=2), clock=timed, renew=renew)
    labels, ran = seen["clusters"], ran[warm:]
    assert len(labels) == c.rounds and len(ran) == 2 * c.rounds
    pairs = [tuple(sorted(ran[2 * r:2 * r + 2])) for r in range(c.rounds)]  # (original's instance, candidate's)
    for r in range(c.rounds):
        for q in range(r):
            assert (labels[r] == labels[q]) == (pairs[r] == pairs[q]), (r, q)
    assert renewed == [4, 2, 3, 4][:EPOCHS - 1] and len(set(pairs)) == 3 + 4 + 2 + 3 + 4  # every epoch's pairs
    # each epoch before the last asked for no more sessions than its rounds use; the last (extended) for all
    epoch_rounds = [sum(1 for x in labels if x // EPOCH_LABELS == e) for e in range(EPOCHS)]
    assert asked[-1] is None and len(asked) == EPOCHS - 1
    assert all(n == epoch_rounds[e + 1] for e, n in enumerate(asked[:-1])) and epoch_rounds[-1] >= epoch_rounds[0]


def _beside(rng: np.random.Generator, a: np.ndarray, ratios: tuple[float, ...], noise: float) -> list[np.ndarray]:
    """Candidates timed in the rounds of the original ``a``, each truly ``ratio`` faster, with noise of their own."""
    return [a / r * np.exp(rng.normal(0, noise, a.size)) for r in ratios]


def test_the_rounds_stop_once_each_open_candidate_lies_below_a_faster_one():
    """A decode step's candidates: one of the original's own speed (open until its interval lies below the futility
    bound: the whole extended budget) beside two 1.2x faster ones. The rounds stop at the first look where the
    faster ones are resolved, and what is faster there is what all the rounds show (the oracle: the verdicts over
    every round the cap affords): the equal one is not faster there, nor ahead of them."""
    rng = np.random.default_rng(3)
    a, _, pairs = paired_rounds(rng, 1.0, CAP, noise=0.05)
    cands = _beside(rng, a, (1.0, 1.2, 1.18), 0.05)
    used, verdicts = replay(a, cands, Gate(), [pairs] * 3, base=BASE)
    assert used == look_schedule(BASE, Gate())[0]
    assert [s for _, s in verdicts] == ["open", "faster", "faster"]
    whole = assess(a, cands, [pairs] * 3, Gate())
    assert [s for _, s in whole][1:] == ["faster", "faster"] and whole[0][1] != "faster"
    assert whole[0][0].ci_high < min(iv.ci_low for iv, _ in whole[1:])


def test_an_open_candidate_that_may_still_be_the_faster_keeps_the_rounds_going():
    """Two candidates 1.03x and 1.02x faster on noisy rounds: where the second's interval reaches past the first's
    lower bound, either may yet ship, and the rounds run on past the pilot while one is open."""
    rng = np.random.default_rng(5)
    a, _, pairs = paired_rounds(rng, 1.0, CAP, noise=0.05)
    cands = _beside(rng, a, (1.03, 1.02), 0.05)
    pilot = look_schedule(BASE, Gate())[0]
    first = assess(a[:pilot], [c[:pilot] for c in cands], [pairs[:pilot]] * 2, Gate())
    assert "open" in [s for _, s in first] and not settled(first)
    used, _ = replay(a, cands, Gate(), [pairs] * 2, base=BASE)
    assert used > pilot
