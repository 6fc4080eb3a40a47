"""One experiment run (a built-in model and an OptimizeConfig) as a JSON-ready record: the unit the benchmark
and reproduction scripts are made of. Scripts build their configs with :func:`add_config_arguments`, the CLI's
flags with the scripts' defaults (:data:`SCRIPT_DEFAULTS`)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from eqsat.app.cli import add_config_arguments, config_from_args
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.ir import Graph
from eqsat.models import MODELS, build

SCRIPT_DEFAULTS = OptimizeConfig.of(cost="analytic", node_limit=2000, measure=False, time_limit=600.0,
                                    allow_slower=True, blocks=False)  # a record is of the program found, even if slower
"""the scripts' config: deterministic analytic costs, the paper's node limit, the paper's 600 s time limit (the
CLI's default is shorter), the paper's whole-model search (no repeated blocks searched once), no end-to-end
timing"""


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


def base_config(args: argparse.Namespace, base: OptimizeConfig = SCRIPT_DEFAULTS) -> OptimizeConfig:
    """``base`` (SCRIPT_DEFAULTS) with the flags given in ``args``."""
    return config_from_args(args, base)


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` whole or not at all (a sweep killed mid-write leaves no half record that a
    resumed sweep would take for a finished run)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, default=str)
    os.replace(tmp, path)


def program_digest(g: Graph) -> str:
    """A digest of a program's structure: operators, attributes, shapes, dtypes and leaf names, bottom-up
    (independent of node identity and order), and its node count. Equal programs, equal digests."""
    memo: dict[int, str] = {}
    for n in g.nodes():  # topological: children first
        below = n.name if n.op in ("input", "weight") else [memo[id(c)] for c in n.inputs]
        memo[id(n)] = hashlib.sha1(repr((n.op, n.attrs, tuple(n.shape), n.dtype, below)).encode()).hexdigest()
    return hashlib.sha1(repr(([memo[id(o)] for o in g.outputs], len(memo))).encode()).hexdigest()[:16]


def run(spec: RunSpec) -> dict[str, Any]:
    """Optimize one built-in model as ``spec`` says; the record holds the spec, the key, the wall time, the
    returned program's :func:`program_digest` and the pipeline's report JSON (``report``)."""
    t = time.perf_counter()
    result = optimize(build(spec.model, small=spec.small), spec.config)
    return {"spec": {"model": spec.model, "small": spec.small, "config": spec.config.to_json()}, "key": spec.key(),
            "seconds": time.perf_counter() - t, "program_digest": program_digest(result.graph),
            "report": result.report.to_json()}


def run_or_record_error(spec: RunSpec) -> dict[str, Any]:
    """``run(spec)``, or a record of its failure, so that one failing run does not end a sweep."""
    try:
        return run(spec)
    except Exception as exc:
        return {"key": spec.key(), "spec": {"model": spec.model, "small": spec.small,
                                            "config": spec.config.to_json()}, "error": f"{type(exc).__name__}: {exc}"}
