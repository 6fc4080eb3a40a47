"""The decode step the shape-generic cache tests share (``test_generic_cache.py``, ``test_grouped_attention.py``):
one attention layer against a key/value cache, its keys and values in fewer heads than its queries (grouped-query
attention), the cache's length after the new token named ``past + 1`` as torch's dynamo exporter names it. A plain
module (no tests): pytest's ``prepend`` import mode puts this folder on ``sys.path`` for its test files."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS, KV_HEADS, DIM = 4, 2, 4
HIDDEN = HEADS * DIM


def decode_step() -> onnx.ModelProto:
    """One attention layer's decode step: x[batch, 1, 16] -> q (4 heads) and k, v (2 KV heads, grouped), k and v
    appended to the past ([batch, 2, past, 4]) as the present outputs, the KV heads repeated to 4 by an Unsqueeze,
    an Expand and a Reshape whose targets are computed from the present's shape (as the exporters write
    ``repeat_kv``), the padding mask [batch, past + 1] added as a large negative bias, softmax, and the heads
    merged back."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    def ints(name: str, *values: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [w("wq", HIDDEN, HIDDEN), w("wk", HIDDEN, KV_HEADS * DIM), w("wv", HIDDEN, KV_HEADS * DIM),
             ints("q_heads", 0, 1, HEADS, DIM), ints("kv_heads", 0, 1, KV_HEADS, DIM), ints("merged", 0, 1, HIDDEN),
             ints("i0", 0), ints("i2", 2), ints("rep", HEADS // KV_HEADS), ints("kvh", KV_HEADS), ints("nh", HEADS),
             ints("d", DIM), ints("ax2", 2), ints("ax12", 1, 2),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
             numpy_helper.from_array(np.array(DIM ** -0.5, np.float32), "scale")]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wq"], ["q0"]), n("Reshape", ["q0", "q_heads"], ["q1"]),
        n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        *[node for kv in ("k", "v") for node in (
            n("MatMul", ["x", f"w{kv}"], [f"{kv}0"]), n("Reshape", [f"{kv}0", "kv_heads"], [f"{kv}1"]),
            n("Transpose", [f"{kv}1"], [f"{kv}_new"], perm=[0, 2, 1, 3]),
            n("Concat", [f"past_{kv}", f"{kv}_new"], [f"present_{kv}"], axis=2),
            n("Shape", [f"present_{kv}"], [f"{kv}_shape"]),
            n("Gather", [f"{kv}_shape", "i0"], [f"{kv}_b"], axis=0),
            n("Gather", [f"{kv}_shape", "i2"], [f"{kv}_len"], axis=0),
            n("Concat", [f"{kv}_b", "kvh", "rep", f"{kv}_len", "d"], [f"{kv}_expand_to"], axis=0),
            n("Concat", [f"{kv}_b", "nh", f"{kv}_len", "d"], [f"{kv}_reshape_to"], axis=0),
            n("Unsqueeze", [f"present_{kv}", "ax2"], [f"{kv}_u"]),
            n("Expand", [f"{kv}_u", f"{kv}_expand_to"], [f"{kv}_e"]),
            n("Reshape", [f"{kv}_e", f"{kv}_reshape_to"], [f"{kv}_all"]))],
        n("Transpose", ["k_all"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        n("Cast", ["attention_mask"], ["m0"], to=TensorProto.FLOAT), n("Sub", ["one", "m0"], ["m1"]),
        n("Mul", ["m1", "neg"], ["m2"]), n("Unsqueeze", ["m2", "ax12"], ["bias"]),
        n("Add", ["s1", "bias"], ["s2"]), n("Softmax", ["s2"], ["p"], axis=-1),
        n("MatMul", ["p", "v_all"], ["c0"]), n("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["c1", "merged"], ["y"]),
    ]
    cache = ["batch", KV_HEADS, "past", DIM]
    present = ["batch", KV_HEADS, "past + 1", DIM]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, HIDDEN]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "past + 1"]),
              helper.make_tensor_value_info("past_k", TensorProto.FLOAT, cache),
              helper.make_tensor_value_info("past_v", TensorProto.FLOAT, cache)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, HIDDEN]),
               helper.make_tensor_value_info("present_k", TensorProto.FLOAT, present),
               helper.make_tensor_value_info("present_v", TensorProto.FLOAT, present)]
    model = helper.make_model(helper.make_graph(nodes, "decode_step", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


__all__ = ["DIM", "HEADS", "HIDDEN", "KV_HEADS", "decode_step"]
