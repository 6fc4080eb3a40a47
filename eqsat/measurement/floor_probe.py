"""Whether flooring masked Softmax scores pays on this CPU (:mod:`eqsat.onnx.softmax_floor`): measured once per
process, not assumed.

A masked score far below its row's maximum makes onnxruntime's CPU Softmax compute a subnormal float, and every
kernel that reads one after it. How slow that is depends on the processor: on one host of this project a causally
masked ``[1, 6, 128, 128]`` Softmax took 5-6x an unmasked one and the MatMul reading its output 95x, and the floor
made decoders 8-26% faster; on an AMD EPYC the penalty was about 2x, the floor's three more passes cost more than
they saved, and the floored candidates were slower (``docs/benchmarks.md``, seventeenth and eighteenth passes).
Where they do not pay, floored copies would only take the place of the unfloored further candidates
(:func:`eqsat.app.floored.floored_phase`). So :func:`floor_pays` times the attention core that the floor changes, a
causally masked Softmax and the MatMul with the values after it, as written and floored, interleaved in one process
at one thread, and says whether the floored one is faster by :data:`MARGIN`.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx import softmax_floor

from .clock import timing_session

SHAPE = (1, 6, 128, 128)
"""the scores timed: six heads of 128 queries over 128 keys (a 384-wide model's attention at 128 tokens)"""

MARGIN = 0.9
"""the floored core pays where its median time is below this fraction of the written one's"""

ROUNDS = 15
"""interleaved rounds of one call each, after two untimed"""


def core(floored: bool) -> onnx.ModelProto:
    """``Softmax(x + causal mask) @ v`` (the mask the lowest float above the diagonal, as transformers' decoders
    write it), with the scores floored (:func:`eqsat.onnx.softmax_floor.floored`) or as written."""
    heads, rows, keys = SHAPE[1], SHAPE[2], SHAPE[3]
    mask = np.where(np.tril(np.ones((rows, keys), bool)), 0.0, np.finfo(np.float32).min).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "mask"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "v"], ["y"])], "core",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE)),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, heads, keys, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, rows, 64])],
        initializer=[numpy_helper.from_array(mask, "mask")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return softmax_floor.floored(model, ["p"]) if floored else model


def ratio(seed: int = 0) -> float:
    """The floored core's median time over the written one's (below 1: the floor is faster here)."""
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32),
             "v": rng.standard_normal((1, SHAPE[1], SHAPE[3], 64)).astype(np.float32)}
    sessions = [timing_session(core(f), 1) for f in (False, True)]
    times: list[list[float]] = [[], []]
    for k in range(ROUNDS + 2):
        for side, s in enumerate(sessions):
            start = time.perf_counter()
            s.run(None, feeds)
            if k >= 2:
                times[side].append(time.perf_counter() - start)
    return float(np.median(times[1]) / np.median(times[0]))


@functools.cache
def floor_pays() -> tuple[bool, float]:
    """(whether the floor pays on this CPU, the measured :func:`ratio`), measured once per process."""
    measured = ratio()
    return measured < MARGIN, measured


__all__ = ["MARGIN", "ROUNDS", "SHAPE", "core", "floor_pays", "ratio"]
