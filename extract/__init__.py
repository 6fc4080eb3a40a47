"""Extractors: one per module behind one interface, ``extract(snapshot, costs, options) -> Extraction``.

=====================  =============================================  ==========  ==========  ==========
CLI name               what                                           optimal     time limit  warm start
=====================  =============================================  ==========  ==========  ==========
greedy-tree            egg's default, tree cost                       tree only   no          no
greedy-constituent     the MCTS paper's constituent cost (quirks)     no          no          no
greedy-dag             ours: exact union of sub-DAGs                  1 node/cls  no          no
ilp                    SCIP, acyclic, warm-started                    DAG         yes         yes
=====================  =============================================  ==========  ==========  ==========

Code that runs a configured extractor (the pipeline's final one, the search's main one) asks the registry
(:data:`EXTRACTORS`) what it takes (:meth:`ExtractorInfo.options`) rather than switching on its name.

>>> info("ilp").options(time_limit=5.0).time_limit, info("greedy-dag").options(time_limit=5.0).time_limit
(5.0, None)
"""

from __future__ import annotations

from dataclasses import dataclass

from . import greedy_constituent, greedy_dag, greedy_tree, ilp
from .base import (
    DEFAULT_OPTIONS,
    Extraction,
    ExtractionError,
    ExtractOptions,
    Extractor,
    chosen_classes,
    dag_cost,
    find_cycle,
    tree_cost,
)

WARM_START = "greedy-dag"
"""the extractor whose program warm-starts those that take a warm start (cheap, and valid on any acyclic e-graph)"""


@dataclass(frozen=True)
class ExtractorInfo:
    """An extractor and what it can do: callers read these capabilities instead of switching on names."""

    name: str
    fn: Extractor
    optimal_for: str
    """the cost its result is optimal for ("none": a heuristic)"""
    takes_time_limit: bool
    """reads ``ExtractOptions.time_limit``"""
    takes_warm_start: bool = False
    """reads ``ExtractOptions.warm_start`` and never returns a program dearer than it"""

    def options(self, time_limit: float | None = None, warm_start: Extraction | None = None) -> ExtractOptions:
        """The options of this extractor given what the caller has: ``time_limit`` and ``warm_start`` are passed on
        only where it takes them."""
        return ExtractOptions(time_limit=time_limit if self.takes_time_limit else None,
                              warm_start=warm_start if self.takes_warm_start else None)


EXTRACTORS: dict[str, ExtractorInfo] = {
    "greedy-tree": ExtractorInfo("greedy-tree", greedy_tree.extract, "tree cost", False),
    "greedy-constituent": ExtractorInfo("greedy-constituent", greedy_constituent.extract, "none", False),
    "greedy-dag": ExtractorInfo("greedy-dag", greedy_dag.extract, "one-node-per-class DAGs", False),
    "ilp": ExtractorInfo("ilp", ilp.extract, "DAG cost", True, takes_warm_start=True),
}


def info(name: str) -> ExtractorInfo:
    """The registry's entry for ``name``; ExtractionError if there is none."""
    try:
        return EXTRACTORS[name]
    except KeyError:
        raise ExtractionError(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}") from None


def get(name: str) -> Extractor:
    return info(name).fn


def extract(name: str, snapshot, costs, options: ExtractOptions = DEFAULT_OPTIONS) -> Extraction:
    """Run the extractor called ``name`` (see :data:`EXTRACTORS`)."""
    return get(name)(snapshot, costs, options)


__all__ = ["DEFAULT_OPTIONS", "EXTRACTORS", "WARM_START", "ExtractOptions", "Extraction", "ExtractionError",
           "Extractor", "ExtractorInfo", "chosen_classes", "dag_cost", "extract", "find_cycle", "get", "info",
           "tree_cost"]
