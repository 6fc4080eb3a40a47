"""``--also-at``: further sizes of the dynamic dimensions the shipped program is verified and measured at, beside the
representative shapes (the sizes a served model also runs at): the report gives the figure at each, and a program
slower with confidence at any of them is not shipped."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.errors import InputError
from eqsat.measurement.decision import Measurement, measure_sizes
from eqsat.onnx.importer import parse_sizes

QUICK = OptimizeConfig.of(budget=8, cost="analytic", measure_budget=0.5, allow_slower=True)


def _heads(rows: int = 64, summed: bool = False) -> onnx.ModelProto:
    """x[batch, seq, rows] -> two MatMuls sharing x (the search merges them into one), through a Relu and a Sigmoid
    (``summed``: added as they are, which the search may write x @ (w0 + w1))."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array((rng.standard_normal((rows, rows)) * 0.1).astype(np.float32), f"w{k}")
         for k in range(2)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", rows])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", rows])
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["x", "w1"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])] if summed else [
        helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["x", "w1"], ["b"]),
        helper.make_node("Relu", ["a"], ["c"]), helper.make_node("Sigmoid", ["b"], ["d"]),
        helper.make_node("Add", ["c", "d"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "heads", [x], [y], w), opset_imports=[helper.make_opsetid("", 17)])


def _chain(depth: int) -> onnx.ModelProto:
    """x[batch, seq, 64] through ``depth`` MatMuls by a 64 x 64 weight (timed, not compared)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.05).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 64])
    names = ["x", *(f"h{k}" for k in range(depth - 1)), "y"]
    nodes = [helper.make_node("MatMul", [names[k], "w"], [names[k + 1]]) for k in range(depth)]
    return helper.make_model(helper.make_graph(nodes, "chain", [x], [y], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_parse_sizes_reads_symbols_and_refuses_what_is_not_a_size():
    assert parse_sizes(["seq=300", "batch=3,seq=7"]) == ({"seq": 300}, {"batch": 3, "seq": 7})
    for bad in ("seq", "seq=0", "seq=-2", "=4", "seq=4,seq=5", "seq=x"):
        with pytest.raises(InputError, match="--also-at"):
            parse_sizes([bad])


def test_the_shipped_program_is_verified_and_timed_at_each_further_size():
    result = optimize(_heads(), QUICK.updated(also_at=({"seq": 300}, {"batch": 3, "seq": 5})))
    report = result.report
    assert report.returned.program == "optimized", report.returned.reason
    rows = report.measured.at_sizes
    assert [r["size"] for r in rows] == ["seq=300", "batch=3,seq=5"]
    assert [r["shapes"] for r in rows] == [{"x": [1, 300, 64]}, {"x": [3, 5, 64]}]  # the others at their own sizes
    for r in rows:
        assert r["rounds"] >= 2 and r["ci_low"] <= r["speedup"] <= r["ci_high"] and r["original_ms"] > 0
    assert {"seq=300", "batch=3,seq=5"} <= set(report.interface.verified_at)  # checked there as well
    assert "at seq=300" in report.returned.reason and "at batch=3,seq=5" in report.returned.reason
    assert json.loads(report.dumps())["measured"]["at_sizes"][0]["size"] == "seq=300"


@pytest.mark.timing
def test_a_program_slower_with_confidence_at_a_further_size_is_not_shipped():
    """The 'candidate' is 24 MatMuls where the original has one: slower at every size, by far; a measurement that
    said ship at the representative size is overruled at seq=512 (and kept only with --allow-slower)."""
    measured = Measurement(1.0, 0.5, 2.0, 1.9, 2.1, 0.95, 10, 1, 1.0, {}, "ship", "faster with confidence")
    config = OptimizeConfig.of(measure_budget=2.0)
    sizes = [("seq=512", {"x": (1, 512, 64)})]
    out = measure_sizes(measured, _chain(1), _chain(24), config, sizes)
    assert out.decision == "original", out.reason
    assert out.at_sizes[0]["ci_high"] < 1.0 and "slower with confidence at seq=512" in out.reason
    kept = measure_sizes(measured, _chain(1), _chain(24), config.updated(allow_slower=True), sizes)
    assert kept.decision == "ship" and "kept because --allow-slower" in kept.reason


@pytest.mark.parametrize("args, message", [
    (["--also-at", "width=4"], "not all free dynamic dimensions of the model; its dimensions: batch, seq"),
    (["--also-at", "seq"], "expected SYMBOL=N"),
    (["--also-at", "seq=4", "--static-shape", "x=1,8,64"], "--static-shape"),
    (["--also-at", "seq=4", "--runtime", "torch-cpu"], "--runtime torch-cpu runs the IR program at the "
                                                       "representative shapes only"),
])
def test_a_size_that_cannot_be_measured_is_exit_2_naming_it(args, message, tmp_path, capsys):
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_heads(), path)
    out.write_bytes(b"the user's file")
    code = main(["optimize-model", str(path), "-o", str(out), "--scheduler", "none", "-q", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert out.read_bytes() == b"the user's file"


def _positions(rows: int) -> onnx.ModelProto:
    """x[batch, seq, 16] plus the first seq rows of a table of ``rows`` positions: onnxruntime refuses seq > rows."""
    table = numpy_helper.from_array(np.random.default_rng(2).standard_normal((rows, 16)).astype(np.float32), "table")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("one", 1), ("zero", [0]), ("axes", [0]))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "one"], ["seq"]),
             helper.make_node("Unsqueeze", ["seq", "axes"], ["end"]),
             helper.make_node("Slice", ["table", "zero", "end", "axes"], ["rows"]),
             helper.make_node("Add", ["x", "rows"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "positions", [x], [y], [table, *consts]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_further_size_the_original_refuses_is_exit_2_before_any_search(tmp_path, capsys):
    path, out = tmp_path / "p.onnx", tmp_path / "o.onnx"
    onnx.save(_positions(64), path)
    code = main(["optimize-model", str(path), "-o", str(out), "--input-shape", "x=1,32,16", "--also-at", "seq=100",
                 "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--also-at seq=100" in err and "x=1,100,16" in err, err
    assert not out.exists()


def test_also_at_on_a_model_without_dynamic_dimensions_or_given_as_a_string_is_refused():
    static = _heads()
    for vi in (*static.graph.input, *static.graph.output):
        for d in vi.type.tensor_type.shape.dim[:2]:
            d.dim_value = 2
    with pytest.raises(InputError, match="no dynamic dimensions"):
        optimize(static, QUICK.updated(also_at=({"seq": 4},)))
    with pytest.raises(InputError, match="also_at"):
        optimize(_heads(), QUICK.updated(also_at="seq=4"))
