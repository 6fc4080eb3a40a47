"""A size no monomial of the symbols fits (an audio front-end's frames) becomes an opaque symbol where the writer first
fits it, and shape inference carries that symbol through the layers computed from it: a candidate of a deep audio
encoder is written with the runs of one fit, not one fit (a run of a longer prefix at several sizes) per layer.
Oracle: the original, whose Reshape targets are computed from its values' shapes, run in onnxruntime at several sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_check import outputs_match

from eqsat.generic import Original, make_generic

WIDTH, HEADS = 8, 2
VALUES = {"batch": 1, "length": 64}
"""the representative sizes: 11 frames (a convolution 10 wide, of stride 5)"""
SIZES = [(1, 64), (2, 64), (3, 50), (2, 101), (1, 400)]


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _encoder(layers: int, static: bool) -> onnx.ModelProto:
    """samples[batch, length] -> a strided Conv -> ``x`` [batch, frames, 8] -> per layer: ``x W + b`` reshaped to
    heads ``[batch, frames, 2, 4]``, scaled, reshaped back and added to ``x``. ``static``: the program at the
    representative sizes (constant targets); else the original, its targets computed from ``x``'s shape."""
    rng = np.random.default_rng(3)
    frames = (VALUES["length"] - 10) // 5 + 1
    inits = [numpy_helper.from_array(rng.standard_normal((WIDTH, 1, 10)).astype(np.float32), "conv_w"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"), _ints("axes", 1)]
    nodes = [helper.make_node("Unsqueeze", ["samples", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "conv_w"], ["c"], strides=[5]),
             helper.make_node("Transpose", ["c"], ["x0"], perm=[0, 2, 1])]
    if static:
        inits += [_ints("heads_t", 1, frames, HEADS, WIDTH // HEADS), _ints("back_t", 1, frames, WIDTH)]
    else:
        inits += [_ints("c_heads", HEADS, WIDTH // HEADS), _ints("c_width", WIDTH)]
        nodes += [helper.make_node("Shape", ["x0"], ["bf"], start=0, end=2),
                  helper.make_node("Concat", ["bf", "c_heads"], ["heads_t"], axis=0),
                  helper.make_node("Concat", ["bf", "c_width"], ["back_t"], axis=0)]
    for k in range(layers):
        inits += [numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / 3, f"w{k}"),
                  numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("MatMul", [f"x{k}", f"w{k}"], [f"p{k}"]),
                  helper.make_node("Add", [f"p{k}", f"b{k}"], [f"l{k}"]),
                  helper.make_node("Reshape", [f"l{k}", "heads_t"], [f"h{k}"]),
                  helper.make_node("Mul", [f"h{k}", "half"], [f"s{k}"]),
                  helper.make_node("Reshape", [f"s{k}", "back_t"], [f"r{k}"]),
                  helper.make_node("Add", [f"r{k}", f"x{k}"], [f"x{k + 1}"])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info(f"x{layers}", TensorProto.FLOAT, ["batch", "frames", WIDTH])
    return helper.make_model(helper.make_graph(nodes, "encoder", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _same_at_every_size(original: onnx.ModelProto, written: onnx.ModelProto) -> bool:
    try:
        return all(outputs_match(original, written, seed=9, draws=1, shapes={"samples": size}, rtol=1e-4)
                   for size in SIZES)
    except Exception:  # noqa: BLE001 - a program that does not run at a size
        return False


def _written(layers: int) -> tuple[onnx.ModelProto, int]:
    """The static program of ``layers`` layers written shape-generic, and the runs of prefixes its writer made."""
    original, program = _encoder(layers, static=False), _encoder(layers, static=True)
    assert _same_at_every_size(original, original)
    assert not _same_at_every_size(original, program)  # the static program holds at the representative sizes only
    facts = Original(original, VALUES)
    written = make_generic(program, original, VALUES, facts).model
    assert _same_at_every_size(original, written)
    return written, facts.probed


@pytest.mark.parametrize("layers", [2, 6])
def test_a_deep_encoders_frames_are_fitted_once_not_once_a_layer(layers):
    _, one = _written(1)
    written, deep = _written(layers)
    assert deep == one, f"{deep} runs for {layers} layers, {one} for one"
    reads = [n for n in written.graph.node if n.op_type == "Shape"]
    assert len(reads) == 1, "every layer's targets read the frames off one value"

