"""The real-model zoo's test matrix and the checks the round-trip tests share (tests/onnx/test_zoo.py,
tests/onnx/test_fidelity.py, tests/onnx/test_attention.py): which (model, exporter, opset) combinations run fast
and which only in the full matrix, the no-rewrite configuration, a model's interface, and closeness of two
outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import zoo
from onnx import numpy_helper

from eqsat import OptimizeConfig

ROUND_TRIP = OptimizeConfig(scheduler="none", cost="analytic", measure=False, allow_slower=True)
FAST = [(name, "torchscript", 17) for name in zoo.NAMES] + [("bert", "dynamo", 18), ("llama", "dynamo", 18)]
# expected combinations this torch (2.13) cannot export: left out of the matrix, and checked to still fail
# (tests/onnx/test_zoo.py's test_unsupported_is_recorded_with_reason) so that a change of torch shows up there
EXPECTED_UNSUPPORTED = {(n, "dynamo", 17) for n in ("gpt2", "resnet", "mobilenetv2", "efficientnet", "llama")}
FULL = [(n, e, o) for n in zoo.NAMES for e in zoo.EXPORTERS for o in zoo.OPSETS
        if (n, e, o) not in FAST and (n, e, o) not in EXPECTED_UNSUPPORTED]


def zoo_model(name: str, exporter: str, opset: int) -> onnx.ModelProto:
    """The zoo's model ``name`` exported by ``exporter`` at ``opset``; the test fails where it cannot export."""
    try:
        return zoo.build(name, exporter, opset)
    except zoo.Unsupported as e:
        pytest.fail(f"{exporter} (torch {torch.__version__}) fails to export {name} at opset {opset}: {e}")


def interface(model: onnx.ModelProto) -> tuple[list, list]:
    """(name, element type, static dims) of each graph input (initializers excluded) and output, in order."""
    inits = {t.name for t in model.graph.initializer}

    def sig(vi):
        tt = vi.type.tensor_type
        return vi.name, tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                                            for d in tt.shape.dim)

    return [sig(v) for v in model.graph.input if v.name not in inits], [sig(v) for v in model.graph.output]


def assert_close(expected: np.ndarray, got: np.ndarray, what: str) -> None:
    """Same dtype and shape, and a max abs error within 1e-4 of the expected output's scale."""
    assert got.dtype == expected.dtype and got.shape == expected.shape, what
    scale = max(float(np.abs(expected).max()), 1e-3)
    err = float(np.abs(expected.astype(np.float64) - got).max())
    assert err <= 1e-4 * scale, f"{what}: max abs error {err:.3g} at output scale {scale:.3g}"


def with_biases(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` with every all-zero 1-D float initializer (the zoo's freshly initialized biases) drawn from
    N(0, 0.02): a bias a program must keep (an all-zero one is not written: tests/onnx/test_neutral.py)."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for k, t in enumerate(out.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.ndim == 1 and a.dtype == np.float32 and a.size > 1 and not a.any():
            out.graph.initializer[k].CopyFrom(numpy_helper.from_array(
                (0.02 * rng.standard_normal(a.shape)).astype(np.float32), t.name))
    return out
