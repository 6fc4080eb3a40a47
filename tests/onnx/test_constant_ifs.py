"""An ``If`` whose condition is the same at every size (computed from a rank, as TorchScript writes ``repeat`` and
``tile``, or from an axis that is a number) is replaced by the branch it takes (eqsat.onnx.constant_ifs); one whose
condition reads a size that changes is kept. Oracle: the model as given, in onnxruntime, at sizes on both sides of
the changing condition."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.onnx.constant_ifs import constant_conditions, inline_constant_ifs
from eqsat.onnx.prepare import prepare

OPSET = [helper.make_opsetid("", 17)]


def _out(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def _branch(name: str, nodes: list[onnx.NodeProto], out: str, inits: list[onnx.TensorProto] = ()) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [_out(out)], list(inits))


def _model() -> onnx.ModelProto:
    """Three ``If``\\ s in a row over ``x`` of shape ``[batch, 3, n]``:

    - ``rank``: ``Size(Shape(x)) - 2 > 0`` (the rank, 3: always the then-branch, ``x * 2``; else ``x + 1``);
    - ``axis``: ``Shape(x)[1] == 3`` (a number: always the then-branch, ``+ b`` of a branch initializer named as the
      other branch's node output);
    - ``size``: ``Shape(x)[2] > 5`` (changes with ``n``: kept), ``-y`` or ``y``."""
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    inits = [two, numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(5, np.int64), "five"),
             numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2.0, np.float32), "twof"),
             numpy_helper.from_array(np.array(1.0, np.float32), "onef")]
    b = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32).reshape(3, 1), "tmp")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Size", ["s"], ["r"]),
        helper.make_node("Sub", ["r", "two"], ["d"]),
        helper.make_node("Greater", ["d", "zero"], ["c_rank"]),
        helper.make_node("If", ["c_rank"], ["a"], name="rank",
                         then_branch=_branch("t", [helper.make_node("Mul", ["x", "twof"], ["tmp"])], "tmp"),
                         else_branch=_branch("e", [helper.make_node("Add", ["x", "onef"], ["tmp2"])], "tmp2")),
        helper.make_node("Gather", ["s", "one"], ["ch"], axis=0),
        helper.make_node("Equal", ["ch", "three"], ["c_axis"]),
        helper.make_node("If", ["c_axis"], ["y"], name="axis",
                         then_branch=_branch("t2", [helper.make_node("Add", ["a", "tmp"], ["plus"])], "plus", [b]),
                         else_branch=_branch("e2", [helper.make_node("Identity", ["a"], ["same"])], "same")),
        helper.make_node("Gather", ["s", "two"], ["n"], axis=0),
        helper.make_node("Greater", ["n", "five"], ["c_size"]),
        helper.make_node("If", ["c_size"], ["z"], name="size",
                         then_branch=_branch("t3", [helper.make_node("Neg", ["y"], ["neg"])], "neg"),
                         else_branch=_branch("e3", [helper.make_node("Identity", ["y"], ["id"])], "id")),
        helper.make_node("Mul", ["z", "w"], ["out"]),
    ]
    inits.append(numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 1)).astype(np.float32), "w"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "n"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 3, "n"])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _x_feeds(*shapes: tuple[int, ...]) -> list[dict[str, tuple[int, ...]]]:
    return [{"x": s} for s in shapes]


SIZES = _x_feeds((1, 3, 1), (2, 3, 5), (1, 3, 6), (3, 3, 17))
"""``n`` on both sides of the changing condition (``n > 5``)"""


def _ifs(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node if n.op_type == "If"]


def test_a_condition_of_a_rank_or_a_fixed_axis_is_constant_and_one_of_a_changing_size_is_not():
    model = _model()
    names = [n.name for n in model.graph.node]
    found = {names[k]: v for k, v in constant_conditions(model).items()}
    assert found == {"rank": True, "axis": True}


def test_the_branch_taken_replaces_the_if_and_computes_what_the_model_does_at_every_size():
    model = _model()
    before = model.SerializeToString()
    inlined = inline_constant_ifs(model)
    assert model.SerializeToString() == before  # the model given is not changed
    assert _ifs(inlined) == ["size"]
    onnx.checker.check_model(inlined, full_check=True)
    assert_same_at(model, inlined, SIZES, seed=0)
    # the axis branch's initializer ("tmp") and the rank branch's output ("tmp") were both renamed apart
    names = [o for n in inlined.graph.node for o in n.output] + [t.name for t in inlined.graph.initializer]
    assert len(names) == len(set(names))


def test_a_shape_the_model_declares_for_an_inner_value_is_not_read_as_its_size():
    """An exporter may declare an inner value at the size it traced (``s`` of length 3 is right, ``n`` of 9 is not:
    read, the size condition would look constant and its branch be taken at every size)."""
    model = _model()
    model.graph.value_info.extend([helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 9])])
    names = [n.name for n in model.graph.node]
    assert "size" not in {names[k] for k in constant_conditions(model)}
    assert "size" in _ifs(inline_constant_ifs(model))


def test_the_import_reads_the_branch_taken():
    prepared = prepare(_model(), {"x": (1, 3, 8)})
    assert _ifs(prepared) == ["size"]


def test_a_program_written_for_every_size_holds_no_if_of_a_rank():
    """The pipeline, written shape-generic: the ``If``\\ s of a rank and of a fixed axis are gone from the program
    it writes, which computes what the model does on both sides of the size condition."""
    model = _model()
    result = optimize(model, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                               input_shapes={"x": (1, 3, 8)}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert len(_ifs(result.optimized)) <= 1
    assert_same_at(model, result.optimized, SIZES, seed=2)
    sess = ort.InferenceSession(result.optimized.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [d for d in sess.get_inputs()[0].shape] == ["batch", 3, "n"]


def _neg_or_same(cond: str, name: str = "if", out: str = "y", local: str = "t") -> onnx.NodeProto:
    return helper.make_node("If", [cond], [out], name=name,
                            then_branch=_branch("t", [helper.make_node("Neg", ["x"], [local])], local),
                            else_branch=_branch("e", [helper.make_node("Identity", ["x"], [local + "_e"])],
                                                local + "_e"))


def _one_if(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto],
            out: str = "y") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["n"])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_an_initializer_the_user_may_feed_is_no_constant():
    """A review's wrong model: ``k`` has a default (an initializer) and is an input too; folded with its default,
    the written model ignored the ``k`` the user feeds."""
    model = _one_if([helper.make_node("Greater", ["k", "zero"], ["c"]), _neg_or_same("c")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                     helper.make_tensor_value_info("k", TensorProto.INT64, [])],
                    [numpy_helper.from_array(np.array(1, np.int64), "k"),
                     numpy_helper.from_array(np.array(0, np.int64), "zero")])
    assert constant_conditions(model) == {}
    inlined = inline_constant_ifs(model)
    x = np.arange(3, dtype=np.float32)
    for k in (1, -1):
        feeds = {"x": x, "k": np.array(k, np.int64)}
        np.testing.assert_array_equal(_run(inlined, feeds)[0], _run(model, feeds)[0])


def test_a_size_onnx_infers_otherwise_than_onnxruntime_is_not_read():
    """onnx's inference sizes a Resize by 0.7 of 10 as 6, onnxruntime computes 7: a condition on it is read at run
    time (a review found the If folded to the branch onnxruntime never takes)."""
    scales = numpy_helper.from_array(np.array([1.0, 1.0, 0.7], np.float32), "scales")
    model = _one_if([helper.make_node("Resize", ["x3", "", "scales"], ["r"], mode="nearest"),
                     helper.make_node("Shape", ["r"], ["s"], start=2),
                     helper.make_node("Equal", ["s", "six"], ["c1"]),
                     helper.make_node("Squeeze", ["c1"], ["c"]),
                     _neg_or_same("c")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                     helper.make_tensor_value_info("x3", TensorProto.FLOAT, ["b", 1, 10])],
                    [scales, numpy_helper.from_array(np.array([6], np.int64), "six")])
    assert constant_conditions(model) == {}


def test_names_made_for_a_branch_are_new_to_the_whole_model():
    """A kept If's branch defines ``if/t``, the name the folded If's local ``t`` would be given (a review: the graph
    was refused as defining it twice)."""
    rank = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["s"], ["r"]),
            helper.make_node("Equal", ["r", "one"], ["c"])]
    kept = helper.make_node("If", ["d"], ["z"], name="kept",
                            then_branch=_branch("t2", [helper.make_node("Abs", ["x"], ["if/t"])], "if/t"),
                            else_branch=_branch("e2", [helper.make_node("Identity", ["x"], ["q"])], "q"))
    model = _one_if([*rank, _neg_or_same("c"), helper.make_node("ReduceSum", ["x"], ["sm"], keepdims=0),
                     helper.make_node("Greater", ["sm", "zf"], ["d"]), kept, helper.make_node("Add", ["y", "z"], ["o"])],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                    [numpy_helper.from_array(np.array(1, np.int64), "one"),
                     numpy_helper.from_array(np.array(0, np.float32), "zf")], out="o")
    inlined = inline_constant_ifs(model)
    assert _ifs(inlined) == ["kept"]
    onnx.checker.check_model(inlined)  # (and onnxruntime loads it: one definition of each name)
    for x in (np.ones(3, np.float32), -np.ones(4, np.float32)):
        np.testing.assert_array_equal(_run(inlined, {"x": x})[0], _run(model, {"x": x})[0])
