"""Reshape targets a candidate holds as constants, read as sizes of the symbols: a GroupNorm's groups of a feature map
and Swin's windows, written for every size.

MaskFormer's dynamo export (a Swin backbone, a pixel decoder of GroupNorms) runs each GroupNorm as a Reshape to
``[1, 32, -1]``, an InstanceNormalization of 32 scales and a Reshape back. The candidate's target, folded at 224 x 224,
is ``[1, 32, 392]``; the writer read its symbols by their sizes alone (each on an axis its size divides, else the
first free one, by a fraction), gave the 32 groups a share of the height, and every candidate failed at a height of
448 ("size of scale != input channels"): the input came back. Targets are now read in memory order where that
decides them (eqsat.onnx.axes.targets._in_order): the groups take 32 of the channels, the last axis the other
channels times both sides.

MaskFormer's TorchScript export runs each window attention's q, k and v projection on rows ``[-1, 48]`` and reshapes
each part back to the tuned ``[64, 49, 2, 24]`` (64 windows of 49 patches at a batch of 1). The writer put the height
and the width on the windows' and the patches' axes by fractions (2/7 of the height, 7/32 of the width) and the
windows' Reshape did not line up: every candidate failed at a batch of 2. A symbol whose size divides no axis now
goes with the other symbols of its input axis (the windows are ``1/784*batch*h*w``).
Oracles: the original in onnxruntime at other sizes; numpy's reshape at other sizes."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.dims import Mono
from eqsat.generic import make_generic
from eqsat.onnx.axes.targets import reshape_target

C, GROUPS = 64, 8
VALUES = {"height": 224, "width": 224}


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _group_norm(folded: bool) -> onnx.ModelProto:
    """Patches of 32 pixels (a Conv of ``C`` channels) through a GroupNorm of ``GROUPS`` groups spelled as dynamo
    writes it, and a per-channel scale. ``folded``: the targets as a candidate holds them at 224 x 224."""
    rng = np.random.default_rng(4)
    per = C // GROUPS * 7 * 7
    inits = [numpy_helper.from_array(rng.standard_normal((C, 3, 32, 32)).astype(np.float32) * 0.05, "k"),
             numpy_helper.from_array(rng.standard_normal(GROUPS).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(GROUPS).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal((C, 1, 1)).astype(np.float32), "gamma"),
             _ints("groups", 1, GROUPS, per) if folded else _ints("groups", 1, GROUPS, -1),
             _ints("back", 1, C, 7, 7)]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[32, 32], strides=[32, 32]),
             helper.make_node("Reshape", ["c", "groups"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "scale", "bias"], ["n"], epsilon=1e-5)]
    if not folded:
        nodes.append(helper.make_node("Shape", ["c"], ["back"]))
        inits.pop()
    nodes += [helper.make_node("Reshape", ["n", "back"], ["r"]), helper.make_node("Mul", ["r", "gamma"], ["y"])]
    graph = helper.make_graph(nodes, "group_norm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, "gh", "gw"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_group_norm_reshapes_hold_at_every_size():
    original = _group_norm(False)
    written = make_generic(_group_norm(True), original, VALUES)
    assert_same_at(original, written.model,
                   [{"x": (1, 3, h, w)} for h, w in ((224, 224), (448, 224), (480, 320), (64, 96), (255, 300))])


def test_a_target_is_read_in_memory_order():
    # oracle: numpy's reshape of an array of the input's sizes to [1, 32, -1], at other sizes than the tuned ones
    h, w = Mono.symbol("h"), Mono.symbol("w")
    dims = [Mono.const(1), Mono.const(256), Mono.const(Fraction(1, 32)) * h, Mono.const(Fraction(1, 32)) * w]
    read = reshape_target(dims, [1, 32, 392], {"h": 224, "w": 224})
    assert read is not None
    for hv, wv in itertools.product((64, 96, 448), (32, 160)):
        at = {"h": hv, "w": wv}
        shape = [int(m.value(at)) for m in dims]
        want = np.arange(int(np.prod(shape))).reshape(shape).reshape(1, 32, -1).shape
        assert tuple(int(m.value(at)) for m in read) == want, at


def _side(axis: int, name: str) -> list[onnx.NodeProto]:
    """``floor(side / 28)`` of the image's axis ``axis``, a 1-D vector, as TorchScript computes a window count."""
    return [helper.make_node("Shape", ["x"], [f"{name}_s"], start=axis, end=axis + 1),
            helper.make_node("Div", [f"{name}_s", "window_px"], [name])]


def _windows(rows: bool) -> onnx.ModelProto:
    """Patches of 4 pixels cut into windows of 7 x 7 (Swin's window partition, its sizes computed from the image's
    shape) and projected to q, k and v. ``rows``: the projection as the search extracts it at a batch of 1 and
    224 x 224 (rows ``[-1, 16]``, a Gemm, back to the tuned ``[64, 49, 48]``)."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 3, 4, 4)).astype(np.float32) * 0.1, "k"),
             numpy_helper.from_array(rng.standard_normal((16, 48)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b"),
             _ints("window_px", 28), _ints("seven", 7), _ints("chans", 16), _ints("windows", -1, 49, 16),
             _ints("to_rows", -1, 16), _ints("back", 64, 49, 48)]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Shape", ["x"], ["batch"], start=0, end=1), *_side(2, "rows"), *_side(3, "cols"),
             helper.make_node("Concat", ["batch", "rows", "seven", "cols", "seven", "chans"], ["cut"], axis=0),
             helper.make_node("Reshape", ["t", "cut"], ["p6"]),
             helper.make_node("Transpose", ["p6"], ["pw"], perm=[0, 1, 3, 2, 4, 5])]
    if rows:
        nodes += [helper.make_node("Reshape", ["pw", "to_rows"], ["r"]),
                  helper.make_node("Gemm", ["r", "w", "b"], ["g"]),
                  helper.make_node("Reshape", ["g", "back"], ["y"])]
    else:
        nodes += [helper.make_node("Reshape", ["pw", "windows"], ["win"]),
                  helper.make_node("MatMul", ["win", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(nodes, "windows",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["windows", 49, 48])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_window_rows_go_back_to_the_windows_at_every_size():
    original = _windows(False)
    written = make_generic(_windows(True), original, {"batch": 1, **VALUES})
    assert not [n for n in written.notes if "does not line up" in n], written.notes
    assert_same_at(original, written.model, [{"x": (b, 3, h, w)} for b in (1, 2, 3)
                                             for h, w in ((224, 224), (448, 224), (280, 336), (28, 56))])


@pytest.mark.parametrize("dims, target, inner", [
    # a side's patches cut into pairs: the pairs' count takes the side (not a 1/112 of it on the pairs)
    ([Mono.const(Fraction(7, 8)) * Mono.symbol("h")], [98, 2], [2]),
    # Swin's windows of 49 patches, at a batch of 1: the windows take the batch and both sides
    ([Mono.const(Fraction(1, 16)) * Mono.symbol("b") * Mono.symbol("h") * Mono.symbol("w"), Mono.const(144)],
     [64, 49, 144], [49, 144]),
    # a grid of 16-pixel patches: each side its own axis
    ([Mono.const(Fraction(1, 256)) * Mono.symbol("h") * Mono.symbol("w"), Mono.const(8)], [14, 14, 8], None),
])
def test_a_constant_target_reads_as_the_reshape_the_network_writes(dims, target, inner):
    # oracle: numpy's reshape at other sizes, to the constant inner axes with the rest outside them (``inner``), or
    # to the grid of each side's patches
    values = {"b": 1, "h": 224, "w": 224}
    read = reshape_target(dims, target, {s: values[s] for m in dims for s, _ in m.powers})
    assert read is not None
    for at in ({"b": 2, "h": 448, "w": 224}, {"b": 3, "h": 224, "w": 672}):
        shape = [int(m.value(at)) for m in dims]
        flat = np.arange(int(np.prod(shape))).reshape(shape)
        want = flat.reshape(-1, *inner).shape if inner is not None \
            else flat.reshape(at["h"] // 16, at["w"] // 16, -1).shape
        assert tuple(int(m.value(at)) for m in read) == want, at
