"""A shape-generic candidate checked near its tuned size where the original refuses every further size
(eqsat.verification.ShapesVerifier's ``near``, eqsat.onnx.axes.interface.near_shapes): a traced model that runs between about
half and twice its tuned length only (Funnel's TorchScript export: 65 to 254 tokens) refuses the usual further
lengths (1, 37, 256), and a program that fixed a size computed from the length passed unchecked. The oracle:
onnxruntime's runs of the original and of the candidate at the sizes named."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.config import OptimizeConfig
from eqsat.app.shaping import Shaping
from eqsat.onnx.axes.interface import near_shapes, probe_shapes
from eqsat.onnx.io import session
from eqsat.verification import ShapesVerifier

VALUES = {"batch": 1, "seq": 128}


def windowed(fixed: int | None = None) -> onnx.ModelProto:
    """y = MaxPool48(transpose(x' + table[Range(seq)])), x' the tokens read in pairs and back: refuses fewer than 48
    tokens (the pool), more than 200 (the table) and an odd count (the pairs: one below the tuned length, verified
    too, is refused as well); ``fixed``: the Range's end a constant, the candidate's mistake."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((200, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "step"),
             numpy_helper.from_array(np.array([0, -1, 16], np.int64), "pairs"),
             numpy_helper.from_array(np.array([0, -1, 8], np.int64), "back")]
    nodes = [helper.make_node("Reshape", ["x", "pairs"], ["paired"]),
             helper.make_node("Reshape", ["paired", "back"], ["xs"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "step"], ["seq"], axis=0)]
    if fixed is not None:
        inits.append(numpy_helper.from_array(np.array(fixed, np.int64), "end"))
    nodes += [helper.make_node("Range", ["zero", "end" if fixed is not None else "seq", "step"], ["idx"]),
              helper.make_node("Gather", ["table", "idx"], ["pos"], axis=0),
              helper.make_node("Add", ["xs", "pos"], ["sum"]),
              helper.make_node("Transpose", ["sum"], ["t"], perm=[0, 2, 1]),
              helper.make_node("MaxPool", ["t"], ["y"], kernel_shape=[48])]
    graph = helper.make_graph(nodes, "windowed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, "out"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def runs(model: onnx.ModelProto, seq: int) -> bool:
    try:
        session(model).run(None, {"x": np.zeros((1, seq, 8), np.float32)})
    except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type
        return False
    return True


def test_the_models_run_where_the_case_says():
    original, wrong = windowed(), windowed(fixed=128)
    assert [runs(original, s) for s in (1, 37, 96, 127, 128, 160, 256)] == [False, False, True, False, True, True, False]
    assert [runs(wrong, s) for s in (96, 128, 160)] == [False, True, False]


def test_a_size_fixed_by_the_candidate_fails_near_the_tuned_size_where_every_further_size_is_refused():
    original, wrong = windowed(), windowed(fixed=128)
    probes, near = probe_shapes(original, VALUES), near_shapes(original, VALUES)
    assert {label for label, _ in probes} >= {"seq=1", "seq=37", "seq=256", "seq=127"}
    before = ShapesVerifier(original, probes).check(wrong)  # without them: every length skipped, nothing found
    assert before.passed and {"seq=1", "seq=37", "seq=256", "seq=127"} <= set(before.skipped)
    after = ShapesVerifier(original, probes, near=near).check(wrong)
    assert not after.passed and "seq=96" in after.detail
    kept = ShapesVerifier(original, probes, near=near).check(original)
    assert kept.passed and {"seq=96 (near its size: the others skipped)",
                            "seq=160 (near its size: the others skipped)"} <= set(kept.verified)


def test_near_sizes_are_not_checked_where_a_further_size_ran():
    original = windowed()
    probes = [("seq=64", {"x": (1, 64, 8)}), ("seq=1", {"x": (1, 1, 8)})]  # 64 runs: the length was checked
    check = ShapesVerifier(original, probes, near=near_shapes(original, VALUES)).check(original)
    assert check.passed and check.verified == ["seq=64"] and check.skipped == ["seq=1"]


def test_the_runs_shape_check_reaches_the_near_sizes():
    original, wrong = windowed(), windowed(fixed=128)
    shaping = Shaping.of(original, OptimizeConfig.of(input_shapes={"x": (1, 128, 8)}))
    assert shaping.generic and shaping.values["seq"] == 128
    check = shaping.check(wrong, seed=0)
    assert not check.passed and "seq=96" in check.detail
