"""Extractors: one per module behind one interface, ``extract(snapshot, costs, **options) -> Extraction``.

=====================  =============================================  ==========  ============
CLI name               what                                           optimal     time limit
=====================  =============================================  ==========  ============
greedy-tree            egg's default, tree cost                       tree only   no
greedy-constituent     the MCTS paper's constituent cost (quirks)     no          no
greedy-dag             ours: exact union of sub-DAGs                  1 node/cls  no
ilp                    SCIP, acyclic, warm-started                    DAG         yes
=====================  =============================================  ==========  ============
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import greedy_constituent, greedy_dag, greedy_tree, ilp
from .base import Extraction, ExtractionError, chosen_classes, dag_cost, find_cycle, tree_cost


@dataclass(frozen=True)
class ExtractorInfo:
    name: str
    fn: Callable[..., Extraction]
    optimal_for: str
    takes_time_limit: bool


EXTRACTORS: dict[str, ExtractorInfo] = {
    "greedy-tree": ExtractorInfo("greedy-tree", greedy_tree.extract, "tree cost", False),
    "greedy-constituent": ExtractorInfo("greedy-constituent", greedy_constituent.extract, "none", False),
    "greedy-dag": ExtractorInfo("greedy-dag", greedy_dag.extract, "one-node-per-class DAGs", False),
    "ilp": ExtractorInfo("ilp", ilp.extract, "DAG cost", True),
}


def get(name: str) -> Callable[..., Extraction]:
    try:
        return EXTRACTORS[name].fn
    except KeyError:
        raise ExtractionError(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}") from None


def extract(name: str, snapshot, costs, **options) -> Extraction:
    """Run the extractor called ``name`` (see :data:`EXTRACTORS`)."""
    return get(name)(snapshot, costs, **options)


__all__ = ["EXTRACTORS", "Extraction", "ExtractionError", "ExtractorInfo", "chosen_classes", "dag_cost", "extract",
           "find_cycle", "get", "tree_cost"]
