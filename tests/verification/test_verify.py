"""Verification: NaN/Inf outputs, inputs of the user's fixed shapes, integer inputs across their index range."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx_builders as ob
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.errors import InputError
from eqsat.onnx import session
from eqsat.verification import compare_outputs, verify
from eqsat.verification.feeds import index_bounds, random_inputs


# -- NaN and Inf --------------------------------------------------------------------------------
def test_nan_and_inf_match_position_by_position():
    ref = np.array([1.0, np.nan, np.inf, -np.inf, 2.0], dtype=np.float32)
    assert compare_outputs(ref, ref.copy())[0]
    ok, max_abs, max_rel = compare_outputs(ref, ref + np.float32(1e-6))
    assert ok and np.isfinite(max_abs) and np.isfinite(max_rel)
    for bad in ([1.0, 1.0, np.inf, -np.inf, 2.0],      # NaN became a number
                [1.0, np.nan, np.nan, -np.inf, 2.0],   # +inf became NaN
                [1.0, np.nan, -np.inf, -np.inf, 2.0],  # sign of an infinity flipped
                [np.nan, 1.0, np.inf, -np.inf, 2.0],   # NaN moved
                [1.0, np.nan, np.inf, -np.inf, 2.5]):  # a finite value off by 25%
        ok, max_abs, _ = compare_outputs(ref, np.array(bad, dtype=np.float32))
        assert not ok, bad
    assert compare_outputs(np.full(3, np.nan), np.full(3, np.nan))[0]  # all-NaN outputs are equal


def _nan_weight_model(weight: np.ndarray) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return ob.model(nodes, [x], [y], [numpy_helper.from_array(weight, "w")])


def test_identical_models_with_nan_and_inf_weights_verify():
    w = np.array([1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    model = _nan_weight_model(w)
    check = verify(model, model, seed=0)
    assert check.passed and np.isfinite(check.max_abs_error) and np.isfinite(check.max_rel_error)
    moved = _nan_weight_model(np.array([np.nan, 1.0, np.inf, -np.inf], dtype=np.float32))
    assert not verify(model, moved, seed=0).passed
    result = optimize(model, OptimizeConfig(scheduler="none", cost="analytic", measure=False))
    assert np.isfinite(result.report.verification.max_rel_error)  # NaN and inf weights: errors over finite outputs


# -- fixed shapes (--input-shape) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def dynamic_batch_model(tmp_path_factory) -> str:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 1))
    path = str(tmp_path_factory.mktemp("dyn") / "dyn.onnx")
    ob.torch_export(m, torch.randn(1, 3, 8, 8), path, dynamic_batch=True)
    return path


def test_fixed_batch_verifies_and_measures_with_the_fixed_shape(dynamic_batch_model, tmp_path, capsys):
    out = str(tmp_path / "o.onnx")
    code = main(["optimize-model", dynamic_batch_model, "-o", out, "--input-shape", "x=3,3,8,8",
                 "--scheduler", "none", "--cost", "analytic", "-q"])
    assert code == 0, capsys.readouterr().err
    optimized = onnx.load(out)
    dims = [d.dim_value or d.dim_param for d in optimized.graph.input[0].type.tensor_type.shape.dim]
    assert dims in ([3, 3, 8, 8], ["batch", 3, 8, 8])  # fixed, or the original's dynamic batch kept
    # an independent check: onnxruntime runs both on a batch of 3
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    a = session(onnx.load(dynamic_batch_model)).run(None, {"x": x})[0]
    b = session(optimized).run(None, {"x": x})[0]
    assert a.shape == b.shape == (3, 4, 8, 8)
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_verify_feeds_the_fixed_shape_to_a_dynamic_original_and_a_static_result(dynamic_batch_model, tmp_path):
    original = onnx.load(dynamic_batch_model)
    static = onnx.load(dynamic_batch_model)
    static.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 3  # what a fully static export gives
    static.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 3
    assert verify(original, static, seed=0, input_shapes={"x": (3, 3, 8, 8)}).passed
    assert verify(original, static, seed=0).passed  # the static side's shape completes the dynamic one
    with pytest.raises(InputError, match="contradicts"):
        verify(original, static, seed=0, input_shapes={"x": (3, 5, 8, 8)})


@pytest.mark.parametrize("spec,reason", [
    ("x=2,5,8,8", "static"),          # contradicts the static channel count
    ("y=2,3,8,8", "not model inputs"),  # unknown input name
    ("x=0,3,8,8", "not positive"),     # empty batch
    ("x=-2,3,8,8", "not positive"),    # negative batch
    ("x=2,3,8", "rank"),               # wrong rank
])
def test_bad_input_shapes_exit_2_before_any_work(dynamic_batch_model, tmp_path, capsys, spec, reason):
    out = tmp_path / "o.onnx"
    code = main(["optimize-model", dynamic_batch_model, "-o", str(out), "--input-shape", spec,
                 "--scheduler", "none", "--cost", "analytic", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and reason in err and "Traceback" not in err, err
    assert not out.exists() and os.listdir(tmp_path) == []


# -- integer inputs -----------------------------------------------------------------------------
def _embedding_model(vocab: int = 50, types: int = 3, seq: int = 64) -> onnx.ModelProto:
    """ids (int64) -> Gather(word table); type ids (int32) -> Cast -> Unsqueeze -> Gather(type table);
    a mask (int64) used arithmetically only."""
    rng = np.random.default_rng(0)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])
    tids = helper.make_tensor_value_info("type_ids", TensorProto.INT32, [seq])
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, [1, seq])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, 8])
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, 8)).astype(np.float32), "word"),
             numpy_helper.from_array(rng.standard_normal((types, 8)).astype(np.float32), "type"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["we"]),
             helper.make_node("Cast", ["type_ids"], ["t64"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["t64", "axes"], ["t2"]),
             helper.make_node("Gather", ["type", "t2"], ["te"]),
             helper.make_node("Add", ["we", "te"], ["e"]),
             helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mf", "axes2"], ["m3"]),
             helper.make_node("Mul", ["e", "m3"], ["y"])]
    inits.append(numpy_helper.from_array(np.array([2], dtype=np.int64), "axes2"))
    return ob.model(nodes, [ids, tids, mask], [y], inits)


def test_index_inputs_are_bounded_by_the_tables_they_index():
    model = _embedding_model(vocab=50, types=3)
    assert index_bounds(model) == {"ids": 50, "type_ids": 3}
    feeds = random_inputs(session(model), np.random.default_rng(0), None, index_bounds(model))
    assert feeds["ids"].dtype == np.int64 and feeds["type_ids"].dtype == np.int32
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 50 and len(np.unique(feeds["ids"])) > 10
    assert set(np.unique(feeds["type_ids"])) <= {0, 1, 2} and feeds["type_ids"].max() == 2
    assert set(np.unique(feeds["mask"])) <= {0, 1}
    # seeded: the same seed gives the same draws
    again = random_inputs(session(model), np.random.default_rng(0), None, index_bounds(model))
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)


def test_smallest_table_bounds_an_input_indexing_two():
    rng = np.random.default_rng(0)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [6])
    ya = helper.make_tensor_value_info("a", TensorProto.FLOAT, [6, 4])
    yb = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 6])
    nodes = [helper.make_node("Gather", ["big", "ids"], ["a"]),
             helper.make_node("Gather", ["small", "ids"], ["b"], axis=1)]
    inits = [numpy_helper.from_array(rng.standard_normal((40, 4)).astype(np.float32), "big"),
             numpy_helper.from_array(rng.standard_normal((4, 7)).astype(np.float32), "small")]
    assert index_bounds(ob.model(nodes, [ids], [ya, yb], inits)) == {"ids": 7}


def test_embedding_model_round_trips_with_ids_across_the_vocabulary():
    model = _embedding_model()
    check = verify(model, model, seed=0)  # onnxruntime rejects out-of-range Gather indices
    assert check.passed
    result = optimize(model, OptimizeConfig(scheduler="none", cost="analytic", measure=False))
    ids = np.arange(64, dtype=np.int64).reshape(1, 64) % 50
    feeds = {"ids": ids, "type_ids": (np.arange(64) % 3).astype(np.int32), "mask": np.ones((1, 64), np.int64)}
    np.testing.assert_allclose(session(result.optimized).run(None, feeds)[0], session(model).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def _reshaped(target: list[int]) -> onnx.ModelProto:
    """``y = reshape(x, target)`` for ``x`` of shape [2, 6]: onnxruntime runs it only where target has 12 entries."""
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["y"])], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(target, np.int64), "t")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_candidate_onnxruntime_cannot_run_fails_verification_with_its_error():
    """A candidate whose Reshape onnxruntime refuses at run time is a failed check naming why, not an exception;
    the original's own refusal is the user's input (InputError)."""
    check = verify(_reshaped([3, 4]), _reshaped([5, 4]))
    assert not check.passed and "cannot run it" in check.detail and "Reshape" in check.detail, check.detail
    unknown = _reshaped([3, 4])
    unknown.graph.node[0].op_type = "NoSuchOperator"
    check = verify(_reshaped([3, 4]), unknown)
    assert not check.passed and "cannot load the written program" in check.detail, check.detail
    assert verify(_reshaped([3, 4]), _reshaped([4, 3])).passed is False  # runs, other shape: a mismatch
    with pytest.raises(InputError, match="cannot run the original"):
        verify(_reshaped([5, 4]), _reshaped([3, 4]))


# -- several candidates at further shapes --------------------------------------------------------
def _shaped(nodes: list, inits: list | None = None) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])
    c = numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "c")
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [c, *(inits or [])]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_candidates_checked_at_further_shapes_against_one_run_of_the_original(monkeypatch):
    from eqsat.verification import ShapesVerifier, outputs, shapes, verify_shapes

    # the original runs only where batch x seq is even (a Reshape to pairs of rows and back)
    pairs = numpy_helper.from_array(np.array([-1, 2, 8], np.int64), "pairs")
    original = _shaped([helper.make_node("Reshape", ["x", "pairs"], ["p"]), helper.make_node("Shape", ["x"], ["sx"]),
                        helper.make_node("Reshape", ["p", "sx"], ["r"]), helper.make_node("Add", ["r", "c"], ["y"])],
                       [pairs])
    same = _shaped([helper.make_node("Add", ["c", "x"], ["y"])])
    # the first row's result spread over the batch: right at batch 1 only
    starts, ends, axes = (numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((0, "s"), (1, "e"),
                                                                                           (0, "a")))
    first_row = _shaped([helper.make_node("Slice", ["x", "s", "e", "a"], ["x0"]), helper.make_node("Shape", ["x"], ["sh"]),
                         helper.make_node("Expand", ["x0", "sh"], ["xe"]), helper.make_node("Add", ["xe", "c"], ["y"])],
                        [starts, ends, axes])
    probes = [("batch=2", {"x": (2, 6, 8)}), ("seq=5", {"x": (1, 5, 8)}), ("seq=8", {"x": (1, 8, 8)})]
    built = []
    real = shapes.session
    for module in (shapes, outputs):  # the checks' sessions, and the spread's (the original unoptimized)
        monkeypatch.setattr(module, "session", lambda m, **kw: built.append((m, kw)) or real(m, **kw))
    checks = ShapesVerifier(original, probes)
    verdicts = [checks.check(m) for m in (first_row, same, first_row, same)]
    # the original's session once for all four (beside each candidate's own), and once unoptimized, for the
    # runtime's own spread where the wrong candidate missed the tolerance (eqsat.verification.Spread)
    assert sum(m is original and kw.get("optimized", True) for m, kw in built) == 1
    assert sum(m is original and not kw.get("optimized", True) for m, kw in built) == 1 and len(built) == 6
    monkeypatch.undo()
    for model, got in zip((first_row, same, first_row, same), verdicts):
        fresh = verify_shapes(original, model, probes)  # a check of its own: the same verdict, the same sizes
        assert (got.passed, got.verified, got.skipped, got.detail) == \
               (fresh.passed, fresh.verified, fresh.skipped, fresh.detail)
    assert not verdicts[0].passed and "batch=2" in verdicts[0].detail
    # the original refuses an odd number of rows: skipped, not verified, for every candidate
    assert verdicts[1].passed and verdicts[1].verified == ["batch=2", "seq=8"] and verdicts[1].skipped == ["seq=5"]
    assert verdicts[3].verified == verdicts[1].verified
    # the check is independent of the cache: onnxruntime's own outputs at batch 2 differ for the wrong candidate
    x = np.random.default_rng(1).standard_normal((2, 6, 8)).astype(np.float32)
    assert not np.allclose(session(original).run(None, {"x": x})[0], session(first_row).run(None, {"x": x})[0])
    checks.close()
    assert checks.check(same).verified == ["batch=2", "seq=8"]


def test_a_candidate_that_fails_where_the_original_runs_is_said_to_be_the_written_program():
    """A program whose Reshape target was left at the sizes tuned at fails at a batch of 2, where the original runs:
    the check says it is the written program that fails there (a new user read "onnxruntime fails" as the
    original's failure)."""
    from eqsat.verification import verify_shapes

    fixed = numpy_helper.from_array(np.array([1, 6, 8], np.int64), "fixed")
    original = _shaped([helper.make_node("Add", ["c", "x"], ["y"])])
    pinned = _shaped([helper.make_node("Reshape", ["x", "fixed"], ["xr"]), helper.make_node("Add", ["xr", "c"], ["y"])],
                     [fixed])
    x = np.zeros((2, 6, 8), np.float32)
    assert session(original).run(None, {"x": x})[0].shape == (2, 6, 8)  # the oracle: the original runs there
    with pytest.raises(Exception, match="Reshape"):
        session(pinned).run(None, {"x": x})
    check = verify_shapes(original, pinned, [("seq=6", {"x": (1, 6, 8)}), ("batch=2", {"x": (2, 6, 8)})])
    assert not check.passed and check.verified == ["seq=6"]
    assert check.detail.startswith("at batch=2 the written program fails in onnxruntime where the original runs: ")


def test_a_probe_the_original_refuses_on_a_later_draw_still_checks_the_draws_before_it():
    """The original gathers from a table of 4 at an index computed from its input: some draws at batch 2 it
    refuses (the index past the table), and those before them it runs. A candidate wrong everywhere fails on a
    draw the original ran, whether the original refuses a later one or not; it passes nowhere (onnxruntime's own
    runs of the original on the verification's draws say which it ran)."""
    from eqsat.verification import ShapesVerifier

    def model(wrong: bool) -> onnx.ModelProto:
        inits = [numpy_helper.from_array(np.arange(4, dtype=np.float32), "tab"),
                 numpy_helper.from_array(np.array(2.6, np.float32), "k"),
                 numpy_helper.from_array(np.array(2.0, np.float32), "two")]
        nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0), helper.make_node("Mul", ["mx", "k"], ["m"]),
                 helper.make_node("Cast", ["m"], ["ix"], to=TensorProto.INT64),
                 helper.make_node("Gather", ["tab", "ix"], ["v"]), helper.make_node("Add", ["x", "v"], ["y0"]),
                 helper.make_node("Add", ["y0", "two"], ["y"]) if wrong else helper.make_node("Identity", ["y0"], ["y"])]
        return ob.model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], inits)

    original, wrong = model(False), model(True)
    probe = [("batch=2", {"x": (2, 3)})]
    first_ran = later_refused = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        s = session(original)
        ran = []
        for _ in range(2):
            feeds = random_inputs(s, rng, {"x": (2, 3)}, index_bounds(original))
            try:
                s.run(None, feeds)
                ran.append(True)
            except Exception:  # noqa: BLE001 - the original refuses this draw
                ran.append(False)
                break
        got = ShapesVerifier(original, probe, seed, draws=2).check(wrong)
        assert not got.passed if ran[0] else (got.passed and got.skipped == ["batch=2"]), (seed, ran, got)
        first_ran += ran[0]
        later_refused += ran == [True, False]
    assert first_ran and later_refused  # both cases were met


def _compare_by_element(ref: np.ndarray, got: np.ndarray) -> tuple[bool, float, float]:
    """The contract of :func:`compare_outputs` on finite outputs, element by element in Python floats (the oracle)."""
    rtol = {"float16": 1e-2, "float32": 1e-3, "float64": 1e-7}[ref.dtype.name]
    refs, gots = [float(v) for v in ref.ravel()], [float(v) for v in got.ravel()]
    scale = max(abs(v) for v in refs)
    atol = rtol * max(scale, 1e-6) * 0.1
    errs = [abs(g - r) for r, g in zip(refs, gots)]
    ok = all(e <= atol + rtol * abs(r) for e, r in zip(errs, refs))
    return ok, max(errs), max(e / max(abs(r), scale, 1e-12) for e, r in zip(errs, refs))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_finite_outputs_are_compared_as_the_contract_says_element_by_element(dtype):
    """Finite outputs (the fast path) near the tolerance's edge, tiny and near the type's range: the same verdict and
    errors as the element-by-element oracle."""
    rng = np.random.default_rng(3)
    top = float(np.finfo(dtype).max)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        ref = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 4)).astype(dtype)
        if trial % 10 == 0:
            ref[0] = dtype(top * 0.9)
        rel = rng.choice([0.0, 1e-4, 9e-4, 1e-3, 1.1e-3, 2e-2], size=n)
        got = (ref.astype(np.float64) * (1 + rel * rng.choice([-1, 1], size=n))).astype(dtype)
        got = np.where(np.isfinite(got), got, ref)
        ok, e_abs, e_rel = compare_outputs(ref, got)
        want_ok, want_abs, want_rel = _compare_by_element(ref, got)
        assert ok == want_ok, (ref, got)
        assert e_abs == pytest.approx(want_abs, rel=1e-12, abs=0) and e_rel == pytest.approx(want_rel, rel=1e-12)
