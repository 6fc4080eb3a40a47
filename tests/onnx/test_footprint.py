"""The memory of a run estimated before it is made, and the runs left out that would not fit
(:mod:`eqsat.onnx.footprint`). Oracles: onnxruntime's run of every value of the model (their sizes, freed after
their last reader, summed at each step by brute force), the process's resident memory while a session runs, and
onnxruntime's runs of the original and a candidate at the sizes a check names."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.memory import Reading
from eqsat.onnx import footprint
from eqsat.onnx.axes.fitting import run_values
from eqsat.onnx.axes.interface import probe_shapes, zero_feeds
from eqsat.onnx.io import session
from eqsat.verification import ShapesVerifier

VALUES = {"batch": 1, "seq": 64}


def wide(width: int = 64, fixed_batch: int | None = None) -> onnx.ModelProto:
    """y = ReduceSum(Softmax(x @ W) tiled 8 times, concatenated with x @ W), of x [batch, seq, 32] transposed
    twice: values of several sizes, freed at different steps; ``fixed_batch``: the candidate's mistake, a Reshape
    to that batch."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((32, width)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 1, 8], np.int64), "reps"),
             numpy_helper.from_array(np.array([2], np.int64), "axes")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),  # twice: a program eqsat rewrites
             helper.make_node("Transpose", ["xt"], ["xx"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["xx", "w"], ["h"]),
             helper.make_node("Softmax", ["h"], ["p"], axis=-1),
             helper.make_node("Tile", ["p", "reps"], ["t"]),
             helper.make_node("Concat", ["t", "h"], ["c"], axis=-1),
             helper.make_node("ReduceSum", ["c", "axes"], ["y"], keepdims=0)]
    if fixed_batch is not None:
        inits.append(numpy_helper.from_array(np.array([fixed_batch, -1], np.int64), "target"))
        nodes[-1].output[0] = "y0"
        nodes.append(helper.make_node("Reshape", ["y0", "target"], ["y"]))
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def brute_force_peak(model: onnx.ModelProto, shape: tuple[int, ...]) -> int:
    """Every value of ``model`` run in onnxruntime at ``shape``: at each step, the bytes of the input, the outputs
    and each value made at or before the step and read at or after it, summed; the largest such sum."""
    every = onnx.ModelProto()
    every.CopyFrom(model)
    outs = [o for n in model.graph.node for o in n.output]
    del every.graph.output[:]
    every.graph.output.extend(onnx.ValueInfoProto(name=o) for o in outs)
    got = dict(zip(outs, session(every).run(outs, {"x": np.zeros(shape, np.float32)})))
    nodes = list(model.graph.node)
    kept = {o.name for o in model.graph.output}
    made = {o: k for k, n in enumerate(nodes) for o in n.output}
    peak = 0
    for k in range(len(nodes)):
        alive = [o for o, at in made.items() if at <= k and (o in kept or at == k or any(
            o in n.input for n in nodes[k:]))]
        peak = max(peak, sum(got[o].nbytes for o in alive))
    return peak + int(np.prod(shape)) * 4


@pytest.mark.parametrize("shape", [(1, 64, 32), (3, 200, 32)])
def test_the_estimate_is_the_brute_force_peak_of_the_values_alive(shape: tuple[int, ...]) -> None:
    model = wide()
    assert footprint.activation_bytes(model, {"x": shape}) == brute_force_peak(model, shape)


RUN_ONCE = """
import json, sys
import numpy as np, onnx
from eqsat.memory import proc_kb
from eqsat.onnx.io import session
model = onnx.load(sys.argv[1])
sess = session(model)
feeds = {"x": np.zeros(json.loads(sys.argv[2]), np.float32)}
before = proc_kb("VmRSS")[0]
sess.run(None, feeds)
print(json.dumps({"before": before, "peak": proc_kb("VmHWM")[0], "after": proc_kb("VmRSS")[0]}))
"""


def test_a_run_takes_about_the_memory_estimated_and_gives_it_back(tmp_path) -> None:
    """A session for checks (:func:`eqsat.onnx.io.session`: no arena, priority-based order) at a size whose values
    take ~300 MB, run once in a process of its own: the rise of its resident high-water mark (the kernel's, exact
    whatever the load) within a factor of two of the estimate, and that memory given back when the run ends."""
    model, shape = wide(width=512), (4, 2048, 32)
    estimate = footprint.activation_bytes(model, {"x": shape})
    assert estimate > 200 << 20
    onnx.save(model, str(tmp_path / "wide.onnx"))
    out = subprocess.run([sys.executable, "-c", RUN_ONCE, str(tmp_path / "wide.onnx"), json.dumps(shape)],
                         capture_output=True, text=True, timeout=300, check=True)
    kb = json.loads(out.stdout.strip().splitlines()[-1])
    grew = (kb["peak"] - kb["before"]) * 1024
    assert estimate / 2 < grew < 2 * estimate, (grew, estimate)
    assert (kb["after"] - kb["before"]) * 1024 < estimate / 4, kb


def test_the_tuned_run_and_any_no_larger_always_fit_and_a_prefix_is_estimated_itself() -> None:
    """A budget below the run tuned at: that run and a smaller one are made, a larger one is not; a prefix of the
    model (its MatMul alone) at the larger size is estimated on its own values and made."""
    model = wide()
    tuned = {"x": (2, 64, 32)}
    lim = footprint.Limit(model, budget=1, tuned=tuned)
    lim.check(tuned)
    lim.check({"x": (1, 64, 32)})
    with pytest.raises(footprint.TooLarge):
        lim.check({"x": (3, 64, 32)})
    prefix = onnx.ModelProto()
    prefix.CopyFrom(model)
    del prefix.graph.node[3:], prefix.graph.output[:]
    prefix.graph.output.extend([onnx.ValueInfoProto(name="h")])
    assert footprint.activation_bytes(prefix, {"x": (3, 64, 32)}) <= lim.tuned
    lim.check({"x": (3, 64, 32)}, prefix)


def test_an_input_empty_where_tuned_is_estimated_at_every_size() -> None:
    """An empty past (a decode's first step) tuned at 0 rows says nothing of the growth: a long past is estimated,
    and refused over the budget."""
    past = helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past", 64])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 64])
    graph = helper.make_graph([helper.make_node("Concat", ["past", "x"], ["y"], axis=1)], "cache", [past, x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "total", 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lim = footprint.Limit(model, budget=10 << 20, tuned={"past": (1, 0, 64), "x": (1, 1, 64)})
    with pytest.raises(footprint.TooLarge):
        lim.check({"past": (1, 50_000, 64), "x": (1, 1, 64)})


def test_a_shape_probe_names_its_shapes_apart_from_every_value_of_the_model() -> None:
    """An initializer already named as the probe would name the Shape it asks (``y.shape``): the probe still
    reads ``y``'s shape, as a run of the whole model shows it (the oracle)."""
    model = wide()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "y.shape"))
    model.graph.input.append(helper.make_tensor_value_info("y.shape_1", TensorProto.FLOAT, [2]))
    run = run_values(model, ["y"], shapes=True)
    whole = session(model).run(["y"], {"x": np.zeros((3, 64, 32), np.float32),
                                       "y.shape_1": np.zeros(2, np.float32)})[0]
    assert run({"batch": 3, "seq": 64}) == [list(whole.shape)] == [[3, 64]]


def budget_between(model: onnx.ModelProto, fits: dict, over: dict) -> int:
    """A budget that a run at ``fits`` (input shapes) takes and a run at ``over`` does not."""
    low, high = footprint.activation_bytes(model, fits), footprint.activation_bytes(model, over)
    assert low < high
    return (low + high) // 2


def test_runs_over_the_budget_are_refused_as_sizes_the_model_cannot_run_at() -> None:
    model = wide()
    budget = budget_between(model, {"x": (3, 64, 32)}, {"x": (4, 64, 32)})
    run = run_values(model, ["y"], shapes=True)
    with footprint.limited(model, budget):
        assert zero_feeds(model, {"batch": 3, "seq": 64})["x"].shape == (3, 64, 32)
        with pytest.raises(footprint.TooLarge, match="would take about"):
            zero_feeds(model, {"batch": 4, "seq": 64})
        assert run({"batch": 3, "seq": 64}) == [[3, 64]]
        assert run({"batch": 4, "seq": 64}) is None
    assert run({"batch": 4, "seq": 64}) == [[4, 64]]  # no limit current: every run is made


def test_the_check_at_further_sizes_skips_those_over_the_budget_saying_so_and_checks_the_others() -> None:
    model, probes = wide(), probe_shapes(wide(), VALUES)
    labels = [label for label, _ in probes]
    assert "batch=3" in labels and "batch=2" in labels
    budget = budget_between(model, {"x": (2, 64, 32)}, {"x": (3, 64, 32)})
    with footprint.limited(model, budget):
        same = ShapesVerifier(model, probes).check(wide())
        wrong = ShapesVerifier(model, probes).check(wide(fixed_batch=1))
    assert same.passed and "batch=2" in same.verified and "batch=3" not in same.verified
    assert [s for s in same.skipped if s.startswith("batch=3 (not run: about")], same.skipped
    assert not wrong.passed and "batch=2" in wrong.detail  # the sizes that fit still catch a wrong candidate


def test_a_run_of_eqsat_leaves_out_the_runs_that_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole run on a machine whose memory left admits a batch of 2 and no more: the model comes back
    verified and shape-generic, the report naming the sizes not run."""
    from eqsat.app.config import OptimizeConfig
    from eqsat.app.pipeline import optimize

    model = wide()
    budget = budget_between(model, {"x": (2, 128, 32)}, {"x": (3, 128, 32)})
    monkeypatch.setattr(footprint, "read_memory", lambda: Reading(1 << 34, int(budget / footprint.SHARE), 0))
    result = optimize(model, OptimizeConfig.of(cost="analytic", budget=2, measure=False))
    assert result.report.candidates, "the search rewrote nothing: no candidate checked at further sizes"
    assert result.report.verification.verified and result.report.interface.kept
    skipped = result.report.interface.skipped
    assert any(s.startswith("batch=3 (not run: about") for s in skipped), skipped
    assert "batch=2" in result.report.interface.verified_at
