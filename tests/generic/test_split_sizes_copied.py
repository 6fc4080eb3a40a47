"""A small vector of sizes that no monomial of the symbols is, computed from the inputs' shapes: the original's own
nodes compute it in the written program.

Sapiens2's dynamo export splits its tokens into the register tokens and the patches with sizes it computes from the
image's shape, ``[5, floor(h / 16) * floor(w / 16)]``. Where onnx's shape inference refuses the model (a
``value_info`` of another rank than the value's, which onnxruntime runs with a warning: Sapiens2's with its scalar
axes rewritten), the import sees no size computation meet the data and folds them at the tuned size (``[5, 196]``);
neither a fit from runs nor the writer's arithmetic reads a product of two floors as a monomial, so every program
written kept the constant, the Split failed at any other size and the input came back. Now such a vector, where it
changes with the sizes and the original computes it from its inputs' shapes alone, is computed by a copy of the
original's nodes (eqsat.generic.recompute.recomputed_vector). Oracle: the original in onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 18)]
REGISTERS = 5


def _registers_and_patches():
    """A patch embedding (a Conv of stride 16), its patches after ``REGISTERS`` learned tokens, split back into the
    two by sizes computed from the image's shape as Sapiens2's export computes them (``[5 + n - rows * cols, rows *
    cols]``, ``n`` the patches and ``rows``, ``cols`` lengths of ``arange(0.5, n)``); the patches plus the registers'
    mean, transposed twice."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], kernel_shape=[16, 16], strides=[16, 16]),
             helper.make_node("Reshape", ["c", "flat"], ["f"]),
             helper.make_node("Transpose", ["f"], ["p"], perm=[0, 2, 1]),
             helper.make_node("Concat", ["regs", "p"], ["tokens"], axis=1),
             *(node for axis, side in ((2, "h"), (3, "w")) for node in (  # each side a scalar, as dynamo writes it
                 helper.make_node("Shape", ["x"], [f"{side}_s"], start=axis, end=axis + 1),
                 helper.make_node("Squeeze", [f"{side}_s"], [side]))),
             helper.make_node("Div", ["h", "sixteen"], ["rows"]),
             helper.make_node("Div", ["w", "sixteen"], ["cols"]),
             helper.make_node("Mul", ["rows", "cols"], ["n"]),
             *(node for side in ("rows", "cols") for node in (  # the grid's rows and columns: lengths of
                 helper.make_node("Cast", [side], [f"{side}_f"], to=TensorProto.FLOAT),  # arange(0.5, n)
                 helper.make_node("Range", ["half", f"{side}_f", "unit"], [f"{side}_at"]),
                 helper.make_node("Shape", [f"{side}_at"], [f"{side}_s"], start=0, end=1),
                 helper.make_node("Squeeze", [f"{side}_s"], [f"{side}_n"]))),
             helper.make_node("Mul", ["rows_n", "cols_n"], ["grid"]),
             helper.make_node("Add", ["count", "n"], ["total"]),
             helper.make_node("Sub", ["total", "grid"], ["first"]),
             helper.make_node("Reshape", ["first", "minus_one"], ["first_v"]),
             helper.make_node("Reshape", ["grid", "minus_one"], ["grid_v"]),
             helper.make_node("Concat", ["first_v", "grid_v"], ["sizes"], axis=0),
             helper.make_node("Split", ["tokens", "sizes"], ["r", "q"], axis=1),
             helper.make_node("ReduceMean", ["r", "one"], ["m"], keepdims=1),
             helper.make_node("Add", ["q", "m"], ["a"]),
             helper.make_node("Transpose", ["a"], ["at"], perm=[0, 2, 1]),  # something to optimize: a pair of
             helper.make_node("Transpose", ["at"], ["y"], perm=[0, 2, 1])]  # Transposes that cancel
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 16, 16)).astype(np.float32), "k"),
             numpy_helper.from_array(rng.standard_normal((1, REGISTERS, 8)).astype(np.float32), "regs"),
             *(numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
               (("flat", [1, 8, -1]), ("sixteen", 16), ("one", [1]), ("minus_one", [-1]),
                ("count", REGISTERS))),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(1.0, np.float32), "unit")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "patches", 8])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_sizes_of_a_product_of_floors_are_computed_as_the_original_computes_them():
    from ort_check import assert_same_at

    from eqsat.app.config import OptimizeConfig
    from eqsat.app.pipeline import optimize

    original = _registers_and_patches()
    original.graph.value_info.append(helper.make_tensor_value_info("minus_one", TensorProto.INT64, []))  # rank 1
    result = optimize(original, OptimizeConfig.of(cost="analytic", budget=2, measure=False, seed=0))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert_same_at(original, result.optimized,
                   [{"x": (1, 3, h, w)} for h, w in ((224, 224), (223, 250), (37, 100), (16, 31), (480, 96))],
                   seed=0)
