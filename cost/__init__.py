"""Operator cost models (analytic roofline; measured in onnxruntime on the CPU, or with torch on CPU or GPU) and
their cache. The torch ones (``cpu``, ``cuda``) need the ``torch`` extra (``pip install 'eqsat[torch]'``)."""

from __future__ import annotations

from eqsat.errors import InputError
from eqsat.measurement.torch_run import check_torch, torch_gpu

from .analytic import DEVICES, AnalyticCost
from .base import CostModel, OpKey, costs_by_op, graph_cost, graph_ops, node_costs
from .cache import CostCache
from .measure import TorchCost
from .ort import OrtCost

__all__ = ["AnalyticCost", "CostModel", "OpKey", "costs_by_op", "graph_cost", "graph_ops", "node_costs"]

COST_MODELS = ("analytic", "ort-cpu", "cpu", "cuda", "auto")
"""--cost values besides ``analytic-DEVICE`` (see :func:`cost_names`)"""


def cost_names() -> list[str]:
    """Every accepted ``--cost`` value: :data:`COST_MODELS` and ``analytic-DEVICE`` per roofline device."""
    return [*COST_MODELS, *(f"analytic-{d}" for d in DEVICES)]


def resolve_auto(runtime: str | None = None) -> str:
    """The cost model ``--cost auto`` stands for: the one measured in the end-to-end runtime (``--runtime``):
    ort-cpu for onnxruntime on the CPU, cpu for torch on the CPU, cuda for the GPU runtimes; None or ``auto``:
    cuda where torch sees a GPU, else ort-cpu (what :mod:`eqsat.measurement.timing` measures on the CPU). Without torch
    installed, torch is not imported: there is no GPU for it (ort-cpu), and cpu and cuda ask for the torch extra
    when made."""
    if runtime in (None, "auto", "torch-compile"):
        gpu = torch_gpu()
        return "cuda" if gpu else ("cpu" if runtime == "torch-compile" else "ort-cpu")
    if runtime in ("ort-cpu", "onnxruntime-cpu"):
        return "ort-cpu"
    return "cpu" if runtime == "torch-cpu" else "cuda"


def make(name: str, cache_path: str | None = None, *, runtime: str | None = None, threads: int = 1):
    """The cost model for a ``--cost`` value: analytic (roofline of this CPU) | analytic-a100 (roofline of an A100,
    the paper's GPU) | ort-cpu (operators timed in onnxruntime on the CPU with ``threads`` intra-op threads, the
    end-to-end run's) | cpu | cuda (timed with torch) | auto (see :func:`resolve_auto`; ``runtime`` is the
    end-to-end runtime)."""
    asked = name
    if name == "auto":
        name = resolve_auto(runtime)
    if name == "analytic":
        return AnalyticCost("cpu")
    if name.startswith("analytic-"):
        device = name.split("-", 1)[1]
        if device not in DEVICES:
            raise InputError(f"--cost {name!r}: analytic devices are {', '.join(DEVICES)}")
        return AnalyticCost(device)
    if name == "ort-cpu":
        return OrtCost(CostCache(cache_path), threads=threads)
    if name in ("cpu", "cuda"):
        shown = f"--cost {name}" if asked == name else f"--cost {asked} (here {name}, for --runtime {runtime})"
        check_torch(shown, "use --cost ort-cpu or --cost analytic")
        return TorchCost(name, CostCache(cache_path))
    raise InputError(f"--cost {name!r}: choose analytic, ort-cpu, cpu, cuda or auto")


__all__ += ["COST_MODELS", "cost_names", "make", "resolve_auto"]
