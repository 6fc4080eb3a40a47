"""Dynamic axes keep the interface: a model with dynamic batch and sequence axes optimizes without
``--input-shape``, at a representative shape; the written model has the original's inputs and outputs (names,
element types, ``dim_param`` names) and matches it in onnxruntime at several sizes of each axis; a program that
cannot be written for every size is not written; ``--static-shape`` specializes and says so."""

from __future__ import annotations

import json
import random
import warnings
from fractions import Fraction

import numpy as np
import onnx
import onnx_builders as ob
import pytest
import torch
import zoo
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.cli import main
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.dims import Mono
from eqsat.generic import make_generic
from eqsat.onnx import export_model, import_model, session
from eqsat.onnx.axes.fitting import fit_sizes
from eqsat.onnx.axes.interface import near_shapes, probe_shapes, shapes_at, symbol_values
from eqsat.onnx.axes.live import live_shapes
from eqsat.onnx.axes.targets import reshape_target
from eqsat.rules.rule import Rule
from eqsat.verification import verify_shapes

FAST = OptimizeConfig.of(budget=8, cost="analytic", measure=False)
BATCHES = (1, 2, 3, 5)
SEQS = (1, 7, 37, 128, 200)


def _ports(model: onnx.ModelProto) -> list[tuple]:
    """Every input and output as (name, element type, dims with dim_params), read from the protobuf directly."""
    out = []
    for vi in [*model.graph.input, *model.graph.output]:
        tt = vi.type.tensor_type
        out.append((vi.name, tt.elem_type,
                    tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim)))
    return out


def _agree_everywhere(original: onnx.ModelProto, written: onnx.ModelProto, name: str, width: int) -> int:
    """Run both in onnxruntime at every (batch, seq) of BATCHES x SEQS; returns the number of shapes compared."""
    s1, s2 = session(original), session(written)
    rng = np.random.default_rng(7)
    count = 0
    for b in BATCHES:
        for s in SEQS:
            x = rng.standard_normal((b, s, width)).astype(np.float32)
            (ref,), (got,) = s1.run(None, {name: x}), s2.run(None, {name: x})
            assert got.shape == ref.shape == (b, s, width)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
            count += 1
    return count


def _heads_model() -> onnx.ModelProto:
    """x[batch, seq, 64] -> two MatMuls sharing x (merged by the search), heads split with Reshape [0, 0, 4, 16],
    Softmax per head, merged back with Reshape [0, 0, 64]."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 64])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]),
             helper.make_node("Reshape", ["a", "s4"], ["b"]),
             helper.make_node("Transpose", ["b"], ["c"], perm=[0, 2, 1, 3]),
             helper.make_node("Softmax", ["c"], ["d"], axis=-1),
             helper.make_node("Transpose", ["d"], ["e"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["e", "s3"], ["f"]),
             helper.make_node("MatMul", ["f", "w2"], ["g"]),
             helper.make_node("MatMul", ["x", "w3"], ["h"]),
             helper.make_node("Add", ["g", "h"], ["y"])]
    inits = [w("w1", 64, 64), w("w2", 64, 64), w("w3", 64, 64),
             numpy_helper.from_array(np.array([0, 0, 4, 16], np.int64), "s4"),
             numpy_helper.from_array(np.array([0, 0, 64], np.int64), "s3")]
    return helper.make_model(helper.make_graph(nodes, "heads", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.o = (torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
        k = self.k(x).view(b, t, 4, 8).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1)
        return self.o((a @ q).transpose(1, 2).reshape(b, t, 32)) + x


def _torch_export(exporter: str, path: str) -> onnx.ModelProto:
    torch.manual_seed(0)
    m, example = _Attention().eval(), (torch.randn(2, 16, 32),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dims = {"x": {0: torch.export.Dim("batch", max=64), 1: torch.export.Dim("seq", max=1024)}}
            torch.onnx.export(m, example, path, input_names=["x"], output_names=["y"], dynamo=True,
                              dynamic_shapes=dims)
        else:
            torch.onnx.export(m, example, path, input_names=["x"], output_names=["y"], opset_version=17,
                              dynamo=False, dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    return onnx.load(path)


# -- the representative shape and the probes -------------------------------------------------------------------
def test_representative_shape_defaults_and_the_users_choice():
    model = _heads_model()
    assert shapes_at(model, symbol_values(model, {})) == {"x": (1, 128, 64)}  # batch-like 1, any other axis 128
    assert shapes_at(model, symbol_values(model, {"x": (4, 9, 64)})) == {"x": (4, 9, 64)}
    values = symbol_values(model, {})
    labels = [label for label, _ in probe_shapes(model, values)]
    # 2+ further sizes per axis, and both at once (at twice the length too, where the original refuses that)
    assert labels == ["batch=2", "batch=3", "seq=1", "seq=37", "seq=256", "seq=127", "batch=2,seq=37"]
    assert [(key, label) for key, label, _ in near_shapes(model, values) if "," in key] == \
        [("batch=2,seq=37", "batch=2,seq=256")]
    assert dict(probe_shapes(model, values))["seq=37"] == {"x": (1, 37, 64)}  # one axis changed at a time


# -- the written model keeps the interface ---------------------------------------------------------------------
def test_hand_built_dynamic_model_optimizes_without_input_shape_and_keeps_the_interface():
    model = _heads_model()
    result = optimize(model, FAST)
    report = result.report
    assert report.returned.program == "optimized", report.returned.reason
    assert result.optimized.graph.node != model.graph.node  # really another program (the MatMuls merged)
    assert report.interface.symbols == {"batch": 1, "seq": 128} and report.interface.kept
    assert report.interface.shapes == {"x": [1, 128, 64]}
    assert report.config.input_shapes == {"x": (1, 128, 64)}  # tuned and measured there
    assert set(report.interface.verified_at) >= {"batch=2", "batch=3", "seq=1", "seq=37", "seq=256"}
    assert _ports(result.optimized) == _ports(model) == [("x", TensorProto.FLOAT, ("batch", "seq", 64)),
                                                          ("y", TensorProto.FLOAT, ("batch", "seq", 64))]
    assert _agree_everywhere(model, result.optimized, "x", 64) == len(BATCHES) * len(SEQS)
    assert json.loads(report.dumps())["interface"]["symbols"] == {"batch": 1, "seq": 128}


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_torch_export_with_dynamic_axes_keeps_the_interface(exporter, tmp_path):
    model = _torch_export(exporter, str(tmp_path / "m.onnx"))
    result = optimize(model, FAST)
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert sum(n.op_type == "MatMul" for n in result.optimized.graph.node) \
        < sum(n.op_type == "MatMul" for n in model.graph.node)  # q and k projections merged
    assert _ports(result.optimized) == _ports(model)
    assert [d for _, _, d in _ports(model)][0][:2] == ("batch", "seq")
    assert _agree_everywhere(model, result.optimized, "x", 32) == len(BATCHES) * len(SEQS)


# -- shape computations that meet the data stay in the program ---------------------------------------------------
def _positions_model(rows: int = 512) -> onnx.ModelProto:
    """y = Relu(x + table[0:seq]), the position table sliced by Shape(x)[1]: folded at one sequence length, the
    program would take only that length."""
    table = numpy_helper.from_array(np.random.default_rng(1).standard_normal((rows, 16)).astype(np.float32), "table")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("one", [1]), ("zero", [0]), ("axis", [0]))]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Slice", ["table", "zero", "seq", "axis"], ["pos"]),
             helper.make_node("Add", ["x", "pos"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])
    return helper.make_model(helper.make_graph(nodes, "pos", [x], [y], [table, *consts]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_shape_computation_that_meets_the_data_is_kept_not_folded():
    model = _positions_model()
    assert live_shapes(model) == {"shape"}
    assert not any(n.op == "opaque" and n.attrs[0] == "Shape" for n in import_model(model, {"x": (1, 128, 16)}).nodes())
    result = optimize(model, FAST.updated(allow_slower=True))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert _ports(result.optimized) == _ports(model)
    s1, s2 = session(model), session(result.optimized)
    for b, s in [(1, 128), (2, 1), (3, 37), (1, 300)]:
        x = np.random.default_rng(s).standard_normal((b, s, 16)).astype(np.float32)
        np.testing.assert_allclose(s2.run(None, {"x": x})[0], s1.run(None, {"x": x})[0], rtol=1e-6)


def test_a_shape_computation_read_by_an_output_alone_is_kept_not_folded():
    """ViTMAE's mask output is scattered at indices ``Concat(rows, kept)``, the rows ``Range(batch)`` expanded and
    meeting no data on their way: folded at a batch of 1, the rows were a constant and the Concat with the kept
    patches' indices (expanded to the batch) failed at a batch of 2 (no program for every size: input returned)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 4])
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("zero", 0), ("one", 1), ("col", [-1, 1]), ("wide", [1, 2]), ("last", [-1]), ("kept", [[1, 3]]),
               ("two", [2]))]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["nb"], axis=0),
             helper.make_node("Range", ["zero", "nb", "one"], ["rows"]),
             helper.make_node("Reshape", ["rows", "col"], ["rows_col"]),
             helper.make_node("Expand", ["rows_col", "wide"], ["rows_wide"]),
             helper.make_node("Slice", ["shape", "zero_v", "one_v"], ["b1"]),
             helper.make_node("Concat", ["b1", "two"], ["kept_shape"], axis=0),
             helper.make_node("Expand", ["kept", "kept_shape"], ["kept_wide"]),
             helper.make_node("Unsqueeze", ["rows_wide", "last"], ["i0"]),
             helper.make_node("Unsqueeze", ["kept_wide", "last"], ["i1"]),
             helper.make_node("Concat", ["i0", "i1"], ["index"], axis=-1),
             helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("Shape", ["index"], ["index_shape"], start=0, end=2),
             helper.make_node("ConstantOfShape", ["index_shape"], ["zeros"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("ScatterND", ["ones", "index", "zeros"], ["mask"])]
    consts += [numpy_helper.from_array(np.array([0], np.int64), "zero_v"),
               numpy_helper.from_array(np.array([1], np.int64), "one_v")]
    model = helper.make_model(helper.make_graph(nodes, "masked", [x], [y, mask], consts),
                              opset_imports=[helper.make_opsetid("", 17)])
    assert live_shapes(model) == {"shape", "index_shape"}
    sized = helper.make_model(helper.make_graph(  # a Shape that only sizes a Reshape of the data: not live
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["x"], ["shape"], start=0, end=1),
         helper.make_node("Concat", ["shape", "last"], ["target"], axis=0),
         helper.make_node("Reshape", ["r", "target"], ["y"])], "sized", [x], [y], consts),
        opset_imports=[helper.make_opsetid("", 17)])
    assert live_shapes(sized) == set()
    result = optimize(model, FAST.updated(allow_slower=True))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    s1, s2 = session(model), session(result.optimized)
    for b in (1, 2, 5):
        feed = {"x": np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)}
        for want, got in zip(s1.run(None, feed), s2.run(None, feed)):
            np.testing.assert_array_equal(got, want)


def _unsqueeze_model() -> onnx.ModelProto:
    """y[1, batch, seq, 8] = Reshape(Relu(x), Concat([1], Shape(x))): the target, folded at batch 1, is
    [1, 1, 128, 8], where its sizes alone do not tell which axis of size 1 is the batch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "batch", "seq", 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Concat", ["one", "shape"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["y"])]
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    return helper.make_model(helper.make_graph(nodes, "unsq", [x], [y], [one]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_folded_target_is_read_off_the_original_where_its_sizes_are_ambiguous():
    model = _unsqueeze_model()
    written = make_generic(export_model(import_model(model, {"x": (1, 128, 8)})), model, {"batch": 1, "seq": 128})
    b, s = Mono.symbol("batch"), Mono.symbol("seq")
    # the sizes alone give the batch to the first axis of size 1: wrong
    assert reshape_target([b, s, Mono.const(8)], [1, 1, 128, 8], {"batch": 1, "seq": 128})[:2] == [b, Mono.const(1)]
    s1, s2 = session(model), session(written.model)
    for shape in [(1, 128, 8), (2, 128, 8), (3, 5, 8)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        ref, got = s1.run(None, {"x": x})[0], s2.run(None, {"x": x})[0]
        assert ref.shape == got.shape == (1, *shape)
        np.testing.assert_array_equal(got, ref)


# -- a program that cannot be written for every size is refused ------------------------------------------------
BATCH_ONE = Rule("relu_transpose_unit_axis", "single", "ours",
                 "relu(transpose(x, (1, 0, 2))) -> reshape(relu(x)) where x is [1, a, b]",
                 (("(= root (Relu (Transpose (S3 1 0 2) x))) (= (S3 1 a b) (shape x))",
                   "(Pend root (Reshape (S3 a 1 b) (Relu x)))"),))
"""a rewrite right only while the first axis has size 1: at batch 1 it holds, at any other batch it does not"""


def _transpose_model() -> onnx.ModelProto:
    """y = Relu(Transpose(x)), z = Relu(x): with BATCH_ONE the two share one Relu (cheaper), at batch 1 only."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", "batch", 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 8])
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]), helper.make_node("Relu", ["t"], ["y"]),
             helper.make_node("Relu", ["x"], ["z"])]
    return helper.make_model(helper.make_graph(nodes, "t", [x], [y, z]), opset_imports=[helper.make_opsetid("", 17)])


def test_a_rewrite_right_at_the_representative_batch_only_is_not_written():
    model = _transpose_model()
    config = OptimizeConfig.of(scheduler="tensat", k_multi=0, cost="analytic", final_extractor="greedy-dag",
                               measure=False, allow_slower=True)
    result = optimize(model, config, extra_rules=[BATCH_ONE])
    report = result.report
    # the batch is symbolic in the e-graph (eqsat.dims): the rewrite, right at batch 1 only, never commits
    assert report.candidate("extracted").operators.get("relu") == 2
    assert report.candidate("extracted").verified and "batch=2" in report.interface.verified_at
    # the refusal is right: the rule fires for the model specialized to batch 1 (--static-shape), and onnxruntime
    # runs that program right at batch 1 and wrong at batch 2 (multi-size verification would refuse it)
    static = optimize(model, config.updated(static_shapes={"x": (1, 128, 8)}), extra_rules=[BATCH_ONE])
    assert static.report.candidate("extracted").operators.get("relu") == 1
    written = make_generic(export_model(static.graph), model, {"batch": 1, "seq": 128})
    x = np.random.default_rng(0).standard_normal((2, 128, 8)).astype(np.float32)
    np.testing.assert_allclose(session(written.model).run(None, {"x": x[:1]})[0],
                               session(model).run(None, {"x": x[:1]})[0])
    assert session(model).run(None, {"x": x})[0].shape == (128, 2, 8)
    check = verify_shapes(model, written.model, [("batch=2", {"x": (2, 128, 8)})])
    assert not check.passed and "batch=2" in check.detail
    assert verify_shapes(model, model, [("batch=2", {"x": (2, 128, 8)})]).verified == ["batch=2"]


def test_static_shape_specializes_on_purpose_and_says_the_interface_changed(tmp_path, capsys):
    path, out, rep = tmp_path / "pos.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(_positions_model(), path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--static-shape", "x=2,24,16",
                 "--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    written = onnx.load(out)
    assert _ports(written)[0] == ("x", TensorProto.FLOAT, (2, 24, 16))
    report = json.loads(rep.read_text())
    assert report["interface"]["kept"] is False and "interface changed" in report["interface"]["note"]
    x = np.random.default_rng(0).standard_normal((2, 24, 16)).astype(np.float32)
    np.testing.assert_allclose(session(written).run(None, {"x": x})[0],
                               session(_positions_model()).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_default_size_the_model_refuses_is_halved_then_asks_for_input_shape(tmp_path, capsys):
    short = _positions_model(rows=64)  # positions stop at 64: the default sequence 128 cannot run, 64 can
    result = optimize(short, FAST.updated(allow_slower=True))
    assert result.report.interface.symbols == {"batch": 1, "seq": 64}
    assert result.report.returned.program == "optimized" and _ports(result.optimized) == _ports(short)
    path = tmp_path / "tiny.onnx"
    onnx.save(_positions_model(rows=4), path)  # not even 8 positions: the user has to choose
    code = main(["optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--scheduler", "none", "--cost",
                 "analytic", "--no-measure", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "seq=128" in err and "--input-shape x=1,<seq>,16" in err, err
    code = main(["optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--input-shape", "x=1,3,16",
                 "--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err


def test_a_waveform_refusing_the_default_length_is_tuned_at_the_nearest_length_it_runs_at(tmp_path, capsys):
    """A front-end 300 samples wide refuses 128 and every halving; 512 runs: the run is tuned, verified (also near
    512: the fixed further lengths are all refused) and measured there, says so, and the written model equals the
    original at other lengths and batches in onnxruntime (the oracle)."""
    path, out, rep = tmp_path / "wave.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    model = ob.waveform_model(300)
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "--allow-slower"])
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads(rep.read_text())
    assert report["interface"]["symbols"] == {"batch": 1, "length": 512}
    assert "length=512" in report["interface"]["note"] and "--input-shape" in report["interface"]["note"]
    assert "length=512" in err and "refused the default size 128" in err
    assert "length=549" in report["interface"]["verified_at"]
    written = onnx.load(out)
    assert _ports(written) == _ports(model)
    s1, s2 = session(model), session(written)
    rng = np.random.default_rng(0)
    for b, n in [(1, 320), (2, 777), (3, 16000)]:
        x = rng.standard_normal((b, n)).astype(np.float32)
        (ref,), (got,) = s1.run(None, {"samples": x}), s2.run(None, {"samples": x})
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_a_length_whose_frames_would_look_constant_is_doubled_again(tmp_path, capsys):
    """Strides 5 and 8 after a 300-sample kernel: 512 samples run but give 6 frames (under 8: a HuBERT at 512
    samples gives 1 frame, where a program fitted to it took the frames for a constant and failed at 16000); the
    run is tuned at 1024 (18 frames), and the written model equals the original at 3000 samples in onnxruntime."""
    path, out, rep = tmp_path / "wave.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    model = ob.waveform_model(300, stride=8)
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(rep.read_text())["interface"]["symbols"] == {"batch": 1, "length": 1024}
    x = np.random.default_rng(1).standard_normal((2, 3000)).astype(np.float32)
    (ref,), (got,) = session(model).run(None, {"samples": x}), session(onnx.load(out)).run(None, {"samples": x})
    assert got.shape == ref.shape == (2, 4, 68)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_a_given_length_whose_frames_look_constant_is_verified_at_a_longer_one_too(tmp_path, capsys):
    """The user tunes at 512 samples, where the front-end gives 6 frames: the written program is also checked at
    1024 (18 frames), where a frames count taken for a constant would show; none of the fixed further lengths
    (1, 37, 256, 257) runs, and 549 gives 6 frames again."""
    path, out, rep = tmp_path / "wave.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    model = ob.waveform_model(300, stride=8)
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--input-shape", "samples=1,512",
                 "--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    interface = json.loads(rep.read_text())["interface"]
    assert interface["symbols"] == {"batch": 1, "length": 512}
    assert "length=1024" in interface["verified_at"] and "length=549" in interface["verified_at"]


def test_a_model_refusing_every_default_length_asks_for_input_shape_before_any_search(tmp_path, capsys):
    """5000 samples wide: no power of two up to 4096 runs; exit 2 naming the flag, before the search, nothing
    written; the size the user gives then runs."""
    path, out = tmp_path / "wide.onnx", tmp_path / "o.onnx"
    onnx.save(ob.waveform_model(5000), path)
    out.write_bytes(b"the user's file")
    code = main(["optimize-model", str(path), "-o", str(out), "--scheduler", "none", "--cost", "analytic",
                 "--no-measure", "--allow-slower"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot run the original model" in err and "--input-shape samples=1,<length>" in err, err
    assert "imported" not in err and out.read_bytes() == b"the user's file"
    code = main(["optimize-model", str(path), "-o", str(out), "--input-shape", "samples=1,6000", "--scheduler",
                 "none", "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err


def test_a_refused_given_size_beside_a_defaulted_dimension_is_said_as_the_given_one(tmp_path, capsys):
    """Positions stop at 64, the user asks for sequence 100 and leaves another input's dimension at its default:
    the refusal names the given shape and its flag (not the default sizes, nor the refused size as the fix)."""
    model = _positions_model(rows=64)
    model.graph.input.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", "other"]))
    model.graph.node.append(helper.make_node("ReduceSum", ["m"], ["m_sum"], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("m_sum", TensorProto.FLOAT, []))
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--input-shape", "x=1,100,16",
                 "--scheduler", "none", "--cost", "analytic", "--no-measure", "--allow-slower"])
    err = capsys.readouterr().err
    assert code == 2 and "at the given input shapes" in err and "x=1,100,16" in err and "--input-shape" in err, err
    assert "default sizes" not in err


@pytest.mark.parametrize("flag", ["--input-shape", "--static-shape"])
def test_a_given_size_the_original_refuses_is_exit_2_naming_it_before_any_search(flag, tmp_path, capsys):
    """Positions stop at 4 and the user asks for sequence 8: onnxruntime's refusal is said with the sizes and the
    flag to change, exit 2, and a file already at the output path is left as it was."""
    path, out = tmp_path / "tiny.onnx", tmp_path / "o.onnx"
    onnx.save(_positions_model(rows=4), path)
    out.write_bytes(b"the user's file")
    code = main(["optimize-model", str(path), "-o", str(out), flag, "x=1,8,16", "--scheduler", "none", "--cost",
                 "analytic", "--no-measure", "--allow-slower"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot run the original model" in err and "x=1,8,16" in err and flag in err, err
    assert "step" not in err and out.read_bytes() == b"the user's file"


def test_input_shape_and_static_shape_for_one_input_is_refused(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_heads_model(), path)
    code = main(["optimize-model", str(path), "-o", str(tmp_path / "o.onnx"), "--input-shape", "x=1,8,64",
                 "--static-shape", "x=1,8,64", "-q"])
    assert code == 2 and "--static-shape" in capsys.readouterr().err


# -- symbolic reshape targets against a brute-force oracle ------------------------------------------------------
def _random_case(rng: random.Random) -> tuple[list[Mono], list[Mono]]:
    """A symbolic shape and a reshape of it that merges or splits neighbouring axes (the intended target)."""
    atoms = [Mono.symbol("b"), Mono.symbol("s"), Mono.const(rng.choice([2, 3, 4])), Mono.const(rng.choice([5, 6]))]
    rng.shuffle(atoms)
    cut = sorted(rng.sample(range(1, len(atoms)), rng.randint(0, len(atoms) - 1)))
    groups_in = [atoms[i:j] for i, j in zip([0, *cut], [*cut, len(atoms)])]
    cut = sorted(rng.sample(range(1, len(atoms)), rng.randint(0, len(atoms) - 1)))
    groups_out = [atoms[i:j] for i, j in zip([0, *cut], [*cut, len(atoms)])]

    def prod(ms: list[Mono]) -> Mono:
        out = Mono.const(1)
        for m in ms:
            out = out * m
        return out

    return [prod(g) for g in groups_in], [prod(g) for g in groups_out]


@pytest.mark.parametrize("seed", range(40))
def test_reshape_target_recovers_the_symbols_of_a_random_reshape(seed):
    """At sizes where every symbol is distinct and above 1, the target's symbols are recovered exactly; the
    oracle: numpy reshapes the same data at other sizes with the recovered target and with the intended one."""
    rng = random.Random(seed)
    dims_in, intended = _random_case(rng)
    values = {"b": 7, "s": 11}
    target = [int(m.value(values)) for m in intended]
    got = reshape_target(dims_in, target, values)
    assert got is not None
    for other in ({"b": 2, "s": 3}, {"b": 13, "s": 1}):
        shape_in = [int(m.value(other)) for m in dims_in]
        data = np.arange(int(np.prod(shape_in))).reshape(shape_in)
        np.testing.assert_array_equal(data.reshape([int(m.value(other)) for m in got]),
                                      data.reshape([int(m.value(other)) for m in intended]))


def test_a_batch_of_one_is_read_as_the_batch_symbol_where_the_target_keeps_an_axis_of_one():
    b, s = Mono.symbol("b"), Mono.symbol("s")
    values = {"b": 1, "s": 128}
    assert reshape_target([b * s, Mono.const(64)], [1, 128, 64], values) == [b, s, Mono.const(64)]
    assert reshape_target([b, s, Mono.const(64)], [128, 64], values) == [b * s, Mono.const(64)]
    assert reshape_target([b, s, Mono.const(64)], [0, 0, 4, -1], values) == [b, s, Mono.const(4), Mono.const(16)]
    assert reshape_target([b, s, Mono.const(64)], [3, 5], values) is None  # sizes that do not line up


# -- a real transformer, both exporters ----------------------------------------------------------------------
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_zoo_transformer_with_dynamic_axes_keeps_the_interface_without_input_shape(name, exporter, tmp_path):
    model = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    result = optimize(model, FAST.updated(allow_slower=True))
    report = result.report
    assert report.returned.program == "optimized", report.returned.reason
    assert report.interface.symbols["batch"] == 1 and report.interface.symbols["seq"] in (128, 64)  # halved if refused
    assert _ports(result.optimized) == _ports(model)
    assert {"batch=2", "batch=3", "seq=1", "seq=37"} <= set(report.interface.verified_at)
    s1, s2 = session(model), session(result.optimized)
    rng = np.random.default_rng(3)
    for b, s in [(1, 16), (2, 16), (3, 16), (2, 3), (2, 37), (3, 40)]:  # 3+ sizes per axis, masks differing by row
        feeds = zoo.sized_feeds(name, rng, b, s)
        for ref, got in zip(s1.run(None, feeds), s2.run(None, feeds)):
            assert got.shape == ref.shape and ref.shape[0] == b
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("seed", range(20))
def test_sizes_fitted_from_runs_are_the_monomials_that_made_them(seed):
    """fit_sizes recovers random monomials from their values at three sizes of each symbol (evaluated here)."""
    rng = random.Random(seed)
    monos = [Mono(Fraction(rng.choice([1, 2, 3, 12])), tuple((s, p) for s, p in (("b", rng.randint(0, 2)),
                                                                               ("s", rng.randint(0, 2))) if p))
             for _ in range(rng.randint(1, 4))]
    values = {"b": rng.choice([1, 2]), "s": rng.choice([16, 128])}

    def at(vals: dict[str, int]) -> list[list[int]]:
        return [[int(m.value(vals)) for m in monos]]

    step = rng.choice([1, -1])  # above the value, or below where the model refuses more
    grown = {s: ((v + step, at({**values, s: v + step})), (v + 2 * step, at({**values, s: v + 2 * step})))
             for s, v in values.items() if v + 2 * step >= 1}
    grown |= {s: ((v + 1, at({**values, s: v + 1})), (v + 2, at({**values, s: v + 2}))) for s, v in values.items()
              if s not in grown}
    assert fit_sizes(at(values), grown, values) == [monos]
    assert fit_sizes(at(values), {**grown, "s": None}, values) == [[None] * len(monos)]  # its runs failed


def test_info_names_the_sizes_a_dynamic_model_is_tuned_at(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_heads_model(), path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "input  x: [1, 128, 64]" in out and "dynamic: batch=1, seq=128" in out
    assert main(["info", str(path), "--input-shape", "x=2,9,64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dynamic"] == {"batch": 2, "seq": 9}


def test_what_the_generic_write_notes_reaches_the_report_of_the_model_returned():
    """A slice that ends inside a dynamic axis (``x[:, :5]``, seq at 128) is written as the original has it, and
    the report's interface section says so; the returned model matches the original in onnxruntime at a
    sequence shorter than the slice's end (3) and longer (200)."""
    inits = [numpy_helper.from_array(np.array([v]), n) for n, v in (("s", 0), ("e", 5), ("a", 1))]
    g = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a"], ["h"], name="head"),
                           helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    result = optimize(model, OptimizeConfig.of(measure=False, budget=2, cost="analytic", allow_slower=True))
    assert result.report.returned.program == "optimized"
    assert "ends at 5, inside the dynamic axis seq" in result.report.interface.note
    ref, got = session(model), session(result.optimized)
    for seq in (3, 200):
        x = np.random.default_rng(seq).standard_normal((2, seq, 8)).astype(np.float32)
        np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-6)
