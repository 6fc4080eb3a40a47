"""A program is verified within onnxruntime's own spread on the original (eqsat.verification.Spread): where the original's
outputs move as far between its runs with and without the runtime's graph optimizations (the widest of the draws
at those input shapes) (a dynamically quantized
BERT at width 384 and sequence 128: a sum reordered before a quantizer crosses a quantization step), a program that
moves them no further matches; in float32, and beyond twice the spread, and wherever a NaN moves, nothing is
excused. The oracle is onnxruntime itself: the original run optimized and unoptimized."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import zoo
from onnx import helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from eqsat.app.cli import main
from eqsat.verification import Spread, Verifier, outputs

SHAPES = {"input_ids": (1, 128), "attention_mask": (1, 128)}


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> tuple[str, onnx.ModelProto]:
    """A BERT at width 384 (TorchScript, dynamic batch and sequence), dynamically quantized as
    ``onnxruntime.quantization.quantize_dynamic`` writes it (its path), and the program eqsat writes of it (no
    search: the import, the export and the forms it writes)."""
    d = tmp_path_factory.mktemp("spread")
    zoo.export_dynamic("bert_w384", "torchscript", str(d / "bert.onnx"))
    quantize_dynamic(str(d / "bert.onnx"), str(d / "q.onnx"), weight_type=QuantType.QInt8)
    code = main(["optimize-model", str(d / "q.onnx"), "-o", str(d / "out.onnx"), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "-q"])
    assert code == 0
    return str(d / "q.onnx"), onnx.load(str(d / "out.onnx"))


def _scaled(model: onnx.ModelProto, factor: float) -> onnx.ModelProto:
    """``model`` with its first output multiplied by ``factor``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    name = out.graph.output[0].name
    for node in out.graph.node:
        node.output[:] = [o + "_unscaled" if o == name else o for o in node.output]
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array(factor, np.float32), "spread_factor"))
    out.graph.node.append(helper.make_node("Mul", [name + "_unscaled", "spread_factor"], [name]))
    return out


def test_a_quantized_model_is_written_within_the_runtime_s_spread(quantized, monkeypatch, tmp_path, capsys):
    path, written = quantized
    original = onnx.load(path)
    check = Verifier(original, input_shapes=SHAPES).check(written)
    assert check.passed and check.spread > 1e-4, check  # (float32's tolerance alone refused it)
    monkeypatch.setattr(outputs, "SPREAD_FACTOR", 0.0)
    refused = Verifier(original, input_shapes=SHAPES).check(written)
    assert not refused.passed and "differs" in refused.detail
    capsys.readouterr()
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code = main(["optimize-model", path, "-o", str(out), "--report", str(report), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "-q"])
    # as every such model was (exit 3, before the miss of a quantized model left the program out): the input back
    assert code == 0 and onnx.load(str(out)).graph.node == original.graph.node
    reason = json.loads(report.read_text())["returned_reason"]
    assert "differs" in reason and "rounds through DynamicQuantizeLinear" in reason


def test_the_spread_is_onnxruntime_s_own_on_the_original(quantized):
    """The spread allowed is how far the original's unoptimized run is from its optimized one on a draw (the
    oracle: both runs, here)."""
    path, written = quantized
    original = onnx.load(path)
    verifier = Verifier(original, input_shapes=SHAPES)
    check = verifier.check(written)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    raw = ort.InferenceSession(original.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    spreads = [float(np.abs(fused.run(None, feeds)[0] - raw.run(None, feeds)[0]).max())
               for feeds, _outs, label in next(iter(verifier.runs.values())) if label == "random"]
    assert check.spread == pytest.approx(max(spreads), rel=1e-6), (check.spread, spreads)  # the widest draw's


def test_twice_the_spread_and_no_more(quantized):
    path, written = quantized
    assert not Verifier(onnx.load(path), input_shapes=SHAPES).check(_scaled(written, 1.05)).passed  # 5%: wrong


def test_a_float32_program_is_allowed_nothing():
    """In float32 the original's two runs agree to rounding: a program off by 1% fails as it always did."""
    model = zoo.build("bert_w384")
    check = Verifier(model, input_shapes=SHAPES).check(_scaled(model, 1.01))
    assert not check.passed and check.spread == 0.0


def test_a_nan_moved_is_never_within_a_spread(quantized):
    path, written = quantized
    original = onnx.load(path)
    verifier = Verifier(original, input_shapes=SHAPES)
    verifier.check(written)
    feeds, outs, _label = next(iter(verifier.runs.values()))[0]
    ref = np.asarray(outs[0])
    got = ref.copy()
    got.reshape(-1)[0] = np.nan
    spread = Spread(original)
    assert not spread.allows([(feeds, outs)], 0, ref, got)
    assert spread.allows([(feeds, outs)], 0, ref, ref.copy())  # (the same values: within any spread, one of 0 too)
