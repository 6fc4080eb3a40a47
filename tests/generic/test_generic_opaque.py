"""A size no monomial of the symbols fits (the frames of an audio front-end: a floor of a quotient of the samples)
is an opaque symbol in a program written for the user (:meth:`eqsat.generic.state.Rewrite.opaque_shape`): read off
the value that has it, kept by a Reshape target (``0``) or read where one needs it. At a batch of 1 a target reads
two ways (``[frames*batch, 8]`` and ``[frames, 8*batch]``): the original's target at a batch of 2 decides where it
computes it, else the reading networks write (the batch with the rows, an axis of 1 after the frames holding it).
Oracle: the original, whose targets are computed from its values' shapes, run in onnxruntime at several sizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.generic import make_generic
from eqsat.onnx import session

VALUES = {"batch": 1, "length": 64}
"""the representative sizes: 11 frames (a convolution 10 wide, of stride 5)"""
SIZES = [(1, 64), (2, 64), (3, 50), (2, 101), (4, 15)]
HEADS, WIDTH = 2, 8


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _front_end(static: bool, names: str = "") -> onnx.ModelProto:
    """samples[batch, length] -> a strided Conv to [batch, 8, frames] -> [frames, batch, 8] -> heads folded with the
    batch ``[frames, 2*batch, 4]`` (scaled) -> rows ``[frames*batch, 8]`` -> x W + b -> ``[frames, batch, 8]`` ->
    ``[batch, frames, 8]``: a WavLM attention's reshapes. ``static``: the program at the representative sizes
    (constant targets, named ``names`` + the original's names: another name is a target the original does not
    compute, a layer replayed from the first one's program); else the original, its targets computed from the
    shapes."""
    rng = np.random.default_rng(5)
    frames = (VALUES["length"] - 10) // 5 + 1
    b = VALUES["batch"]
    inits = [numpy_helper.from_array(rng.standard_normal((WIDTH, 1, 10)).astype(np.float32), "conv_w"),
             numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"), _ints("axes", 1)]
    if static:
        inits += [_ints(names + "heads_t", frames, HEADS * b, WIDTH // HEADS), _ints(names + "rows_t", frames * b, WIDTH),
                  _ints(names + "back_t", frames, b, WIDTH)]
        sizes: list[onnx.NodeProto] = []
    else:
        inits += [_ints("c_heads", HEADS), _ints("c_head", WIDTH // HEADS), _ints("c_width", WIDTH)]
        sizes = [helper.make_node("Shape", ["t"], ["f1"], start=0, end=1),
                 helper.make_node("Shape", ["t"], ["b1"], start=1, end=2),
                 helper.make_node("Mul", ["b1", "c_heads"], ["bh"]),
                 helper.make_node("Concat", ["f1", "bh", "c_head"], ["heads_t"], axis=0),
                 helper.make_node("Mul", ["f1", "b1"], ["fb"]),
                 helper.make_node("Concat", ["fb", "c_width"], ["rows_t"], axis=0),
                 helper.make_node("Concat", ["f1", "b1", "c_width"], ["back_t"], axis=0)]
    nodes = [helper.make_node("Unsqueeze", ["samples", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "conv_w"], ["c"], strides=[5]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1]),
             *sizes,
             helper.make_node("Reshape", ["t", names + "heads_t" if static else "heads_t"], ["h"]),
             helper.make_node("Mul", ["h", "half"], ["hs"]),
             helper.make_node("Reshape", ["hs", names + "rows_t" if static else "rows_t"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["prod"]),
             helper.make_node("Add", ["prod", "bias"], ["lin"]),
             helper.make_node("Reshape", ["lin", names + "back_t" if static else "back_t"], ["back"]),
             helper.make_node("Transpose", ["back"], ["y"], perm=[1, 0, 2])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", WIDTH])
    return helper.make_model(helper.make_graph(nodes, "front", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _runs_at_every_size(original: onnx.ModelProto, written: onnx.ModelProto) -> bool:
    ref, got = session(original), session(written)
    rng = np.random.default_rng(9)
    for b, n in SIZES:
        feeds = {"samples": rng.standard_normal((b, n)).astype(np.float32)}
        want = ref.run(None, feeds)[0]
        try:
            have = got.run(None, feeds)[0]
        except Exception:  # noqa: BLE001 - a program that does not run at a size
            return False
        if have.shape != want.shape or not np.allclose(have, want, rtol=1e-4, atol=1e-4):
            return False
    return True


@pytest.mark.parametrize("names", ["", "copy_"], ids=["targets-the-original-computes", "targets-of-a-replayed-layer"])
def test_a_size_no_monomial_fits_is_read_off_its_value_and_every_reshape_holds_at_every_size(names):
    original, program = _front_end(static=False), _front_end(static=True, names=names)
    assert _runs_at_every_size(original, original)
    assert not _runs_at_every_size(original, program)  # the static program is the representative sizes' only
    written = make_generic(program, original, VALUES).model
    assert _runs_at_every_size(original, written)
    g = written.graph
    reads = [n for n in g.node if n.op_type == "Shape"]
    assert reads, "the frames are read off a value of the program"
    assert not g.value_info  # a program for the user: no inner shapes, no opaque symbol named anywhere
    declared = {d.dim_param for vi in [*g.input, *g.output] for d in vi.type.tensor_type.shape.dim}
    assert not any("@" in d for d in declared)


def test_the_import_rewrite_has_no_opaque_symbols():
    """The import's rewrite (read again by eqsat) keeps an unknown size unknown: its value_info names only the
    interface's symbols."""
    from eqsat.generic import simplify_for_import

    original = _front_end(static=False)
    simplified = simplify_for_import(original, {"samples": (1, 64)})
    assert simplified is not None and simplified.graph.value_info  # the import's rewrite, with its inner shapes
    params = {d.dim_param for vi in simplified.graph.value_info for d in vi.type.tensor_type.shape.dim}
    assert not any("@" in p for p in params), params
