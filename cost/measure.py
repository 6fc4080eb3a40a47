"""Operator costs measured with torch, on the CPU (median of repeats, fixed thread count) or on a GPU
(CUDA events, cuDNN benchmark mode picking the fastest algorithm, TASO's 8 warm-ups + 32 runs).
Opaque ONNX operators are timed as one-node models in onnxruntime (CPU).

Each operator is timed in rounds and costs the minimum of the rounds' medians. A timing far above the
analytic estimate, or a minimum that no second round confirms, is taken for contention (another process
on the same cores) and re-measured; one that stays an outlier is used for this run but never cached.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import AttributeProto, helper

from eqsat.errors import InputError
from eqsat.ops import OPS
from eqsat.timing import cuda_event_ms, median_ms

from .analytic import AnalyticCost
from .base import OpKey
from .cache import CostCache

OUTLIER_FACTOR = 20.0
"""A timing above this many times the analytic estimate (of at least ``ESTIMATE_FLOOR_US``) is suspect."""
ESTIMATE_FLOOR_US = 10.0
AGREEMENT = 2.0
"""The minimum round median counts as confirmed when another round lies within this factor of it."""


def _torch_fn(key: OpKey) -> Callable[..., Any] | None:
    """The operator as a function of torch tensors (its :mod:`eqsat.ops` entry's), or None if it has none."""
    import torch  # deferred: torch takes seconds to import and only the measured cost models need it

    entry = OPS.get(key.op)
    if entry is None or entry.torch is None:
        return None
    return entry.torch(torch, key.attrs, key.in_shapes)


@dataclass(frozen=True)
class Timing:
    """One operator's measured cost: ``us`` the minimum of the round medians; ``trusted`` False when it stayed
    an outlier after every re-measurement (such a timing is not cached)."""

    us: float
    medians: tuple[float, ...]
    estimate_us: float
    trusted: bool


def suspicious(medians: list[float], estimate_us: float) -> bool:
    """Whether the best of ``medians`` (us) looks like contention: far above the analytic estimate, or not
    confirmed by a second round within ``AGREEMENT`` of it."""
    ordered = sorted(medians)
    if ordered[0] > OUTLIER_FACTOR * max(estimate_us, ESTIMATE_FLOOR_US):
        return True
    return len(ordered) < 2 or ordered[1] > AGREEMENT * ordered[0]


def robust_time(time_round: Callable[[int], float], estimate_us: float, repeats: int, min_rounds: int = 2,
                max_rounds: int = 5, retry_repeats: int = 3, backoff_s: float = 0.005) -> Timing:
    """Time an operator in rounds (``time_round(n)`` returns the median of ``n`` runs, us) until the minimum
    is credible (see :func:`suspicious`) or ``max_rounds`` have run. Re-measurements take fewer runs
    (``retry_repeats``) and wait a little longer each time, so that a passing burst of contention can end."""
    medians = [float(time_round(repeats)) for _ in range(min_rounds)]
    while suspicious(medians, estimate_us) and len(medians) < max_rounds:
        time.sleep(backoff_s * len(medians))
        medians.append(float(time_round(min(repeats, retry_repeats))))
    return Timing(min(medians), tuple(medians), estimate_us, not suspicious(medians, estimate_us))


class CachedTimings:
    """What the measured cost models share: an operator's cost from this run's memo, else the cache, else timed
    now (and cached only when the timing is trusted)."""

    cache: CostCache
    device_name: str
    backend: str
    _memo: dict[OpKey, float]
    measured: int
    outliers: int

    def timing(self, key: OpKey) -> Timing:
        raise NotImplementedError

    def op_cost(self, key: OpKey) -> float:
        if key in self._memo:
            return self._memo[key]
        us = self.cache.get(self.device_name, self.backend, key)
        if us is None:
            timing = self.timing(key)
            us = timing.us
            self.measured += 1
            if timing.trusted:
                self.cache.put(self.device_name, self.backend, key, us)
            else:
                self.outliers += 1
        self._memo[key] = us
        return us


class TorchCost(CachedTimings):
    """Times each operator with torch on ``device`` ("cpu" or "cuda"); results cached persistently.

    Unlike TASO's model, slices and transposes are timed: onnxruntime materializes them as copies, so
    calling them free would favour programs that are slower end to end.
    """

    free_ops = frozenset(d.op for d in OPS.values() if d.free and not d.copies)

    def __init__(self, device: str = "cpu", cache: CostCache | None = None, threads: int | None = None,
                 warmup: int | None = None, repeats: int | None = None):
        import torch

        self.torch = torch
        self.device = device
        if device == "cuda":
            if not torch.cuda.is_available():
                raise InputError("--cost cuda: torch sees no GPU; use --cost cpu or --cost analytic")
            torch.backends.cudnn.benchmark = True
            self.device_name = torch.cuda.get_device_name(0)
            self.warmup, self.repeats = warmup or 8, repeats or 32
        else:
            self.threads = threads or max(1, os.cpu_count() or 1)
            torch.set_num_threads(self.threads)
            self.device_name = f"cpu-{self.threads}t"
            self.warmup, self.repeats = warmup or 3, repeats or 10
        self.backend = f"torch-{torch.__version__}"
        self.name = f"{device}:{self.device_name}"
        self.cache = cache if cache is not None else CostCache()
        self._memo: dict[OpKey, float] = {}
        self._fallback = AnalyticCost("a100" if device == "cuda" else "cpu")
        self.measured = 0
        self.outliers = 0
        """operators whose timing stayed an outlier (used in this run, not cached)"""

    def measure(self, key: OpKey) -> float:
        """Time one operator now (microseconds), bypassing the cache."""
        return self.timing(key).us

    def timing(self, key: OpKey) -> Timing:
        """Time one operator now, in rounds checked against the analytic estimate (see :func:`robust_time`)."""
        estimate = self._fallback.op_cost(key)
        run = self._runner(key)
        if run is None:  # nothing to time: the estimate is the cost, and a deterministic one
            return Timing(estimate, (), estimate, True)
        with self.torch.no_grad():
            for _ in range(self.warmup):
                run()
            if self.device == "cuda":
                return robust_time(lambda n: cuda_event_ms(run, n) * 1e3, estimate, self.repeats)
            return robust_time(lambda n: median_ms(run, 0, n) * 1e3, estimate, self.repeats)

    def _runner(self, key: OpKey) -> Callable[[], object] | None:
        """A callable that runs the operator once on seeded random operands, or None if it cannot be run."""
        if key.op == "opaque":
            return _opaque_runner(key) if self.device == "cpu" else None
        fn = _torch_fn(key)
        if fn is None:
            return None
        torch = self.torch
        gen = torch.Generator().manual_seed(0)
        args = [torch.randn(*s, generator=gen).to(self.device) for s in key.in_shapes]
        return lambda: fn(*args)


def _opaque_runner(key: OpKey) -> Callable[[], object] | None:
    """A one-node onnxruntime session running an opaque operator on seeded float32 inputs, or None when it
    cannot run that way (inputs of other dtypes, operators needing constant inputs)."""
    built = opaque_model(key)
    if built is None:
        return None
    model, feeds = built
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
    except Exception:  # inputs of other dtypes, ops needing constant inputs: estimated instead
        return None
    return lambda: sess.run(None, feeds)


def opaque_model(key: OpKey) -> tuple[onnx.ModelProto, dict[str, np.ndarray]] | None:
    """The one-node ONNX model (opset 17) of an opaque operator's key and seeded float32 feeds for it, or None
    when its attributes do not parse. Whether onnxruntime can run it shows only when a session is built."""
    op_type, domain, attr_bytes, _out_index = key.attrs
    ins = [f"i{k}" for k in range(len(key.in_shapes))]
    node = helper.make_node(op_type, ins, ["y"], domain=domain or None)
    try:
        for b in attr_bytes:
            ap = AttributeProto()
            ap.ParseFromString(b)
            node.attribute.append(ap)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype)) if key.dtype else onnx.TensorProto.FLOAT
        graph = helper.make_graph([node], "op", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)
                                                 for n, s in zip(ins, key.in_shapes)],
                                  [helper.make_tensor_value_info("y", elem, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    except Exception:  # unparsable attributes or an unknown dtype: estimated instead
        return None
    rng = np.random.default_rng(0)
    return model, {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(ins, key.in_shapes)}
