"""Check that two ONNX models compute the same outputs, and time them, in onnxruntime."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

_RTOL = {"float16": 1e-2, "float32": 1e-3, "float64": 1e-7}


def session(model: onnx.ModelProto | bytes | str, threads: int | None = None) -> ort.InferenceSession:
    from .onnx_io import as_path, is_large

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    if isinstance(model, onnx.ModelProto) and is_large(model):
        with as_path(model) as path:  # onnxruntime reads the external data while the session is built
            return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def random_inputs(sess: ort.InferenceSession, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        t = i.type
        if "float16" in t:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float16)
        elif "double" in t:
            feeds[i.name] = rng.standard_normal(shape)
        elif "float" in t:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        elif "bool" in t:
            feeds[i.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            dtype = np.int32 if "int32" in t else np.int64
            feeds[i.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


@dataclass
class Verification:
    passed: bool
    max_abs_error: float
    max_rel_error: float
    draws: int
    detail: str = ""


def compare_outputs(ref: np.ndarray, got: np.ndarray) -> tuple[bool, float, float]:
    """Pass iff |got - ref| <= atol + rtol |ref| elementwise; tolerances from dtype and output magnitude."""
    if ref.shape != got.shape:
        return False, float("inf"), float("inf")
    if ref.dtype.kind not in "fc":
        ok = bool(np.array_equal(ref, got))
        return ok, 0.0 if ok else float("inf"), 0.0 if ok else float("inf")
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    rtol = _RTOL.get(ref.dtype.name, 1e-3)
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    atol = rtol * max(scale, 1e-6) * 0.1
    err = np.abs(got64 - ref64)
    if not np.all(np.isfinite(got64) == np.isfinite(ref64)):
        return False, float("inf"), float("inf")
    err = np.where(np.isfinite(err), err, 0.0)
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float((err / np.maximum(np.abs(ref64), max(scale, 1e-12))).max()) if err.size else 0.0
    ok = bool(np.all(err <= atol + rtol * np.abs(ref64)))
    return ok, max_abs, max_rel


def verify(original: onnx.ModelProto, optimized: onnx.ModelProto, seed: int = 0, draws: int = 3) -> Verification:
    """Run both models on ``draws`` seeded random inputs and compare every output."""
    s1, s2 = session(original), session(optimized)
    names1 = [o.name for o in s1.get_outputs()]
    names2 = [o.name for o in s2.get_outputs()]
    if len(names1) != len(names2):
        return Verification(False, float("inf"), float("inf"), 0, f"{len(names1)} outputs vs {len(names2)}")
    rng = np.random.default_rng(seed)
    worst_abs = worst_rel = 0.0
    passed = True
    detail = ""
    for _ in range(draws):
        feeds = random_inputs(s1, rng)
        outs1 = s1.run(None, feeds)
        outs2 = s2.run(None, feeds)
        for name, a, b in zip(names1, outs1, outs2):
            ok, e_abs, e_rel = compare_outputs(np.asarray(a), np.asarray(b))
            worst_abs, worst_rel = max(worst_abs, e_abs), max(worst_rel, e_rel)
            if not ok and passed:
                passed = False
                detail = f"output {name!r} differs: max abs error {e_abs:.3g}, max rel error {e_rel:.3g}"
    return Verification(passed, worst_abs, worst_rel, draws, detail)


def median_ms(call, warmup: int = 5, repeats: int = 20) -> float:
    """Median wall time in milliseconds of ``call()``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def measure_latency(model: onnx.ModelProto, seed: int = 0, warmup: int = 5, repeats: int = 20,
                    threads: int | None = None) -> float:
    """Median end-to-end latency in milliseconds of one onnxruntime session on seeded random inputs."""
    sess = session(model, threads)
    feeds = random_inputs(sess, np.random.default_rng(seed))
    return median_ms(lambda: sess.run(None, feeds), warmup, repeats)


def measure_pair(a: onnx.ModelProto, b: onnx.ModelProto, seed: int = 0, rounds: int = 5, repeats: int = 10,
                 threads: int | None = None, budget_s: float = 30.0) -> tuple[float, float]:
    """Median latencies (ms) of two models timed in alternating rounds, so drift hits both alike.

    Large models take fewer repeats per round (at least one), so that timing each stays near ``budget_s``."""
    sa, sb = session(a, threads), session(b, threads)
    feeds = random_inputs(sa, np.random.default_rng(seed))
    slowest = 0.0
    for s in (sa, sb):
        for _ in range(3):
            t = time.perf_counter()
            s.run(None, feeds)
            slowest = max(slowest, time.perf_counter() - t)
    repeats = max(1, min(repeats, int(budget_s / (rounds * max(slowest, 1e-9)))))
    ta, tb = [], []
    for _ in range(rounds):
        for s, acc in ((sa, ta), (sb, tb)):
            for _ in range(repeats):
                t = time.perf_counter()
                s.run(None, feeds)
                acc.append(time.perf_counter() - t)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
