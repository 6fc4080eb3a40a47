"""ONNX -> IR -> e-graph -> extraction -> ONNX round trips verify and keep operator counts."""

from __future__ import annotations

import onnx
import onnx_builders as ob
import pytest
import torch
import torch_modules as tm
from ort_check import outputs_match

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.onnx.importer import import_model
from eqsat.verification import verify

CONFIG = OptimizeConfig(scheduler="none", cost="analytic", measure=False, allow_slower=True)  # the round trip, returned


def same_ops(after, before):
    """Equal operator counts, except that the e-graph merges identical layout ops (common subexpressions)."""
    layout = {"reshape", "transpose"}
    assert {k: v for k, v in after.items() if k not in layout} == {k: v for k, v in before.items() if k not in layout}
    for k in layout:
        assert 0 < after.get(k, 0) <= before.get(k, 0) or after.get(k, 0) == before.get(k, 0) == 0


@pytest.mark.parametrize("build", [ob.residual_block, ob.mlp, ob.attention])
def test_helper_models_roundtrip(build):
    model = build()
    result = optimize(model, CONFIG)
    assert outputs_match(model, result.optimized)
    onnx.checker.check_model(result.optimized, full_check=True)
    same_ops(result.graph.op_counts(), import_model(model).op_counts())
    assert result.report.extracted_cost == pytest.approx(result.report.original_cost)


def test_attention_import_maps_matmuls_and_keeps_opaque_ops():
    g = import_model(ob.attention())
    counts = g.op_counts()
    assert counts["linear"] == 3 and counts["matmul"] == 1  # q, k, v with their biases; the output projection
    # composites (eqsat.onnx.patterns), no longer opaque: logits, softmax and context are one attention
    assert counts["attention"] == 1 and counts["addnorm"] == 1  # the residual Add and its LayerNorm: one addnorm
    # the 3-D x 2-D projections became 2-D matmuls behind reshapes, so the rules can see them
    proj = [n for n in g.nodes() if n.op == "matmul" and n.inputs[1].op == "weight"]
    assert proj and all(len(n.shape) == 2 for n in proj)


def test_torch_mixed_module_roundtrip(tmp_path):
    m = tm.seeded(tm.Mixed)
    model = ob.torch_export(m, torch.randn(1, 3, 6, 6), str(tmp_path / "mixed.onnx"))
    result = optimize(model, CONFIG)
    assert outputs_match(model, result.optimized)
    same_ops(result.graph.op_counts(), import_model(model).op_counts())
    assert {"conv2d", "linear", "layernorm"} <= set(result.graph.op_counts())


@pytest.mark.parametrize("cls,shape", [(tm.ResNet18, (1, 3, 64, 64)), (tm.BertLike, (1, 8, 32))])
def test_real_exported_models_verify(tmp_path, cls, shape):
    m = tm.seeded(cls)
    model = ob.torch_export(m, torch.randn(*shape), str(tmp_path / "m.onnx"))
    result = optimize(model, CONFIG)
    assert result.report.verification.max_abs_error < 1e-3
    assert outputs_match(model, result.optimized)
    # the verifier really compares: a perturbed weight is caught
    bad = onnx.ModelProto()
    bad.CopyFrom(result.optimized)
    init = max(bad.graph.initializer, key=lambda t: len(t.raw_data))
    arr = onnx.numpy_helper.to_array(init).copy()
    arr.flat[0] += 1.0
    init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    assert not verify(model, bad, seed=0).passed


def test_dynamic_batch_needs_input_shape(tmp_path):
    m = tm.seeded(tm.ResNet18)
    model = ob.torch_export(m, torch.randn(1, 3, 32, 32), str(tmp_path / "dyn.onnx"), dynamic_batch=True)
    from eqsat.errors import DynamicShapeError

    with pytest.raises(DynamicShapeError, match="--input-shape x="):
        import_model(model)
    g = import_model(model, {"x": (2, 3, 32, 32)})
    assert g.inputs[0].shape == (2, 3, 32, 32)
