"""What the tests of unusual models and environments share (tests/app/test_unusual_models.py,
tests/app/test_refused_models.py, tests/app/test_unusual_environments.py): the float type and the opset of the
models they build, and a model's outputs in onnxruntime, the oracle they compare with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def outputs(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``model`` (a model, or the path of a saved one) in onnxruntime (CPU) on ``feeds``."""
    src = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feeds)
