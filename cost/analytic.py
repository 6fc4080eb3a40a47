"""A deterministic roofline cost model: time = overhead + max(FLOPs / peak, bytes / bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass

from eqsat.ops import OPS
from eqsat.ops.base import bytes_moved as default_bytes

from .base import OpKey, volume

ITEMSIZE = {"float32": 4, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "bool": 1}


@dataclass(frozen=True)
class Device:
    name: str
    peak_gflops: float
    bandwidth_gbs: float
    overhead_us: float


DEVICES = {
    "cpu": Device("cpu", peak_gflops=100.0, bandwidth_gbs=20.0, overhead_us=2.0),
    "a100": Device("a100", peak_gflops=19_500.0, bandwidth_gbs=1_555.0, overhead_us=5.0),
}


def flops(key: OpKey) -> float:
    """Floating-point operations of one operator (its :mod:`eqsat.ops` entry's count)."""
    entry = OPS.get(key.op)
    if entry is None:
        return float(volume(key.out_shape))
    return entry.flops(key.attrs, key.in_shapes, key.out_shape)


def bytes_moved(key: OpKey) -> float:
    """Bytes one operator reads and writes (its :mod:`eqsat.ops` entry's count)."""
    size = ITEMSIZE.get(key.dtype, 4)
    entry = OPS.get(key.op)
    if entry is None:
        return default_bytes(key.in_shapes, key.out_shape, size)
    return entry.bytes(key.in_shapes, key.out_shape, size)


class AnalyticCost:
    """Roofline estimate; deterministic, the default in tests.

    >>> AnalyticCost().op_cost(OpKey("relu", (), ((1, 1000),), (1, 1000))) > 0
    True
    """

    def __init__(self, device: str | Device = "cpu"):
        self.device = DEVICES[device] if isinstance(device, str) else device
        self.name = f"analytic-{self.device.name}"

    def op_cost(self, key: OpKey) -> float:
        d = self.device
        compute = flops(key) / (d.peak_gflops * 1e3)  # microseconds
        memory = bytes_moved(key) / (d.bandwidth_gbs * 1e3)
        return d.overhead_us + max(compute, memory)
