"""The sizes onnx's shape inference leaves unknown where they are products of symbols (a Reshape's ``-1`` over
``[batch*seq, 384]``, a Flatten, a Tile or an Expand of a symbolic axis, a Resize, a Range or a ConstantOfShape to
sizes computed at run time) are given as monomials by
:func:`eqsat.onnx.axes.symbolic.infer_node`: each checked against the shapes onnxruntime computes at several sizes where
the symbols vary apart (the oracle), and none given where the sizes do not decide them."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.dims import Mono
from eqsat.onnx.axes.symbolic import infer_node

B, S = Mono.symbol("batch"), Mono.symbol("seq")
C = Mono.const
SIZES = ({"batch": 1, "seq": 8}, {"batch": 3, "seq": 5}, {"batch": 2, "seq": 11})
OPSET = [helper.make_opsetid("", 17)]


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(node: onnx.NodeProto, shape: list[Mono], inits: list[onnx.TensorProto],
           before: list[onnx.NodeProto] = ()) -> onnx.ModelProto:
    dims = [int(m.coef) if m.is_const else m.key() for m in shape]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)
    graph = helper.make_graph([*before, node], "g", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _ort_shapes(model: onnx.ModelProto, shape: list[Mono]) -> list[tuple[int, ...]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = []
    for at in SIZES:
        x = np.zeros([int(m.value(at)) for m in shape], np.float32)
        out.append(sess.run(None, {"x": x})[0].shape)
    return out


def _inferred(node: onnx.NodeProto, shape: list[Mono], inits: list[onnx.TensorProto],
              vectors: dict[str, list[Mono]] | None = None) -> list[Mono | None] | None:
    shapes: dict[str, list[Mono] | None] = {"x": shape}
    types = {"x": TensorProto.FLOAT}
    for name, entries in (vectors or {}).items():  # a vector computed at run time: typed, its values unknown to onnx
        shapes[name], types[name] = [C(len(entries))], TensorProto.INT64
    got = infer_node(node, shapes, types, {t.name: t for t in inits}, OPSET, vectors=vectors)
    return got[node.output[0]][1] if node.output[0] in got else None


CASES = [
    ("rows", "Reshape", [B, S, C(384)], [-1, 384], {}),
    ("copied", "Reshape", [B, S, C(384)], [0, -1, 64], {}),
    ("heads", "Reshape", [B * S, C(384)], [-1, 6, 64], {}),
    ("back", "Reshape", [B * S, C(6), C(64)], [0, 384], {}),
    ("flat", "Flatten", [B, S, C(6), C(64)], None, {"axis": 2}),
    ("flat_last", "Flatten", [B, S, C(6)], None, {"axis": -1}),
    ("flat_all", "Flatten", [B, S, C(6)], None, {"axis": 0}),
    ("tiled", "Tile", [B * S, C(1), C(384)], [1, 2, 1], {}),
    ("tiled_axis", "Tile", [B, S], [3, 1], {}),
    ("expanded", "Expand", [B, C(1), S], [1, 4, 1], {}),
    ("expanded_rank", "Expand", [S, C(1)], [2, 1, 5], {}),
]


@pytest.mark.parametrize("name,op,shape,sizes,attrs", CASES, ids=[c[0] for c in CASES])
def test_sizes_are_what_onnxruntime_computes(name, op, shape, sizes, attrs):
    inits = [] if sizes is None else [_ints("sizes", sizes)]
    node = helper.make_node(op, ["x", *(["sizes"] if inits else [])], ["y"], **attrs)
    got = _inferred(node, shape, inits)
    assert got is not None and None not in got, got
    runs = _ort_shapes(_model(node, shape, inits), shape)
    assert [tuple(int(m.value(at)) for m in got) for at in SIZES] == runs


def test_a_size_vector_of_monomials_is_read_as_the_sizes_it_holds():
    # the target [batch, seq, 6, 64] computed at run time from x's shape: its entries known as monomials
    shape = [B, S, C(384)]
    before = [helper.make_node("Shape", ["x"], ["dims"], start=0, end=2),
              helper.make_node("Concat", ["dims", "heads"], ["target"], axis=0)]
    inits = [_ints("heads", [6, 64])]
    node = helper.make_node("Reshape", ["x", "target"], ["y"])
    assert _inferred(node, shape, inits) in (None, [None] * 4)  # onnx alone: the target's values unknown
    got = _inferred(node, shape, inits, {"target": [B, S, C(6), C(64)]})
    assert got == [B, S, C(6), C(64)]
    assert [tuple(int(m.value(at)) for m in got) for at in SIZES] == _ort_shapes(_model(node, shape, inits, before),
                                                                                  shape)
    tile = helper.make_node("Tile", ["x", "target3"], ["y"])
    assert _inferred(tile, shape, [], {"target3": [C(1), C(2), C(1)]}) == [B, S * C(2), C(384)]


@pytest.mark.parametrize("op,shape,sizes", [
    ("Reshape", [B, S, C(384)], [C(-1), C(-1)]),  # two free sizes: not a valid target
    ("Reshape", [B, S, C(384)], [C(-1), S / B]),  # a size no monomial of sizes holds
    ("Expand", [B, C(1)], [S, C(4)]),  # one symbol broadcast to another: the sizes do not say which is 1
    ("Tile", [B, S], [C(2), S / B]),
])
def test_sizes_the_symbols_do_not_decide_stay_unknown(op, shape, sizes):
    node = helper.make_node(op, ["x", "sizes"], ["y"])
    got = _inferred(node, shape, [], {"sizes": sizes})
    assert got is None or None in got


def test_an_expand_to_a_vector_of_monomials_is_read_as_its_sizes():
    shape = [B, C(1), S]
    before = [helper.make_node("Shape", ["x"], ["b"], start=0, end=1),
              helper.make_node("Shape", ["x"], ["s"], start=2, end=3),
              helper.make_node("Concat", ["b", "four", "s"], ["target"], axis=0)]
    inits = [_ints("four", [4])]
    node = helper.make_node("Expand", ["x", "target"], ["y"])
    got = _inferred(node, shape, inits, {"target": [B, C(4), S]})
    assert got == [B, C(4), S]
    assert [tuple(int(m.value(at)) for m in got) for at in SIZES] == _ort_shapes(_model(node, shape, inits, before),
                                                                                  shape)


def test_a_floored_size_is_not_multiplied():
    # [8, h/4, w/4] after a strided Conv is [8, floor(h/4), floor(w/4)]: their product is not h*w/16 (h = w = 18:
    # 16, not 20.25), so a Flatten of it stays unknown (a run fits it)
    h, w = Mono.symbol("h"), Mono.symbol("w")
    quarter = Mono.const(Fraction(1, 4))
    node = helper.make_node("Flatten", ["x"], ["y"], axis=1)
    got = _inferred(node, [C(8), quarter * h, quarter * w], [])
    assert got is None or got[1] is None


@pytest.mark.parametrize("axes", [None, [2, 3]], ids=["every-axis", "axes"])
def test_a_resize_to_a_vector_of_monomials_is_read_as_its_sizes(axes):
    # MobileViT's interpolation to a multiple of its patch: sizes computed at run time from the input's shape
    shape = [B, C(3), C(7), C(7)]
    head = [helper.make_node("Shape", ["x"], ["bc"], start=0, end=2)] if axes is None else []
    before = [*head, helper.make_node("Concat", [*(["bc"] if axes is None else []), "sides"], ["target"], axis=0)]
    inits = [_ints("sides", [8, 8])]
    attrs = {"mode": "linear"} | ({} if axes is None else {"axes": axes})
    node = helper.make_node("Resize", ["x", "", "", "target"], ["y"], **attrs)
    entries = ([B, C(3)] if axes is None else []) + [C(8), C(8)]
    assert _inferred(node, shape, inits) in (None, [None] * 4, [B, C(3), None, None])  # onnx alone
    got = _inferred(node, shape, inits, {"target": entries})
    assert got == [B, C(3), C(8), C(8)]
    model = _model(node, shape, inits, before)
    model.opset_import[0].version = 18  # Resize's axes
    assert [tuple(int(m.value(at)) for m in got) for at in SIZES] == _ort_shapes(model, shape)


def test_a_resize_that_keeps_its_aspect_ratio_is_left_to_onnx():
    node = helper.make_node("Resize", ["x", "", "", "target"], ["y"], keep_aspect_ratio_policy="not_larger")
    got = _inferred(node, [B, C(3), C(7), C(14)], [], {"target": [B, C(3), C(8), C(8)]})
    assert got is None or None in got


def _if_node(else_of: str) -> onnx.NodeProto:
    """torch's SDPA export's NaN rows rebuilt (:mod:`eqsat.ops.attention_nz`): where ``x`` holds a NaN, each NaN
    replaced by its column's ``sum(0 * x)`` (a Constant inside the branch), else ``else_of`` as it is."""
    fix = helper.make_graph([
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.float32))),
        helper.make_node("Constant", [], ["axis"], value=numpy_helper.from_array(np.array([-2], np.int64))),
        helper.make_node("Mul", ["x", "zero"], ["zx"]),
        helper.make_node("ReduceSum", ["zx", "axis"], ["column"], keepdims=1),
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("Where", ["nan", "column", "x"], ["fixed"])], "fix", [],
        [helper.make_tensor_value_info("fixed", TensorProto.FLOAT, None)])
    keep = helper.make_graph([helper.make_node("Identity", [else_of], ["kept"])], "keep", [],
                             [helper.make_tensor_value_info("kept", TensorProto.FLOAT, None)])
    return helper.make_node("If", ["any_nan"], ["y"], then_branch=fix, else_branch=keep)


def test_an_if_whose_branches_keep_the_shape_is_read_as_that_shape():
    shape = [B, C(2), S, C(4)]
    node = _if_node("x")
    shapes, types = {"x": shape, "any_nan": []}, {"x": TensorProto.FLOAT, "any_nan": TensorProto.BOOL}
    got = infer_node(node, shapes, types, {}, OPSET)["y"][1]
    assert got == shape
    before = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
              helper.make_node("IsNaN", ["total"], ["any_nan"])]
    sess = ort.InferenceSession(_model(node, shape, [], before).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    for at in SIZES:  # the oracle: onnxruntime, through either branch
        x = np.ones([int(m.value(at)) for m in shape], np.float32)
        for nan in (False, True):
            x[0, 0, 0, 0] = np.nan if nan else 1.0
            assert sess.run(None, {"x": x})[0].shape == tuple(int(m.value(at)) for m in got)


def test_an_if_whose_branches_differ_stays_unknown():
    shapes = {"x": [B, C(2), S, C(4)], "w": [B, C(2), C(3), C(4)], "any_nan": []}
    types = {"x": TensorProto.FLOAT, "w": TensorProto.FLOAT, "any_nan": TensorProto.BOOL}
    got = infer_node(_if_node("w"), shapes, types, {}, OPSET).get("y")
    assert got is None or got[1] is None or None in got[1]


def test_a_constant_of_a_vector_of_monomials_is_read_as_its_sizes():
    # torch.zeros(x.shape[0], 2 * x.shape[1], 8): the sizes computed at run time from the input's shape
    shape = [B, S, C(8)]
    before = [helper.make_node("Shape", ["x"], ["bs"], start=0, end=2),
              helper.make_node("Mul", ["bs", "one_two"], ["doubled"]),
              helper.make_node("Concat", ["doubled", "eight"], ["target"], axis=0)]
    inits = [_ints("one_two", [1, 2]), _ints("eight", [8])]
    node = helper.make_node("ConstantOfShape", ["target"], ["y"],
                            value=numpy_helper.from_array(np.array([0.5], np.float32)))
    assert _inferred(node, shape, inits) in (None, [None] * 3)  # onnx alone
    got = _inferred(node, shape, inits, {"target": [B, C(2) * S, C(8)]})
    assert got == [B, C(2) * S, C(8)]
    assert [tuple(int(m.value(at)) for m in got) for at in SIZES] == _ort_shapes(_model(node, shape, inits, before),
                                                                                 shape)
    assert _inferred(node, shape, inits, {"target": [B, C(0), C(8)]}) in (None, [B, None, C(8)])  # empty: unread


def test_a_slice_of_a_table_to_a_size_of_the_symbols_is_read_as_that_size():
    # a position table's first seq rows, the end read off the input's Shape (as the shape-generic writer slices it)
    shape = [B, S, C(8)]
    table = numpy_helper.from_array(np.arange(64 * 8, dtype=np.float32).reshape(64, 8), "table")
    before = [helper.make_node("Shape", ["x"], ["seq"], start=1, end=2)]
    inits = [table, _ints("zero", [0]), _ints("axis", [0])]
    node = helper.make_node("Slice", ["table", "zero", "seq", "axis"], ["rows"])
    shapes = {"x": shape, "table": [C(64), C(8)]}
    got = infer_node(node, shapes | {"seq": [C(1)]}, {"x": TensorProto.FLOAT, "table": TensorProto.FLOAT,
                                                      "seq": TensorProto.INT64},
                     {t.name: t for t in inits}, OPSET, vectors={"seq": [S]})["rows"][1]  # (the writer's known)
    assert got == [S, C(8)]
    add = helper.make_node("Add", ["x", "rows"], ["y"])  # the rows read beside the input: run where they fit
    model = _model(add, shape, inits, [*before, node])
    assert [(int(B.value(at)), *(int(m.value(at)) for m in got)) for at in SIZES] == _ort_shapes(model, shape)


@pytest.mark.parametrize("case", ["another-symbol", "a-step-of-two", "a-start-of-one", "a-value-not-a-table"])
def test_a_slice_whose_size_the_symbols_do_not_decide_is_left_unknown(case):
    # mask[:, :seq] over a mask of another length T is min(seq, T); a step of 2 halves (rounded up); a start of 1
    # leaves seq - 1, no monomial; a computed value's axis of 64 (a projection's columns) is min(seq, 64), which no
    # guard covers (only a constant table's slice is read as seq, the writer guarding the table past its rows)
    t = Mono.symbol("total")
    axis_size = t if case == "another-symbol" else C(64)
    steps = [2] if case == "a-step-of-two" else [1]
    starts = [1] if case == "a-start-of-one" else [0]
    inits = [_ints("starts", starts), _ints("axis", [1]), _ints("steps", steps)]
    node = helper.make_node("Slice", ["x", "starts", "seq", "axis", "steps"], ["y"])
    shapes = {"x": [B, axis_size], "seq": [C(1)]}
    types = {"x": TensorProto.FLOAT, "seq": TensorProto.INT64}
    got = infer_node(node, shapes, types, {t.name: t for t in inits}, OPSET, vectors={"seq": [S]}).get("y")
    assert got is None or got[1] is None or got[1][1] is None


@pytest.mark.parametrize("half", ["first", "second"])
def test_a_rotary_half_whose_bound_is_computed_from_the_head_size_is_read_as_its_size(half):
    # rotate_half's x[..., :d // 2] and x[..., d // 2:], the bound computed at run time from the input's Shape
    shape = [B, C(6), S, C(64)]
    before = [helper.make_node("Shape", ["x"], ["d"], start=3, end=4),
              helper.make_node("Div", ["d", "two"], ["half"])]
    inits = [_ints("two", [2]), _ints("zero", [0]), _ints("end", [2**63 - 1]), _ints("axis", [3])]
    bounds = ["zero", "half"] if half == "first" else ["half", "end"]
    node = helper.make_node("Slice", ["x", *bounds, "axis"], ["y"])
    got = _inferred(node, shape, inits, {"half": [C(32)]})
    assert got == [B, C(6), S, C(32)]
    assert [tuple(int(m.value(at)) for m in got) for at in SIZES] == _ort_shapes(_model(node, shape, inits, before),
                                                                                 shape)
