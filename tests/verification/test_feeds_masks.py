"""The mask-like inputs of a feed (eqsat.verification.feeds.unmasked, one_row, served): bool inputs and integer inputs that index
nothing are a model's masks and flags; token ids (Gather indices) are not. Oracle: the model built here, whose
inputs' uses are known."""

from __future__ import annotations

import numpy as np
import onnx_builders as ob
from onnx import TensorProto, helper, numpy_helper

from eqsat.measurement.timing import timing_feeds
from eqsat.onnx import session
from eqsat.verification.feeds import one_row, served, unmasked


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


def _padded_rows(mask: np.ndarray) -> list[int]:
    """Each row's kept length, where the row is kept up to it and masked after it (a right-padded row); asserted."""
    lengths = []
    for row in np.asarray(mask, np.int64):
        n = int(row.sum())
        assert np.array_equal(row, (np.arange(row.size) < n).astype(np.int64)), row
        lengths.append(n)
    return lengths


def test_timed_masks_are_a_padded_batch_and_a_single_row_is_kept_throughout():
    """The inputs a program is timed on (timing_feeds, and the pipeline's served verification draw): masks as a
    server pads a batch, not masked at random; token ids as drawn. Oracle: the rows read one by one."""
    rng = np.random.default_rng(0)
    feeds = {"ids": rng.integers(0, 10, (8, 6)), "mask": rng.integers(0, 2, (8, 6)),
             "keep": rng.integers(0, 2, (8, 6)).astype(bool)}
    out = served(_model(8), feeds, seed=3)
    assert np.array_equal(out["ids"], feeds["ids"]) and out["mask"].dtype == np.int64 and out["keep"].dtype == np.bool_
    for name in ("mask", "keep"):
        lengths = _padded_rows(out[name])
        assert lengths[0] == 6 and all(1 <= n <= 6 for n in lengths) and min(lengths) < 6  # some row padded
    assert all(np.array_equal(served(_model(8), feeds, seed=3)[k], out[k]) for k in out)  # seeded
    one = served(_model(1), {k: v[:1] for k, v in feeds.items()}, seed=3)
    assert one["mask"].all() and one["keep"].all()
    assert served(_model(1), None) is None
    model = _model(8)
    timed = timing_feeds(model, [session(model), session(model)], 3)
    assert _padded_rows(timed["mask"])[0] == 6 and _padded_rows(timed["keep"])[0] == 6
    assert timed["ids"].max() < 10  # still drawn over the table they index
