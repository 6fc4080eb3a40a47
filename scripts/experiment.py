"""One experiment run (a built-in model and an OptimizeConfig) as a JSON-ready record: the unit the benchmark
and reproduction scripts are made of. Scripts build their configs with :func:`add_config_arguments`, the CLI's
flags with the scripts' defaults (:data:`SCRIPT_DEFAULTS`)."""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from eqsat.app.cli import add_config_arguments, config_from_args
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.models import MODELS, build

SCRIPT_DEFAULTS = OptimizeConfig.of(cost="analytic", node_limit=2000, measure=False,
                                    allow_slower=True)  # a record is of the program the search found, even if slower
"""the scripts' config: deterministic analytic costs, the paper's node limit, no end-to-end timing"""


@dataclass(frozen=True)
class RunSpec:
    """A built-in model (``small``: its reduced size) and the config of its run."""

    model: str
    config: OptimizeConfig = field(default_factory=lambda: SCRIPT_DEFAULTS)
    small: bool = False

    @classmethod
    def of(cls, model: str, small: bool = False, base: OptimizeConfig = SCRIPT_DEFAULTS, **options: Any) -> RunSpec:
        """A spec from flat options (OptimizeConfig.of's names); the model's own k_multi and rule set unless given."""
        spec = MODELS[model]
        own = {k: getattr(spec, k) for k in ("k_multi", "rule_set") if k not in options}
        return cls(model, base.updated(**own, **options), small)

    def __hash__(self) -> int:  # the config is a mutable dataclass: hash by the key (equal specs, equal keys)
        return hash(self.key())

    def key(self) -> str:
        c = self.config
        size = "small" if self.small else "paper"
        ext = f"{c.search.main_extractor}+{c.final_extractor}" if c.scheduler == "mcts" else c.final_extractor
        name = f"{self.model}__{size}__{c.scheduler}__{ext}__{c.cost}__b{c.search.budget}__s{c.seed}"
        # every other option (time limits, node limit, workers, early stop, ...) in a short digest, so that a
        # resumed sweep never takes a run made with other settings for this one
        digest = hashlib.sha1(json.dumps(c.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:8]
        return f"{name}__{digest}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The optimize-model flags, with the scripts' defaults."""
    add_config_arguments(p, SCRIPT_DEFAULTS)


def base_config(args: argparse.Namespace) -> OptimizeConfig:
    """SCRIPT_DEFAULTS with the flags given in ``args``."""
    return config_from_args(args, SCRIPT_DEFAULTS)


def run(spec: RunSpec) -> dict[str, Any]:
    """Optimize one built-in model as ``spec`` says; the record holds the spec, the key, the wall time and the
    pipeline's report JSON (``report``)."""
    t = time.perf_counter()
    result = optimize(build(spec.model, small=spec.small), spec.config)
    return {"spec": {"model": spec.model, "small": spec.small, "config": spec.config.to_json()}, "key": spec.key(),
            "seconds": time.perf_counter() - t, "report": result.report.to_json()}


def run_or_record_error(spec: RunSpec) -> dict[str, Any]:
    """``run(spec)``, or a record of its failure, so that one failing run does not end a sweep."""
    try:
        return run(spec)
    except Exception as exc:
        return {"key": spec.key(), "spec": {"model": spec.model, "small": spec.small,
                                            "config": spec.config.to_json()}, "error": f"{type(exc).__name__}: {exc}"}
