"""Operator cost models (analytic roofline, measured on CPU or GPU with torch) and their cache."""

from __future__ import annotations

from .analytic import DEVICES, AnalyticCost
from .base import CostModel, OpKey, graph_cost, graph_ops, node_costs

__all__ = ["AnalyticCost", "CostModel", "OpKey", "graph_cost", "graph_ops", "node_costs"]

COST_MODELS = ("analytic", "cpu", "cuda", "auto")
"""--cost values besides ``analytic-DEVICE`` (see :func:`cost_names`)"""


def cost_names() -> list[str]:
    """Every accepted ``--cost`` value: :data:`COST_MODELS` and ``analytic-DEVICE`` per roofline device."""
    return [*COST_MODELS, *(f"analytic-{d}" for d in DEVICES)]


def make(name: str, cache_path: str | None = None):
    """The cost model for a ``--cost`` value: analytic (roofline of this CPU) | analytic-a100 (roofline of an A100,
    the paper's GPU) | cpu | cuda | auto (cuda if a GPU is present, else cpu)."""
    from eqsat.errors import InputError

    if name == "auto":
        import torch

        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "analytic":
        return AnalyticCost("cpu")
    if name.startswith("analytic-"):
        from .analytic import DEVICES

        device = name.split("-", 1)[1]
        if device not in DEVICES:
            raise InputError(f"--cost {name!r}: analytic devices are {', '.join(DEVICES)}")
        return AnalyticCost(device)
    if name in ("cpu", "cuda"):
        from .cache import CostCache
        from .measure import TorchCost

        return TorchCost(name, CostCache(cache_path))
    raise InputError(f"--cost {name!r}: choose analytic, cpu, cuda or auto")


__all__ += ["COST_MODELS", "cost_names", "make"]
