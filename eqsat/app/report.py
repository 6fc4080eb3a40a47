"""The typed report of an optimization run, its phase timer, and its one serialization (:meth:`Report.to_json`).

Costs are the cost model's estimates in microseconds; times are seconds. JSON never holds NaN or Infinity:
non-finite floats become null (``allow_nan=False`` guards the rest).

>>> from eqsat.mcts import StopReason
>>> jsonable({"a": float("nan"), "b": (1, 2.5), "c": StopReason.SATURATED})
{'a': None, 'b': [1, 2.5], 'c': 'saturated'}
>>> timer = PhaseTimer()
>>> with timer("search"):
...     pass
>>> list(timer.seconds)
['search']
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from eqsat import memory
from eqsat.extract import Extraction
from eqsat.mcts import SearchReport
from eqsat.measurement.decision import Measurement, Returned
from eqsat.onnx import pool
from eqsat.ops import OPS
from eqsat.verification import Verification

from .config import OptimizeConfig


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: dataclasses and mappings as objects, enums as their values, tuples as
    lists, non-finite floats as None."""
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


class PhaseTimer:
    """Wall time and peak resident memory per phase, from one clock: ``with timer("search"): ...`` adds to
    ``timer.seconds["search"]`` and raises ``timer.memory_mb["search"]`` to the phase's peak resident memory in
    MiB (:func:`eqsat.memory.watch`: the kernel's high-water mark where the phase reached the run's peak so far,
    else sampled; the mark itself is never reset, so ``time -v`` and ``getrusage`` still see the run's peak). As
    each phase starts, the run's weight pool drops its mapped pages (:meth:`eqsat.onnx.pool.WeightPool.drop_pages`):
    a phase holds those it reads itself."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.memory_mb: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        memory.release()  # what earlier phases freed is not this phase's
        weights = pool.current()
        if weights is not None:  # the weights' mapped pages an earlier phase read: read again only where needed
            weights.drop_pages()
        start = time.perf_counter()
        peak = memory.Peak()
        try:
            with memory.watch() as peak:
                yield
        finally:  # the watch filled ``peak`` in on its way out
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
            self.memory_mb[phase] = round(max(self.memory_mb.get(phase, 0.0), peak.mb), 1)

    def total(self, *phases: str) -> float:
        """Seconds spent so far in ``phases``."""
        return sum(self.seconds.get(p, 0.0) for p in phases)


@dataclass
class EGraphSize:
    """The e-graph the final extraction saw."""

    enodes: int
    eclasses: int
    initial_enodes: int
    node_limit: int


@dataclass
class ExtractionReport:
    """The final extractor's result; ``dag_cost`` (microseconds) is the returned program's estimate."""

    extractor: str
    dag_cost: float
    optimal: bool
    gap: float | None
    seconds: float
    notes: list[str]
    used_warm_start: bool

    @classmethod
    def of(cls, ext: Extraction) -> ExtractionReport:
        """The report of one extraction."""
        return cls(ext.extractor, ext.dag_cost, ext.optimal, ext.gap, ext.seconds, list(ext.notes),
                   ext.used_warm_start)


@dataclass
class VerificationReport:
    """The check of the optimized model against the original on seeded random inputs (eqsat.verification)."""

    verified: bool
    max_abs_error: float
    max_rel_error: float
    draws: int
    seed: int
    spread: float = 0.0
    """where an output matched only within onnxruntime's own spread on the original (a float16 or quantized graph:
    :class:`eqsat.verification.Spread`), the largest such spread; 0 where every output matched within the tolerance"""

    @classmethod
    def of(cls, check: Verification, seed: int) -> VerificationReport:
        return cls(check.passed, check.max_abs_error, check.max_rel_error, check.draws, seed, check.spread)


@dataclass
class Candidate:
    """A program the run could return, with its estimate (microseconds) and operator counts; where measured, its
    end-to-end latency (ms), its speedup over the original with the interval, and whether it shipped."""

    name: str
    estimated_cost: float
    operators: dict[str, int]
    source: str = ""
    """how it was produced (``original``, ``ilp under analytic``, ``greedy-dag``, ...)"""
    verified: bool | None = None
    max_abs_error: float | None = None
    measured_ms: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    shipped: bool = False
    note: str = ""
    beside: dict[str, float] = field(default_factory=dict)
    """the runtime's side timings of this program (torch-cuda: ``eager_ms``)"""
    costs: dict[str, float] = field(default_factory=dict)
    """the estimate split by IR operator kind: op -> its nodes' summed cost (microseconds; free kinds left out)"""


@dataclass(frozen=True)
class Change:
    """One IR operator kind whose count or estimated cost differs between the original and the returned program:
    where an estimated gain (or loss) came from."""

    op: str
    original: int
    optimized: int
    original_us: float
    optimized_us: float
    description: str

    @property
    def saved_us(self) -> float:
        """The estimated microseconds this kind saves (negative: what it adds)."""
        return self.original_us - self.optimized_us


@dataclass
class InterfaceReport:
    """The model's dynamic dimensions: their representative sizes (the run tuned and measured there), the further
    sizes the returned model was verified at, and whether its interface is the original's (eqsat.app.shaping)."""

    kept: bool = True
    symbols: dict[str, int] = field(default_factory=dict)
    """each dynamic dimension (its dim_param, or INPUT:AXIS) -> its representative size"""
    shapes: dict[str, list[int]] = field(default_factory=dict)
    """input -> the shape tuned, verified and measured at"""
    verified_at: list[str] = field(default_factory=list)
    """the further sizes (``SYMBOL=N``) the returned program matched the original at"""
    skipped: list[str] = field(default_factory=list)
    """further sizes the original itself refuses, and those a run at would not fit in memory, with what it would
    take (:mod:`eqsat.onnx.footprint`): not checked"""
    note: str = ""


@dataclass
class Report:
    """Everything an optimization run reports; :meth:`to_json` gives the documented JSON layout."""

    config: OptimizeConfig
    cost_model: str
    search: SearchReport
    egraph: EGraphSize
    extraction: ExtractionReport
    verification: VerificationReport
    candidates: list[Candidate]
    returned: Returned
    measured: Measurement | None = None
    times: dict[str, float] = field(default_factory=dict)
    memory_mb: dict[str, float] = field(default_factory=dict)
    """each phase's peak resident memory in MiB (:class:`PhaseTimer`)"""
    blocks: dict[str, Any] | None = None
    """the repeated blocks found and how they were treated (None with ``--no-blocks``)"""
    costs_estimated: int = 0
    """operators a measured cost model estimated instead of timing: ``--time-limit`` had passed
    (:func:`eqsat.cost.measure.timing_until`)"""
    input: str | None = None
    output: str | None = None
    external_data: str | None = None
    """the external data file the output keeps its weights in (``OUT.onnx.data``, beside it); None: inline"""
    interface: InterfaceReport = field(default_factory=InterfaceReport)
    rewritten: list[str] = field(default_factory=list)
    """what the import wrote in another form before the search, and why (routed expert products written dense
    where timed faster: :mod:`eqsat.measurement.experts`)"""

    def candidate(self, name: str) -> Candidate:
        """The candidate called ``name`` (``original`` or ``extracted``)."""
        return next(c for c in self.candidates if c.name == name)

    @property
    def original_cost(self) -> float:
        return self.candidate("original").estimated_cost

    @property
    def extracted_cost(self) -> float:
        """The searched program's estimate (the extractor's DAG cost), before any fallback."""
        return self.candidate("extracted").estimated_cost

    @property
    def shipped(self) -> Candidate:
        """The returned program's candidate (``original`` on a fallback)."""
        return self.candidate(self.returned.candidate if self.returned.program == "optimized" else "original")

    @property
    def optimized_cost(self) -> float:
        """The returned program's estimate."""
        return self.shipped.estimated_cost

    @property
    def estimated_speedup(self) -> float | None:
        return self.original_cost / self.optimized_cost if self.optimized_cost > 0 else None

    def changes(self) -> list[Change]:
        """Where the returned program differs from the original, by IR operator kind, the largest estimated saving
        first (empty when the original was returned)."""
        before, after = self.candidate("original"), self.shipped
        if after is before:
            return []
        kinds = (set(before.operators) | set(after.operators)) - {"input", "weight"}
        rows = [Change(op, before.operators.get(op, 0), after.operators.get(op, 0), before.costs.get(op, 0.0),
                       after.costs.get(op, 0.0), OPS[op].doc if op in OPS else "")
                for op in kinds]
        rows = [r for r in rows if r.original != r.optimized or abs(r.saved_us) > 1e-9]
        return sorted(rows, key=lambda r: (-r.saved_us, r.op))

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (the layout README.md documents); no NaN or Infinity."""
        v = self.verification
        optimized = self.shipped
        return jsonable({
            "verified": v.verified, "max_abs_error": v.max_abs_error, "max_rel_error": v.max_rel_error,
            "verification_spread": v.spread, "seed": v.seed, "config": self.config.to_json(), "times": self.times,
            "memory_mb": self.memory_mb, "blocks": self.blocks, "egraph": self.egraph,
            "extraction": self.extraction, "original_cost": self.original_cost,
            "optimized_cost": self.optimized_cost, "estimated_speedup": self.estimated_speedup,
            "extracted_cost": self.extracted_cost, "measured": self.measured, "fallback": self.returned.fallback,
            "returned": self.returned.program, "returned_reason": self.returned.reason, "shipped": optimized.name,
            "cost_model": self.cost_model,
            "costs_estimated": self.costs_estimated, "candidates": self.candidates,
            "operators": {"original": self.candidate("original").operators, "optimized": optimized.operators},
            "kernels": kernels_used(optimized.operators), "changes": self.changes(),
            "rules_applied": self.search.rules_applied(), "steps": self.search.steps,
            "stop_reason": self.search.stop_reason, "search": self._search_summary(),
            "input": self.input, "output": self.output, "external_data": self.external_data,
            "interface": self.interface, "assumptions": assumptions(self.config),
            "rewritten": self.rewritten})

    def _search_summary(self) -> dict[str, Any]:
        s = self.search
        return {"initial_cost_us": s.initial_cost_us, "best_cost_us": s.best_cost_us, "seconds": s.seconds,
                "simulations": s.simulations, "simulations_per_second": s.simulations_per_second,
                "extractions": s.extractions, "extraction_seconds": s.extraction_seconds,
                "prelude_steps": s.prelude_steps, "finish_steps": s.finish_steps}

    def dumps(self) -> str:
        """The report as JSON text (indented); refuses NaN and Infinity."""
        return json.dumps(self.to_json(), indent=2, allow_nan=False)


def report_bytes(report: Report) -> bytes:
    """The report as written to ``--report``: indented JSON (no NaN or Infinity), UTF-8."""
    return (report.dumps() + "\n").encode()


def assumptions(config: OptimizeConfig) -> list[str]:
    """What the user vouched for beyond the equivalence contract (docs/robustness.md), each a flag and what it lets
    change: empty for a run under the contract alone."""
    out = []
    if config.assume_finite_masks:
        out.append("--assume-finite-masks: no attention mask holds -inf, +inf or NaN; on inputs that make one do, "
                   "the written model may give finite values where the original gives NaN (a query row masked "
                   "with -inf throughout)")
    for name, expression in config.assume_dims.items():
        out.append(f"--assume-dim {name}={expression}: the model is fed {name} = {expression} only; at other sizes "
                   "the written model may refuse them or differ from the original")
    return out


def kernels_used(operators: dict[str, int]) -> dict[str, int]:
    """The runtime kernels of a newer opset among a program's ``operators`` (IR op -> count): kernel -> count."""
    return {OPS[op].kernel or op: n for op, n in sorted(operators.items()) if op in OPS and OPS[op].kernel and n}


__all__ = ["Candidate", "Change", "EGraphSize", "ExtractionReport", "InterfaceReport", "Measurement", "PhaseTimer", "Report", "Returned",
           "VerificationReport", "jsonable", "kernels_used", "report_bytes"]
