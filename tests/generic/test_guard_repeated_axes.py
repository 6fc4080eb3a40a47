"""A table guarded on a value repeated along a symbolic axis: DeBERTa's log-bucketed relative positions, expanded
to ``[batch*heads, seq, seq]`` for a GatherElements, are a table of ``[1, seq, seq]`` (its repeated axis cut to
1) within 1024 positions and the user's computation beyond. The If's else-branch gives the value at the
then-branch's shape (the Expand read through), so that the guard's check (:func:`eqsat.verification.verify_guards`)
compares one value with one value: the dynamo DeBERTa-v2 failed it with an infinite error (the shapes differed),
and the whole generic write fell back to the original."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.generic import make_generic
from eqsat.onnx import session
from eqsat.onnx.axes.branches import guard_bounds, table_guards
from eqsat.verification import verify_guards, verify_shapes

HEADS, DIM, MID, MAX_POS, SPAN = 2, 4, 4, 32, 8


def _deberta_like() -> onnx.ModelProto:
    """x[batch, seq, HEADS*DIM] attended per head with DeBERTa's content-to-position term, as torch exports it:
    ``rel = Range(seq)[:, None] - Range(seq)[None]``, log-bucketed (``make_log_bucket_position``: a Log of
    ``|rel| / MID`` where ``|rel|`` is at least MID, a Ceil, a Where on the sign), shifted and clipped to
    ``[0, 2*SPAN)``, expanded to ``[batch*heads, seq, seq]`` and read by a GatherElements of the query's scores
    against the position embeddings."""
    rng = np.random.default_rng(3)
    f32, i64 = np.float32, np.int64
    consts = {
        "i0": np.array(0, i64), "i1": np.array(1, i64), "ax0": np.array([0], i64), "ax1": np.array([1], i64),
        "mid": np.array(MID, i64), "negmid": np.array(-MID, i64), "midless": np.array(MID - 1, i64),
        "midf": np.array(MID, f32), "midlessf": np.array(MID - 1, f32),
        "logspan": np.array(np.log((MAX_POS - 1) / MID), f32), "span": np.array(SPAN, i64),
        "lo": np.array(0, i64), "hi": np.array(2 * SPAN - 1, i64),
        "heads4": np.array([0, 0, HEADS, DIM], i64), "minus1": np.array([-1], i64), "dim": np.array([DIM], i64),
        "heads": np.array([HEADS], i64), "flat": np.array([0, 0, HEADS * DIM], i64),
        "pos_emb": rng.standard_normal((DIM, 2 * SPAN)).astype(f32),
    }
    nodes = [
        # the queries per head: [batch*heads, seq, DIM]
        helper.make_node("Shape", ["x"], ["xshape"]),
        helper.make_node("Gather", ["xshape", "ax1"], ["s1"], axis=0),
        helper.make_node("Gather", ["xshape", "i1"], ["s"], axis=0),
        helper.make_node("Reshape", ["x", "heads4"], ["x4"]),
        helper.make_node("Transpose", ["x4"], ["xt"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["minus1", "s1", "dim"], ["qshape"], axis=0),
        helper.make_node("Reshape", ["xt", "qshape"], ["q"]),
        # the log-bucketed relative positions [seq, seq]
        helper.make_node("Range", ["i0", "s", "i1"], ["pos"]),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["rows"]),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["cols"]),
        helper.make_node("Sub", ["rows", "cols"], ["rel"]),
        helper.make_node("Sign", ["rel"], ["sign"]),
        helper.make_node("Less", ["rel", "mid"], ["lt"]),
        helper.make_node("Greater", ["rel", "negmid"], ["gt"]),
        helper.make_node("And", ["lt", "gt"], ["near"]),
        helper.make_node("Abs", ["rel"], ["absrel"]),
        helper.make_node("Where", ["near", "midless", "absrel"], ["abspos"]),
        helper.make_node("Cast", ["abspos"], ["absf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["absf", "midf"], ["ratio"]),
        helper.make_node("Log", ["ratio"], ["logr"]),
        helper.make_node("Div", ["logr", "logspan"], ["frac"]),
        helper.make_node("Mul", ["frac", "midlessf"], ["scaled"]),
        helper.make_node("Ceil", ["scaled"], ["ceiled"]),
        helper.make_node("Add", ["ceiled", "midf"], ["logpos"]),
        helper.make_node("LessOrEqual", ["abspos", "mid"], ["inside"]),
        helper.make_node("Cast", ["rel"], ["relf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["sign"], ["signf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["logpos", "signf"], ["signed"]),
        helper.make_node("Where", ["inside", "relf", "signed"], ["bucketf"]),
        helper.make_node("Cast", ["bucketf"], ["bucket"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["bucket", "ax0"], ["bucket3"]),
        helper.make_node("Add", ["bucket3", "span"], ["shifted"]),
        helper.make_node("Clip", ["shifted", "lo", "hi"], ["c2p_pos"]),
        # expanded to the scores' shape and gathered from the query-to-position scores
        helper.make_node("Shape", ["q"], ["qs"]),
        helper.make_node("Gather", ["qs", "ax0"], ["bh"], axis=0),
        helper.make_node("Concat", ["bh", "s1", "s1"], ["eshape"], axis=0),
        helper.make_node("Expand", ["c2p_pos", "eshape"], ["c2p_index"]),
        helper.make_node("MatMul", ["q", "pos_emb"], ["c2p_att"]),
        helper.make_node("GatherElements", ["c2p_att", "c2p_index"], ["c2p"], axis=-1),
        helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Add", ["qk", "c2p"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "q"], ["o"]),
        helper.make_node("Concat", ["minus1", "heads", "s1", "dim"], ["oshape"], axis=0),
        helper.make_node("Reshape", ["o", "oshape"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "flat"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", HEADS * DIM])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HEADS * DIM])
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    return helper.make_model(helper.make_graph(nodes, "deberta_like", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_log_bucket_table_expanded_to_the_heads_is_guarded_at_its_own_shape_and_matches_the_original():
    model = _deberta_like()
    values = {"batch": 1, "seq": 16}
    written = make_generic(model, model, values).model
    (guard,) = table_guards(written)
    assert guard_bounds(written, guard) == [1025]
    within = [n.op_type for n in written.graph.node if n.op_type in ("Log", "Ceil")]
    assert within == [], within  # the buckets are a table within its bound
    check = verify_guards(model, written, values)
    assert check.passed, check.detail
    assert check.verified == ["seq=1025 (beyond the tables)"]
    assert verify_shapes(model, written, [("seq=37", {"x": (2, 37, 8)}), ("batch=3", {"x": (3, 16, 8)})]).passed
    ref, got = session(model), session(written)  # the oracle: onnxruntime running the original
    rng = np.random.default_rng(4)
    for b, s in [(1, 1), (2, 7), (3, 128), (1, 600), (2, 1024), (2, 1025), (1, 1100)]:
        feeds = {"x": rng.standard_normal((b, s, HEADS * DIM)).astype(np.float32)}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, s, HEADS * DIM)
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)
