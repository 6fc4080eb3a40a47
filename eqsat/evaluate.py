"""Reference semantics of the IR's operators in numpy.

Used to fold weight-only subgraphs at export, and by the rule verifier, which evaluates both sides of
a rule in float64 and, for multi-linear rules, in the integers modulo a prime (``modulus``).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .ir import Node, topo_order
from .shapes import ACT_NONE, ACT_RELU, ACT_SIGMOID, ACT_TANH, conv_pad


class NotEvaluable(Exception):
    """The node is opaque or non-linear in modular mode."""


def activation(x: np.ndarray, act: int, modulus: int | None = None) -> np.ndarray:
    if act == ACT_NONE:
        return x
    if modulus is not None:
        raise NotEvaluable("activations are not defined over a prime field")
    if act == ACT_RELU:
        return np.maximum(x, 0)
    if act == ACT_SIGMOID:
        return 1.0 / (1.0 + np.exp(-x))
    if act == ACT_TANH:
        return np.tanh(x)
    raise ValueError(f"unknown activation code {act}")


def _pad_hw(x: np.ndarray, ph: int, pw: int, value: float = 0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int) -> np.ndarray:
    v = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    return v[:, :, ::sh, ::sw]  # [N, C, OH, OW, kh, kw]


def conv2d(x: np.ndarray, w: np.ndarray, sh: int, sw: int, ph: int, pw: int) -> np.ndarray:
    co, cg, kh, kw = w.shape
    groups = x.shape[1] // cg
    xp = _pad_hw(x, conv_pad(kh, ph), conv_pad(kw, pw))
    win = _windows(xp, kh, kw, sh, sw)
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, co // groups, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return out.reshape(n, co, oh, ow)


def pool(x: np.ndarray, kind: int, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int) -> np.ndarray:
    ph, pw = conv_pad(kh, ph), conv_pad(kw, pw)
    if kind == 0:
        win = _windows(_pad_hw(x, ph, pw, -np.inf), kh, kw, sh, sw)
        return win.max(axis=(4, 5))
    total = _windows(_pad_hw(x, ph, pw), kh, kw, sh, sw).sum(axis=(4, 5))
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    count = _windows(_pad_hw(ones, ph, pw), kh, kw, sh, sw).sum(axis=(4, 5))
    return total / count


def merge(w: np.ndarray, groups: int, count: int) -> np.ndarray:
    co, cg, kh, kw = w.shape
    out = np.zeros((co, cg * count, kh, kw), dtype=w.dtype)
    per_group = co // groups
    for o in range(co):
        j = (o // per_group) % count
        out[o, j * cg : (j + 1) * cg] = w[o]
    return out


def enlarge(w: np.ndarray, ref_shape: tuple[int, ...]) -> np.ndarray:
    dh, dw = ref_shape[2] - w.shape[2], ref_shape[3] - w.shape[3]
    return np.pad(w, ((0, 0), (0, 0), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)))


def apply_op(node: Node, args: list[np.ndarray], modulus: int | None = None) -> np.ndarray:
    """Evaluate one non-leaf node on its operands' values."""
    op, a = node.op, node.attrs
    if op == "ewadd":
        out = args[0] + args[1]
    elif op == "ewmul":
        out = args[0] * args[1]
    elif op == "relu":
        out = activation(args[0], ACT_RELU, modulus)
    elif op == "tanh":
        out = activation(args[0], ACT_TANH, modulus)
    elif op == "sigmoid":
        out = activation(args[0], ACT_SIGMOID, modulus)
    elif op == "dropout":
        out = args[0]
    elif op == "matmul":
        out = activation(np.matmul(args[0], args[1]), a[0], modulus)
    elif op == "conv2d":
        sh, sw, ph, pw, act = a
        out = activation(conv2d(args[0], args[1], sh, sw, ph, pw), act, modulus)
    elif op == "pool":
        kind, kh, kw, sh, sw, ph, pw, act = a
        if modulus is not None:
            raise NotEvaluable("pooling is not defined over a prime field")
        out = activation(pool(args[0], kind, kh, kw, sh, sw, ph, pw), act)
    elif op == "concat":
        out = np.concatenate(args, axis=a[0])
    elif op == "slice":
        axis, start, end = a
        out = np.take(args[0], np.arange(start, end), axis=axis)
    elif op == "transpose":
        out = np.transpose(args[0], a)
    elif op == "reshape":
        out = args[0].reshape(a)
    elif op == "merge":
        out = merge(args[0], a[0], a[1])
    elif op == "enlarge":
        out = enlarge(args[0], node.inputs[1].shape)
    elif op == "batchnorm":
        if modulus is not None:
            raise NotEvaluable("batchnorm is not defined over a prime field")
        x, scale, bias, mean, var = args
        eps = a[0] * 1e-12
        c = (1, -1, 1, 1)
        out = (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + eps) * scale.reshape(c) + bias.reshape(c)
    elif op in ("bn_scale", "bn_shift"):
        if modulus is not None:
            raise NotEvaluable("batch-norm folding is not defined over a prime field")
        eps = a[0] * 1e-12
        if op == "bn_scale":
            scale, var = args
            out = scale / np.sqrt(var + eps)
        else:
            bias, mean, scale, var = args
            out = bias - mean * scale / np.sqrt(var + eps)
    else:
        raise NotEvaluable(f"no numpy semantics for {node!r}")
    if modulus is not None:
        out = np.mod(out, modulus)
    return np.asarray(out)


def evaluate(outputs: list[Node], leaves: Mapping[str, np.ndarray] | Callable[[Node], np.ndarray],
             modulus: int | None = None) -> list[np.ndarray]:
    """Evaluate ``outputs``; leaf values come from a mapping by name or a callable on the leaf node."""
    values: dict[int, np.ndarray] = {}
    get = leaves if callable(leaves) else (lambda n: leaves[n.name])
    for node in topo_order(outputs):
        if node.op in ("input", "weight"):
            values[id(node)] = np.asarray(get(node))
        else:
            values[id(node)] = apply_op(node, [values[id(i)] for i in node.inputs], modulus)
    return [values[id(o)] for o in outputs]
