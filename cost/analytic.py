"""A deterministic roofline cost model: time = overhead + max(FLOPs / peak, bytes / bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass

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
    op, a, ins, out = key.op, key.attrs, key.in_shapes, key.out_shape
    n_out = volume(out)
    if op == "matmul":
        k = ins[0][-1]
        return 2.0 * n_out * k + (n_out if a and a[0] else 0)
    if op == "conv2d":
        w = ins[1]
        return 2.0 * n_out * w[1] * w[2] * w[3] + (n_out if a[4] else 0)
    if op == "pool":
        return float(n_out * a[1] * a[2])
    if op in ("batchnorm",):
        return 2.0 * n_out
    if op in ("sigmoid", "tanh"):
        return 4.0 * n_out
    if op == "opaque":
        return 4.0 * n_out
    return float(n_out)


def bytes_moved(key: OpKey) -> float:
    size = ITEMSIZE.get(key.dtype, 4)
    return float(size * (sum(volume(s) for s in key.in_shapes) + volume(key.out_shape)))


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
