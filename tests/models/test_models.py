"""The 13 built-in architectures: they build, export, pass the ONNX checker, run in onnxruntime, and match
the TASO exports / the spec's descriptions in operator counts and shapes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from eqsat.app.cli import main
from eqsat.evaluate import evaluate
from eqsat.models import MODELS, build
from eqsat.onnx import session
from eqsat.onnx.export import export_model
from eqsat.verification import compare_outputs


def counts(g) -> Counter:
    c = Counter(g.op_counts())
    for n in g.nodes():
        if n.op == "pool":
            c["maxpool" if n.attrs[0] == 0 else "avgpool"] += 1
    del c["pool"], c["weight"], c["input"]
    return +c


def conv_macs(g) -> int:
    total = 0
    for n in g.nodes():
        if n.op == "conv2d":
            w, o = n.inputs[1].shape, n.shape
            total += o[1] * o[2] * o[3] * w[1] * w[2] * w[3]
    return total


@pytest.mark.parametrize("name", list(MODELS))
def test_small_model_exports_and_runs(name):
    g = build(name, small=True)
    model = export_model(g)
    onnx.checker.check_model(model, full_check=True)
    sess = session(model)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in g.inputs}
    got = sess.run(None, feeds)
    ref = evaluate(list(g.outputs), lambda n: feeds[n.name] if n.op == "input" else g.weights[n.name])
    assert len(got) == len(ref) == len(g.outputs)
    for a, b, node in zip(got, ref, g.outputs):
        assert a.shape == tuple(node.shape)
        assert np.all(np.isfinite(a))
        ok, err, _ = compare_outputs(b.astype(np.float32), a)
        assert ok, f"{name}: onnxruntime and the numpy semantics differ by {err}"


def test_small_is_smaller_and_seed_matters():
    big, small = build("resnet50"), build("resnet50", small=True)
    assert small.num_parameters() < big.num_parameters() / 10
    a, b = build("vgg19", small=True, seed=0), build("vgg19", small=True, seed=1)
    w = a.weight_nodes()[0].name
    assert not np.array_equal(a.weights[w], b.weights[w])
    assert np.array_equal(a.weights[w], build("vgg19", small=True, seed=0).weights[w])


# counts read off TASO's exports (taso_models/*.model), without the unconnected bias/pool weights
TASO = {
    "vgg19": ({"conv2d": 16, "relu": 18, "maxpool": 5, "reshape": 3, "transpose": 3, "matmul": 3, "dropout": 2},
              19_508_428_800, (1, 1000)),
    "squeezenet": ({"conv2d": 26, "relu": 26, "maxpool": 3, "avgpool": 1, "concat": 8, "dropout": 1, "reshape": 1},
                   349_151_936, (1, 1000)),
    "mobilenetv2": ({"conv2d": 54, "batchnorm": 53, "relu": 36, "ewadd": 10, "avgpool": 1, "reshape": 1},
                    429_111_936, (1, 1000)),
    "inceptionv3": ({"conv2d": 94, "maxpool": 5, "avgpool": 9, "concat": 30}, 5_711_168_096, (1, 2048, 1, 1)),
}


@pytest.mark.parametrize("name", list(TASO))
def test_matches_taso_export(name):
    expected, macs, out_shape = TASO[name]
    g = build(name)
    assert dict(counts(g)) == expected
    assert conv_macs(g) == macs  # every conv's shapes as in the export (cross-checked conv by conv)
    assert g.outputs[0].shape == out_shape


def test_bert_matches_spec():
    g = build("bert")
    assert g.inputs[0].shape == (64, 1024)
    # 5 matmuls per layer (Q, K, V, logits, output) + the 7 linears that feed the next layer
    assert dict(counts(g)) == {"matmul": 47, "reshape": 32, "transpose": 32}
    assert len(g.outputs) == 8 and all(o.shape == (64, 1024) for o in g.outputs)
    logits = [n for n in g.nodes() if n.op == "matmul" and n.inputs[0].op == "transpose" and n.inputs[1].op == "transpose"]
    assert len(logits) == 8 and all(n.shape == (16, 64, 64) for n in logits)


def test_nasrnn_matches_spec():
    g = build("nasrnn")
    per_step = {"matmul": 16, "ewadd": 11, "ewmul": 4, "relu": 2, "sigmoid": 5, "tanh": 8}
    assert dict(counts(g)) == {k: 5 * v for k, v in per_step.items()}
    assert len(g.inputs) == 5 and g.outputs[0].shape == (1, 512)


def test_other_paper_shapes():
    assert build("resnet50").outputs[0].shape == (1, 2048, 7, 7)
    assert build("resnext50").outputs[0].shape == (1, 2048, 7, 7)
    assert build("nasneta").outputs[0].shape == (1, 5120, 7, 7)
    assert build("vit-base").outputs[0].shape == (197, 768)
    assert build("vit-huge").outputs[0].shape == (257, 1280)
    tt = build("tt")
    assert [o.shape for o in tt.outputs] == [(128, 512), (32, 512)]
    grouped = [n for n in build("resnext50").nodes() if n.op == "conv2d" and n.inputs[1].shape[2] == 3]
    assert all(n.inputs[0].shape[1] // n.inputs[1].shape[1] == 32 for n in grouped)


@pytest.mark.parametrize("name", ["tt", "vit-base"])
def test_deep_transformers_stay_finite_at_paper_size(name):
    """No layer norm or softmax: the weight scales alone must keep 12-18 layers of attention finite."""
    model = export_model(build(name))
    sess = session(model)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    for out in sess.run(None, feeds):
        assert np.all(np.isfinite(out))
        assert 0.5 < float(out.std()) < 4.0


def test_models_cli(tmp_path, capsys):
    assert main(["models", "list", "--small"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MODELS)
    path = tmp_path / "sq.onnx"
    assert main(["models", "export", "squeezenet", "--small", "-o", str(path)]) == 0
    onnx.checker.check_model(onnx.load(path))
    assert main(["models", "export", "nope", "-o", str(path)]) == 2
