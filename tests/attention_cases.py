"""Small hand-built attention graphs and their oracle, shared by tests/onnx/test_attention.py and
tests/onnx/test_unseen.py: a model from a list of nodes and float constants, seeded random feeds for its inputs,
numpy's softmax attention in float64, and the model's outputs in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
Q, KT, V, MASK = (1, 2, 4, 3), (1, 2, 3, 5), (1, 2, 5, 3), (1, 1, 4, 5)
OUT = (1, 2, 4, 3)


def attention_model(nodes: list[onnx.NodeProto], consts: dict[str, float | np.ndarray],
                    outputs: tuple[tuple[str, tuple], ...] = (("y", OUT),),
                    inputs: tuple[tuple[str, tuple], ...] = (("q", Q), ("kt", KT), ("v", V), ("mask", MASK)),
                    opset: int = 17) -> onnx.ModelProto:
    """A checked model of ``nodes``: ``consts`` as float32 initializers, the ``inputs`` some node reads (name,
    shape) as float inputs, ``outputs`` (name, shape) as float outputs."""
    inits = [numpy_helper.from_array(np.array(c, np.float32), k) for k, c in consts.items()]
    used = {i for n in nodes for i in n.input}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, F, s) for k, s in inputs if k in used],
                              [helper.make_tensor_value_info(k, F, s) for k, s in outputs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def random_feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Seeded standard normal float32 values for each of ``model``'s (static) inputs."""
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def numpy_attention(q, kt, v, scale: float, mask=None, axis: int = -1) -> np.ndarray:
    """The oracle: softmax over the last axis (or ``axis``) of q @ kt * scale (+ mask), times v, in float64."""
    s = np.matmul(q.astype(np.float64), kt) * scale + (0.0 if mask is None else mask)
    p = np.exp(s - s.max(axis=axis, keepdims=True))
    return np.matmul(p / p.sum(axis=axis, keepdims=True), v)


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model``'s outputs in onnxruntime (CPU) on ``feeds``."""
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
