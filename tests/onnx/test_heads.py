"""Inputs read through a Slice to a tie's first positions (eqsat.onnx.axes.heads): a model written for ``total = past +
seq`` then computes, with a longer mask, what a model that reads its mask at the keys' positions only computes.
Oracles: onnxruntime running hand-written models of both kinds."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx import session
from eqsat.onnx.axes.heads import sliced_heads
from eqsat.onnx.axes.interface import interface

F = TensorProto.FLOAT


def _model(nodes: list, inits: dict, mask_dims: list, opset: int = 17) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("past", F, ["batch", "past", 4]),
              helper.make_tensor_value_info("new", F, ["batch", "seq", 4]),
              helper.make_tensor_value_info("mask", F, mask_dims)]
    model = helper.make_model(helper.make_graph(
        nodes, "m", inputs, [helper.make_tensor_value_info("y", F, ["batch", None])],
        [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in inits.items()]),
        opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _summed(head: bool, branch: bool = False) -> onnx.ModelProto:
    """The past and the new rows concatenated, summed over their last axis, plus the mask (``head``: its first past +
    seq entries, the original's own Slice; ``branch``: added inside an If's branch that reads it from outside)."""
    n = helper.make_node
    nodes = [n("Concat", ["past", "new"], ["both"], axis=1), n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0)]
    mask = "mask"
    if head:
        nodes += [n("Shape", ["both"], ["shape"]), n("Gather", ["shape", "one"], ["length"], axis=0),
                  n("Slice", ["mask", "zero", "length", "one"], ["cut"])]
        mask = "cut"
    if branch:
        then = helper.make_graph([n("Add", ["sums", mask], ["inner"])], "then", [],
                                 [helper.make_tensor_value_info("inner", F, None)])
        other = helper.make_graph([n("Sub", ["sums", mask], ["inner2"])], "else", [],
                                  [helper.make_tensor_value_info("inner2", F, None)])
        nodes += [n("Constant", [], ["flag"], value=helper.make_tensor("f", TensorProto.BOOL, [], [True])),
                  n("If", ["flag"], ["y"], then_branch=then, else_branch=other)]
    else:
        nodes.append(n("Add", ["sums", mask], ["y"]))
    return _model(nodes, {"axis2": [2], "one": [1], "zero": [0]}, ["batch", "total"])


def _feeds(rng: np.random.Generator, batch: int, past: int, seq: int, total: int) -> dict[str, np.ndarray]:
    return {"past": rng.standard_normal((batch, past, 4)).astype(np.float32),
            "new": rng.standard_normal((batch, seq, 4)).astype(np.float32),
            "mask": rng.standard_normal((batch, total)).astype(np.float32)}


def test_a_program_written_for_the_tie_reads_a_longer_mask_at_its_head_as_the_original_does():
    for branch in (False, True):
        written = sliced_heads(_summed(head=False, branch=branch), {"total": "past + seq"})
        assert written is not None and interface(written) == interface(_summed(head=False, branch=branch))
        got, want = session(written), session(_summed(head=True, branch=branch))
        rng = np.random.default_rng(0)
        for batch, past, seq, extra in [(1, 5, 2, 0), (2, 3, 1, 4), (1, 0, 3, 9), (3, 17, 1, 1)]:
            feeds = _feeds(rng, batch, past, seq, past + seq + extra)
            np.testing.assert_array_equal(got.run(None, feeds)[0], want.run(None, feeds)[0])
        unsliced = session(_summed(head=False, branch=branch))  # and without the Slice, refused when longer
        feeds = _feeds(rng, 1, 5, 2, 9)
        try:
            unsliced.run(None, feeds)
            raise AssertionError("the program written for the tie ran on a longer mask")
        except Exception as e:  # noqa: BLE001 - onnxruntime's broadcast error
            assert "AssertionError" not in type(e).__name__


def test_a_constant_in_the_tie_is_added_and_what_cannot_be_sliced_is_said():
    n = helper.make_node
    nodes = [n("ReduceSum", ["past", "axis2"], ["sums"], keepdims=0), n("Pad", ["sums", "pads"], ["padded"]),
             n("Add", ["padded", "mask"], ["y"])]
    model = _model(nodes, {"axis2": [2], "pads": [0, 0, 0, 2]}, ["batch", "total"])
    written = sliced_heads(model, {"total": "past + 2"})
    assert written is not None
    rng = np.random.default_rng(1)
    feeds = _feeds(rng, 2, 6, 1, 11)
    head = {**feeds, "mask": feeds["mask"][:, :8]}
    np.testing.assert_array_equal(session(written).run(None, feeds)[0], session(model).run(None, head)[0])
    assert sliced_heads(model, {"width": "past + 2"}) is model  # no input of that symbol: unchanged
    assert sliced_heads(model, {"total": "past * 2"}) is None  # no sum
    old = _model([helper.make_node("Add", ["mask", "mask"], ["y"])], {}, ["batch", "total"], opset=9)
    assert sliced_heads(old, {"total": "past + seq"}) is None  # Slice's bounds were attributes


def test_the_slice_takes_no_name_a_subgraph_defines():
    """An If branch reading the mask from outside defines the names the Slice would take first: the written model
    checks (single assignment) and computes what the original reading the head computes."""
    n = helper.make_node
    taken = ["mask_head_0", "head_axis_0", "head_start_0", "past_shape_0", "past_size_0", "seq_size_0", "total_head_0"]
    then = helper.make_graph([n("Identity", ["sums"], [taken[0]]), *[n("Identity", [a], [b]) for a, b in
                                                                    zip(taken, taken[1:])],
                              n("Add", [taken[-1], "mask"], ["inner"])], "then", [],
                             [helper.make_tensor_value_info("inner", F, None)])
    nodes = [n("Concat", ["past", "new"], ["both"], axis=1), n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0),
             n("Constant", [], ["flag"], value=helper.make_tensor("f", TensorProto.BOOL, [], [True])),
             n("If", ["flag"], ["y"], then_branch=then, else_branch=then)]
    model = _model(nodes, {"axis2": [2]}, ["batch", "total"])
    written = sliced_heads(model, {"total": "past + seq"})
    assert written is not None
    onnx.checker.check_model(written, full_check=True)
    rng = np.random.default_rng(2)
    feeds = _feeds(rng, 2, 4, 1, 9)
    want = session(model).run(None, {**feeds, "mask": feeds["mask"][:, :5]})[0]
    np.testing.assert_array_equal(session(written).run(None, feeds)[0], want)
