"""The measurement in memory-bounded groups (issue 28: memory).

Every timed onnxruntime session keeps its own prepacked copy of its constant MatMul, Gemm and Conv weights (MLAS's
layout; part of the latency the user gets, so measurement keeps prepacking on), even where the weights themselves
are shared (:mod:`eqsat.onnx.pool`). Timing the original and every candidate in one interleaved run keeps all those
copies alive at once: for BERT-base about 340 MB per session. :func:`plan` bounds what the timed sessions hold
together by a budget (``--memory-budget``; default :func:`auto_budget`):

* When the original and every candidate fit, with one session each, they are timed in one interleaved run as
  always (a small model's measurement is unchanged).
* Else in groups, one after another: the original and as many candidates as fit beside it (at least one), in the
  candidates' order; each group's sessions are freed before the next group's are built. Each group is one paired,
  interleaved run under the sequential gate, whose Bonferroni correction counts the candidates of all the groups
  (:attr:`eqsat.measurement.timing.Protocol.family`), so that the false-ship rate of the whole measurement is the gate's.
  A shipping decision stays a paired comparison against the original, timed in the same rounds. Two candidates
  faster with confidence in different groups share no rounds: the selection (:func:`eqsat.measurement.decision.choose`)
  then times them against each other in a run of their own (a duel: the earlier one in place of the original)
  and keeps the later one only if it is faster than the earlier with confidence.

Within a group, sessions per program are also bounded by the budget (:attr:`eqsat.measurement.timing.Protocol.memory_bytes`).

>>> plan([100, 100, 100, 100], 1000).groups
[[1, 2, 3]]
>>> plan([100, 100, 100, 100], 250).groups
[[1], [2], [3]]
>>> plan([100, 100, 100, 100, 100], 300).groups
[[1, 2], [3, 4]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import onnx
from onnx import helper

MIB = 2**20
PREPACKED = {"MatMul": 1, "Gemm": 1, "Conv": 1, "ConvTranspose": 1, "FusedMatMul": 1, "MatMulInteger": 1,
             "QLinearMatMul": 3, "QLinearConv": 3, "DynamicQuantizeMatMul": 1, "MatMulNBits": 1}
"""operator -> the input whose constant value onnxruntime's CPU kernels prepack (the weight)"""
THROUGH = frozenset({"Transpose", "Reshape", "Cast", "Squeeze", "Unsqueeze", "Identity", "Flatten"})
"""operators of one weight that onnxruntime folds into a constant before its consumer prepacks it"""
AUTO_FLOOR = 512 * MIB
"""the default budget's least: what a small model's sessions never reach (its measurement is unchanged)"""
AUTO_FACTOR = 2
"""the default budget in weights: with the one shared, memory-mapped copy of the weights besides (pages dropped
once the sessions are built: :meth:`eqsat.onnx.pool.WeightPool.drop_pages`), a run's peak stays near 3x them"""


def _tensor_bytes(t: onnx.TensorProto) -> int:
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 4
    return math.prod(t.dims) * itemsize


def session_bytes(model: onnx.ModelProto) -> int:
    """The bytes a timed session of ``model`` holds of its own, estimated: those of the constant weights its MatMul,
    Gemm and Conv operators read (directly or through a transpose, reshape or cast), which onnxruntime prepacks (a
    weight read by several counts once). Machine-independent, so the plan is the same on every machine."""
    g = model.graph
    sizes = {t.name: _tensor_bytes(t) for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    counted: set[str] = set()
    for n in g.node:
        k = PREPACKED.get(n.op_type)
        if k is None or len(n.input) <= k:
            continue
        name = n.input[k]
        while name not in sizes and name in producer and producer[name].op_type in THROUGH:
            name = producer[name].input[0]
        if name in sizes:
            counted.add(name)
    return sum(sizes[name] for name in counted)


def auto_budget(weights: int) -> int:
    """The default budget of the timed sessions (bytes) for a model of ``weights`` bytes: AUTO_FACTOR x the weights,
    at least AUTO_FLOOR."""
    return max(AUTO_FLOOR, AUTO_FACTOR * weights)


@dataclass(frozen=True)
class Plan:
    """How the programs are timed: ``groups`` (each a list of candidate indices, 1-based: 0 is the original,
    timed in every group) and the budget (bytes) they were planned under."""

    groups: list[list[int]]
    budget: int

    @property
    def grouped(self) -> bool:
        """Whether the measurement is split (else: one interleaved run of every program, as without a budget)."""
        return len(self.groups) > 1


def plan(sizes: Sequence[int], budget: int) -> Plan:
    """The groups for programs whose sessions hold ``sizes`` bytes each (:func:`session_bytes`; ``sizes[0]`` the
    original's): all in one group when one session of each fits ``budget``, else the original with as many
    candidates after each other as fit beside it, at least one."""
    if len(sizes) < 2:
        raise ValueError(f"need the original and at least one candidate, got {len(sizes)} programs")
    candidates = list(range(1, len(sizes)))
    if sum(sizes) <= budget:
        return Plan([candidates], budget)
    groups: list[list[int]] = []
    for k in candidates:
        if groups and sizes[0] + sum(sizes[j] for j in groups[-1]) + sizes[k] <= budget:
            groups[-1].append(k)
        else:
            groups.append([k])
    return Plan(groups, budget)


__all__ = ["AUTO_FACTOR", "AUTO_FLOOR", "PREPACKED", "Plan", "auto_budget", "plan", "session_bytes"]
