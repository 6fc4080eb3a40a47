"""A constant axis sliced to an end the model computes (a table's first ``seq`` rows, a projection's first ``seq``
columns) is ``min(seq, length)``: a program written from the symbols reads its size as ``seq``, which holds up to the
length only. The written model is verified past each such length (eqsat.onnx.axes.beyond), so the model eqsat returns
computes what the original computes there too (onnxruntime on both, the oracle), or is the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.onnx import session
from eqsat.onnx.axes.beyond import beyond_shapes, past, sliced_lengths

LENGTH = 300
"""the table's rows: past every size verified by default (1, 37, 256 and 32 at a tuned 16)"""


def _model(counted: str) -> onnx.ModelProto:
    """x ``[batch, seq, 16]`` times a count read off ``t``, the first ``seq`` rows (or columns) of a constant of
    LENGTH: its Shape summed (``shape``), or the ones of a ConstantOfShape of it summed (``ones``); for ``columns``
    the count is of a projection's columns sliced so. The original runs at every seq, past LENGTH too."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Shape", ["x"], ["seq"], start=1, end=2)]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    if counted == "columns":
        inits.append(numpy_helper.from_array(rng.standard_normal((16, LENGTH)).astype(np.float32), "w"))
        nodes += [helper.make_node("MatMul", ["x", "w"], ["h"]),
                  helper.make_node("Slice", ["h", "zero", "seq", "axis2"], ["t"])]
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal((LENGTH, 16)).astype(np.float32), "table"))
        nodes.append(helper.make_node("Slice", ["table", "zero", "seq", "axis0"], ["t"]))
    if counted == "ones":
        nodes += [helper.make_node("Shape", ["t"], ["ts"]),
                  helper.make_node("ConstantOfShape", ["ts"], ["ones"],
                                   value=numpy_helper.from_array(np.array([1.0], np.float32))),
                  helper.make_node("ReduceSum", ["ones"], ["count"], keepdims=0)]
    else:
        nodes += [helper.make_node("Shape", ["t"], ["ts"]), helper.make_node("Cast", ["ts"], ["tf"], to=TensorProto.FLOAT),
                  helper.make_node("ReduceSum", ["tf"], ["count"], keepdims=1)]
    nodes.append(helper.make_node("Mul", ["x", "count"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_lengths_sliced_to_a_computed_end_are_read_and_verified_past():
    model = _model("shape")
    assert sliced_lengths(model) == [LENGTH]
    labels = [label for label, _ in beyond_shapes(model, {"batch": 1, "seq": 16})]
    assert labels == [f"seq={past(LENGTH)}"]  # not the batch
    ended = _model("shape")
    ended.graph.initializer.append(numpy_helper.from_array(np.array([8], np.int64), "eight"))
    ended.graph.node[1].input[2] = "eight"  # a constant end: onnx's inference sizes it
    assert sliced_lengths(ended) == []
    split = _model("shape")  # an end computed from a size that is constant at every size (Phi-3's fused projections
    split.graph.node[0].CopyFrom(helper.make_node("Shape", ["x"], ["seq"], start=2, end=3))  # split at x's 16)
    assert sliced_lengths(split) == []


@pytest.mark.parametrize("counted", ["shape", "ones", "columns"])
def test_a_model_counting_a_sliced_constant_is_right_past_its_length(counted, tmp_path):
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    model = _model(counted)
    onnx.save(model, path)
    fast = ["--no-measure", "--cost", "analytic", "-q", "--budget", "4", "--input-shape", "x=1,16,16"]
    assert main(["optimize-model", str(path), "-o", str(out), *fast]) == 0
    ref, got, rng = session(model), session(onnx.load(out)), np.random.default_rng(3)
    for seq in (1, 16, LENGTH - 1, LENGTH, LENGTH + 1, 2 * LENGTH + 5):
        x = rng.standard_normal((2, seq, 16)).astype(np.float32)
        np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
