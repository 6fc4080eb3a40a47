"""A decode step as onnxruntime-genai's model builder writes it: onnxruntime's own ``SimplifiedLayerNormalization``
in the ONNX domain (which onnx's checker has no schema for), contrib ``GroupQueryAttention`` reading its sequence
lengths off the attention mask (``ReduceSum(mask) - 1``: a mask of zeros gives -1, which the kernel refuses), and
the key/value cache in and out. eqsat reads it, optimizes it and writes a model that onnxruntime (the oracle) runs
to the original's values at sizes it was not tuned at; before, it was refused as an invalid ONNX model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.onnx import session
from eqsat.onnx.axes.interface import zero_feeds
from eqsat.onnx.reading import load_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64
HIDDEN, HEADS, KV_HEADS, HEAD = 32, 4, 1, 8
VOCAB = 16


def _builder_step() -> onnx.ModelProto:
    """One layer of the builder's decode step: embedding, RMS norm, packed QKV, grouped-query attention over the
    cache, output projection."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    qkv = (HEADS + 2 * KV_HEADS) * HEAD
    inits = [weight("embed", VOCAB, HIDDEN), weight("norm", HIDDEN), weight("w_qkv", HIDDEN, qkv),
             weight("w_o", HIDDEN, HIDDEN), numpy_helper.from_array(np.array([1], np.int64), "one_v"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "one_v"], ["mask_sum"], keepdims=0),
        helper.make_node("Sub", ["mask_sum", "one_v"], ["lengths64"]),
        helper.make_node("Cast", ["lengths64"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "one"], ["total64"], axis=0),
        helper.make_node("Cast", ["total64"], ["total"], to=TensorProto.INT32),
        helper.make_node("Gather", ["embed", "input_ids"], ["h"]),
        helper.make_node("SimplifiedLayerNormalization", ["h", "norm"], ["n"], axis=-1, epsilon=1e-6),
        helper.make_node("MatMul", ["n", "w_qkv"], ["packed"]),
        helper.make_node("GroupQueryAttention", ["packed", "", "", "past_key", "past_value", "seqlens_k", "total"],
                         ["attn", "present_key", "present_value"], domain="com.microsoft",
                         num_heads=HEADS, kv_num_heads=KV_HEADS, scale=HEAD ** -0.5),
        helper.make_node("MatMul", ["attn", "w_o"], ["y"]),
    ]
    cache = ["batch", KV_HEADS, "past", HEAD]
    present = ["batch", KV_HEADS, "total", HEAD]
    graph = helper.make_graph(
        nodes, "builder_step",
        [helper.make_tensor_value_info("input_ids", I64, ["batch", 1]),
         helper.make_tensor_value_info("attention_mask", I64, ["batch", "total"]),
         helper.make_tensor_value_info("past_key", F, cache), helper.make_tensor_value_info("past_value", F, cache)],
        [helper.make_tensor_value_info("y", F, ["batch", 1, HIDDEN]),
         helper.make_tensor_value_info("present_key", F, present),
         helper.make_tensor_value_info("present_value", F, present)],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _feeds(batch: int, past: int, seed: int) -> dict[str, np.ndarray]:
    """A decode step's inputs as a server feeds them: each row's cache holds ``past`` positions, the mask keeps
    them and the new one."""
    rng = np.random.default_rng(seed)
    cache = (batch, KV_HEADS, past, HEAD)
    return {"input_ids": rng.integers(0, VOCAB, (batch, 1)).astype(np.int64),
            "attention_mask": np.ones((batch, past + 1), np.int64),
            "past_key": rng.standard_normal(cache).astype(np.float32),
            "past_value": rng.standard_normal(cache).astype(np.float32)}


def test_the_builders_operators_are_read_where_onnx_checker_refuses_them(tmp_path):
    path = tmp_path / "step.onnx"
    onnx.save(_builder_step(), path)
    with pytest.raises(onnx.checker.ValidationError, match="SimplifiedLayerNormalization"):
        onnx.checker.check_model(str(path))
    model = load_model(path)  # before: InputError "invalid ONNX model"
    assert [n.op_type for n in model.graph.node if n.domain == ""].count("SimplifiedLayerNormalization") == 1


def test_a_run_for_sizes_feeds_a_mask_of_ones_and_zero_indices():
    model = _builder_step()
    feeds = zero_feeds(model, {"batch": 2, "total": 6, "past": 5})
    assert np.all(feeds["attention_mask"] == 1) and np.all(feeds["input_ids"] == 0)
    sess = session(model)
    with pytest.raises(Exception, match="seqlens_k|out of range|-1"):  # what zeros for every input gave
        sess.run(None, {**feeds, "attention_mask": np.zeros_like(feeds["attention_mask"])})
    shapes = [np.shape(v) for v in sess.run(None, feeds)]
    assert shapes == [(2, 1, HIDDEN), (2, KV_HEADS, 6, HEAD), (2, KV_HEADS, 6, HEAD)]


def test_a_builders_decode_step_is_optimized_and_equal_to_it_at_other_sizes(tmp_path, capsys):
    original = _builder_step()
    path, out = tmp_path / "step.onnx", tmp_path / "out.onnx"
    onnx.save(original, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--input-shape", "input_ids=1,1",
                 "--input-shape", "attention_mask=1,8", "--input-shape", "past_key=1,1,7,8",
                 "--input-shape", "past_value=1,1,7,8", "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    written = onnx.load(out)
    assert [i.name for i in written.graph.input] == [i.name for i in original.graph.input]
    a, b = session(original), session(written)
    for batch, past, seed in [(1, 7, 0), (3, 12, 1), (2, 1, 2)]:
        feeds = _feeds(batch, past, seed)
        for want, got in zip(a.run(None, feeds), b.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
