"""The built-in ``encoder`` (models/encoder.py): a BERT-style encoder spelled as torch's exporters write it. Its
ONNX export runs in onnxruntime and matches a second evaluator, torch's own BERT layer arithmetic (``F.linear``,
``scaled_dot_product_attention``, ``layer_norm``, ``gelu``) computed from the named weights."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

from eqsat.models import BENCHMARKS, MODELS, build
from eqsat.models.encoder import EPS
from eqsat.onnx import session
from eqsat.onnx.export import export_model

PARTS = ("query", "key", "value", "attention.output", "attention.norm", "intermediate", "output", "output.norm")
"""each layer's parametrized parts, named as :func:`torch_forward` reads their weights"""


def torch_forward(graph, hidden: np.ndarray, mask: np.ndarray, layers: int, heads: int) -> np.ndarray:
    """BERT's post-LayerNorm encoder layers in torch, in float64, from the graph's weights by name."""
    w = {k: torch.from_numpy(np.asarray(graph.weights[k], np.float64)) for k in graph.weights}
    x = torch.from_numpy(hidden.astype(np.float64))
    m = torch.from_numpy(mask.astype(np.float64))
    _, s, d = x.shape

    def lin(t, name):  # the stored weight is [in, out]: torch's Linear weight transposed
        return F.linear(t, w[f"{name}.weight"].T, w[f"{name}.bias"])

    def heads_of(t):
        return t.view(1, s, heads, d // heads).transpose(1, 2)

    for i in range(layers):
        p = f"layer{i}"
        q, k, v = (heads_of(lin(x, f"{p}.{n}")) for n in ("query", "key", "value"))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=m).transpose(1, 2).reshape(1, s, d)
        x = F.layer_norm(lin(ctx, f"{p}.attention.output") + x, (d,), w[f"{p}.attention.norm.weight"],
                         w[f"{p}.attention.norm.bias"], EPS)
        h = F.gelu(lin(x, f"{p}.intermediate"))
        x = F.layer_norm(lin(h, f"{p}.output") + x, (d,), w[f"{p}.output.norm.weight"], w[f"{p}.output.norm.bias"],
                         EPS)
    return x.numpy()


@pytest.mark.parametrize("small", [True, False])
def test_encoder_runs_in_onnxruntime_and_matches_torch(small):
    spec = MODELS["encoder"]
    kwargs = spec.small if small else spec.paper
    layers, heads = kwargs.get("layers", 2), kwargs.get("heads", 4)
    g = build("encoder", small=small)
    assert sorted(g.weights) == sorted(f"layer{i}.{part}.{kind}" for i in range(layers) for part in PARTS
                                       for kind in ("weight", "bias"))
    model = export_model(g)
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert {"LayerNormalization", "Softmax", "Erf", "MatMul", "Add"} <= ops  # the spelling exporters write
    rng = np.random.default_rng(3)
    _, seq, hidden = g.inputs[0].shape
    x = rng.standard_normal((1, seq, hidden)).astype(np.float32)
    mask = np.zeros((1, 1, 1, seq), np.float32)
    mask[..., seq - seq // 4:] = -10000.0  # the last quarter padded, as BERT's extended attention mask
    (got,) = session(model).run(None, {"hidden_states": x, "attention_mask": mask})
    want = torch_forward(g, x, mask, layers, heads)
    assert got.shape == want.shape == (1, seq, hidden)
    assert np.abs(got - want).max() < 1e-4
    # the mask matters: without it the padded tokens are attended to and the output changes
    (unmasked,) = session(model).run(None, {"hidden_states": x, "attention_mask": np.zeros_like(mask)})
    assert np.abs(unmasked - got).max() > 1e-2


def test_encoder_is_listed_but_not_a_paper_benchmark():
    assert "encoder" in MODELS and "encoder" not in BENCHMARKS
    assert len(BENCHMARKS) == 13
    g = build("encoder")
    assert [i.shape for i in g.inputs] == [(1, 128, 64), (1, 1, 1, 128)]
    assert g.op_counts()["addnorm"] == 4 and g.op_counts()["attention"] == 2
    a, b = build("encoder", small=True, seed=0), build("encoder", small=True, seed=1)
    assert not np.array_equal(a.weights["layer0.query.weight"], b.weights["layer0.query.weight"])
