"""Scaled-dot-product attention as one IR operator: the recognizer (eqsat.onnx.patterns) finds
the attention that torch's two exporters write in the zoo's transformers and in small hand-built graphs (scale
after the product as Mul or Div, on q and kt separately as torch's SDPA export writes it, with or without a mask,
Casts after the Softmax, its axis -1 or the last axis's positive index), refuses one whose inner value is used
outside or whose Softmax is over another axis, and the importer makes each one ``attention`` node
(eqsat.ops.attention). Oracles: numpy's own softmax attention for the hand-built graphs and
onnxruntime on the original model for the zoo. The operator's table entry is checked by tests/core/test_ops.py like
every other (its sampler is in tests/op_samplers.py).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import onnxruntime as ort
import pytest
import zoo
from attention_cases import KT, MASK, OUT, Q, V, attention_model, numpy_attention, ort_outputs, random_feeds
from onnx import TensorProto, helper, numpy_helper
from ort_graphs import fused, ort_graph
from zoo_cases import assert_close, with_biases

from eqsat import ir, ops
from eqsat.errors import ShapeError
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.onnx.patterns import find_composites
from eqsat.ops.composite import float_bits, float_value

N = helper.make_node
F = TensorProto.FLOAT
SCORES = N("MatMul", ["q", "kt"], ["s"])
SOFTMAX_V = [N("Softmax", ["m"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["y"])]
CASES = {  # name: (nodes, constants, scale, masked, covered node count)
    "torchscript_mul": ([SCORES, N("Mul", ["s", "c"], ["sc"]), N("Add", ["sc", "mask"], ["m"]), *SOFTMAX_V],
                        {"c": 0.35355338}, 0.35355338, True, 5),
    "div_without_mask": ([SCORES, N("Div", ["s", "c"], ["m"]), *SOFTMAX_V], {"c": math.sqrt(8.0)}, 1 / math.sqrt(8.0),
                         False, 4),
    "scale_first_mask_first": ([SCORES, N("Mul", ["c", "s"], ["sc"]), N("Add", ["mask", "sc"], ["m"]), *SOFTMAX_V],
                               {"c": 0.25}, 0.25, True, 5),
    "sdpa_scaled_q_and_kt": ([N("Mul", ["q", "r"], ["qs"]), N("Mul", ["kt", "r"], ["ks"]), N("MatMul", ["qs", "ks"], ["s"]),
                              N("Add", ["s", "mask"], ["m"]), *SOFTMAX_V], {"r": math.sqrt(0.125)}, 0.125, True, 6),
    "casts_after_softmax": ([SCORES, N("Mul", ["s", "c"], ["m"]), N("Softmax", ["m"], ["p0"], axis=-1),
                             N("Cast", ["p0"], ["p1"], to=F), N("Cast", ["p1"], ["p"], to=F), N("MatMul", ["p", "v"], ["y"])],
                            {"c": 0.5}, 0.5, False, 6),
    "unscaled": ([N("MatMul", ["q", "kt"], ["m"]), *SOFTMAX_V], {}, 1.0, False, 3),
    "softmax_axis_positive_last": ([SCORES, N("Mul", ["s", "c"], ["sc"]), N("Add", ["sc", "mask"], ["m"]),
                                    N("Softmax", ["m"], ["p"], axis=3), N("MatMul", ["p", "v"], ["y"])],
                                   {"c": 0.5}, 0.5, True, 5),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hand_built_attention_is_found_imported_and_exact(case):
    nodes, consts, scale, masked, covered = CASES[case]
    model = attention_model(nodes, consts)
    (match,) = find_composites(model.graph, {k: np.array(v, np.float32) for k, v in consts.items()})
    assert (match.op, match.output, len(match.nodes)) == ("attention", "y", covered)
    assert match.inputs == ("q", "kt", "v") + (("mask",) if masked else ())
    assert math.isclose(float_value(match.attrs[0]), scale, rel_tol=1e-6)
    graph = import_model(model)
    (y,) = graph.outputs
    assert y.op == "attention" and [i.op for i in y.inputs] == ["input"] * (3 + masked)
    out = export_model(graph)
    assert [n.op_type for n in out.graph.node] == ["MatMul", "Mul"] + ["Add"] * masked + ["Softmax", "MatMul"]
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        expected = numpy_attention(feeds["q"], feeds["kt"], feeds["v"], scale, feeds.get("mask"))
        for m in (model, out):
            np.testing.assert_allclose(ort_outputs(m, feeds)[0], expected, rtol=1e-5, atol=1e-5)


def _torchscript_with(nodes):  # the torchscript form with more nodes, for the negative cases
    return CASES["torchscript_mul"][0] + nodes


NEGATIVE = {  # name: (nodes, constants, outputs): an inner value used outside, or a part that is not attention's
    "scores_are_a_graph_output": (_torchscript_with([]), {"c": 0.5}, (("y", OUT), ("s", (1, 2, 4, 5)))),
    "probabilities_read_by_another_node": (_torchscript_with([N("Relu", ["p"], ["z"])]), {"c": 0.5},
                                           (("y", OUT), ("z", (1, 2, 4, 5)))),
    "softmax_over_another_axis": ([SCORES, N("Mul", ["s", "c"], ["m"]), N("Softmax", ["m"], ["p"], axis=-2),
                                   N("MatMul", ["p", "v"], ["y"])], {"c": 0.5}, (("y", OUT),)),
    "probabilities_on_the_right": ([N("MatMul", ["q", "kt"], ["m"]), N("Softmax", ["m"], ["p"], axis=-1),
                                    N("MatMul", ["w", "p"], ["y"])], {}, (("y", (1, 2, 4, 5)),)),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_attention_with_an_outside_use_or_a_wrong_part_is_not_matched(case):
    nodes, consts, outputs = NEGATIVE[case]
    inputs = (("q", Q), ("kt", KT), ("v", V), ("mask", MASK), ("w", (1, 2, 4, 4)))
    model = attention_model(nodes, consts, outputs, inputs)
    matches = find_composites(model.graph, {k: np.array(v, np.float32) for k, v in consts.items()})
    assert "attention" not in [m.op for m in matches]
    graph = import_model(model)
    assert "attention" not in graph.op_counts()
    feeds = random_feeds(model, 3)
    for got, want in zip(ort_outputs(export_model(graph), feeds), ort_outputs(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


R3 = (("q", (2, 4, 3)), ("kt", (2, 3, 5)), ("v", (2, 5, 3)))
"""rank-3 operands ([B, S, D]): axis 2 is their scores' last"""


@pytest.mark.parametrize("rank,axis,last", [(3, 2, True), (4, 3, True), (3, 1, False), (4, 2, False), (4, 1, False)])
def test_softmax_axis_written_as_a_positive_index(rank, axis, last):
    """A positive Softmax axis is the last one at one rank only: the recognizer leaves that to the shapes, and the
    importer makes an attention node where it is the scores' last axis, the nodes one by one (the Softmax one
    softmax over its axis) where not; values against numpy's softmax over that axis."""
    inputs = (("q", Q), ("kt", KT), ("v", V)) if rank == 4 else R3
    shapes = dict(inputs)
    nodes = [SCORES, N("Mul", ["s", "c"], ["m"]), N("Softmax", ["m"], ["p"], axis=axis), N("MatMul", ["p", "v"], ["y"])]
    model = attention_model(nodes, {"c": 0.5}, (("y", shapes["q"][:-1] + shapes["v"][-1:]),), inputs)
    (match,) = find_composites(model.graph, {"c": np.array(0.5, np.float32)})
    assert (match.op, match.last_axis) == ("attention", axis)
    graph = import_model(model)
    counts = graph.op_counts()
    assert counts["attention"] == int(last)
    if not last:
        assert [n.attrs for n in graph.nodes() if n.op == "softmax"] == [(axis,)]
    out = export_model(graph)
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        expected = numpy_attention(feeds["q"], feeds["kt"], feeds["v"], 0.5, axis=axis)
        for m in (model, out):
            np.testing.assert_allclose(ort_outputs(m, feeds)[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [None, 1, 2, 3, -1])
def test_before_opset_13_softmax_is_attention_only_over_the_last_axis(axis):
    """Before opset 13 a Softmax flattens its input at ``axis`` (default 1) and normalizes the rows: a softmax over
    the last axis only where ``axis`` is the last. The match holds (its IR attributes exist) exactly where
    onnxruntime's opset-12 attention equals numpy's over the last axis. (The importer itself takes opset >= 13.)"""
    soft = N("Softmax", ["m"], ["p"]) if axis is None else N("Softmax", ["m"], ["p"], axis=axis)
    nodes = [SCORES, N("Mul", ["s", "c"], ["m"]), soft, N("MatMul", ["p", "v"], ["y"])]
    model = attention_model(nodes, {"c": 0.5}, inputs=(("q", Q), ("kt", KT), ("v", V)), opset=12)
    (match,) = find_composites(model.graph, {"c": np.array(0.5, np.float32)}, opset=12)
    attrs = match.ir_attrs([Q, KT, V])
    feeds = random_feeds(model, 2)
    expected = numpy_attention(feeds["q"], feeds["kt"], feeds["v"], 0.5)
    same = np.allclose(ort_outputs(model, feeds)[0], expected, rtol=1e-5, atol=1e-5)
    assert same == (attrs is not None) == (axis in (3, -1))
    if attrs is not None:
        assert attrs == (float_bits(0.5),)


def test_before_opset_13_a_lone_softmax_is_one_only_over_the_last_axis():
    """The same for a Softmax alone (x [2, 3, 4]): its IR attributes exist where its opset-12 value (onnxruntime)
    is numpy's softmax over the last axis; from opset 13 every axis in range is one."""
    x = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    last = e / e.sum(axis=-1, keepdims=True)
    for axis in (None, 0, 1, 2, -1, 3):
        soft = N("Softmax", ["x"], ["y"]) if axis is None else N("Softmax", ["x"], ["y"], axis=axis)
        for opset in (12, 13):
            graph = helper.make_graph([soft], "g", [helper.make_tensor_value_info("x", F, x.shape)],
                                      [helper.make_tensor_value_info("y", F, x.shape)])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            (match,) = find_composites(model.graph, opset=opset)
            attrs = match.ir_attrs([x.shape])
            if axis == 3:  # out of range: no softmax at any opset
                assert attrs is None
                continue
            resolved = 2 if axis is None and opset >= 13 else 1 if axis is None else axis % 3
            assert attrs == ((resolved,) if opset >= 13 or resolved == 2 else None), (axis, opset)
            if opset == 12:
                same = np.allclose(ort_outputs(model, {"x": x})[0], last, rtol=1e-5, atol=1e-6)
                assert same == (attrs is not None), (axis, opset)


def test_a_mask_the_operator_refuses_is_imported_node_by_node():
    """A [4, 5] mask (rank 2 under rank-4 scores): recognized, but attention needs a mask of the scores' rank, so
    the nodes are imported one by one (the Softmax still one IR node) with the same values."""
    model = attention_model(CASES["torchscript_mul"][0], {"c": 0.5},
                            inputs=(("q", Q), ("kt", KT), ("v", V), ("mask", (4, 5))))
    assert [m.op for m in find_composites(model.graph, {"c": np.array(0.5, np.float32)})] == ["attention"]
    graph = import_model(model)
    assert "attention" not in graph.op_counts() and graph.op_counts()["softmax"] == 1
    feeds = random_feeds(model, 4)
    np.testing.assert_allclose(ort_outputs(export_model(graph), feeds)[0], ort_outputs(model, feeds)[0],
                               rtol=1e-5, atol=1e-5)


def test_a_constant_mask_of_lower_rank_is_broadcast_to_the_scores_rank():
    """A constant [4, 5] mask (a causal mask, say): one attention node with the mask as a [1, 1, 4, 5] weight."""
    mask = np.triu(np.full((4, 5), -1e9, np.float32), 1)
    model = attention_model(CASES["torchscript_mul"][0], {"c": 0.5, "mask": mask},
                            inputs=(("q", Q), ("kt", KT), ("v", V)))
    graph = import_model(model)
    (y,) = graph.outputs
    assert y.op == "attention" and y.inputs[3].op == "weight" and y.inputs[3].shape == (1, 1, 4, 5)
    feeds = random_feeds(model, 6)
    expected = numpy_attention(feeds["q"], feeds["kt"], feeds["v"], 0.5, mask)
    for m in (model, export_model(graph)):
        np.testing.assert_allclose(ort_outputs(m, feeds)[0], expected, rtol=1e-5, atol=1e-5)


def test_operator_refuses_ill_shaped_operands():
    bits = float_bits(0.5)
    assert ops.infer_shape("attention", (bits,), [(2, 4, 3), (2, 3, 6), (2, 6, 7)]) == (2, 4, 7)
    bad = {"rank 2": [(4, 3), (3, 6), (6, 7)], "inner": [(2, 4, 3), (2, 2, 6), (2, 6, 7)],
           "keys and values": [(2, 4, 3), (2, 3, 6), (2, 5, 7)], "batch": [(2, 4, 3), (1, 3, 6), (2, 6, 7)],
           "mask": [(2, 4, 3), (2, 3, 6), (2, 6, 7), (1, 3, 6)], "mask rank": [(2, 4, 3), (2, 3, 6), (2, 6, 7), (4, 6)]}
    for shapes in bad.values():
        with pytest.raises(ShapeError, match="attention"):
            ops.infer_shape("attention", (bits,), shapes)
    for scale in (0, -1.0, math.inf):
        with pytest.raises(ShapeError):
            ops.infer_shape("attention", (float_bits(scale) if scale else 0,), [(2, 4, 3), (2, 3, 6), (2, 6, 7)])


# -- the zoo's transformers ------------------------------------------------------------------------------
TRANSFORMERS = {"bert": (2, True), "gpt2": (2, True), "vit": (2, False), "llama": (1, True)}
"""name -> (attention blocks, masked in the TorchScript export); dynamo's ViT adds a constant all-zero mask"""
FAST = [(n, "torchscript", 17) for n in TRANSFORMERS] + [("bert", "dynamo", 18), ("llama", "dynamo", 18)]
UNSUPPORTED = {("gpt2", "dynamo", 17), ("llama", "dynamo", 17)}
SLOW = [(n, e, o) for n in TRANSFORMERS for e in zoo.EXPORTERS for o in zoo.OPSETS
        if (n, e, o) not in FAST and (n, e, o) not in UNSUPPORTED]


def check_zoo_attention(name: str, exporter: str, opset: int) -> None:
    model = with_biases(zoo.build(name, exporter, opset))  # a zero bias is not written (tests/onnx/test_neutral.py)
    blocks, masked = TRANSFORMERS[name]
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    found = [m for m in find_composites(model.graph, consts) if m.op == "attention"]
    assert len(found) == blocks
    assert all(len(m.inputs) == 4 for m in found) == (masked or exporter == "dynamo")
    graph = import_model(model)
    attention = [n for n in graph.nodes() if n.op == "attention"]
    assert len(attention) == blocks and all(math.isclose(float_value(n.attrs[0]), 8 ** -0.5, rel_tol=1e-6)
                                            for n in attention)
    assert not [n for n in graph.nodes() if n.op == "matmul" and len(n.shape) == 3 and n.inputs[1].op != "weight"], \
        "a product of two activations (attention's) left outside the attention node"
    own = export_model(graph)  # the user's other nodes written back verbatim, attention by its own emitter
    session_a = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session_b = ort.InferenceSession(own.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in (0, 1):
        feeds = zoo.feeds(name, seed)
        for o, a, b in zip(session_a.get_outputs(), session_a.run(None, feeds), session_b.run(None, feeds)):
            assert_close(a, b, f"{name} output {o.name!r}, seed {seed}")
    g_orig, g_own = ort_graph(model), ort_graph(own)
    assert g_own["nodes"] <= g_orig["nodes"]
    # onnxruntime makes of the written attention what it makes of the export's: the product and its scale in
    # one FusedMatMul, the Softmax kept
    for kind in ("FusedMatMul", "Softmax"):
        assert collections.Counter(g_own["ops"])[kind] == collections.Counter(g_orig["ops"])[kind], kind
    assert not {k for k in fused(g_orig) if k not in fused(g_own)}


@pytest.mark.parametrize("name,exporter,opset", FAST, ids=[f"{n}-{e}-{o}" for n, e, o in FAST])
def test_zoo_attention_is_one_node_and_exact(name, exporter, opset):
    check_zoo_attention(name, exporter, opset)


@pytest.mark.slow
@pytest.mark.parametrize("name,exporter,opset", SLOW, ids=[f"{n}-{e}-{o}" for n, e, o in SLOW])
def test_zoo_attention_full_matrix(name, exporter, opset):
    check_zoo_attention(name, exporter, opset)


def test_attention_node_in_a_program_is_exact_against_numpy():
    """An IR program with an attention node written by its emitter, against the numpy oracle (4-D, masked)."""
    rng = np.random.default_rng(5)
    q, kt, v, mask = (ir.input_(n, s) for n, s in (("q", Q), ("kt", KT), ("v", V), ("mask", MASK)))
    y = ir.make("attention", [q, kt, v, mask], (float_bits(0.3),))
    model = export_model(ir.Graph((q, kt, v, mask), (y,), ("y",)))
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in (("q", Q), ("kt", KT), ("v", V), ("mask", MASK))}
    expected = numpy_attention(feeds["q"], feeds["kt"], feeds["v"], float(np.float32(0.3)), feeds["mask"])
    np.testing.assert_allclose(ort_outputs(model, feeds)[0], expected, rtol=1e-5, atol=1e-5)
