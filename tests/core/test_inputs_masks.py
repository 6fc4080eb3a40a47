"""The mask-like inputs of a feed (eqsat.inputs.unmasked, one_row): bool inputs and integer inputs that index
nothing are a model's masks and flags; token ids (Gather indices) are not. Oracle: the model built here, whose
inputs' uses are known."""

from __future__ import annotations

import numpy as np
import onnx_builders as ob
from onnx import TensorProto, helper, numpy_helper

from eqsat.inputs import one_row, unmasked


def _model(batch: int):
    """ids [batch, 6] index an embedding table; mask [batch, 6] (int64) and keep [batch, 6] (bool) scale it."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["keep"], ["k"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["m", "k"], ["mk"]),
             helper.make_node("Unsqueeze", ["mk", "last"], ["mk3"]),
             helper.make_node("Mul", ["e", "mk3"], ["y"])]
    inits = [table, numpy_helper.from_array(np.array([2], np.int64), "last")]
    return ob.model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, 6]),
                            helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, 6]),
                            helper.make_tensor_value_info("keep", TensorProto.BOOL, [batch, 6])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 6, 4])], inits)


def test_masks_and_flags_are_set_to_ones_and_token_ids_kept():
    rng = np.random.default_rng(0)
    feeds = {"ids": rng.integers(0, 10, (2, 6)), "mask": rng.integers(0, 2, (2, 6)),
             "keep": rng.integers(0, 2, (2, 6)).astype(bool)}
    out = unmasked(_model(2), feeds)
    assert np.array_equal(out["ids"], feeds["ids"])
    assert np.array_equal(out["mask"], np.ones((2, 6), np.int64)) and out["mask"].dtype == feeds["mask"].dtype
    assert out["keep"].dtype == np.bool_ and out["keep"].all()
    assert not feeds["mask"].all()  # the caller's feeds are left as they were


def test_one_row_reads_the_masks_leading_dimension_only():
    ids = np.zeros((1, 6), np.int64)
    one = {"ids": ids, "mask": np.ones((1, 6), np.int64), "keep": np.ones((1, 6), bool)}
    assert one_row(_model(1), one)
    two = {"ids": np.zeros((2, 6), np.int64), "mask": np.ones((2, 6), np.int64), "keep": np.ones((2, 6), bool)}
    assert not one_row(_model(2), two)
    assert one_row(_model(2), {"ids": two["ids"]})  # no mask at all: nothing a server pads
