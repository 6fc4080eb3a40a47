"""An independent check that two ONNX models compute the same function: both run in onnxruntime on seeded
random inputs and their outputs compared with numpy (no eqsat code involved)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
           "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def _session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _feeds(sess: ort.InferenceSession, rng: np.random.Generator, shapes: dict[str, tuple[int, ...]]) -> dict:
    feeds = {}
    for i in sess.get_inputs():
        shape = shapes.get(i.name) or tuple(d if isinstance(d, int) and d > 0 else 1 for d in i.shape)
        dtype = _DTYPES[i.type]
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[i.name] = np.zeros(shape, dtype)  # valid as an index for any axis
    return feeds


def outputs_match(original: onnx.ModelProto | str, optimized: onnx.ModelProto | str, seed: int = 0, draws: int = 2,
                  shapes: dict[str, tuple[int, ...]] | None = None, rtol: float = 1e-3) -> bool:
    """Whether ``optimized`` gives ``original``'s outputs (within ``rtol`` of the output's scale) on ``draws``
    seeded random inputs."""
    a, b = _session(original), _session(optimized)
    rng = np.random.default_rng(seed)
    for _ in range(draws):
        feeds = _feeds(a, rng, shapes or {})
        for x, y in zip(a.run(None, feeds), b.run(None, feeds)):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            scale = max(float(np.max(np.abs(x))) if x.size else 0.0, 1e-6)
            if x.shape != y.shape or not np.allclose(x, y, rtol=rtol, atol=rtol * scale):
                return False
    return True


def assert_same_at(original: onnx.ModelProto, optimized: onnx.ModelProto, sizes: list[dict[str, tuple[int, ...]]],
                   seed: int = 0, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """``optimized`` gives ``original``'s outputs, of the same shapes and within ``rtol`` and ``atol``, on one seeded
    random input at each of ``sizes`` (input name -> shape; the others at 1 where dynamic)."""
    a, b = _session(original), _session(optimized)
    rng = np.random.default_rng(seed)
    for shapes in sizes:
        feeds = _feeds(a, rng, shapes)
        for want, got in zip(a.run(None, feeds), b.run(None, feeds)):
            assert got.shape == want.shape, (shapes, got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=str(shapes))


def assert_symbolic_shapes(model: onnx.ModelProto, shapes: dict, runs: list[tuple[dict[str, int], dict]]) -> None:
    """Each value of ``model`` named in ``shapes`` (name -> its sizes as monomials of the symbols, ``.value(at)``)
    has those sizes in onnxruntime at each run's symbol values ``at``, fed ``feeds`` (``runs``: (at, feeds))."""
    names = sorted(shapes)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = _session(probe)
    for at, feeds in runs:
        for name, value in zip(names, sess.run(None, feeds)):
            assert [int(d.value(at)) for d in shapes[name]] == list(value.shape), (name, at)
