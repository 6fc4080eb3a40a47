"""The one configuration of an optimization run, its documentation and its checks.

:class:`OptimizeConfig` holds the pipeline's options and nests the schedulers' :class:`SearchConfig`. Each
field carries its documentation, its command-line flag and its check in its metadata (``eqsat.mcts.option``):
the CLI's arguments, their defaults and help (eqsat.app.cli), and :func:`validate` derive from them, and the
names a field accepts come from the registries (extractors, schedulers, cost models, rule sets).

>>> OptimizeConfig().final_extractor, OptimizeConfig().cost, OptimizeConfig().search.budget
('ilp', 'auto', 128)
>>> OptimizeConfig.of(budget=4, cost="analytic").search.budget
4
>>> validate(OptimizeConfig.of(budget=0))
Traceback (most recent call last):
...
eqsat.errors.InputError: --budget 0: give a whole number >= 1
"""

from __future__ import annotations

import math
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from eqsat.cost import cost_names
from eqsat.errors import InputError
from eqsat.extract import EXTRACTORS
from eqsat.mcts import SearchConfig, option, scheduler_names
from eqsat.mcts.config import WORKER_MB, usable_cores
from eqsat.measurement.runtimes import TORCH_RUNTIMES, check_available, resolve, runtime_names
from eqsat.onnx.axes.tied import check_assumed
from eqsat.rules import RULE_SETS

REGISTRIES: dict[str, Callable[[], list[str]]] = {
    "extractors": lambda: list(EXTRACTORS),
    "schedulers": scheduler_names,
    "costs": cost_names,
    "rule_sets": lambda: list(RULE_SETS),
    "runtimes": runtime_names,
}
"""registry name (a field's ``choices``) -> the names it accepts"""

ILP_FLOOR_SECONDS = 0.1
"""the least time the ILP gets: SCIP then returns its greedy warm start"""
ILP_SHARE = 0.2
"""the share of ``--time-limit`` kept for the final ILP (at most ``--ilp-time-limit``): :func:`search_seconds`"""
IMPORT_SHARE = 0.5
"""at most this share of ``--time-limit`` is charged to the import (:func:`after_import`)"""


@dataclass
class OptimizeConfig:
    """Options of one optimization run (the CLI's ``optimize-model`` flags); defaults are the documented ones.

    Build it nested (``OptimizeConfig(search=SearchConfig(budget=8))``) or flat (``OptimizeConfig.of(budget=8)``).
    """

    scheduler: str = option("mcts", "rule scheduler (none: no search, the program is re-extracted as it is)",
                            "--scheduler", choices="schedulers")
    search: SearchConfig = field(default_factory=SearchConfig, metadata={"doc": "the scheduler's options"})
    final_extractor: str = option("ilp", "extractor of the program returned", "--final-extractor",
                                  choices="extractors")
    cost: str = option("auto", "operator cost model (auto: the one timed in --runtime: ort-cpu for onnxruntime on the CPU, cuda on a GPU)", "--cost",
                       choices="costs")
    ilp_time_limit: float = option(60.0, "at most this many seconds of ILP", "--ilp-time-limit", seconds=True)
    verify_draws: int = option(3, "seeded random inputs on which the optimized model is checked", least=1)
    measure: bool = option(True, "time both programs end to end in onnxruntime and ship the optimized one only if "
                                 "faster with confidence", "--no-measure")
    allow_slower: bool = option(False, "keep the optimized program even when it is not measured faster with "
                                       "confidence than the original", "--allow-slower")
    measure_budget: float = option(10.0, "seconds of timed rounds in the end-to-end comparison (eqsat.measurement.timing; the "
                                         "minimum rounds always run; where the gate's pilot finds the rounds too "
                                         "noisy for a 2% gain, it may extend them, up to 3x, into what the search "
                                         "and extraction left of --time-limit, and to 40 rounds whatever is left: "
                                         "a slow program's)", "--measure-budget", seconds=True)
    measure_threads: int = option(1, "intra-op threads of the end-to-end comparison (onnxruntime, torch on the CPU)",
                                  least=1)
    memory_budget: int | None = option(None, "MiB the timed sessions of the end-to-end comparison may hold together "
                                             "(each keeps its own prepacked copy of its MatMul, Gemm and Conv "
                                             "weights); where the original and every candidate do not fit, they are "
                                             "timed in groups, the original with as many candidates as fit "
                                             "(eqsat.measurement.grouping). None: twice the model's weights, at least 512 MiB, "
                                             "which keeps a run's peak near 3x the weights", "--memory-budget",
                                        least=1)
    runtime: str = option("auto", "where the end-to-end measurement runs: ort-cpu (onnxruntime, CPU), torch-cuda "
                                  "(torch on the GPU, replayed as a CUDA graph), torch-compile (torch.compile: "
                                  "reduce-overhead on a GPU, default on the CPU), ort-cuda (onnxruntime-gpu), "
                                  "torch-cpu (eager torch); auto: torch-cuda if torch sees a GPU, else ort-cpu",
                          "--runtime", choices="runtimes")
    candidates: int = option(4, "distinct programs extracted (final extractor, the input as eqsat writes it where "
                                "that differs from the input, greedy-dag, greedy-dag avoiding onnxruntime's "
                                "attention kernel where its scores' floor pays, greedy-dag favouring the "
                                "runtime's kernels, the ILP under another cost model, the search path's states, "
                                "greedy-tree), each verified and measured end to end; the first in that order "
                                "that is faster than the original with confidence ships, unless a later one is "
                                "faster than it with confidence (1: the final extractor's only)",
                             "--candidates", least=1)
    blocks: bool = option(True, "find repeated blocks (layers of one structure and shapes, different weights, at "
                                "least 3 copies with weights of their own over half the model), search and extract one copy and replay its program on every copy, "
                                "and search the operators outside the blocks as a program of their own (the default "
                                "node limit's floor is shared among the copies); --no-blocks (or none found): the "
                                "whole model is searched, rewrites across the layers' boundaries included",
                          "--no-blocks")
    assume_finite_masks: bool = option(False, "vouch that no attention mask of the model ever holds -inf, +inf or NaN on "
                                       "the inputs it will be fed (a 0/1 padding mask made additive with float32's "
                                       "lowest never does; a float mask fed -inf does), so that every masked "
                                       "attention may run as the runtime's kernel, which gives a query row masked "
                                       "with -inf throughout finite values where the original gives NaN. Without "
                                       "it, only masks eqsat proves finite do (docs/robustness.md); the report's "
                                       "assumptions name it", "--assume-finite-masks")
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, metadata={
        "doc": "input name -> the shape to tune and measure at (--input-shape NAME=D1,D2,...); the written model "
               "keeps the original's dynamic dimensions. Inputs not given: a batch-like dynamic dimension 1, an "
               "image's side 224, any other 128 (the report's interface.shapes)"})
    also_at: tuple[dict[str, int], ...] = field(default=(), metadata={
        "doc": "further sizes of the dynamic dimensions to verify and measure the shipped program at (--also-at "
               "SYMBOL=N[,SYMBOL=N...], repeatable; e.g. past=511 beside a decode step tuned at past 127): a "
               "program measured slower with confidence at any of them is not shipped, and the report gives its "
               "figure at each"})
    assume_dims: dict[str, str] = field(default_factory=dict, metadata={
        "doc": "symbol -> integer arithmetic of other symbols it is always fed as (--assume-dim total=past+seq, "
               "repeatable): the run tunes, fits and verifies with it holding; where it does not, the written model "
               "may refuse or differ from the original (the report's assumptions name it). Not needed where the "
               "names say it (past + 1) or the original runs only where it holds (found by runs)"})
    static_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict, metadata={
        "doc": "input name -> a shape the written model is specialized to (--static-shape NAME=D1,D2,...): "
               "the interface changes on purpose, and the report says so"})

    @property
    def seed(self) -> int:
        """The run's seed (``search.seed``): search, verification inputs and timing order."""
        return self.search.seed

    @classmethod
    def of(cls, **options: Any) -> OptimizeConfig:
        """A config from flat options: each name is a field of OptimizeConfig or of SearchConfig."""
        return cls().updated(**options)

    def updated(self, **options: Any) -> OptimizeConfig:
        """This config with flat options replaced (names of OptimizeConfig's or SearchConfig's fields)."""
        top = {f.name for f in fields(self)} - {"search"}
        nested = {f.name for f in fields(SearchConfig)}
        unknown = set(options) - top - nested
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}; options are {sorted(top | nested)}")
        search = replace(self.search, **{k: v for k, v in options.items() if k in nested})
        return replace(self, search=search, **{k: v for k, v in options.items() if k in top})

    def validate(self) -> None:
        """Raise :class:`InputError` naming the first unusable option (see :func:`validate`)."""
        validate(self)

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready data (shapes as lists)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "search"}
        out["search"] = {f.name: getattr(self.search, f.name) for f in fields(self.search)}
        out["input_shapes"] = {k: list(v) for k, v in self.input_shapes.items()}
        out["static_shapes"] = {k: list(v) for k, v in self.static_shapes.items()}
        out["also_at"] = [dict(s) for s in self.also_at]
        return out


def options() -> Iterator[tuple[str | None, Field[Any]]]:
    """Every checked field: (None for OptimizeConfig's own, or ``"search"``, the field)."""
    for f in fields(OptimizeConfig):
        if f.name != "search":
            yield None, f
    for f in fields(SearchConfig):
        yield "search", f


def flag(f: Field[Any]) -> str:
    """How messages name a field: its CLI flag, else its name (an API-only option)."""
    return f.metadata.get("flag") or f.name


def choices(f: Field[Any]) -> list[str] | None:
    """The names a field accepts, from its registry; None if any value of its type goes."""
    registry = f.metadata.get("choices")
    return REGISTRIES[registry]() if registry else None


def value_type(owner: type, f: Field[Any]) -> type:
    """A field's value type, ``X`` of ``X | None`` (the annotations are strings: resolved here)."""
    hint = typing.get_type_hints(owner)[f.name]
    if isinstance(hint, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _check(f: Field[Any], value: Any) -> None:
    meta, name = f.metadata, flag(f)
    names = choices(f)
    if names is not None and value not in names:
        raise InputError(f"{name} {value!r}: choose one of {', '.join(names)}")
    if meta.get("least") is not None and value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < meta["least"]:
            raise InputError(f"{name} {value!r}: give a whole number >= {meta['least']}"
                             + (f" and <= {meta['most']}" if meta.get("most") is not None else ""))
    if meta.get("most") is not None and value is not None and value > meta["most"]:
        hint = f" ({meta['most_hint']()})" if meta.get("most_hint") else ""
        raise InputError(f"{name} {value!r}: over the cap of {meta['most']}; give a whole number from "
                         f"{meta['least'] if meta.get('least') is not None else 0} to {meta['most']}{hint}")
    if meta.get("seconds"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputError(f"{name} {value!r}: give a finite number of seconds > 0 (NaN and inf are refused)")
    if meta.get("share"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise InputError(f"{name} {value!r}: give a share of the time, a number > 0 and <= 1")


def validate(config: OptimizeConfig) -> None:
    """Raise :class:`InputError` (exit 2) naming the first unusable option of ``config``; None if all are usable."""
    if not isinstance(config.search, SearchConfig):
        raise InputError(f"search {config.search!r}: give an eqsat.mcts.SearchConfig")
    for owner, f in options():
        _check(f, getattr(config.search if owner else config, f.name))
    check_assumed(config.assume_dims)
    if config.measure:  # a runtime that cannot run here fails now, not after the search
        check_available(config.runtime)
    if config.also_at and config.measure and resolve(config.runtime) in TORCH_RUNTIMES:
        chose = f" (auto chose {resolve(config.runtime)})" if config.runtime == "auto" else ""
        raise InputError(f"--also-at times onnxruntime programs at further sizes; --runtime {config.runtime}{chose} "
                         "runs the IR program at the representative shapes only: leave out --also-at or give an "
                         "onnxruntime runtime (--runtime ort-cpu)")


def available_mb() -> int | None:
    """The memory the kernel says is available to new processes (``MemAvailable`` of /proc/meminfo), in MiB;
    None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def bounded_workers(config: OptimizeConfig, warn: Callable[[str], None] | None = None) -> OptimizeConfig:
    """``config`` with ``--workers`` at most the usable cores (:func:`eqsat.mcts.config.usable_cores`) and at
    most what half the available memory holds (a worker process holds about ``WORKER_MB``); where that is fewer
    than asked, ``warn`` (default: a line on stderr) says so and the run takes that many trees (the report's
    config records them). Values over the hard cap never get here: :func:`validate` refuses them."""
    asked = config.search.workers
    if not isinstance(asked, int) or asked <= 1:
        return config
    cores, free = usable_cores(), available_mb()
    by_memory = 1 + free // 2 // WORKER_MB if free is not None else asked
    trees = max(1, min(asked, cores, by_memory))
    if trees == asked:
        return config
    why = (f"this machine has {cores} usable cores, and more trees would only share them" if trees == cores else
           f"half the available memory ({free} MB) holds {trees - 1} worker processes of about {WORKER_MB} MB")
    (warn or (lambda m: print(m, file=sys.stderr)))(
        f"eqsat: warning: --workers {asked}: {why}; running {trees} tree{'s' if trees > 1 else ''}")
    return config.updated(workers=trees)


def search_seconds(config: OptimizeConfig) -> float:
    """The search's share of ``--time-limit``: with a final extractor that takes a time limit (the ILP), the search
    stops early enough to leave it ``min(--ilp-time-limit, ILP_SHARE x --time-limit)`` (a search that used the whole
    limit left SCIP 0.1 s, and a faster search then returned a worse program); the others take well under a
    second."""
    limit = config.search.time_limit
    if not EXTRACTORS[config.final_extractor].takes_time_limit:
        return limit
    return max(ILP_FLOOR_SECONDS, limit - min(config.ilp_time_limit, ILP_SHARE * limit))


def after_import(limit: float, import_seconds: float) -> float:
    """What ``--time-limit`` leaves the search and extraction after an import of ``import_seconds``: the import
    counts against it (a large model's import, runs of the original at several sizes included, took 6 s of a 45 s
    limit that the search then used whole, and the run went past a minute), but at most :data:`IMPORT_SHARE` of it,
    so a slow import still leaves the search half."""
    return max((1 - IMPORT_SHARE) * limit, limit - import_seconds)


def ilp_seconds(config: OptimizeConfig, elapsed: float) -> float:
    """The ILP's time limit: what ``--time-limit`` (search plus extraction) leaves after ``elapsed`` seconds,
    at most ``--ilp-time-limit`` and at least 0.1 s (SCIP then returns its greedy warm start)."""
    return max(ILP_FLOOR_SECONDS, min(config.ilp_time_limit, config.search.time_limit - elapsed))


__all__ = ["ILP_FLOOR_SECONDS", "ILP_SHARE", "IMPORT_SHARE", "OptimizeConfig", "REGISTRIES", "SearchConfig", "available_mb",
           "after_import", "bounded_workers", "choices", "flag", "ilp_seconds",
           "options", "search_seconds", "validate", "value_type"]
