"""A table the original computes from its sizes alone that follows no pattern (a rotary table over an image's patch
grid, DINOv3's: each patch's row and column angle ``(arange(h // 4) + 0.5) / (h // 4)``, every entry other at another
side) is computed in the written program as the original computes it (eqsat.generic.recompute), not kept as the
constant the import folded. Oracle: the original in onnxruntime at sides the program was not tuned at, its stride
dividing them or not."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.generic import Original, make_generic
from eqsat.generic.recompute import varying
from eqsat.onnx.axes import dataflow
from eqsat.onnx.axes.dataflow import data_free, shape_only
from eqsat.onnx.axes.live import live_shapes

OPSET = [helper.make_opsetid("", 17)]


def _angles(axis: int, tag: str) -> list[onnx.NodeProto]:
    """``(arange(n) + 0.5) / n`` for ``n = size(axis) // 4``, as ``a{tag}`` (float) and ``n{tag}`` (int64, [1])."""
    return [helper.make_node("Gather", ["s", f"i{axis}"], [f"n{tag}0"], axis=0),
            helper.make_node("Div", [f"n{tag}0", "four"], [f"n{tag}"]),
            helper.make_node("Range", ["zero", f"n{tag}", "one"], [f"r{tag}"]),
            helper.make_node("Cast", [f"r{tag}"], [f"f{tag}"], to=TensorProto.FLOAT),
            helper.make_node("Add", [f"f{tag}", "half"], [f"p{tag}"]),
            helper.make_node("Cast", [f"n{tag}"], [f"nf{tag}"], to=TensorProto.FLOAT),
            helper.make_node("Div", [f"p{tag}", f"nf{tag}"], [f"a{tag}"])]


def _grid_rope() -> onnx.ModelProto:
    """Patches of 4x4 (a Conv of stride 4: ``floor(h / 4) * floor(w / 4)`` rows of 8), scaled by ``sin`` of the
    patch grid's angles (rows ``3 * a_h + a_w``, flattened: a ``[rows, 1]`` table, negated behind an ``If`` whose
    branches read it, as TorchScript writes ``if``s on sizes: its condition ``h // 4 > 0``, true at every side the
    model runs at, but read at run time: an ``If`` of a constant condition is its branch at import,
    eqsat.onnx.constant_ifs) and by the square root of the channels (4 at every size: a
    value of the sizes that does not change), then a MatMul."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 4, 4)) * 0.2).astype(np.float32), "k"),
             numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "m")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("i1", 1), ("i2", 2), ("i3", 3), ("four", 4), ("zero", 0), ("one", 1), ("flat", [0, 8, -1]),
               ("column", [-1, 1]), ("ax1", [1]), ("ax0", [0]))]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("half", 0.5), ("three", 3.0))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Reshape", ["c", "flat"], ["cf"]),
             helper.make_node("Transpose", ["cf"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Shape", ["x"], ["s"]),
             *_angles(2, "h"), *_angles(3, "w"),
             helper.make_node("Unsqueeze", ["ah", "ax1"], ["ah2"]),
             helper.make_node("Unsqueeze", ["aw", "ax0"], ["aw2"]),
             helper.make_node("Mul", ["ah2", "three"], ["ah3"]),
             helper.make_node("Add", ["ah3", "aw2"], ["grid"]),
             helper.make_node("Reshape", ["grid", "column"], ["g"]),
             helper.make_node("Sin", ["g"], ["sin"]),
             helper.make_node("Greater", ["nh", "zero"], ["some"]),
             helper.make_node("If", ["some"], ["table"],
                              then_branch=helper.make_graph([helper.make_node("Neg", ["sin"], ["neg"])], "then", [],
                                                            [helper.make_tensor_value_info("neg", TensorProto.FLOAT,
                                                                                           None)]),
                              else_branch=helper.make_graph([helper.make_node("Identity", ["sin"], ["same"])], "else",
                                                            [], [helper.make_tensor_value_info("same",
                                                                                               TensorProto.FLOAT,
                                                                                               None)])),
             helper.make_node("Shape", ["x"], ["s2"]),
             helper.make_node("Gather", ["s2", "i1"], ["ch"], axis=0),
             helper.make_node("Cast", ["ch"], ["chf"], to=TensorProto.FLOAT),
             helper.make_node("Sqrt", ["chf"], ["root"]),
             helper.make_node("Mul", ["t", "table"], ["rotated"]),
             helper.make_node("Mul", ["rotated", "root"], ["scaled"]),
             helper.make_node("MatMul", ["scaled", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "patches", 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _folded(model: onnx.ModelProto, name: str, at: tuple[int, ...]) -> onnx.ModelProto:
    """``model`` with its value ``name`` a constant, its value at the input shape ``at`` (as the import folds what it
    does not keep: the candidate the writer is given)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend([onnx.ValueInfoProto(name=name)])
    (value,) = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros(at, np.float32)})
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [n for n in out.graph.node if name not in n.output]
    del out.graph.node[:]
    out.graph.node.extend(kept)
    out.graph.initializer.append(numpy_helper.from_array(value, name))
    return dataflow.prune(out)


def test_values_behind_an_if_on_a_size_are_computed_from_the_sizes_alone():
    model = _grid_rope()
    assert "table" not in shape_only(model)  # (a node with a subgraph: not folded by the writer's own passes)
    assert {"table", "root", "sin"} <= shape_only(model, branches=True)
    assert {"table", "half", "three"} <= data_free(model)
    assert not {"c", "t", "rotated", "y"} & data_free(model)


def test_a_branch_holding_a_random_operator_is_not_computed_from_the_sizes():
    """An ``If`` on a size whose branch draws random numbers is no function of the sizes (a copy of it would draw
    again)."""
    model = _grid_rope()
    branch = next(n for n in model.graph.node if n.op_type == "If").attribute[0].g
    branch.node[0].input[0] = "noise"
    branch.node.insert(0, helper.make_node("RandomUniformLike", ["sin"], ["noise"]))
    assert "table" not in shape_only(model, branches=True)
    assert "table" not in data_free(model)


def test_a_shape_whose_values_reach_the_data_inside_a_branch_is_kept_live():
    """The table meets the data only past the ``If`` that reads it in its branches (before, the walk followed a
    node's inputs only: the Shape was folded, and the table with it)."""
    assert "s" in live_shapes(_grid_rope())


def test_a_grid_table_of_the_sizes_is_computed_at_every_size():
    """Before, the import folded the table at 32x32 (64 rows), and the program written failed at a side of 37: the
    input came back."""
    original = _grid_rope()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 3, 32, 32)}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert_same_at(original, result.optimized, [{"x": s} for s in SIDES], seed=1)


SIDES = ((1, 3, 32, 32), (2, 3, 37, 50), (1, 3, 4, 4), (3, 3, 61, 19), (1, 3, 128, 36))


def test_a_table_a_candidate_holds_folded_is_computed_again_as_the_original_computes_it():
    """The writer given a candidate that holds the table as the constant folded at 32x32 writes the original's chain
    for it (eqsat.generic.recompute); the channels' root, the same at every size, stays a constant."""
    original, values = _grid_rope(), {"batch": 1, "height": 32, "width": 32}
    candidate = _folded(_folded(original, "table", (1, 3, 32, 32)), "root", (1, 3, 32, 32))
    with pytest.raises((AssertionError, Fail)):  # (the candidate itself: right at 32x32 only; fails at 37x50)
        assert_same_at(original, candidate, [{"x": s} for s in SIDES], seed=1)
    written = make_generic(candidate, original, values).model
    assert_same_at(original, written, [{"x": s} for s in SIDES], seed=1)
    ops = [n.op_type for n in written.graph.node]
    assert "Sin" in ops and "If" in ops  # the table's chain, copied
    assert "Sqrt" not in ops  # the channels' root


def _length_scale(read: str) -> onnx.ModelProto:
    """``y = r * (1 / n)``, ``r = Relu(x)``, ``n`` the length of ``read`` (``x``: the input's; ``r``: a layer's output)
    as a float."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("i1", 1),)]
    inits += [numpy_helper.from_array(np.array(1.0, np.float32), "unit")]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", [read], ["s"]),
             helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["unit", "nf"], ["scale"]),
             helper.make_node("Mul", ["r", "scale"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_only_values_of_the_inputs_sizes_are_asked_whether_they_change():
    """A scale of the input's length changes with it (a run of its chain at each verified size says so); the same
    scale read off a layer's output is not asked (its run would compute the layer at every size)."""
    values = {"batch": 1, "seq": 16}
    assert varying(Original.of(_length_scale("x"), values), ["scale"]) == {"scale": frozenset()}
    facts = Original.of(_length_scale("r"), values)
    assert varying(facts, ["scale"]) == {}
    assert facts.varying == {"scale": None}
