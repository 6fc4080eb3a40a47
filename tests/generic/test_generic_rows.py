"""The shape-generic writer (:mod:`eqsat.generic`) writes no more kernels than the static program around the
rows of a layer and a mask: a Reshape of a Reshape (or Flatten) is one Reshape of the first one's
input, a Split of rows reshaped to ``[batch, seq, 3*hidden]`` along that last axis splits the rows themselves, a
mask indexed with a Gather is one Reshape with 0 and -1, and an And of an all-true slice expanded to a shape is
the other operand expanded. Oracles: the original model run in onnxruntime at several sizes of each axis, and
onnxruntime's own optimized graph of the static program (its kernels)."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_builders as ob
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_symbolic_shapes

from eqsat.generic import Original, make_generic
from eqsat.generic.rewrite import rewrite
from eqsat.generic.state import Forms
from eqsat.onnx import session

VALUES = {"batch": 2, "seq": 5}
SIZES = [(2, 5), (1, 5), (3, 5), (2, 1), (2, 9), (4, 17)]


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _layer(static: bool) -> onnx.ModelProto:
    """x[batch, seq, 24] -> rows -> x W + b (3 x 24 wide) -> [batch, seq, 72] -> Split in three -> each to heads
    [batch, seq, 3, 8], transposed; mask[batch, seq] -> Cast -> Flatten -> Reshape [-1] -> [batch, 1, 1, seq].
    ``static``: the program the exporter writes at the representative sizes (constant targets); else the original
    with the targets computed from the inputs' shapes."""
    rng = np.random.default_rng(7)
    b, s = VALUES["batch"], VALUES["seq"]
    inits = [numpy_helper.from_array(rng.standard_normal((24, 72)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(72).astype(np.float32), "bias"),
             _ints("sizes", 24, 24, 24), _ints("flat", -1), _ints("zero", 0), _ints("two", 2)]
    if static:
        inits += [_ints("rows_t", b * s, 24), _ints("wide_t", b, s, 72), _ints("heads_t", b, s, 3, 8),
                  _ints("mask_t", b, 1, 1, s)]
        sizes: list[onnx.NodeProto] = []
    else:
        inits += [_ints("rows_t", -1, 24), _ints("c72", 72), _ints("c38", 3, 8), _ints("c11", 1, 1)]
        sizes = [helper.make_node("Shape", ["x"], ["bs"], start=0, end=2),
                 helper.make_node("Shape", ["x"], ["b1"], start=0, end=1),
                 helper.make_node("Shape", ["x"], ["s1"], start=1, end=2),
                 helper.make_node("Concat", ["bs", "c72"], ["wide_t"], axis=0),
                 helper.make_node("Concat", ["bs", "c38"], ["heads_t"], axis=0),
                 helper.make_node("Concat", ["b1", "c11", "s1"], ["mask_t"], axis=0)]
    nodes = [*sizes,
             helper.make_node("Reshape", ["x", "rows_t"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["prod"]),
             helper.make_node("Add", ["prod", "bias"], ["lin"]),
             helper.make_node("Reshape", ["lin", "wide_t"], ["wide"]),
             helper.make_node("Split", ["wide", "sizes"], ["q", "k", "v"], axis=2)]
    for part in ("q", "k", "v"):
        nodes += [helper.make_node("Reshape", [part, "heads_t"], [f"{part}4"]),
                  helper.make_node("Transpose", [f"{part}4"], [f"{part}_out"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
              helper.make_node("Flatten", ["maskf"], ["mask2"], axis=2),
              helper.make_node("Reshape", ["mask2", "flat"], ["mask1"]),
              helper.make_node("Reshape", ["mask1", "mask_t"], ["mask_out"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 24])
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    outs = [helper.make_tensor_value_info(f"{p}_out", TensorProto.FLOAT, ["batch", 3, "seq", 8]) for p in "qkv"]
    outs.append(helper.make_tensor_value_info("mask_out", TensorProto.FLOAT, ["batch", 1, 1, "seq"]))
    return helper.make_model(helper.make_graph(nodes, "layer", [x, mask], outs, inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _check_at_sizes(original: onnx.ModelProto, written: onnx.ModelProto) -> None:
    ref, got = session(original), session(written)
    rng = np.random.default_rng(8)
    for b, s in SIZES:
        feeds = {"x": rng.standard_normal((b, s, 24)).astype(np.float32),
                 "mask": rng.integers(0, 2, (b, s)).astype(np.int64)}
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_reshape_chains_are_one_reshape_and_the_split_runs_on_the_rows():
    original, program = _layer(static=False), _layer(static=True)
    written = make_generic(program, original, VALUES)
    assert not written.notes
    g = written.model.graph
    made = {o: n for n in g.node for o in n.output}
    # no Reshape reads a Reshape or a Flatten: the chains are one Reshape each
    assert not [n.name for n in g.node if n.op_type == "Reshape"
                and made.get(n.input[0]) is not None and made[n.input[0]].op_type in ("Reshape", "Flatten")]
    # the Split reads the rows (2-D, axis 1), and only the three head Reshapes (and the rows') read it
    split = next(n for n in g.node if n.op_type == "Split")
    assert made[split.input[0]].op_type in ("Add", "Gemm", "MatMul")
    assert [a.i for a in split.attribute if a.name == "axis"] == [1]
    # the mask's Reshape reads the Cast, with a constant target of 0 and -1
    (mask,) = [n for n in g.node if "mask_out" in n.output]
    assert made[mask.input[0]].op_type == "Cast"
    target = numpy_helper.to_array(next(t for t in g.initializer if t.name == mask.input[1]))
    assert target.tolist() == [0, 1, 1, -1]
    _check_at_sizes(original, written.model)
    # onnxruntime runs no more kernels than for the static program, size computations included
    ks, kg = ob.ort_kernels(program), ob.ort_kernels(written.model)
    assert sum(kg.values()) <= sum(ks.values()), (kg, ks)
    assert kg["Reshape"] + kg["Flatten"] < ks["Reshape"] + ks["Flatten"]


def test_an_and_of_an_all_true_slice_expanded_is_the_other_operand_expanded():
    """torch's mask: ones of [1, 1, seq, 1] (computed from the sizes) And the padding mask [batch, 1, 1, seq]:
    written as the padding mask expanded to [1, 1, seq, 1] (no And, no all-true tensor)."""
    nodes = [helper.make_node("Shape", ["mask"], ["s1"], start=1, end=2),
             helper.make_node("Concat", ["c11", "s1", "c1"], ["ones_t"], axis=0),
             helper.make_node("ConstantOfShape", ["ones_t"], ["ones"],
                              value=numpy_helper.from_array(np.array([True]), "v")),
             helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["mb", "axes"], ["m4"]),
             helper.make_node("And", ["ones", "m4"], ["both"]),
             helper.make_node("Where", ["both", "zero", "low"], ["y"])]
    inits = [_ints("c11", 1, 1), _ints("c1", 1), _ints("axes", 1, 2),
             numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(np.full((), -1e4, np.float32), "low")]
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, "seq", "seq"])
    model = helper.make_model(helper.make_graph(nodes, "mask", [mask], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    written = make_generic(model, model, VALUES)
    ops = collections.Counter(n.op_type for n in written.model.graph.node)
    assert ops["And"] == 0 and ops["ConstantOfShape"] == 0 and ops["Expand"] == 1, ops
    (expand,) = [n for n in written.model.graph.node if n.op_type == "Expand"]
    assert expand.input[0] == "m4"
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(9)
    for b, s in SIZES:
        feeds = {"mask": rng.integers(0, 2, (b, s)).astype(np.int64)}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, 1, s, s)
        np.testing.assert_array_equal(have, want)


def test_an_expand_that_its_readers_broadcast_anyway_goes():
    """The padding mask expanded to [batch, 1, seq, seq], made a bias by a Where and added to the scores
    [batch, 2, seq, seq] of two layers: the Add broadcasts the mask's [batch, 1, 1, seq] to the same values, so the
    Expand (and its target's Concat) go; an Expand whose result a reader needs at its size stays."""
    nodes = [helper.make_node("Shape", ["mask"], ["s1"], start=1, end=2),
             helper.make_node("Concat", ["c11", "s1", "c1"], ["ones_t"], axis=0),
             helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["mb", "axes"], ["m4"]),
             helper.make_node("Expand", ["m4", "ones_t"], ["square"]),
             helper.make_node("Where", ["square", "zero", "low"], ["bias"]),
             helper.make_node("Add", ["scores", "bias"], ["a1"]),
             helper.make_node("Softmax", ["a1"], ["p1"], axis=-1),
             helper.make_node("Add", ["p1", "bias"], ["a2"]),
             helper.make_node("Softmax", ["a2"], ["y"], axis=-1),
             helper.make_node("Not", ["m4"], ["unmasked"]),
             helper.make_node("Expand", ["unmasked", "ones_t"], ["kept"]),
             helper.make_node("Cast", ["kept"], ["z"], to=TensorProto.FLOAT)]
    inits = [_ints("c11", 1, 1), _ints("c1", 1), _ints("axes", 1, 2),
             numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(np.full((), -1e4, np.float32), "low")]
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 1, "seq", "seq"])
    model = helper.make_model(helper.make_graph(nodes, "bias", [mask, scores], [y, z], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    written = make_generic(model, model, VALUES)
    g = written.model.graph
    expands = [n for n in g.node if n.op_type == "Expand"]
    assert len(expands) == 1 and [n.op_type for n in g.node if expands[0].output[0] in n.input] == ["Cast"]
    (where,) = [n for n in g.node if n.op_type == "Where"]
    assert where.input[0] == "m4"
    assert sum(ob.ort_kernels(written.model).values()) < sum(ob.ort_kernels(model).values())
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(10)
    for b, s in SIZES:
        feeds = {"mask": rng.integers(0, 2, (b, s)).astype(np.int64),
                 "scores": rng.standard_normal((b, 2, s, s)).astype(np.float32)}
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-6)


def test_the_shapes_carried_from_the_import_are_the_original_s():
    """The import's rewrite writes the Split of rows (its outputs ``[batch*seq, 24]``, where the original's are
    ``[batch, seq, 24]``); what it carries to the next rewrite of the original (eqsat.generic.Original.shapes) is
    only what holds of the original's values: each shape carried is onnxruntime's for that value of the original
    at other sizes."""
    original = _layer(static=False)
    facts = Original(original, VALUES)
    written = rewrite(original, original, VALUES, Forms.IMPORT, facts).model
    assert any(n.op_type == "Split" and n.input[0] != "wide" for n in written.graph.node)  # the rows split
    assert len(facts.shapes) >= 5 and "wide" in facts.shapes
    rng = np.random.default_rng(2)
    assert_symbolic_shapes(original, facts.shapes, [
        ({"batch": b, "seq": s}, {"x": rng.standard_normal((b, s, 24)).astype(np.float32),
                                  "mask": np.ones((b, s), np.int64)}) for b, s in [(2, 5), (3, 7)]])
