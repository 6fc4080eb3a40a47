"""Convolution and the kernel operators TASO's rules create.

* ``conv2d`` ``(sh, sw, ph, pw, act)``: grouped conv (groups = C / weight[1]); ph = pw = -1 is SAME.
* ``merge`` ``(groups, count)``: grouped-conv weight merge, groups -> groups / count (weights only).
* ``enlarge`` ``()``: zero-pad a kernel (centred) to the spatial size of the second operand's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import (
    Ctor,
    Emitter,
    OpDef,
    Shape,
    act_flops,
    activation,
    conv_pad,
    emit_activation,
    fail,
    torch_activation,
    volume,
    window_out,
)
from .egglog_text import rule
from .mapping import ImportContext, Mapper, V, floats, onnx_attrs, spelled_out, window_attrs

if TYPE_CHECKING:
    import onnx

TASO_PAD = {0: (-1, -1), 1: (0, 0)}
"""TENSAT's pad code -> the IR's (ph, pw): SAME, VALID"""


def _conv_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    sh, sw, ph, pw, _act = attrs
    x, w = shapes
    if len(x) != 4 or len(w) != 4:
        raise fail("conv2d", f"input and weight must be 4-D, got {x} and {w}")
    c, cin = x[1], w[1]
    if cin <= 0 or c % cin != 0:
        raise fail("conv2d", f"{c} input channels not divisible by the weight's {cin}")
    groups = c // cin
    if w[0] % groups != 0:
        raise fail("conv2d", f"{w[0]} output channels not divisible by {groups} groups")
    return (x[0], w[0], window_out(x[2], w[2], sh, ph), window_out(x[3], w[3], sw, pw))


def _conv_rules() -> list[str]:
    ok = ["(> ci 0)", "(= 0 (% c ci))", "(= 0 (% co (/ c ci)))", "(> sh 0)", "(> sw 0)"]
    return [rule("shape_Conv2d_same", ["(= e (Conv2d sh sw -1 -1 act x w))", "(= (S4 n c h wd) (shape x))",
                                       "(= (S4 co ci kh kw) (shape w))", *ok, "(= 1 (% kh 2))", "(= 1 (% kw 2))"],
                 ["(set (shape e) (S4 n co (+ (/ (- h 1) sh) 1) (+ (/ (- wd 1) sw) 1)))"]),
            rule("shape_Conv2d", ["(= e (Conv2d sh sw ph pw act x w))", "(>= ph 0)", "(>= pw 0)",
                                  "(= (S4 n c h wd) (shape x))", "(= (S4 co ci kh kw) (shape w))", *ok,
                                  "(>= (+ h (* 2 ph)) kh)", "(>= (+ wd (* 2 pw)) kw)"],
                 ["(set (shape e) (S4 n co (+ (/ (- (+ h (* 2 ph)) kh) sh) 1) (+ (/ (- (+ wd (* 2 pw)) kw) sw) 1)))"])]


def pad_hw(x: np.ndarray, ph: int, pw: int, value: float = 0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int) -> np.ndarray:
    """Sliding windows of a padded NCHW array: [N, C, OH, OW, kh, kw]."""
    v = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    return v[:, :, ::sh, ::sw]


def conv2d(x: np.ndarray, w: np.ndarray, sh: int, sw: int, ph: int, pw: int) -> np.ndarray:
    co, cg, kh, kw = w.shape
    groups = x.shape[1] // cg
    win = windows(pad_hw(x, conv_pad(kh, ph), conv_pad(kw, pw)), kh, kw, sh, sw)
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, co // groups, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return out.reshape(n, co, oh, ow)


def _conv_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    sh, sw, ph, pw, act = attrs
    return activation(conv2d(args[0], args[1], sh, sw, ph, pw), act, modulus)


def _conv_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    sh, sw, ph, pw, act = attrs
    x, w = shapes
    ph, pw = conv_pad(w[2], ph), conv_pad(w[3], pw)
    out = em.emit("Conv", ins, "conv", strides=[sh, sw], pads=[ph, pw, ph, pw], kernel_shape=[w[2], w[3]],
                  group=x[1] // w[1])
    return emit_activation(em, out, act)


def _conv_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    sh, sw, ph, pw, act = attrs
    x, w = shapes
    pad, groups = (conv_pad(w[2], ph), conv_pad(w[3], pw)), x[1] // w[1]
    return lambda x, w: torch_activation(torch, torch.nn.functional.conv2d(x, w, stride=(sh, sw), padding=pad,
                                                                           groups=groups), act)


def _conv_flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    w = ins[1]
    return 2.0 * volume(out) * w[1] * w[2] * w[3] + act_flops(attrs[4], out)


def _conv_taso(args: tuple) -> tuple[tuple, tuple, int | None]:
    sh, sw, pad, act, x, w = args
    return (sh, sw, *TASO_PAD[pad], act), (x, w), None


def _conv_sym(attrs: tuple, dims: list[list[str]]) -> list[str]:
    x, w = dims  # TASO's convs are stride 1, SAME: spatial dimensions are kept
    return [x[0], w[0], x[2], x[3]]


CONV2D = OpDef("conv2d", "grouped 2-D convolution (groups = C / weight[1]), fused activation",
               "(sh, sw, ph, pw, act)", _conv_shape, (Ctor("Conv2d", "iiiiitt"),), _conv_rules, _conv_numpy,
               _conv_onnx, _conv_torch, _conv_flops, taso=_conv_taso, sym_shape=_conv_sym)


def _merge_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    groups, count = attrs
    (w,) = shapes
    if len(w) != 4 or count <= 0 or groups % count != 0 or w[0] % groups != 0:
        raise fail("merge", f"cannot merge {groups} groups of weight {w} by {count}")
    return (w[0], w[1] * count, w[2], w[3])


def _merge_rules() -> list[str]:
    return [rule("shape_Merge", ["(= e (Merge g cnt w))", "(= (S4 co cg kh kw) (shape w))", "(> cnt 0)",
                                 "(= 0 (% g cnt))", "(= 0 (% co g))"], ["(set (shape e) (S4 co (* cg cnt) kh kw))"])]


def _merge_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    groups, count = attrs
    w = args[0]
    co, cg, kh, kw = w.shape
    out = np.zeros((co, cg * count, kh, kw), dtype=w.dtype)
    per_group = co // groups
    for o in range(co):
        j = (o // per_group) % count
        out[o, j * cg:(j + 1) * cg] = w[o]
    return out


MERGE = OpDef("merge", "grouped-conv weight merge: groups -> groups / count", "(groups, count)", _merge_shape,
              (Ctor("Merge", "iit"),), _merge_rules, _merge_numpy, free=True, fold_only=True)


def _enlarge_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    w, ref = shapes
    if len(w) != 4 or len(ref) != 4 or w[2] > ref[2] or w[3] > ref[3]:
        raise fail("enlarge", f"cannot enlarge kernel {w} to {ref}")
    if (ref[2] - w[2]) % 2 or (ref[3] - w[3]) % 2:
        raise fail("enlarge", f"kernel {w} cannot be centred in {ref}")
    return (w[0], w[1], ref[2], ref[3])


def _enlarge_rules() -> list[str]:
    return [rule("shape_Enlarge", ["(= e (Enlarge w r))", "(= (S4 a b kh kw) (shape w))", "(= (S4 c d rh rw) (shape r))",
                                   "(<= kh rh)", "(<= kw rw)", "(= 0 (% (- rh kh) 2))", "(= 0 (% (- rw kw) 2))"],
                 ["(set (shape e) (S4 a b rh rw))"])]


def _enlarge_pads(w: Shape, ref: Shape) -> tuple[tuple[int, int], tuple[int, int]]:
    dh, dw = ref[2] - w[2], ref[3] - w[3]
    return (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)


def _enlarge_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    (top, bottom), (left, right) = _enlarge_pads(args[0].shape, args[1].shape)
    return np.pad(args[0], ((0, 0), (0, 0), (top, bottom), (left, right)))


def _enlarge_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    (top, bottom), (left, right) = _enlarge_pads(shapes[0], shapes[1])
    pads = np.array([0, 0, top, left, 0, 0, bottom, right], dtype=np.int64)
    return em.emit("Pad", [ins[0], em.const(pads, "pads")], "enlarge")


def _enlarge_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    (top, bottom), (left, right) = _enlarge_pads(shapes[0], shapes[1])
    return lambda w, ref: torch.nn.functional.pad(w, (left, right, top, bottom))


ENLARGE = OpDef("enlarge", "zero-pad a kernel (centred) to the spatial size of the second operand", "()",
                _enlarge_shape, (Ctor("Enlarge", "tt"),), _enlarge_rules, _enlarge_numpy, _enlarge_onnx,
                _enlarge_torch)


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def _import_conv(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    """``conv2d``, then an ``ewadd`` of the bias (reshaped to [1, C, 1, 1]) when the Conv has one. A 1-D Conv
    (``[batch, C, length]``: an audio front-end's, a convolutional position embedding) is the 2-D one over
    ``[batch, C, 1, length]`` between two reshapes (:func:`_as_2d`)."""
    args = floats(ins, 2)
    bias = ins[2] if len(ins) > 2 else None
    if args is None or len(args[0].shape) != len(args[1].shape) or len(args[0].shape) not in (3, 4):
        return None
    x, w = args
    at = onnx_attrs(node)
    flat = len(x.shape) == 3
    if flat:
        at = _as_2d(at)
    kernel = (1, w.shape[2]) if flat else (w.shape[2], w.shape[3])
    win = window_attrs(at, kernel)
    if win is None:
        return None
    sh, sw, ph, pw = win
    ph, pw = spelled_out(ph, pw, *kernel)
    if flat:
        x = cx.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        w = cx.reshape(w, (w.shape[0], w.shape[1], *kernel))
    out = cx.make("conv2d", [x, w], (sh, sw, ph, pw, 0))
    if bias is not None:
        out = cx.make("ewadd", [out, cx.reshape(bias, (1, w.shape[0], 1, 1))])
    return cx.reshape(out, (out.shape[0], out.shape[1], out.shape[3])) if flat else out


def _as_2d(at: dict[str, Any]) -> dict[str, Any]:
    """A 1-D Conv's attributes as the 2-D Conv's over a height of 1: onnxruntime's CPU provider runs the 2-D one
    faster (its blocked-layout kernels take 4-D convolutions only; 1.08-1.59x on an audio front-end's layers, 1.08-1.10x
    end to end on WavLM and HuBERT, measured on this project's 2-core AMD EPYC), and the IR's ``conv2d`` is the one
    convolution the rules and the costs know."""
    out = dict(at)
    for key in ("kernel_shape", "strides", "dilations"):
        if key in at:
            out[key] = [1, *at[key]]
    if "pads" in at:
        begin, end = at["pads"]
        out["pads"] = [0, begin, 0, end]
    return out


def one_d(out: Any) -> bool:
    """Whether a Conv's mapped value is a 1-D Conv's (:func:`_import_conv`: the 2-D one between reshapes)."""
    return len(out.shape) == 3


IMPORTS: dict[str, Mapper] = {"Conv": _import_conv}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
