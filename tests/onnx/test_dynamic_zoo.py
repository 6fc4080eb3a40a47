"""What the zoo's dynamic-axes exports needed, each failure reproduced on a small model: the T5
encoder exported by TorchScript, whose shape-generic program failed at batch 2 (a batch size the importer folded
at the representative batch of 1 beside a sequence length kept live), and whose attention adds a position bias
of batch 1 to a mask of the batch (a sum that broadcasts otherwise at other batches). Oracle: the original model
in onnxruntime at 3+ sizes of each axis."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from script_loader import load_script

from eqsat import OptimizeConfig, optimize
from eqsat.dims import Mono
from eqsat.generic import make_generic
from eqsat.onnx import session
from eqsat.onnx.axes.fitting import fit_vectors

SIZES = [(1, 16), (2, 16), (3, 16), (2, 1), (2, 7), (3, 37)]
"""(batch, seq): the representative shape and 2+ further sizes of each axis"""


def _const(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _t5_heads_model() -> onnx.ModelProto:
    """x[batch, seq, 32] split into 4 heads the way TorchScript exports T5: the target ``[batch, seq, -1, 8]``
    from two ``Shape`` nodes, the sequence length's also read by a ``Range`` whose positions are added to the data
    (so it stays live), the batch size's only by the target (so the importer folds it, at batch 1)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape_live"]),
        helper.make_node("Gather", ["shape_live", "one"], ["seq"], axis=0),
        helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["positions_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["positions_f", "axis1"], ["positions_col"]),
        helper.make_node("Add", ["x", "positions_col"], ["xp"]),
        helper.make_node("Shape", ["x"], ["shape_folded"]),
        helper.make_node("Gather", ["shape_folded", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        helper.make_node("Unsqueeze", ["seq", "axis0"], ["seq1"]),
        helper.make_node("Concat", ["batch1", "seq1", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["xp", "target"], ["split"]),
        helper.make_node("Transpose", ["split"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["t"], ["p"], axis=-1),
        helper.make_node("Mul", ["p", "scale"], ["y"]),
    ]
    inits = [_const("zero", 0), _const("one", 1), _const("axis0", [0]), _const("axis1", [1]),
             _const("heads", [-1, 8]), _const("scale", np.linspace(0.5, 2, 8), np.float32)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "seq", 8])
    return helper.make_model(helper.make_graph(nodes, "t5_heads", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _run_at_sizes(original: onnx.ModelProto, written: onnx.ModelProto) -> None:
    ref, got = session(original), session(written)
    rng = np.random.default_rng(0)
    for b, s in SIZES:
        feeds = {"x": rng.standard_normal((b, s, 32)).astype(np.float32)}
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape == (b, 4, s, 8), (b, s)
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def test_a_batch_size_folded_at_batch_one_beside_a_live_sequence_length_is_written_from_the_symbols():
    model = _t5_heads_model()
    # the program as an import that folded the batch size (1) into a constant under the original's name, beside
    # the live length (the generic import now writes this model's shape chain as a table slice, so it is built here)
    exported = copy.deepcopy(model)
    keep = [n for n in exported.graph.node if "batch1" not in n.output]
    del exported.graph.node[:]
    exported.graph.node.extend(keep)
    exported.graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "batch1"))
    assert session(exported).run(None, {"x": np.zeros((1, 16, 32), np.float32)})[0].shape == (1, 4, 16, 8)
    written = make_generic(exported, model, {"batch": 1, "seq": 16})
    assert not written.notes
    assert "batch1" not in {i for n in written.model.graph.node for i in n.input}
    _run_at_sizes(model, written.model)


def test_optimize_keeps_the_interface_of_the_t5_style_heads_model():
    model = _t5_heads_model()
    result = optimize(model, OptimizeConfig(scheduler="none", cost="analytic", measure=False, allow_slower=True))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert {"batch=2", "batch=3"} <= set(result.report.interface.verified_at)
    assert [d.dim_param or d.dim_value for d in result.optimized.graph.output[0].type.tensor_type.shape.dim] == \
        ["batch", 4, "seq", 8]
    _run_at_sizes(model, result.optimized)


def test_an_entry_is_not_taken_for_a_constant_when_every_run_varying_its_symbol_failed():
    """fit_vectors: runs at further batches fail (the program so far refuses them), those at further sequence
    lengths run; the batch entry, 1 in every run that ran, is unknown, not the constant 1 (nor is any other: which
    symbols an entry depends on is not known without the runs of each)."""
    def run(at):
        return None if at["b"] != 1 else [[at["b"], at["s"], 4]]

    assert fit_vectors(run, {"b": 1, "s": 16}) == [[None, None, None]]
    assert fit_vectors(lambda at: [[at["b"], at["s"], 4]], {"b": 1, "s": 16}) == \
        [[Mono.symbol("b"), Mono.symbol("s"), Mono.const(4)]]


def _bias_plus_mask_attention() -> onnx.ModelProto:
    """T5's attention scores: q k^T plus a position bias of batch 1 ([1, H, S, S], from the sequence length) plus
    the mask's [B, 1, 1, S] term, then Softmax and the product with v."""
    heads, d = 2, 8
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Shape", ["q"], ["qs"]),
        helper.make_node("Gather", ["qs", "two"], ["seq"], axis=0),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
        helper.make_node("Unsqueeze", ["pos", "axis0"], ["row"]),
        helper.make_node("Unsqueeze", ["pos", "axis1"], ["col"]),
        helper.make_node("Sub", ["row", "col"], ["rel"]),
        helper.make_node("Cast", ["rel"], ["relf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["relf", "slopes"], ["bias3"]),
        helper.make_node("Unsqueeze", ["bias3", "axis0"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["biased"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["onef", "maskf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["m2"]),
        helper.make_node("Unsqueeze", ["m2", "axes12"], ["m4"]),
        helper.make_node("Add", ["biased", "m4"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    inits = [_const("zero", 0), _const("one", 1), _const("two", 2), _const("axis0", [0]), _const("axis1", [1]),
             _const("axes12", [1, 2]), _const("slopes", np.array([0.1, -0.2]).reshape(2, 1, 1), np.float32),
             _const("onef", 1.0, np.float32), _const("neg", -1e4, np.float32)]
    qkv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", heads, "seq", d]) for n in "qkv"]
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", heads, "seq", d])
    return helper.make_model(helper.make_graph(nodes, "bias_mask", [*qkv, mask], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("seed", [0, 1])
def test_an_attention_whose_bias_and_mask_sum_only_at_batch_one_imports_and_keeps_the_interface(seed):
    model = _bias_plus_mask_attention()
    result = optimize(model, OptimizeConfig.of(scheduler="none", cost="analytic", measure=False, allow_slower=True,
                                               seed=seed))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    ref, got = session(model), session(result.optimized)
    rng = np.random.default_rng(seed)
    for b, s in SIZES:
        feeds = {n: rng.standard_normal((b, 2, s, 8)).astype(np.float32) for n in "qkv"}
        mask = rng.integers(0, 2, (b, s)).astype(np.int64)
        mask[:, 0] = 1
        feeds["mask"] = mask
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape == (b, 2, s, 8)
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


# -- scripts/bench_interface.py --check-only: the survey's own checks -----------------------------------------------
def _bench_interface():
    return load_script("bench_interface")


def test_the_survey_checks_sizes_and_the_interface_against_onnxruntime(tmp_path):
    import zoo

    bench = _bench_interface()
    original = zoo.export_dynamic("bert", "torchscript", str(tmp_path / "bert.onnx"))
    rep, rows = bench.check_sizes("bert", original, original)
    assert rep == 64  # the tiny BERT's position table stops at 64: the original refuses 128
    assert sorted((r["batch"], r["seq"]) for r in rows) == [(1, 64), (2, 1), (2, 37), (2, 64), (3, 64)]
    assert all(r["match"] for r in rows)
    # specialized to [1, 64]: onnxruntime refuses the other sizes, and the interface differs
    static = onnx.ModelProto()
    static.CopyFrom(original)
    for vi in static.graph.input:
        for d, n in zip(vi.type.tensor_type.shape.dim, (1, 64)):
            d.dim_value = n
    _, rows = bench.check_sizes("bert", original, static)
    assert {(r["batch"], r["seq"]) for r in rows if not r["match"]} == {(2, 1), (2, 37), (2, 64), (3, 64)}
    assert bench.ports(static) != bench.ports(original) and bench.ports(original) == bench.ports(original)
    # a program that computes something else fails at every size
    wrong = onnx.ModelProto()
    wrong.CopyFrom(original)
    big = max(wrong.graph.initializer, key=lambda t: int(np.prod(t.dims)) if t.data_type == TensorProto.FLOAT else 0)
    big.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(big) * 1.5, big.name))
    _, rows = bench.check_sizes("bert", original, wrong)
    assert not any(r["match"] for r in rows)


def test_the_survey_row_of_a_run_without_search(tmp_path):
    bench = _bench_interface()
    row = bench.check_one("gpt2", "dynamo", ["--scheduler", "none", "--no-measure", "--cost", "analytic"],
                          measure=False, measure_budget=1.0, lock=None)
    assert row["export"] == "ok" and row["exit"] == 0, row
    assert row["interface_kept"] and row["matched"], row
    assert row["symbols"] == {"batch": 1, "seq": 64}
    assert row["generic_check"]["passed"] and {"batch=2", "batch=3"} <= set(row["generic_check"]["verified_at"])
