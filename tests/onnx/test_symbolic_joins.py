"""Sizes onnx's shape inference leaves unknown over symbols, given by eqsat.onnx.axes.symbolic.infer_node: a Concat of
inputs of one monomial length each (four layers' hidden states stacked on the batch: ``4*batch``) and a Split by
constant sizes along a symbolic axis (onnx cannot check their sum there). Oracle: onnxruntime's output shapes at
several sizes of the symbols."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.dims import Mono
from eqsat.onnx.axes.symbolic import infer_node

OPSET = [helper.make_opsetid("", 17)]
F = TensorProto.FLOAT


def _shapes(node: onnx.NodeProto, inputs: dict[str, list[Mono]], inits: list[onnx.TensorProto]) -> dict:
    types = {**dict.fromkeys(inputs, F), **{t.name: t.data_type for t in inits}}
    return {k: v[1] for k, v in infer_node(node, inputs, types, {t.name: t for t in inits}, OPSET).items()}


def _run(node: onnx.NodeProto, inputs: dict[str, list], inits: list[onnx.TensorProto], feeds: dict) -> list:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(o, F, None) for o in node.output], inits)
    model = helper.make_model(graph, opset_imports=OPSET)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [r.shape for r in sess.run(None, feeds)]


B, S = Mono.symbol("b"), Mono.symbol("s")


@pytest.mark.parametrize("lengths", [[B, B, B, B], [S, Mono.const(2) * S], [B * S, B * S]])
def test_a_concat_of_one_monomial_each_is_their_sum(lengths):
    names = [f"x{k}" for k in range(len(lengths))]
    node = helper.make_node("Concat", names, ["y"], axis=0)
    (length, width) = _shapes(node, {n: [d, Mono.const(3)] for n, d in zip(names, lengths)}, [])["y"]
    assert length is not None and width == Mono.const(3)
    for b, s in [(1, 5), (2, 7), (3, 1)]:
        at = {"b": b, "s": s}
        feeds = {n: np.zeros((int(d.value(at)), 3), np.float32) for n, d in zip(names, lengths)}
        (got,) = _run(node, {n: ["n", 3] for n in names}, [], feeds)
        assert got[0] == int(length.value(at))


def test_a_concat_of_other_symbols_or_a_floor_is_left_unknown():
    node = helper.make_node("Concat", ["a", "c"], ["y"], axis=0)
    assert _shapes(node, {"a": [B], "c": [S]}, [])["y"] == [None]
    floor = Mono(B.coef / 16, B.powers)  # floor(b / 16) twice is not floor(b / 8)
    assert _shapes(node, {"a": [floor], "c": [floor]}, [])["y"] == [None]


def test_a_split_by_constant_sizes_along_a_symbol_gives_each_its_size():
    sizes = numpy_helper.from_array(np.array([1, 2, 1], np.int64), "sizes")
    node = helper.make_node("Split", ["x", "sizes"], ["p", "q", "r"], axis=0)
    shapes = _shapes(node, {"x": [Mono.const(4) * B, S]}, [sizes])
    assert [shapes[o][0] for o in "pqr"] == [Mono.const(1), Mono.const(2), Mono.const(1)]
    assert all(shapes[o][1] == S for o in "pqr")
    got = _run(node, {"x": ["n", "s"]}, [sizes], {"x": np.zeros((4, 9), np.float32)})
    assert [g[0] for g in got] == [1, 2, 1]
