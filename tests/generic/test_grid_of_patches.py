"""A segmentation head's Reshape of a ViT's patches back to their grid, after register tokens, written for every size.

Sapiens2's dynamo export (a ViT with register tokens and a convolutional head) splits the tokens by sizes it computes
from the image's shape, so the patches' count, ``floor(h / 16) * floor(w / 16)``, is a size fitted from runs (no
monomial is a product of two floors), and reshapes them back to ``[batch, 384, floor(h / 16), floor(w / 16)]``, a
target it computes from the image's shape, which the import folds. The writer found the original's target
(``[batch, 384, 1/16*h, 1/16*w]``, read off runs at further sizes) but could not line it up with an input of a fitted
size, and wrote the tuned ``[1, 384, 14, 14]``: every program failed at a batch of 2, and the input came back. Now
the two products are compared in every run that fitted the patches' count (eqsat.generic.reshapes._lines_up).
Oracle: the original in onnxruntime at other batches and sides."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 18)]
REGISTERS, WIDTH = 5, 8


def _side(axis: int, name: str) -> list:
    """``floor(side / 16)`` of the image's axis ``axis`` as a scalar, as dynamo computes it."""
    return [helper.make_node("Shape", ["x"], [f"{name}_s"], start=axis, end=axis + 1),
            helper.make_node("Squeeze", [f"{name}_s"], [f"{name}_n"]),
            helper.make_node("Div", [f"{name}_n", "sixteen"], [name])]


def _head_over_registers():
    """Patches (a Conv of stride 16) after ``REGISTERS`` learned tokens, split back by sizes computed from the
    image's shape (lengths of ``arange(0.5, rows)``, as Sapiens2's rotary grid computes them), doubled, reshaped to
    their grid by a target computed from the image's shape, and a 1x1 Conv over the grid."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[16, 16], strides=[16, 16]),
             helper.make_node("Reshape", ["c", "flat"], ["f"]),
             helper.make_node("Transpose", ["f"], ["p"], perm=[0, 2, 1]),
             helper.make_node("Shape", ["x"], ["batch"], start=0, end=1),
             helper.make_node("Concat", ["batch", "regs_dims"], ["regs_to"], axis=0),
             helper.make_node("Expand", ["regs", "regs_to"], ["r"]),
             helper.make_node("Concat", ["r", "p"], ["tokens"], axis=1),
             *_side(2, "rows"), *_side(3, "cols"),
             helper.make_node("Mul", ["rows", "cols"], ["n"]),
             *(node for side in ("rows", "cols") for node in (
                 helper.make_node("Cast", [side], [f"{side}_f"], to=TensorProto.FLOAT),
                 helper.make_node("Range", ["half", f"{side}_f", "unit"], [f"{side}_at"]),
                 helper.make_node("Shape", [f"{side}_at"], [f"{side}_len"]))),
             helper.make_node("Mul", ["rows_len", "cols_len"], ["grid"]),
             helper.make_node("Add", ["count", "n"], ["total"]),
             helper.make_node("Sub", ["total", "grid"], ["first"]),
             helper.make_node("Concat", ["first", "grid"], ["sizes"], axis=0),
             helper.make_node("Split", ["tokens", "sizes"], ["kept", "q"], axis=1),
             helper.make_node("Mul", ["q", "two"], ["q2"]),
             helper.make_node("Transpose", ["q2"], ["qt"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["rows", "minus_one"], ["rows_v"]),
             helper.make_node("Reshape", ["cols", "minus_one"], ["cols_v"]),
             helper.make_node("Concat", ["batch", "width", "rows_v", "cols_v"], ["to_grid"], axis=0),
             helper.make_node("Reshape", ["qt", "to_grid"], ["g"]),
             helper.make_node("Conv", ["g", "k1"], ["gc"], kernel_shape=[1, 1]),
             helper.make_node("Transpose", ["gc"], ["gt"], perm=[0, 1, 3, 2]),  # something to optimize: two
             helper.make_node("Transpose", ["gt"], ["y"], perm=[0, 1, 3, 2])]  # Transposes that cancel
    inits = [numpy_helper.from_array(rng.standard_normal((WIDTH, 3, 16, 16)).astype(np.float32), "k"),
             numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH, 1, 1)).astype(np.float32), "k1"),
             numpy_helper.from_array(rng.standard_normal((1, REGISTERS, WIDTH)).astype(np.float32), "regs"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "unit"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("flat", [0, WIDTH, -1]), ("regs_dims", [REGISTERS, WIDTH]), ("sixteen", 16),
                ("minus_one", [-1]), ("count", [REGISTERS]), ("width", [WIDTH])))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH, "gh", "gw"])],
                              inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_patches_after_registers_go_back_to_their_grid_at_every_size():
    from ort_check import assert_same_at

    from eqsat.app.config import OptimizeConfig
    from eqsat.app.pipeline import optimize

    original = _head_over_registers()
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0,
                                                  input_shapes={"x": (1, 3, 224, 224)}))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert_same_at(original, result.optimized,
                   [{"x": s} for s in ((2, 3, 224, 224), (1, 3, 223, 250), (3, 3, 37, 100), (1, 3, 480, 96))],
                   seed=0)
