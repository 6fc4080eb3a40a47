"""The clocks and session settings every measurement shares: :func:`median_ms` (wall clock), :func:`cuda_event_ms`
(CUDA events), :func:`wall_block_ms` (a round's summary on the CPU runtimes) and :func:`session_options` (the
onnxruntime settings every timed session uses, so that two programs run under the same conditions). The operator
cost models (:mod:`eqsat.cost`) time with these too, which is why they live below the rest of the package."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import onnx
import onnxruntime as ort

from eqsat.onnx.io import inference_session

RUNTIME = "ort-cpu"
"""the runtime :func:`~eqsat.measurement.timing.compare` measures in (``--runtime`` names it so; others:
:mod:`eqsat.measurement.runtimes`)"""


def median_ms(call: Callable[[], Any], warmup: int = 5, repeats: int = 20) -> float:
    """Median wall time in milliseconds of ``call()``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def cuda_event_ms(call: Callable[[], Any], repeats: int) -> float:
    """Mean milliseconds of ``call()`` on the current CUDA device over ``repeats`` back-to-back calls, timed
    by CUDA events recorded between two synchronizations (the GPU's clock, so launches overlap the work)."""
    from .torch_run import require_torch  # here: the torch runtimes' executor, and torch, only GPU timing needs

    torch = require_torch("timing with CUDA events")

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        call()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / repeats


def session_options(threads: int) -> ort.SessionOptions:
    """The options every timed session uses, so that two programs run under the same conditions."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}; give the intra-op thread count to time with")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return opts


def runtime_info(threads: int) -> dict[str, Any]:
    """What the timings were taken on (the report's ``measured.runtime``)."""
    return {"name": RUNTIME, "version": ort.__version__, "intra_op_threads": threads, "inter_op_threads": 1,
            "graph_optimization_level": "ORT_ENABLE_ALL", "execution_mode": "sequential"}


def timing_session(model: onnx.ModelProto | bytes, threads: int,
                   providers: Sequence[str] = ("CPUExecutionProvider",)) -> ort.InferenceSession:
    """A session with :func:`session_options` (its weights read from the current weight pool, where one is)."""
    return inference_session(model, session_options(threads), providers)


def timed_s(call: Callable[[], Any]) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t



def wall_block_ms(call: Callable[[], Any], repeats: int) -> float:
    """The median wall time (ms) of ``repeats`` individually timed calls: the CPU runtimes' clock."""
    return statistics.median(timed_s(call) for _ in range(repeats)) * 1e3
