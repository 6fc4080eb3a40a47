"""``pool`` ``(kind, kh, kw, sh, sw, ph, pw, act)``: 2-D pooling, kind 0 max, 1 average (padding excluded),
with a fused activation; ph = pw = -1 is SAME."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import (
    Ctor,
    Emitter,
    NotEvaluable,
    OpDef,
    Shape,
    activation,
    conv_pad,
    emit_activation,
    fail,
    torch_activation,
    volume,
    window_out,
)
from .conv import pad_hw, windows
from .egglog_text import rule
from .mapping import ImportContext, Mapper, V, floats, onnx_attrs, spelled_out, window_attrs

if TYPE_CHECKING:
    import onnx


def _shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    _kind, kh, kw, sh, sw, ph, pw, _act = attrs
    (x,) = shapes
    if len(x) != 4:
        raise fail("pool", f"input must be 4-D, got {x}")
    return (x[0], x[1], window_out(x[2], kh, sh, ph), window_out(x[3], kw, sw, pw))


def _rules() -> list[str]:
    return [rule("shape_Pool_same", ["(= e (Pool k kh kw sh sw -1 -1 act x))", "(= (S4 n c h wd) (shape x))",
                                     "(= 1 (% kh 2))", "(= 1 (% kw 2))", "(> sh 0)", "(> sw 0)"],
                 ["(set (shape e) (S4 n c (+ (/ (- h 1) sh) 1) (+ (/ (- wd 1) sw) 1)))"]),
            rule("shape_Pool", ["(= e (Pool k kh kw sh sw ph pw act x))", "(>= ph 0)", "(>= pw 0)",
                                "(= (S4 n c h wd) (shape x))", "(> sh 0)", "(> sw 0)",
                                "(>= (+ h (* 2 ph)) kh)", "(>= (+ wd (* 2 pw)) kw)"],
                 ["(set (shape e) (S4 n c (+ (/ (- (+ h (* 2 ph)) kh) sh) 1) (+ (/ (- (+ wd (* 2 pw)) kw) sw) 1)))"])]


def pool(x: np.ndarray, kind: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int) -> np.ndarray:
    ph, pw = conv_pad(kh, ph), conv_pad(kw, pw)
    if kind == 0:
        return windows(pad_hw(x, ph, pw, -np.inf), kh, kw, sh, sw).max(axis=(4, 5))
    total = windows(pad_hw(x, ph, pw), kh, kw, sh, sw).sum(axis=(4, 5))
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    count = windows(pad_hw(ones, ph, pw), kh, kw, sh, sw).sum(axis=(4, 5))
    return total / count


def _numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    kind, kh, kw, sh, sw, ph, pw, act = attrs
    if modulus is not None:
        raise NotEvaluable("pooling is not defined over a prime field")
    return activation(pool(args[0], kind, kh, kw, sh, sw, ph, pw), act)


def _onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    kind, kh, kw, sh, sw, ph, pw, act = attrs
    ph, pw = conv_pad(kh, ph), conv_pad(kw, pw)
    common: dict[str, Any] = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph, pw])
    out = em.emit("MaxPool", ins, "maxpool", **common) if kind == 0 else \
        em.emit("AveragePool", ins, "avgpool", count_include_pad=0, **common)
    return emit_activation(em, out, act)


def _torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    kind, kh, kw, sh, sw, ph, pw, act = attrs
    pad = (conv_pad(kh, ph), conv_pad(kw, pw))
    f = torch.nn.functional
    if kind == 0:
        return lambda x: torch_activation(torch, f.max_pool2d(x, (kh, kw), (sh, sw), pad), act)
    return lambda x: torch_activation(torch, f.avg_pool2d(x, (kh, kw), (sh, sw), pad, count_include_pad=False), act)


def _flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    return float(volume(out) * attrs[1] * attrs[2])


POOL = OpDef("pool", "2-D max (kind 0) or average (kind 1, padding excluded) pooling, fused activation",
             "(kind, kh, kw, sh, sw, ph, pw, act)", _shape, (Ctor("Pool", "iiiiiiiit"),), _rules, _numpy, _onnx,
             _torch, _flops)


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def _pool_import(kind: int) -> Mapper:
    """MaxPool (kind 0) or AveragePool (kind 1; one that counts the padding only unpadded) without indices."""

    def mapper(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
        args = floats(ins, 1)
        at = onnx_attrs(node)
        if args is None or len(args[0].shape) != 4 or len(node.output) > 1 and node.output[1]:
            return None
        kh, kw = at["kernel_shape"]
        win = window_attrs(at, (kh, kw))
        if win is None:
            return None
        sh, sw, ph, pw = win
        ph, pw = spelled_out(ph, pw, kh, kw)
        if kind == 1 and at.get("count_include_pad", 0) and (ph != 0 or pw != 0):
            return None
        return cx.make("pool", args, (kind, kh, kw, sh, sw, ph, pw, 0))

    return mapper


def _import_global_average(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    (x,) = ins
    if x is None or x.dtype != "float32" or len(x.shape) != 4:
        return None
    return cx.make("pool", [x], (1, x.shape[2], x.shape[3], 1, 1, 0, 0, 0))


IMPORTS: dict[str, Mapper] = {"MaxPool": _pool_import(0), "AveragePool": _pool_import(1),
                              "GlobalAveragePool": _import_global_average}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
