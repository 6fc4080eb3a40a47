"""The small integer vectors a dynamic-axes model computes from its shapes, read as monomials of the symbols without
a run (eqsat.onnx.axes.shape_values): each decided entry is the value onnxruntime computes at other sizes (the oracle),
and what is not one monomial at every size (a sum of two sizes, a floor of a quotient, a comparison the sizes
decide) is left to the runs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper

from eqsat.dims import Mono
from eqsat.onnx.axes.shape_values import evaluate, shape_values

SIZES = [{"batch": 1, "seq": 16}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 33}]


def _values_at(model: onnx.ModelProto, names: list[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's values of ``names`` in ``model`` on ``feeds`` (each exposed as an output)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in known)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(names, feeds)))


def _agree(model: onnx.ModelProto, decided: dict[str, list[Mono]], feeds_at) -> None:
    names = sorted(decided)
    for at in SIZES:
        got = _values_at(model, names, feeds_at(at))
        for name in names:
            want = [int(v) for v in np.asarray(got[name]).reshape(-1)]
            assert [int(m.value(at)) for m in decided[name]] == want, (name, at)


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_every_vector_decided_is_onnxruntime_s_at_other_sizes(name, tmp_path):
    model = zoo.export_dynamic(name, "torchscript", str(tmp_path / f"{name}.onnx"))
    decided = shape_values(model)
    computed = {o for n in model.graph.node if n.op_type != "Constant" for o in n.output}
    shaped = {n: v for n, v in decided.items() if n in computed and any(not m.is_const for m in v)}
    assert len(shaped) >= 10, sorted(shaped)  # the shape chains torch writes (Shape, Gather, Concat, ...)
    shapes = {n.output[0] for n in model.graph.node if n.op_type == "Shape"}
    # most Shapes: each value's shape inferred in the symbols (not BERT's after its position table's Slice, whose
    # length is the sequence's only up to the table's: a run decides those)
    assert len(shapes & set(decided)) >= len(shapes) // 2
    rng = np.random.default_rng(0)
    _agree(model, shaped, lambda at: zoo.sized_feeds(name, rng, at["batch"], at["seq"]))


def _chain_model() -> onnx.ModelProto:
    """Shape arithmetic over ``x [batch, seq, 4]``: what one monomial computes at every size, and what none does."""
    ints = {"i0": 0, "i1": 1, "two": 2, "minus": -1, "axes0": [0], "one_v": [1], "four": [4], "start": [1], "end": [3]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    one = numpy_helper.from_array(np.array([1], np.int64))
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Shape", ["h"], ["shape"]),
        helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
        helper.make_node("Mul", ["s", "two"], ["s2"]),
        helper.make_node("Div", ["s2", "two"], ["s_again"]),                   # exact: s
        helper.make_node("Div", ["s", "two"], ["half"]),                        # a floor: not decided
        helper.make_node("Sub", ["s", "b"], ["diff"]),                          # a difference: not decided
        helper.make_node("Mul", ["b", "s"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "axes0"], ["rows1"]),
        helper.make_node("Unsqueeze", ["s", "axes0"], ["s1"]),
        helper.make_node("Concat", ["rows1", "minus_v", "four"], ["target"], axis=0),
        helper.make_node("Reshape", ["minus", "one_v"], ["minus_v"]),
        helper.make_node("Shape", ["target"], ["tlen"]),
        helper.make_node("ConstantOfShape", ["tlen"], ["ones"], value=one),
        helper.make_node("Equal", ["target", "minus_v"], ["is_minus"]),
        helper.make_node("Where", ["is_minus", "ones", "target"], ["expand_to"]),  # torch's, before an Expand
        helper.make_node("Equal", ["s", "i1"], ["s_is_1"]),
        helper.make_node("Where", ["s_is_1", "two", "s"], ["by_size"]),         # the sizes decide: not decided
        helper.make_node("Slice", ["shape", "start", "end"], ["tail"]),
        helper.make_node("Range", ["i0", "s", "i1"], ["positions"]),
        helper.make_node("Shape", ["positions"], ["positions_len"]),            # a Range's length: s
        helper.make_node("Cast", ["positions_len"], ["positions_len32"], to=TensorProto.INT32),
    ]
    nodes.insert(11, nodes.pop(12))  # the Reshape before the Concat that reads it
    outs = ["s_again", "half", "diff", "s1", "expand_to", "by_size", "tail", "positions_len32"]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
                              [helper.make_tensor_value_info(o, TensorProto.INT64, None) for o in outs[:-1]]
                              + [helper.make_tensor_value_info(outs[-1], TensorProto.INT32, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_one_monomial_at_every_size_is_decided_and_nothing_else():
    model = _chain_model()
    decided = shape_values(model)
    b, s = Mono.symbol("batch"), Mono.symbol("seq")
    assert decided["s_again"] == [s]
    assert decided["expand_to"] == [b * s, Mono.const(1), Mono.const(4)]
    assert decided["tail"] == [s, Mono.const(4)]
    assert decided["positions_len32"] == [s]
    for undecided in ("half", "diff", "by_size"):
        assert undecided not in decided
    rng = np.random.default_rng(0)
    names = ["s_again", "expand_to", "tail", "positions_len32", "s1"]
    _agree(model, {n: decided[n] for n in names},
           lambda at: {"x": rng.standard_normal((at["batch"], at["seq"], 4)).astype(np.float32)})
    # the sizes at 1 are where the comparison turns: the runs, not the shapes, decide it
    got = _values_at(model, ["by_size"], {"x": np.zeros((1, 1, 4), np.float32)})
    assert int(got["by_size"]) == 2


def test_the_writer_s_evaluation_reads_the_known_vectors_and_the_nodes_before():
    """:func:`evaluate`, as the shape-generic writer asks it of one value: its node and the nodes before it, over
    the vectors it knows (a Shape's entries) and the constants; a boolean between them is evaluated, not asked."""
    model = _chain_model()
    producer = {o: n for n in model.graph.node for o in n.output}
    constants = {t.name: t for t in model.graph.initializer}
    b, s = Mono.symbol("batch"), Mono.symbol("seq")
    shapes = {"h": [b, s, Mono.const(4)], "target": [Mono.const(3)], "shape": [Mono.const(3)]}
    vectors = {"shape": [b, s, Mono.const(4)]}
    assert evaluate("expand_to", producer.get, vectors, constants, shapes) == [b * s, Mono.const(1), Mono.const(4)]
    assert evaluate("expand_to", producer.get, {}, constants, {}) is None  # no shape known: nothing decided
    assert evaluate("diff", producer.get, vectors, constants, shapes) is None
    assert evaluate("expand_to", producer.get, vectors, constants, shapes, depth=2) is None  # too far back
