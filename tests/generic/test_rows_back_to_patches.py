"""A layer over a ViT's patches written as rows, a Gemm, and back to ``[1, patches, N]``, written for every size.

CHMv2's dynamo export (DINOv3 and a DPT head, batch fixed at 1) concatenates each patch with the class token and
projects it; the extracted program runs that projection on rows (``[-1, 768]``) and reshapes the result back to
the tuned ``[1, 196, 384]``. The patches' count is ``1/256*height*width`` (two sides of 16 pixels), which divides
neither side's size, so the writer could not tell which axis of the target the patches go to, wrote the tuned
constant, and every rewritten candidate failed at a height of 37: the input came back. A target with one axis
above 1 now takes the whole count there (eqsat.onnx.axes.targets._assign).
Oracle: the original in onnxruntime at other sides."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_same_at

from eqsat.generic import make_generic

C, N = 8, 16


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _patch_layer(rows: bool, batch: str | int) -> onnx.ModelProto:
    """Patches of 16 pixels ``[1, n, C]`` through a linear layer of ``N`` and an erf GELU. ``rows``: the program as
    the search extracts it at 224 x 224 (to rows ``[-1, C]``, the product, the GELU, back to the tuned
    ``[1, 196, N]``); else as exported (the product on ``[1, n, C]``). ``batch``: the image's first axis (a
    symbol at 1 in the rows' count: ``[1, 196, N]`` reads as ``[batch, patches, N]``)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((C, 3, 16, 16)).astype(np.float32) * 0.1, "k"),
             numpy_helper.from_array(rng.standard_normal((C, N)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(2 ** 0.5, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             _ints("flat", 0, C, -1), _ints("to_rows", -1, C), _ints("back", 1, 196, N)]
    patches = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[16, 16], strides=[16, 16]),
               helper.make_node("Reshape", ["c", "flat"], ["f"]),
               helper.make_node("Transpose", ["f"], ["p"], perm=[0, 2, 1])]
    if rows:
        linear = [helper.make_node("Reshape", ["p", "to_rows"], ["r"]),
                  helper.make_node("Gemm", ["r", "w", "b"], ["a"])]
    else:
        linear = [helper.make_node("MatMul", ["p", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"])]
    gelu = [helper.make_node("Div", ["a", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["a", "e1"], ["g0"]),
            helper.make_node("Mul", ["g0", "half"], ["g" if rows else "y"])]
    out = [helper.make_node("Reshape", ["g", "back"], ["y"])] if rows else []
    graph = helper.make_graph([*patches, *linear, *gelu, *out], "patches",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, "n", N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("batch", [1, "batch"])
def test_rows_go_back_to_the_patches_at_every_size(batch):
    original = _patch_layer(False, batch)
    values = {"height": 224, "width": 224, **({"batch": 1} if batch == "batch" else {})}
    written = make_generic(_patch_layer(True, batch), original, values)
    assert not [n for n in written.notes if "does not line up" in n], written.notes
    batches = (1, 2, 3) if batch == "batch" else (1,)
    assert_same_at(original, written.model,
                   [{"x": (b, 3, h, w)} for b in batches
                    for h, w in ((224, 224), (37, 256), (480, 320), (16, 33), (255, 241))])
