"""The real-model zoo (tests/zoo) through the round trip: each model imports, goes through the e-graph and
back with no rewrite (``scheduler='none'``), computes what onnxruntime computes on the original on inputs in
range, and keeps its interface exactly.

The node-count / fused-operator fidelity of the round trip (no more nodes after onnxruntime's own
optimizations, every fused operator kind kept) is asserted by ``tests/onnx/test_fidelity.py`` on the same matrix,
and measured with latencies by ``scripts/bench_roundtrip.py``. The fast set takes one export per model; the
whole matrix (both torch exporters, opsets 17 and 18) is ``slow``; combinations this torch cannot export are left out of it, and a test
checks that they still fail with the exporter's reason (listed in ``zoo.UNSUPPORTED``).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import zoo
from script_loader import load_script
from zoo_cases import EXPECTED_UNSUPPORTED, FAST, FULL, ROUND_TRIP, assert_close, interface, zoo_model

from eqsat import optimize

SEEDS = (0, 1)


def report_json(result) -> dict:
    """The run's report in the documented JSON layout (the Result holds a typed Report, or that dict)."""
    r = result.report
    return r if isinstance(r, dict) else r.to_json()


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def check_round_trip(name: str, exporter: str, opset: int) -> None:
    original = zoo_model(name, exporter, opset)
    result = optimize(original, ROUND_TRIP)
    report = report_json(result)
    assert report["verified"], report
    # the program went through the e-graph and the exporter (not the input handed back)
    assert report["returned"] == "optimized", report["returned_reason"]
    out = result.optimized
    onnx.checker.check_model(out)
    assert interface(out) == interface(original)
    s_orig, s_out = _session(original), _session(out)
    assert [(i.name, i.type, i.shape) for i in s_out.get_inputs()] == \
        [(i.name, i.type, i.shape) for i in s_orig.get_inputs()]
    assert [(o.name, o.type, o.shape) for o in s_out.get_outputs()] == \
        [(o.name, o.type, o.shape) for o in s_orig.get_outputs()]
    for seed in SEEDS:  # inputs in range: token ids over the whole vocabulary, 0/1 masks
        feeds = zoo.feeds(name, seed)
        for o, a, b in zip(s_orig.get_outputs(), s_orig.run(None, feeds), s_out.run(None, feeds)):
            assert_close(a, b, f"{name} ({exporter}, opset {opset}) output {o.name!r}, seed {seed}")


@pytest.mark.parametrize("name,exporter,opset", FAST, ids=[f"{n}-{e}-{o}" for n, e, o in FAST])
def test_round_trip(name, exporter, opset):
    check_round_trip(name, exporter, opset)


@pytest.mark.slow
@pytest.mark.parametrize("name,exporter,opset", FULL, ids=[f"{n}-{e}-{o}" for n, e, o in FULL])
def test_round_trip_full_matrix(name, exporter, opset):
    check_round_trip(name, exporter, opset)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_export_matches_torch(name):
    """The zoo itself: the exported model computes what the torch module computes (an independent oracle
    for every later comparison against the exported original)."""
    model = zoo_model(name, "torchscript", 17)
    feeds = zoo.feeds(name, 3)
    with torch.no_grad():
        expected = zoo.module(name)(*(torch.from_numpy(v) for v in feeds.values()))
    got = _session(model).run(None, feeds)
    assert [o.name for o in model.graph.output] == list(zoo.SPECS[name].outputs)
    for o, e, g in zip(zoo.SPECS[name].outputs, expected, got):
        assert_close(e.numpy(), g, f"{name} output {o}")


DYNAMIC_SIZES = {"ids": [(1, 128), (2, 128), (3, 128), (2, 1), (2, 37)], "float": [(1,), (2,), (3,)]}
"""(batch, seq) of the token models, (batch,) of the image and audio models: 3 sizes of each dynamic axis"""


@pytest.mark.parametrize("name,exporter", [("bert_s128", "dynamo"), ("convnext", "dynamo"),
                                           ("t5_encoder", "torchscript")])
def test_dynamic_export_matches_torch_at_several_sizes(name, exporter, tmp_path):
    """The zoo's dynamic-axes exports (as serving code exports them): the sequence-128 models export under dynamo
    (the sequence axis had a maximum of 64), ConvNeXt too (traced at batch 2: at batch 1 torch.export guards
    ``batch <= 2``); the exported model keeps ``batch``/``seq`` on its inputs and computes what the torch module
    computes at 3 sizes of each axis."""
    model = zoo.export_dynamic(name, exporter, str(tmp_path / "m.onnx"))
    spec = zoo.SPECS[name]
    tokens = any(kind == "ids" for _, kind, _ in spec.inputs)
    for vi, (_, kind, _) in zip(model.graph.input, spec.inputs):
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        assert dims[0] == "batch" and (kind == "float" or dims[1] == "seq"), (vi.name, dims)
    sess, net, rng = _session(model), zoo.module(name), np.random.default_rng(5)
    for size in DYNAMIC_SIZES["ids" if tokens else "float"]:
        feeds = zoo.sized_feeds(name, rng, *size)
        with torch.no_grad():
            expected = net(*(torch.from_numpy(v) for v in feeds.values()))
        for o, e, g in zip(spec.outputs, expected, sess.run(None, feeds)):
            assert g.shape[0] == size[0]
            assert_close(e.numpy(), g, f"{name} {exporter} at {size}: output {o}")


# operators that show the architecture is what its description says (exported by TorchScript, opset 17)
SIGNATURES = {
    "bert": {"Erf", "Softmax", "Tanh", "Gather"},         # erf GELU, attention, pooler, embeddings
    "gpt2": {"Tanh", "Pow", "Softmax", "Gemm"},            # tanh GELU, Conv1D as addmm
    "vit": {"Conv", "Erf", "Softmax", "Concat"},           # patch embedding, GELU, attention, CLS token
    "resnet": {"Conv", "Relu", "Add", "MaxPool"},
    "mobilenetv2": {"Conv", "Clip", "Add"},                # ReLU6 as Clip, inverted residuals
    "efficientnet": {"Conv", "Sigmoid", "Mul", "GlobalAveragePool"},  # SiLU, squeeze-excite
    "llama": {"Sigmoid", "Pow", "ReduceMean", "Sqrt", "Cos", "Sin", "Softmax"},  # SiLU gate, RMSNorm, rotary
}


@pytest.mark.parametrize("name", zoo.NAMES)
def test_architecture_signature(name):
    ops = {n.op_type for n in zoo_model(name, "torchscript", 17).graph.node}
    assert SIGNATURES[name] <= ops, f"{name} lacks {sorted(SIGNATURES[name] - ops)}"


@pytest.mark.slow
@pytest.mark.parametrize("name,exporter,opset", sorted(EXPECTED_UNSUPPORTED))
def test_unsupported_is_recorded_with_reason(name, exporter, opset):
    """An exporter/model combination that fails is recorded with the exporter's reason, not dropped; the
    failures are the known ones of this torch."""
    with pytest.raises(zoo.Unsupported) as err:
        zoo.build(name, exporter, opset)
    assert str(err.value) and zoo.UNSUPPORTED[name, exporter, opset] == str(err.value)
    with pytest.raises(zoo.Unsupported):  # recorded: the second call does not export again
        zoo.build(name, exporter, opset)


def test_feeds_are_seeded_and_in_range():
    a, b, c = zoo.feeds("bert", 0), zoo.feeds("bert", 0), zoo.feeds("bert", 1)
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["input_ids"], c["input_ids"])
    ids = np.concatenate([zoo.feeds("gpt2", s)["input_ids"].ravel() for s in range(8)])
    assert ids.min() >= 0 and ids.max() < zoo.VOCAB and len(np.unique(ids)) > zoo.VOCAB // 2
    mask = zoo.feeds("bert", 0)["attention_mask"]
    assert set(np.unique(mask)) <= {0, 1} and mask[0, 0] == 1


def test_trained_weights_leave_no_parameter_constant():
    """``weights="trained"``: the zero biases and unit norm scales a family initializes are spread, as training
    leaves them (counted from the parameters themselves, not from the function's return); the rest is the init's
    draw, and the same seed gives the same module."""
    def constant(m):
        return [n for n, p in m.named_parameters() if p.numel() > 1 and bool((p == p.flatten()[0]).all())]

    init, trained, again = zoo.module("bert"), zoo.module("bert", weights="trained"), zoo.module("bert", weights="trained")
    assert any(n.endswith("bias") for n in constant(init)) and any("LayerNorm.weight" in n for n in constant(init))
    assert constant(trained) == []
    for (name, p), (_, q), (_, r) in zip(init.named_parameters(), trained.named_parameters(), again.named_parameters()):
        assert torch.equal(q, r)
        if name not in constant(init):
            assert torch.equal(p, q), name
    spread = dict(trained.named_parameters())
    bias = spread[next(n for n in constant(init) if n.endswith("bias"))]  # was 0: N(0, 0.02)
    scale = spread[next(n for n in constant(init) if "LayerNorm.weight" in n)]  # was 1: 1 + N(0, 0.1)
    assert 0.01 < float(bias.std()) < 0.03 and 0.05 < float(scale.std()) < 0.15 and abs(float(scale.mean()) - 1) < 0.05
    with pytest.raises(ValueError, match="unknown weights"):
        zoo.module("bert", weights="pretrained")


def test_bench_roundtrip_script(tmp_path, capsys):
    """scripts/bench_roundtrip.py on one model: the table and the JSON hold onnxruntime's node counts and
    fused kinds for the three programs and the latency ratios with their intervals."""
    bench = load_script("bench_roundtrip")
    out = tmp_path / "rt.json"
    assert bench.main(["--models", "resnet", "--exporters", "torchscript", "--opsets", "17", "--budget", "2",
                       "--depth", "1", "--time-budget", "0.3", "--json", str(out)]) == 0
    assert "resnet" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())["rows"]
    assert "error" not in row and row["roundtrip_report"]["verified"] and row["optimized_report"]["verified"]
    assert set(row["ort"]) == {"original", "roundtrip", "optimized"}
    original = row["ort"]["original"]
    assert original["nodes"] == sum(original["ops"].values()) > 0
    assert original["fused"].get("Conv+Relu", 0) > 0  # onnxruntime fuses the ResNet's Conv+ReLU
    for k in ("roundtrip", "optimized"):
        lat = row["latency"][k]
        assert 0 < lat["ci_low"] <= lat["speedup"] <= lat["ci_high"] and lat["rounds"] >= 10
