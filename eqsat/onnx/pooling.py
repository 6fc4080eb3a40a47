"""onnxruntime's output lengths of a pooling that rounds up (``ceil_mode=1``), where onnx's shape inference differs.

onnxruntime (as torch) drops a last window that would start in the end padding: a MaxPool of kernel 2, stride 2 and
padding 1 on each side gives 7 outputs from 13 inputs where onnx's inference says 8. An import that typed the pool
by onnx's inference carried the wrong size into every Reshape target after it, and the program it wrote failed to
run (the run ended with exit 3 on a valid model). Every inference of a single node eqsat makes (the import's
types, the fingerprints, the writer's symbolic shapes) reads the pool's lengths from here instead.
``tests/onnx/test_pooling.py`` checks :func:`ceil_length` against onnxruntime.

>>> ceil_length(13, kernel=2, stride=2, dilation=1, pad_begin=1, pad_end=1), ceil_length(12, 2, 2, 1, 1, 1)
(7, 7)
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

CEILED = frozenset({"MaxPool", "AveragePool", "LpPool"})


def ceil_length(n: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int) -> int:
    """The output length of a ``ceil_mode`` pooling over ``n`` inputs, as onnxruntime computes it."""
    out = -(-(n + pad_begin + pad_end - dilation * (kernel - 1) - 1) // stride) + 1
    if (out - 1) * stride >= n + pad_begin:
        out -= 1
    return out


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == name), None)


def rounds_up(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a pooling of the default domain with ``ceil_mode`` set and padding given (not SAME)."""
    if node.op_type not in CEILED or node.domain not in ("", "ai.onnx"):
        return False
    ceil = next((a.i for a in node.attribute if a.name == "ceil_mode"), 0)
    auto = next((a.s.decode() for a in node.attribute if a.name == "auto_pad"), "NOTSET")
    return ceil == 1 and auto in ("NOTSET", "VALID")


def pooled(node: onnx.NodeProto, shape: Sequence[int]) -> list[int] | None:
    """The output shape onnxruntime gives a :func:`rounds_up` ``node`` on an input of ``shape`` (``[N, C, *spatial]``,
    every size known); None where ``node`` is no such pooling or its attributes do not fit the shape."""
    if not rounds_up(node) or len(shape) < 3:
        return None
    rank = len(shape) - 2
    kernels = _ints(node, "kernel_shape") or []
    strides = _ints(node, "strides") or [1] * rank
    dilations = _ints(node, "dilations") or [1] * rank
    valid = next((a.s.decode() for a in node.attribute if a.name == "auto_pad"), "NOTSET") == "VALID"
    pads = [0] * (2 * rank) if valid else (_ints(node, "pads") or [0] * (2 * rank))
    if not len(kernels) == len(strides) == len(dilations) == rank or len(pads) != 2 * rank:
        return None
    return [int(shape[0]), int(shape[1]), *(ceil_length(int(n), k, s, d, pads[i], pads[i + rank]) for i, (n, k, s, d)
                                             in enumerate(zip(shape[2:], kernels, strides, dilations)))]


__all__ = ["CEILED", "ceil_length", "pooled", "rounds_up"]
