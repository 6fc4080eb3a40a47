"""The measurement in memory-bounded groups (eqsat.measurement.grouping), the pool's dropped pages and its stale folders:
a small ``memory_budget`` splits the measurement, bounds the live timed sessions, and still ships a faster
program (its outputs onnxruntime's on the original) or returns the original for an A/A."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.config import OptimizeConfig
from eqsat.errors import InputError
from eqsat.measurement import timing
from eqsat.measurement.decision import SPLIT_CANDIDATES, choose, measure
from eqsat.measurement.gate import Gate
from eqsat.measurement.grouping import MIB, auto_budget, plan, session_bytes
from eqsat.measurement.runtimes import Program
from eqsat.onnx import pool as weight_pool

N = 512
W = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32) / N**0.5


def _model(nodes: list[onnx.NodeProto], weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, N])],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def slow() -> onnx.ModelProto:
    """y = x @ W + x @ W, W read eight times over (a chain through a second copy: nothing onnxruntime folds)."""
    nodes, last = [], "x"
    for i in range(8):
        nodes += [helper.make_node("MatMul", [last, "w"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        last = f"t{i}"
    nodes += [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", [last, "p"], ["q"]),
              helper.make_node("Sub", ["q", last], ["y"])]
    return _model(nodes, {"w": W})


def fast() -> onnx.ModelProto:
    """What :func:`slow` computes (up to rounding), one MatMul."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": W})


def _outputs(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x})[0])


# -- the estimate and the plan ----------------------------------------------------------------------------------

def test_session_bytes_counts_the_weights_matmuls_prepack_once():
    assert session_bytes(fast()) == W.nbytes
    assert session_bytes(slow()) == W.nbytes  # nine MatMuls read one weight: one prepacked copy counted
    m = _model([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["h"]),
                helper.make_node("Add", ["h", "b"], ["y"])], {"w": W, "b": np.ones(N, np.float32)})
    assert session_bytes(m) == W.nbytes  # through the transpose; the bias is read as it is, not prepacked
    with weight_pool.pooled() as pool:  # a pooled model's references count as the weights they refer to
        assert session_bytes(pool.slim(fast())) == W.nbytes


def test_plan_partitions_the_candidates_in_order_into_groups_that_fit():
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = [int(s) for s in rng.integers(1, 100, rng.integers(2, 8))]
        budget = int(rng.integers(1, 500))
        p = plan(sizes, budget)
        assert [k for g in p.groups for k in g] == list(range(1, len(sizes)))  # every candidate once, in order
        assert p.grouped == (sum(sizes) > budget and len(sizes) > 2)
        for g in p.groups:  # each group fits beside the original, or holds one candidate only
            assert len(g) == 1 or sizes[0] + sum(sizes[k] for k in g) <= budget
        for a, b in zip(p.groups, p.groups[1:]):  # greedy: the next group's first would not have fitted
            assert sizes[0] + sum(sizes[k] for k in a) + sizes[b[0]] > budget
    assert auto_budget(10) == 512 * MIB and auto_budget(400 * MIB) == 800 * MIB


def test_memory_budget_is_checked_and_given_on_the_command_line():
    from eqsat.app.cli import build_parser, config_from_args

    with pytest.raises(InputError, match="--memory-budget"):
        OptimizeConfig.of(memory_budget=0).validate()
    OptimizeConfig.of(memory_budget=1).validate()
    args = build_parser().parse_args(["optimize-model", "m.onnx", "-o", "o.onnx", "--memory-budget", "64"])
    assert config_from_args(args).memory_budget == 64
    assert config_from_args(build_parser().parse_args(["optimize-model", "m.onnx", "-o", "o.onnx"])).memory_budget \
        is None


# -- the measurement in groups ----------------------------------------------------------------------------------

@pytest.fixture
def live_sessions(monkeypatch):
    """Track the timed sessions built: the most alive at once (``peak[0]``)."""
    live: weakref.WeakSet[ort.InferenceSession] = weakref.WeakSet()
    peak = [0]
    build = timing.timing_session

    def tracked(*args, **kwargs):
        s = build(*args, **kwargs)
        live.add(s)
        peak[0] = max(peak[0], len(live))
        return s
    monkeypatch.setattr(timing, "timing_session", tracked)
    return peak


CONFIG = OptimizeConfig.of(measure_budget=1.0, runtime="ort-cpu", memory_budget=1)


@pytest.mark.timing
def test_a_small_budget_times_in_groups_and_still_ships_the_faster_program(live_sessions):
    original, candidates = slow(), [Program(slow()), Program(fast()), Program(fast())]
    with weight_pool.pooled():
        measurement, measured = measure(original, candidates, CONFIG, names=["same", "fast", "fast-too"])
    # each session holds 1 MiB of prepacked weights: the original and one candidate at a time fit 1 MiB no better;
    # each group times the original again, so only the first SPLIT_CANDIDATES candidates are timed
    assert SPLIT_CANDIDATES == 2 and len(measured.comparisons) == 2
    assert measured.groups == [[0], [1]]
    assert live_sessions[0] <= 2  # one session of the original and one of the candidate alive at once
    assert all(c.runtime["groups"] == [[0], [1]] for c in measured.comparisons)
    assert measured.comparisons[1].faster
    assert measurement.decision == "ship" and measurement.candidate == "fast"
    x = np.random.default_rng(3).standard_normal((8, N)).astype(np.float32)
    np.testing.assert_allclose(_outputs(fast(), x), _outputs(original, x), rtol=1e-4, atol=1e-4)


@pytest.mark.timing
def test_a_small_budget_returns_the_original_for_an_a_a(live_sessions):
    """The gate ships an A/A in at most 1% of runs by design (grouped: the correction counts both groups'
    candidates), so one run may ship: of two seeded runs, both shipping happens at most 1e-4 of the time."""
    decisions = []
    for seed in (0, 1):
        with weight_pool.pooled():
            measurement, measured = measure(fast(), [Program(fast()), Program(fast())], CONFIG.updated(seed=seed))
        assert measured.groups == [[0], [1]] and live_sessions[0] <= 2
        decisions.append(measurement.decision)
    assert "original" in decisions, decisions


def test_without_a_small_budget_the_programs_share_one_run(live_sessions):
    config = replace(CONFIG, memory_budget=None)
    with weight_pool.pooled():
        _, measured = measure(slow(), [Program(fast()), Program(slow())], config)
    assert measured.groups == [[0, 1]] and "groups" not in measured.comparisons[0].runtime
    assert live_sessions[0] > 3  # several sessions per program, all alive in the one interleaved run


def test_the_budget_bounds_the_sessions_per_program():
    models = [fast(), fast()]
    assert timing.session_count(models, 10, build_s=0.001, budget_s=10) == 10
    assert timing.session_count(models, 10, build_s=0.001, budget_s=10, memory_bytes=6 * W.nbytes) == 3
    assert timing.session_count(models, 10, build_s=0.001, budget_s=10, memory_bytes=W.nbytes) == 1


# -- the selection across groups --------------------------------------------------------------------------------

def _rounds(rng: np.random.Generator, ratio: float, n: int = 60) -> timing.Comparison:
    a = np.exp(rng.normal(0, 0.01, n))
    b = a / ratio * np.exp(rng.normal(0, 0.01, n))
    return timing.Comparison(1.0, 1 / ratio, ratio, ratio * 0.98, ratio * 1.02, 0.99, n, 1, 0.1, {"name": "test"},
                             list(a), list(b))


def test_choose_across_groups_takes_a_later_candidate_only_if_it_wins_its_duel():
    rng = np.random.default_rng(0)
    a, b = _rounds(rng, 1.1), _rounds(rng, 1.3)
    asked: list[tuple[int, int]] = []

    def duel(ratio: float):
        def run(first: int, second: int) -> timing.Comparison:
            asked.append((first, second))
            return _rounds(rng, ratio)
        return run
    assert choose([a, b], ["a", "b"], False, Gate(), [0, 1], duel(1.2))[0] == 1  # b faster than a: b ships
    assert choose([a, b], ["a", "b"], False, Gate(), [0, 1], duel(1.0))[0] == 0  # b no faster than a: a stays
    assert choose([a, b], ["a", "b"], False, Gate(), [0, 1], duel(1.003))[0] == 0  # within a session's spread
    assert asked == [(0, 1), (0, 1), (0, 1)]
    assert choose([a, b], ["a", "b"], False, Gate(), [0, 0], duel(1.0))[0] == 1  # one group: their shared rounds
    assert len(asked) == 3  # no duel within a group


# -- the pool: dropped pages, stale folders ---------------------------------------------------------------------

def test_dropped_pages_read_back_the_same_weights():
    x = np.random.default_rng(5).standard_normal((8, N)).astype(np.float32)
    with weight_pool.pooled() as pool:
        slim = pool.slim(fast())
        sess = timing.timing_session(slim, threads=1)
        before = sess.run(None, {"x": x})[0]
        assert pool.drop_pages() == W.nbytes
        (entry,) = [e for es in pool.entries.values() for e in es]
        np.testing.assert_array_equal(entry.array, W)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], before)
        np.testing.assert_allclose(before, _outputs(fast(), x), rtol=1e-5, atol=1e-5)
        with pool.dropping(every_s=0.001):  # pages dropped while sessions are built: they compute the same
            built = [timing.timing_session(slim, threads=1) for _ in range(3)]
        for s in built:
            np.testing.assert_array_equal(s.run(None, {"x": x})[0], before)
        del sess, built
        gc.collect()


def test_stale_weight_folders_are_removed_only_for_dead_processes(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a PID no process has now
    stale = tmp_path / f"eqsat-weights-{gone.pid}-abcd1234"
    stale.mkdir()
    (stale / "eqsat-pool.bin").write_bytes(b"weights")
    live = tmp_path / f"eqsat-weights-{os.getppid()}-efgh5678"  # a running process's
    live.mkdir()
    other = tmp_path / "eqsat-weights-xyz"  # not named by the rule: kept
    other.mkdir()
    with weight_pool.pooled(str(tmp_path)) as pool:
        assert os.path.basename(pool.folder).startswith(f"eqsat-weights-{os.getpid()}-")
        assert not stale.exists() and live.is_dir() and other.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_renewed_sessions_never_fall_back_to_the_rounds_as_units():
    """One epoch (one session pair) says nothing of what differs between sessions: the interval is unbounded, not
    the narrow one over its rounds (which an A/A on one pair passes about half the time)."""
    from eqsat.measurement.gate import trimmed_interval

    x = np.random.default_rng(0).normal(0.005, 0.001, 12)  # one pair 0.5% apart, rounds that agree on it
    assert trimmed_interval(x, [0] * 12, 0.99, 2).ci_low > 1  # rounds as units: "faster"
    one = trimmed_interval(x, [0] * 12, 0.99, 2, clustered=True)
    assert one.ci_low == 0 and one.ci_high == float("inf")
    two = trimmed_interval(x, [0] * 6 + [1] * 6, 0.99, 2, clustered=True)
    assert 0 < two.ci_low and two.units == 2


@pytest.mark.timing
def test_programs_of_few_sessions_are_renewed_so_that_session_pairs_are_the_units():
    """A memory budget that holds two sessions of each program (fewer than the gate's 5 units): the sessions are
    renewed every few rounds, and the interval's units are the pairs of every epoch (finite, not the rounds')."""
    from eqsat.measurement.runtimes import OrtRuntime, compare_programs

    programs = [Program(slow()), Program(fast())]
    two_each = 2 * sum(session_bytes(p.model) for p in programs) + 1
    protocol = timing.Protocol(budget_s=1.0, gate=Gate(), memory_bytes=two_each, max_budget_s=1.0)
    measured = compare_programs(programs[0], programs[1:], OrtRuntime(), protocol)
    (cmp,) = measured.comparisons
    assert cmp.runtime["sessions_per_program"] == 2 and cmp.runtime["sessions_renewed"] is True
    assert 0 < cmp.ci_low <= cmp.speedup <= cmp.ci_high < float("inf")
    assert cmp.speedup > 1  # fast() runs one of the nine MatMuls slow() runs (the oracle: the models themselves)
