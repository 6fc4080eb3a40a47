"""The shape-generic decoders run no more reshaping than the static ones: a Reshape of a Reshape (or of a
Flatten, or of the rows a Gemm computes) reads the inner one's input, a Reshape to its input's own shape is dropped,
targets back to ``[batch, seq, N]`` are one vector ``[batch, seq, -1]`` (or ``[-1, seq, N]`` where the sequence length's
size is read already), and opset 23's RotaryEmbedding reads its
cos and sin tables whole at position ids. Oracles: onnxruntime's optimized graph of the static program (its
kernels), and the original model run in onnxruntime at several sizes of each axis."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_builders as ob
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper

from eqsat import ir
from eqsat.generic import import_generic, make_generic
from eqsat.onnx import export_model, import_model, session

SIZES = [(1, 16), (2, 16), (3, 16), (2, 1), (2, 7), (3, 37)]
"""(batch, seq): the representative shape and 2+ further sizes of each axis"""


def _kernels(model: onnx.ModelProto) -> collections.Counter[str]:
    """The operators onnxruntime runs for ``model`` after its own optimizations (one thread)."""
    return ob.ort_kernels(model)


def _matches_at_sizes(name: str, model: onnx.ModelProto, written: onnx.ModelProto, seed: int) -> None:
    """``written`` computes what the zoo model ``model`` does in onnxruntime (the oracle) at every size of SIZES."""
    ref, got = session(model), session(written)
    rng = np.random.default_rng(seed)
    for b, s in SIZES:
        feeds = zoo.sized_feeds(name, rng, b, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


def _chain_model() -> onnx.ModelProto:
    """x[batch, seq, 8] flattened to rows and to one vector, reshaped back, and once more to the same shape; the
    rows split into heads; all targets constants at batch 1, seq 16 (as the importer folds them)."""
    def ints(name: str, *values: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [ints("rows", 16, 8), ints("flat", -1), ints("same", 1, 16, 8), ints("heads", 1, 16, 2, 4)]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "rows"], ["r2"]),
             helper.make_node("Reshape", ["r2", "flat"], ["r1"]),
             helper.make_node("Reshape", ["r1", "same"], ["r3"]),
             helper.make_node("Reshape", ["r3", "same"], ["r3b"]),
             helper.make_node("Sigmoid", ["r3b"], ["y"]),
             helper.make_node("Reshape", ["r2", "heads"], ["z"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 2, 4])
    return helper.make_model(helper.make_graph(nodes, "chain", [x], [y, z], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_chain_of_reshapes_is_one_reshape_of_the_first_input_with_0_and_minus_1():
    model = _chain_model()
    written = make_generic(model, model, {"batch": 1, "seq": 16}).model
    ops = collections.Counter(n.op_type for n in written.graph.node)
    # y: the rows, the vector and the two reshapes back are the input's own shape: no Reshape at all; z: one
    # Reshape of the Relu's output, to [0, 0, 2, 4] (no size computed from the shapes)
    assert ops["Reshape"] == 1 and ops["Shape"] == ops["Concat"] == 0, ops
    (z,) = [n for n in written.graph.node if n.op_type == "Reshape"]
    assert z.input[0] == "r"
    got = session(written)
    rng = np.random.default_rng(4)
    for b, s in SIZES:  # (the model's own constant targets take only batch 1, seq 16: numpy is the oracle)
        x = rng.standard_normal((b, s, 8)).astype(np.float32)
        y, z = got.run(None, {"x": x})
        r = np.maximum(x, 0)
        np.testing.assert_allclose(y, 1 / (1 + np.exp(-r)), rtol=1e-5)
        np.testing.assert_array_equal(z, r.reshape(b, s, 2, 4))


@pytest.mark.parametrize("name,exporter", [("gpt2", "torchscript"), ("gpt2", "dynamo"), ("qwen2", "torchscript"),
                                           ("qwen2", "dynamo"), ("llama", "torchscript")])
def test_a_generic_decoder_runs_no_more_reshapes_than_the_static_one(name, exporter, tmp_path):
    model = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    static = export_model(import_model(model, shapes))
    generic = make_generic(export_model(import_generic(model, shapes)), model, {"batch": 1, "seq": 16})
    ks, kg = _kernels(static), _kernels(generic.model)
    # GPT-2's flattened mask gathered back is one Reshape of the mask where the static program gathers it
    assert kg["Reshape"] <= ks["Reshape"] + ks["GatherND"] + ks["Gather"] - kg["Gather"], (kg, ks)
    assert kg["Expand"] <= ks["Expand"], (kg, ks)
    # the sizes: at most one Shape of each span of an input's axes, and a Concat per target, the causal mask's (a
    # target [-1, seq, N] of its own where [batch, seq, -1] shared by the widths would take a Shape more)
    assert kg["Shape"] <= 2 and kg["Shape"] + kg["Concat"] - ks["Concat"] <= 5, (kg, ks)
    _matches_at_sizes(name, model, generic.model, seed=5)


@pytest.mark.parametrize("name,exporter", [("gpt2", "dynamo"), ("qwen2", "torchscript")])
def test_a_reshape_to_a_target_computed_from_kept_shapes_is_a_reshape_on_the_generic_import(name, exporter, tmp_path):
    """The dynamo GPT-2 computes its linear layers' targets back to [batch, seq, N] from the Shape that its position
    ids read too (kept: it meets the data): each such Reshape is imported as a ``reshape`` (the static import's
    form, which the rules rewrite), not carried opaque; the written program matches the original at every size."""
    model = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    graphs = [import_generic(model, shapes, generic=g) for g in (False, True)]
    opaque = [collections.Counter(n.attrs[0] for n in ir.topo_order(list(g.outputs)) if n.op == "opaque")
              for g in graphs]
    assert opaque[0]["Reshape"] == opaque[1]["Reshape"] == 0, opaque
    # (the generic import reads transformers' repeat_kv, a reshape of an Expand, as one repeat_heads)
    reshapes = [sum(n.op in ("reshape", "repeat_heads") for n in ir.topo_order(list(g.outputs))) for g in graphs]
    assert reshapes[1] >= reshapes[0], reshapes
    generic = make_generic(export_model(graphs[1]), model, {"batch": 1, "seq": 16}).model
    _matches_at_sizes(name, model, generic, seed=6)


@pytest.mark.parametrize("name,exporter", [("gpt2", "torchscript"), ("gpt2", "dynamo"), ("bert", "torchscript")])
def test_the_rows_back_to_batch_and_seq_read_only_the_sequence_lengths_size(name, exporter, tmp_path):
    """The reshapes back from rows to ``[batch, seq, N]`` (a Gemm's, a user's ``view``) are written ``[-1, seq, N]``
    where the sequence length's size is read already (by the causal mask, the position table) and ``[batch, seq,
    ...]`` would take a Shape of both sizes more: onnxruntime runs one Shape (it ran two), and the program matches
    the original at several sizes of each axis."""
    model = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    generic = make_generic(export_model(import_generic(model, shapes)), model, {"batch": 1, "seq": 16})
    kg = _kernels(generic.model)
    assert kg["Shape"] == 1, kg
    _matches_at_sizes(name, model, generic.model, seed=6)
