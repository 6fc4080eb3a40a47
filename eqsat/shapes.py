"""Shape inference for the IR's operators: each operator's shape function lives in its :mod:`eqsat.ops`
entry (beside its egglog twin); this module dispatches to it and re-exports the shared shape arithmetic.

Activation codes follow TENSAT: NONE=0, SIGMOID=1, RELU=2, TANH=3. Padding of conv2d and pooling is
explicit and symmetric (``ph``, ``pw``); ``-1`` means SAME, i.e. ``k // 2`` on each side for an odd
kernel (TASO's SAME for stride 1).
"""

from __future__ import annotations

from collections.abc import Sequence

from .ops import (
    ACT_NONE,
    ACT_RELU,
    ACT_SIGMOID,
    ACT_TANH,
    SAME,
    Shape,
    broadcast,
    conv_pad,
    infer_shape,
    volume,
    window_out,
)

__all__ = ["ACT_NONE", "ACT_RELU", "ACT_SIGMOID", "ACT_TANH", "SAME", "Shape", "broadcast", "conv_pad", "infer",
           "volume", "window_out"]


def infer(op: str, attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    """Output shape of ``op`` with ``attrs`` applied to operands of ``shapes``; raises ShapeError."""
    return infer_shape(op, attrs, shapes)
