"""A rotary embedding at a decode step's offset, tuned at one new token and written as onnxruntime's kernel
(``RotaryEmbedding``): its caches are the angles of each new position, so a chunk of several new tokens must read
one row per position. At a sequence of 1, a cache's shape [1, 1, 1, D] cannot tell its sequence axis from a
constant 1; written as a Reshape to sizes it became [0, 1, -1] (every position's angles on one row) and the program
was wrong at 8 tokens. The oracle: the original model in onnxruntime at several sequence lengths."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from rule_cases import choose

from eqsat.egglog.egraph import EGraph
from eqsat.generic import import_generic, make_generic
from eqsat.onnx import export_model, session
from eqsat.onnx.axes.interface import symbol_values
from eqsat.rules import RuleEngine, by_name

HEADS, D = 3, 8


def _offset_rotary() -> onnx.ModelProto:
    """y = x * cos + rotate_half(x) * sin, cos and sin computed from the positions ``pos`` [1, seq] (a decode
    step's past length plus 0..seq-1, as LLaMA's exports compute them): Cos(Concat(f, f)) of the angles f."""
    inv = numpy_helper.from_array((1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32), "inv")
    ints = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
            (("zero", [0]), ("h", [D // 2]), ("big", [2 ** 62]), ("last", [-1]), ("one", [1]))]
    nodes = [helper.make_node("Unsqueeze", ["pos", "last"], ["p3"]), helper.make_node("Mul", ["p3", "inv"], ["f"]),
             helper.make_node("Concat", ["f", "f"], ["emb"], axis=-1)]
    for fn, name in (("Cos", "cos"), ("Sin", "sin")):
        nodes += [helper.make_node(fn, ["emb"], [f"{name}3"]), helper.make_node("Unsqueeze", [f"{name}3", "one"], [name])]
    nodes += [helper.make_node("Slice", ["x", "zero", "h", "last", "one"], ["x1"]),
              helper.make_node("Slice", ["x", "h", "big", "last", "one"], ["x2"]),
              helper.make_node("Neg", ["x2"], ["nx2"]), helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
              helper.make_node("Mul", ["x", "cos"], ["a"]), helper.make_node("Mul", ["rot", "sin"], ["b"]),
              helper.make_node("Add", ["a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "offset_rotary",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, HEADS, "seq", D]),
                               helper.make_tensor_value_info("pos", TensorProto.FLOAT, [1, "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HEADS, "seq", D])],
                              [inv, *ints])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_rotary_kernel_tuned_at_one_token_is_right_at_every_sequence_length():
    model = _offset_rotary()
    shapes = {"x": (1, HEADS, 1, D), "pos": (1, 1)}
    graph = import_generic(model, shapes)
    assert graph.op_counts()["rotary"] == 1
    eg = EGraph.from_graph(graph)
    assert RuleEngine(eg, [by_name()["rotary_kernel"]]).apply("rotary_kernel").changed
    program = export_model(choose(eg, graph, "rope"))
    written = make_generic(program, model, symbol_values(model, shapes)).model
    assert "RotaryEmbedding" in {n.op_type for n in written.graph.node}
    ref, got = session(model), session(written)
    rng = np.random.default_rng(0)
    for seq, past in ((1, 37), (8, 1024), (5, 0)):
        feeds = {"x": rng.standard_normal((1, HEADS, seq, D)).astype(np.float32),
                 "pos": (past + np.arange(seq, dtype=np.float32))[None]}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5, err_msg=f"seq {seq}")
