"""A broadcasting node's output sizes that shape inference leaves unknown, where its inputs read one size two ways
(``[2*seq, 3072, 384] @ [2*batch*seq, 384, 1]`` at a batch of 1: the experts' weights gathered per routed token
and the tokens, each read its own way), are written as one of them (eqsat.generic.values.broadcast_sizes): the
program runs only where they are equal. A MatMul's batch axes broadcast so; its last two axes never. Where the
two differ at the representative sizes, or one is a symbol at 1 there (it may broadcast), the size stays unknown
(a run fits it). Each size given is checked against onnxruntime's at the representative sizes; through the
writer, the MatMul's is given without a run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from eqsat.dims import Mono
from eqsat.generic import Original, make_generic
from eqsat.generic.values import broadcast_sizes
from eqsat.onnx.axes.symbolic import infer_node

B, S, C = Mono.symbol("batch"), Mono.symbol("seq"), Mono.const
VALUES = {"batch": 1, "seq": 6}
OPSET = [helper.make_opsetid("", 17)]


def _written(op: str, a: list[Mono], b: list[Mono]) -> list[Mono | None]:
    node = helper.make_node(op, ["a", "b"], ["y"])
    shapes = {"a": a, "b": b}
    types = dict.fromkeys(shapes, TensorProto.FLOAT)
    inferred = infer_node(node, shapes, types, {}, OPSET)["y"][1]
    assert inferred is not None
    w = SimpleNamespace(shapes=shapes, sizes_at=VALUES, fits=SimpleNamespace(opaque={}))
    return broadcast_sizes(w, node, inferred)


def _ort_shape(op: str, a: list[Mono], b: list[Mono]) -> tuple[int, ...]:
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = ort.InferenceSession(helper.make_model(graph, opset_imports=OPSET).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    feeds = {n: np.ones([int(m.value(VALUES)) for m in dims], np.float32) for n, dims in (("a", a), ("b", b))}
    return sess.run(None, feeds)[0].shape


def test_a_matmul_s_batch_axis_read_two_ways_is_one_of_them():
    a, b = [C(2) * S, C(12), C(8)], [C(2) * B * S, C(8), C(1)]
    got = _written("MatMul", a, b)
    assert got[0] in (C(2) * S, C(2) * B * S) and got[1:] == [C(12), C(1)]
    assert tuple(int(m.value(VALUES)) for m in got if m is not None) == _ort_shape("MatMul", a, b)


def test_an_add_s_axis_read_two_ways_is_one_of_them():
    a, b = [S, C(8)], [B * S, C(8)]
    got = _written("Add", a, b)
    assert None not in got and tuple(int(m.value(VALUES)) for m in got if m is not None) == _ort_shape("Add", a, b)


def test_a_symbol_at_one_may_broadcast_so_its_size_stays_unknown():
    got = _written("MatMul", [S, C(12), C(8)], [B, C(8), C(1)])  # batch is 1 here: [seq] or [batch] at other sizes
    assert got[0] is None and got[1:] == [C(12), C(1)]


def test_a_matmul_s_batch_axis_read_two_ways_is_written_without_a_run():
    """In the writer (eqsat.generic.make_generic): the experts' rows ``[2*seq, 12, 8]`` by the tokens
    ``[2*batch*seq, 8, 1]`` at a batch of 1 (a mixture of experts' batched MatMul), then a Reshape that reads the
    product's shape: its size is one of the two readings, so no run of the program so far fits it (the writer
    made 10 there before), and the program written computes the original's output (onnxruntime on both)."""
    nodes = [helper.make_node("Tile", ["a0", "rep"], ["a"]),
             helper.make_node("Reshape", ["b0", "t"], ["b1"]),
             helper.make_node("Tile", ["b1", "rep"], ["b"]),
             helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Reshape", ["m", "t2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a0", TensorProto.FLOAT, ["seq", 12, 8]),
                                           helper.make_tensor_value_info("b0", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 24])],
                              [numpy_helper.from_array(np.array(v, np.int64), n)
                               for n, v in (("rep", [2, 1, 1]), ("t", [-1, 8, 1]), ("t2", [-1, 6, 24]))])
    model = helper.make_model(graph, opset_imports=OPSET)
    facts = Original(model, VALUES)
    written = make_generic(model, model, VALUES, facts).model
    assert facts.probed == 0
    rng = np.random.default_rng(0)
    feeds = {"a0": rng.standard_normal((6, 12, 8)).astype(np.float32),
             "b0": rng.standard_normal((1, 6, 8)).astype(np.float32)}
    want, got = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
                 for m in (model, written))
    np.testing.assert_allclose(got, want, rtol=1e-6)
