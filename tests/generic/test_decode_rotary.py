"""Rotary tables computed each call: a decode step computes cos and sin from the position (the past's length), not
from a constant cache, so the importer proves by construction that their halves repeat
(:func:`eqsat.ops.rotary.computed_halves_repeat`) before it reads the decomposition as ``rotary``. Oracles:
onnxruntime's values of each table (its halves equal, or not, on random inputs), and the original decode step run
in onnxruntime at other batches and past lengths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx import session
from eqsat.ops.rotary import computed_halves_repeat

CASES = {
    # name: (nodes after f [B, S, 4] -> t, proven)
    "concat-cos-unsqueeze": ([("Concat", ["f", "f"], "c", {"axis": -1}), ("Cos", ["c"], "e", {}),
                              ("Unsqueeze", ["e", "ax1"], "t", {})], True),
    "scaled-and-cast": ([("Concat", ["f", "f"], "c", {"axis": 2}), ("Sin", ["c"], "e", {}),
                         ("Mul", ["e", "half"], "m", {}), ("Cast", ["m"], "t", {"to": TensorProto.FLOAT})], True),
    "reshaped-rows-whole": ([("Concat", ["f", "f"], "c", {"axis": -1}), ("Reshape", ["c", "rows"], "t", {})], True),
    "two-angles": ([("Concat", ["f", "g"], "c", {"axis": -1}), ("Cos", ["c"], "t", {})], False),
    "other-axis": ([("Concat", ["f", "f"], "c", {"axis": 1}), ("Cos", ["c"], "t", {})], False),
    "times-a-row": ([("Concat", ["f", "f"], "c", {"axis": -1}), ("Mul", ["c", "row"], "t", {})], False),
    "axis-after-it": ([("Concat", ["f", "f"], "c", {"axis": -1}), ("Unsqueeze", ["c", "ax3"], "t", {})], False),
    "reshape-across-rows": ([("Concat", ["f", "f"], "c", {"axis": -1}), ("Reshape", ["c", "merge"], "t", {})], False),
}


def _model(nodes) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array([1], np.int64), "ax1"), numpy_helper.from_array(np.array([3], np.int64), "ax3"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.arange(8, dtype=np.float32), "row"),
             numpy_helper.from_array(np.array([0, -1, 1, 8], np.int64), "rows"),
             numpy_helper.from_array(np.array([0, 16], np.int64), "merge")]
    made = [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes]
    graph = helper.make_graph(made, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2, 4]) for n in "fg"],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", list(CASES))
def test_a_table_is_proven_to_repeat_its_halves_only_where_it_does(case):
    nodes, proven = CASES[case]
    model = _model(nodes)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((2, 2, 4)).astype(np.float32) for n in "fg"}
    values = {o.name: v for o, v in zip(session(model).get_outputs(), session(model).run(None, feeds))}
    t = values["t"]
    equal = t.shape[-1] % 2 == 0 and np.array_equal(t[..., :t.shape[-1] // 2], t[..., t.shape[-1] // 2:])
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
              for v in [*inferred.graph.value_info, *inferred.graph.input]}
    shapes["t"] = t.shape
    producers = {n.output[0]: n for n in model.graph.node}
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert computed_halves_repeat("t", producers.get, consts.get, shapes.get) == proven
    assert equal == proven  # the oracle: onnxruntime's values agree with the proof


def test_a_last_axis_equal_at_the_representative_sizes_only_proves_nothing():
    """A Reshape whose operand's last axis is a symbol (8 here, another size elsewhere) and whose output's is the
    constant 8 keeps the rows whole at these sizes only: not proven. The same shapes with a constant last axis
    are."""
    from eqsat.dims import Dim

    model = _model(CASES["reshaped-rows-whole"][0])
    producers = {n.output[0]: n for n in model.graph.node}
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for last, proven in ((8, True), (Dim(8, 64 * 1009), False)):
        shapes = {"f": (2, 2, 4), "c": (2, 2, last), "t": (2, 2, 1, 8)}
        assert computed_halves_repeat("t", producers.get, consts.get, shapes.get) == proven
