"""One experiment run (a model, a scheduler, a pair of extractors, a seed) as a JSON-ready record: the
unit the benchmark and reproduction scripts are made of."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from eqsat.models import MODELS, build
from eqsat.app.pipeline import OptimizeConfig, optimize


@dataclass(frozen=True)
class RunSpec:
    model: str
    scheduler: str = "mcts"
    main_extractor: str = "greedy-dag"
    final_extractor: str = "ilp"
    seed: int = 0
    cost: str = "analytic"
    budget: int = 128
    depth: int = 10
    node_limit: int = 2000
    k_multi: int | None = None
    time_limit: float = 600.0
    ilp_time_limit: float = 60.0
    small: bool = False
    measure: bool = False

    def key(self) -> str:
        size = "small" if self.small else "paper"
        ext = f"{self.main_extractor}+{self.final_extractor}" if self.scheduler == "mcts" else self.final_extractor
        return f"{self.model}__{size}__{self.scheduler}__{ext}__{self.cost}__b{self.budget}__s{self.seed}"


def run(spec: RunSpec) -> dict:
    """Optimize one built-in model as ``spec`` says; the record holds the spec and the pipeline's report."""
    k_multi = spec.k_multi if spec.k_multi is not None else MODELS[spec.model].k_multi
    config = OptimizeConfig(scheduler=spec.scheduler, main_extractor=spec.main_extractor,
                            final_extractor=spec.final_extractor, cost=spec.cost, seed=spec.seed, budget=spec.budget,
                            depth=spec.depth, node_limit=spec.node_limit, k_multi=k_multi, time_limit=spec.time_limit,
                            ilp_time_limit=spec.ilp_time_limit, measure=spec.measure,
                            allow_slower=True)  # the record is of the program the search found, even if it measures slower
    t = time.perf_counter()
    result = optimize(build(spec.model, small=spec.small), config)
    report = result.report
    return {"spec": asdict(spec) | {"k_multi": k_multi}, "key": spec.key(), "seconds": time.perf_counter() - t,
            "original_cost": report["original_cost"], "optimized_cost": report["optimized_cost"],
            "estimated_speedup": report["estimated_speedup"], "measured": report["measured"],
            "optimization_seconds": report["times"]["search"], "extraction_seconds": report["times"]["extract"],
            "egraph": report["egraph"], "rules_applied": report["rules_applied"], "steps": report["steps"],
            "stop_reason": report["stop_reason"], "verified": report["verified"],
            "max_abs_error": report["max_abs_error"], "extraction": report["extraction"]}


def run_or_record_error(spec: RunSpec) -> dict:
    """``run(spec)``, or a record of its failure, so that one failing run does not end a sweep."""
    try:
        return run(spec)
    except Exception as exc:
        return {"key": spec.key(), "spec": asdict(spec), "error": f"{type(exc).__name__}: {exc}"}
