"""Composites whose constants the import computes: TorchScript writes a rotary embedding's halves as Slices whose
bound, ``x.shape[-1] // 2``, is a Shape, a Gather, a Div and Casts, and an Unsqueeze whose axes are a Constant node.
The patterns read only the given constants, so the first import of such a model finds no rotary; the import then
reads the values it folded and imports again (:meth:`eqsat.onnx.importer._Importer.small_folded`), and the
shape-generic writer infers shapes through Constant nodes' values (the import's simplification of a dynamic model).
Oracles: the original model in onnxruntime (at several sizes where it is dynamic), and numpy's rotate-half."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper

from eqsat import ir
from eqsat.generic import import_generic, make_generic, simplify_for_import
from eqsat.onnx import export_model, import_model, session
from eqsat.onnx.patterns import find_composites

D = 8
"""the rotated head size"""


def _rotary(dynamic: bool) -> onnx.ModelProto:
    """y = x * cos + rotate_half(x) * sin, x [1, 2, 16, D] (``dynamic``: [batch, 2, seq, D], the tables Sliced to
    seq), the halves' bound ``x.shape[-1] // 2`` computed as TorchScript writes it."""
    angles = np.arange(64)[:, None] / 10000 ** (np.arange(D // 2) / (D // 2))
    emb = np.concatenate([angles, angles], axis=-1)[None, None].astype(np.float32)  # halves repeat
    seq = 64 if dynamic else 16
    inits = [numpy_helper.from_array(np.cos(emb)[:, :, :seq], "cos_table"),
             numpy_helper.from_array(np.sin(emb)[:, :, :seq], "sin_table"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]

    def const(name: str, value: np.ndarray) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))

    nodes = [const("i3", np.array(3, np.int64)), const("two", np.array(2, np.int64)),
             const("ax0", np.array([0], np.int64)), const("big", np.array([2**62], np.int64)),
             helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "i3"], ["d"], axis=0),
             helper.make_node("Div", ["d", "two"], ["h"]), helper.make_node("Cast", ["h"], ["hc"], to=TensorProto.INT64),
             helper.make_node("Cast", ["hc"], ["hc2"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["hc2", "ax0"], ["half"]),
             helper.make_node("Slice", ["x", "zero", "half", "last"], ["x1"]),
             helper.make_node("Slice", ["x", "half", "big", "last"], ["x2"]),
             helper.make_node("Neg", ["x2"], ["nx2"]), helper.make_node("Concat", ["nx2", "x1"], ["turned"], axis=-1)]
    if dynamic:
        nodes += [helper.make_node("Shape", ["x"], ["seq"], start=2, end=3),
                  helper.make_node("Slice", ["cos_table", "zero", "seq", "axis2"], ["cos"]),
                  helper.make_node("Slice", ["sin_table", "zero", "seq", "axis2"], ["sin"])]
    else:
        nodes += [helper.make_node("Identity", ["cos_table"], ["cos"]), helper.make_node("Identity", ["sin_table"], ["sin"])]
    nodes += [helper.make_node("Mul", ["x", "cos"], ["xc"]), helper.make_node("Mul", ["turned", "sin"], ["ts"]),
              helper.make_node("Add", ["xc", "ts"], ["y"])]
    dims = ["batch", 2, "seq", D] if dynamic else [1, 2, 16, D]
    graph = helper.make_graph(nodes, "rotary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rotated(x: np.ndarray) -> np.ndarray:
    """numpy's rotate-half rotary of x [B, H, S, D] at positions 0..S-1."""
    angles = np.arange(x.shape[2])[:, None] / 10000 ** (np.arange(D // 2) / (D // 2))
    emb = np.concatenate([angles, angles], axis=-1)
    turned = np.concatenate([-x[..., D // 2:], x[..., : D // 2]], axis=-1)
    return x * np.cos(emb) + turned * np.sin(emb)


def _ops(graph: ir.Graph) -> collections.Counter[str]:
    return collections.Counter(n.op if n.op != "opaque" else n.attrs[0] for n in ir.topo_order(list(graph.outputs)))


def test_a_rotary_whose_bound_is_computed_from_the_shape_is_imported_as_one():
    model = _rotary(dynamic=False)
    given = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert [m.op for m in find_composites(model.graph, given, 17)] == []  # the bound: not a given constant
    graph = import_model(model, {})
    ops = _ops(graph)
    assert ops["rotary"] == 1 and ops["Slice"] == ops["Neg"] == ops["Concat"] == 0, ops
    written = session(export_model(graph))
    x = np.random.default_rng(0).standard_normal((1, 2, 16, D)).astype(np.float32)
    x[0, 1, 3, 2], x[0, 0, 5, 6] = np.nan, np.inf  # the edges go through as the original's do
    (got,), (want,) = written.run(None, {"x": x}), session(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    finite = np.isfinite(x).all(axis=-1, keepdims=True).repeat(D, axis=-1)
    np.testing.assert_allclose(got[finite], _rotated(x.astype(np.float64))[finite], rtol=1e-4, atol=1e-5)


def test_the_generic_writer_infers_through_a_constant_nodes_axes():
    """The dynamic model's Unsqueeze reads its axes from a Constant node: the simplification for the import knows
    the bound's shape (a vector of one) and writes it as a constant; the generic import reads one rotary, and its
    program matches the original at several batches and sequence lengths."""
    model = _rotary(dynamic=True)
    simplified = simplify_for_import(model, {"x": (1, 2, 16, D)})
    assert simplified is not None
    sliced = [n for n in simplified.graph.node if n.op_type == "Slice" and n.input[0] == "x"]
    consts = {t.name: numpy_helper.to_array(t) for t in simplified.graph.initializer}
    bounds = [sliced[0].input[2], sliced[1].input[1]]  # the first half's end, the second's start
    assert len(sliced) == 2 and all(b in consts for b in bounds), [list(n.input) for n in sliced]
    assert [consts[b].tolist() for b in bounds] == [[D // 2], [D // 2]]
    graph = import_generic(model, {"x": (1, 2, 16, D)})
    assert _ops(graph)["rotary"] == 1, _ops(graph)
    written = make_generic(export_model(graph), model, {"batch": 1, "seq": 16}).model
    rng = np.random.default_rng(1)
    for b, s in ((1, 16), (2, 16), (3, 5), (1, 1), (2, 64)):
        x = rng.standard_normal((b, 2, s, D)).astype(np.float32)
        (got,), (want,) = session(written).run(None, {"x": x}), session(model).run(None, {"x": x})
        assert got.shape == want.shape == (b, 2, s, D)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_torchscripts_decoder_rotary_is_read_by_both_imports(name, tmp_path):
    """The zoo's TorchScript exports (dynamic axes): one rotary per query and key, statically and generically
    imported (neither found one before), and the generic program matches the original at several sizes."""
    model = zoo.export_dynamic(name, "torchscript", str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    graphs = [import_generic(model, shapes, generic=g) for g in (False, True)]
    counts = [_ops(g)["rotary"] for g in graphs]
    assert counts[0] == counts[1] == 2, counts  # one layer: its query and its key
    written = make_generic(export_model(graphs[1]), model, {"batch": 1, "seq": 16}).model
    ref, got = session(model), session(written)
    rng = np.random.default_rng(2)
    for b, s in ((1, 16), (2, 7), (3, 37)):
        feeds = zoo.sized_feeds(name, rng, b, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
