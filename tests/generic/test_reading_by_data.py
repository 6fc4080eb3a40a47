"""A candidate's Reshape to a constant that two of the original's computed targets read otherwise, told apart by
the elements it reshapes.

MaskFormer (Swin + a DETR decoder), TorchScript, at 224 pixels: the last Swin stage is one window of 49 tokens,
so its q, k and v go to ``[windows, 49, -1, 32]`` (``windows = batch*tokens/49`` at 1), and the decoder's keys
over the same 49 tokens to ``[batch, tokens, -1, 32]``. Both are ``[1, 49, 12, 32]`` there. The extracted program
computes q on rows and reshapes them to that constant; the writer could not tell the two readings apart, read the
tokens as the window, and every rewritten candidate failed at 448 pixels (the window's relative bias no longer
broadcast): the input came back. The reading whose original Reshape holds the same elements now decides.
Oracle: the original in onnxruntime at other sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.generic import make_generic

D, HEADS, WINDOW = 384, 12, 49


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _computed_targets() -> list[onnx.NodeProto]:
    """The windows' ``[batch*tokens/49, 49, -1, 32]`` (``t_win``) and the keys' ``[batch, tokens, -1, 32]``
    (``t_keys``), computed from ``x``'s shape as TorchScript writes them."""
    return [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
            helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
            helper.make_node("Mul", ["b", "n"], ["bn"]),
            helper.make_node("Div", ["bn", "window"], ["nw"]),
            helper.make_node("Concat", ["nw", "window", "rest", "head"], ["t_win"], axis=0),
            helper.make_node("Concat", ["b", "n", "rest", "head"], ["t_keys"], axis=0)]


def _windows_and_keys(rows: bool, batch: str | int, constants: bool = False) -> onnx.ModelProto:
    """Tokens ``[batch, tokens, D]`` (tokens a multiple of 49) through a window attention's q (to ``[windows, 49,
    -1, 32]``, plus a per-window bias ``[12, 49, 32]``) and a decoder's keys (to ``[batch, tokens, -1, 32]``), both
    targets computed from the shapes as TorchScript writes them. ``rows``: q as the search extracts it at 49 tokens
    (on rows ``[-1, D]``, reshaped to the constant ``[1, 49, 12, 32]``). ``batch``: the first axis (fixed at 1: no
    symbol at 1 tells the writer the target is open, the tokens equal to the window's 49 do). ``constants``: the
    targets as the dynamo exporter writes them at a batch of 1 (``[-1, 49, 12, 32]`` and ``[1, -1, 12, 32]``)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.05, "wq"),
             numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.05, "wk"),
             numpy_helper.from_array(rng.standard_normal((HEADS, WINDOW, 32)).astype(np.float32), "bias"),
             _ints("i0", 0), _ints("i1", 1), _ints("window", WINDOW), _ints("rest", -1), _ints("head", 32),
             _ints("to_rows", -1, D), _ints("tuned", 1, WINDOW, HEADS, 32)]
    if constants:
        inits += [_ints("t_win", -1, WINDOW, HEADS, 32), _ints("t_keys", 1, -1, HEADS, 32)]
    sizes = _computed_targets() if not constants else []
    if rows:
        q = [helper.make_node("Reshape", ["x", "to_rows"], ["xr"]),
             helper.make_node("MatMul", ["xr", "wq"], ["qr"]),
             helper.make_node("Reshape", ["qr", "tuned"], ["q4"])]
    else:
        q = [helper.make_node("MatMul", ["x", "wq"], ["qm"]),
             helper.make_node("Reshape", ["qm", "t_win"], ["q4"])]
    rest = [helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
            helper.make_node("Add", ["qt", "bias"], ["q"]),
            helper.make_node("MatMul", ["x", "wk"], ["km"]),
            helper.make_node("Reshape", ["km", "t_keys"], ["k4"]),
            helper.make_node("Transpose", ["k4"], ["k"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph([*sizes, *q, *rest], "windows",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, "tokens", D])],
                              [helper.make_tensor_value_info("q", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("k", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("batch", "constants"), [("batch", False), (1, False), (1, True)])
def test_the_window_reading_is_the_one_holding_the_same_elements(batch, constants):
    original = _windows_and_keys(False, batch, constants)
    values = {"tokens": WINDOW, **({"batch": 1} if batch == "batch" else {})}
    written = make_generic(_windows_and_keys(True, batch, constants), original, values)
    batches = (1, 2, 3) if batch == "batch" else (1,)
    assert_same_at(original, written.model,
                   [{"x": (b, n, D)} for b in batches for n in (WINDOW, 2 * WINDOW, 4 * WINDOW)])


def _twice(rows: bool) -> onnx.ModelProto:
    """q (of 49 tokens, batch fixed at 1) reshaped both to the windows ``[windows, 49, -1, 32]`` (plus a bias) and
    to heads ``[0, 0, 12, 32]``; k to ``[batch, tokens, -1, 32]``. ``rows``: the heads' target folded to the constant
    ``[1, 49, 12, 32]`` (the reading it needs is ``[1, tokens, 12, 32]``, which no other target of those entries
    gives: the windows' Reshape holds the same elements, so the elements do not decide, and the sizes do)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.05, "wq"),
             numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.05, "wk"),
             numpy_helper.from_array(rng.standard_normal((WINDOW, HEADS, 32)).astype(np.float32), "bias"),
             _ints("i0", 0), _ints("i1", 1), _ints("window", WINDOW), _ints("rest", -1), _ints("head", 32),
             _ints("heads", *((1, WINDOW, HEADS, 32) if rows else (0, 0, HEADS, 32)))]
    nodes = [*_computed_targets(),
             helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("Reshape", ["q", "t_win"], ["qw"]), helper.make_node("Add", ["qw", "bias"], ["w"]),
             helper.make_node("Reshape", ["k", "t_keys"], ["kk"]),
             helper.make_node("Reshape", ["q", "heads"], ["qh"]),
             helper.make_node("Transpose", ["qh"], ["h"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "tokens", D])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("h", "w", "kk")],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_elements_another_target_reshapes_too_leave_the_reading_to_the_sizes():
    original = _twice(False)
    written = make_generic(_twice(True), original, {"tokens": WINDOW})
    assert_same_at(original, written.model, [{"x": (1, n, D)} for n in (WINDOW, 2 * WINDOW, 4 * WINDOW)])
