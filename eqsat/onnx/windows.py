"""A sliding window's output lengths (Conv, MaxPool, AveragePool, LpPool) as onnxruntime computes them: one home for
reading the window's attributes and for the arithmetic, used by every single-node inference eqsat makes where
onnx's shape inference differs from onnxruntime (the import's types, the fingerprints, the writer's symbolic
shapes) and by the writer's strided sizes (:mod:`eqsat.generic.strided`).

Where they differ: a pooling that rounds up (``ceil_mode=1``). onnxruntime (as torch) drops a last window that would
start in the end padding: a MaxPool of kernel 2, stride 2 and padding 1 on each side gives 7 outputs from 13 inputs
where onnx's inference says 8. An import that typed the pool by onnx's inference carried the wrong size into every
Reshape target after it, and the program it wrote failed to run (the run ended with exit 3 on a valid model).
``tests/onnx/test_pooling.py`` checks :func:`ceil_length` against onnxruntime.

>>> ceil_length(13, kernel=2, stride=2, dilation=1, pad_begin=1, pad_end=1), ceil_length(12, 2, 2, 1, 1, 1)
(7, 7)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx

from eqsat.ops.mapping import onnx_attrs

POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
WINDOWED = POOLS | {"Conv"}


def ceil_length(n: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int) -> int:
    """The output length of a ``ceil_mode`` pooling over ``n`` inputs, as onnxruntime computes it."""
    out = -(-(n + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride) + 1
    if (out - 1) * stride >= n + pad_begin:
        out -= 1
    return out


@dataclass(frozen=True)
class Window:
    """A Conv's or pooling's window along its spatial axes, read off its attributes."""

    op: str
    kernels: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    auto: str
    ceil: bool

    @classmethod
    def of(cls, node: onnx.NodeProto, kernels: Sequence[int] = ()) -> Window | None:
        """``node``'s window (``kernels``: a Conv's, read off its weight, where it names no ``kernel_shape``); None
        where it is no Conv or pooling of the default domain, or its attributes do not agree in rank."""
        if node.op_type not in WINDOWED or node.domain not in ("", "ai.onnx"):
            return None
        at = onnx_attrs(node)
        ks = tuple(int(k) for k in at.get("kernel_shape", kernels))
        rank = len(ks)
        auto = at.get("auto_pad", "NOTSET")
        window = cls(node.op_type, ks, tuple(at.get("strides", (1,) * rank)), tuple(at.get("dilations", (1,) * rank)),
                     tuple(at.get("pads", (0,) * (2 * rank))), auto.decode() if isinstance(auto, bytes) else str(auto),
                     int(at.get("ceil_mode", 0)) == 1 and node.op_type in POOLS)
        if len(window.strides) != rank or len(window.dilations) != rank or len(window.pads) != 2 * rank:
            return None
        return window

    @property
    def rounds_up(self) -> bool:
        """A pooling with ``ceil_mode`` set and padding given (not SAME): onnx's inference differs there."""
        return self.ceil and self.auto in ("NOTSET", "VALID")

    def length(self, spatial: int) -> Callable[[int], int] | None:
        """The output length along spatial axis ``spatial`` (0 for the first after the channels) as a function of
        the input's; None where the padding is one this does not read, or a pooling pads SAME with dilations
        (onnxruntime's lengths follow a rule of their own there)."""
        rank = len(self.kernels)
        if not 0 <= spatial < rank:
            return None
        k, s, d = self.kernels[spatial], self.strides[spatial], self.dilations[spatial]
        if s < 1 or d < 1 or k < 1 or (self.op in POOLS and self.auto.startswith("SAME") and d > 1):
            return None
        if self.auto in ("SAME_UPPER", "SAME_LOWER"):
            return lambda n: -(-n // s)
        if self.auto == "VALID":
            begin = end = 0
        elif self.auto == "NOTSET":
            begin, end = self.pads[spatial], self.pads[spatial + rank]
        else:
            return None
        if self.ceil:  # onnxruntime's rule: a last window that would start in the end padding dropped
            return lambda n: ceil_length(n, k, s, d, begin, end)
        span = d * (k - 1) + 1
        return lambda n: (n + begin + end - span) // s + 1


def rounds_up(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a pooling of the default domain with ``ceil_mode`` set and padding given (not SAME)."""
    window = Window.of(node) if node.op_type in POOLS else None
    return window is not None and window.rounds_up


def pooled(node: onnx.NodeProto, shape: Sequence[int]) -> list[int] | None:
    """The output shape onnxruntime gives a :func:`rounds_up` ``node`` on an input of ``shape`` (``[N, C, *spatial]``,
    every size known); None where ``node`` is no such pooling or its attributes do not fit the shape."""
    window = Window.of(node) if node.op_type in POOLS else None
    if window is None or not window.rounds_up or len(shape) != len(window.kernels) + 2:
        return None
    lengths = [window.length(i) for i in range(len(window.kernels))]
    if any(f is None for f in lengths):
        return None
    return [int(shape[0]), int(shape[1]), *(f(int(n)) for f, n in zip(lengths, shape[2:]) if f is not None)]


__all__ = ["POOLS", "WINDOWED", "Window", "ceil_length", "pooled", "rounds_up"]
