"""Shape inference for the IR's operators (the Python twin of the egglog shape rules).

Activation codes follow TENSAT: NONE=0, SIGMOID=1, RELU=2, TANH=3. Padding of conv2d and pooling is
explicit and symmetric (``ph``, ``pw``); ``-1`` means SAME, i.e. ``k // 2`` on each side for an odd
kernel (TASO's SAME for stride 1).
"""

from __future__ import annotations

from typing import Sequence

from .errors import ShapeError

Shape = tuple[int, ...]

ACT_NONE, ACT_SIGMOID, ACT_RELU, ACT_TANH = 0, 1, 2, 3
SAME = -1


def _fail(op: str, why: str) -> ShapeError:
    return ShapeError(f"{op}: {why}")


def broadcast(a: Shape, b: Shape, op: str = "ewadd") -> Shape:
    """Numpy broadcasting restricted to operands of equal rank (the IR reshapes to equal rank first)."""
    if len(a) != len(b):
        raise _fail(op, f"operands of rank {len(a)} and {len(b)}; reshape to equal rank first")
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise _fail(op, f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def conv_pad(k: int, p: int) -> int:
    """The real padding of one side given a kernel size and the IR's pad code."""
    if p == SAME:
        if k % 2 == 0:
            raise ShapeError(f"SAME padding needs an odd kernel, got {k}")
        return k // 2
    if p < 0:
        raise ShapeError(f"negative padding {p}")
    return p


def window_out(n: int, k: int, s: int, p: int) -> int:
    pad = conv_pad(k, p)
    o = (n + 2 * pad - k) // s + 1
    if o <= 0 or s <= 0:
        raise ShapeError(f"window {k}/{s} with padding {pad} does not fit a dimension of {n}")
    return o


def infer(op: str, attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    """Output shape of ``op`` with ``attrs`` applied to operands of ``shapes``; raises ShapeError."""
    n = len(shapes)
    if op in ("relu", "tanh", "sigmoid", "dropout"):
        return tuple(shapes[0])
    if op in ("ewadd", "ewmul"):
        return broadcast(shapes[0], shapes[1], op)
    if op == "matmul":
        a, b = shapes
        if len(a) != len(b) or len(a) not in (2, 3):
            raise _fail(op, f"operands must both be 2-D or both 3-D, got {a} and {b}")
        if a[-1] != b[-2]:
            raise _fail(op, f"inner dimensions differ: {a} x {b}")
        if len(a) == 3 and a[0] != b[0]:
            raise _fail(op, f"batch dimensions differ: {a} x {b}")
        return tuple(a[:-1]) + (b[-1],)
    if op == "conv2d":
        sh, sw, ph, pw, _act = attrs
        x, w = shapes
        if len(x) != 4 or len(w) != 4:
            raise _fail(op, f"input and weight must be 4-D, got {x} and {w}")
        c, cin = x[1], w[1]
        if cin <= 0 or c % cin != 0:
            raise _fail(op, f"{c} input channels not divisible by the weight's {cin}")
        groups = c // cin
        if w[0] % groups != 0:
            raise _fail(op, f"{w[0]} output channels not divisible by {groups} groups")
        return (x[0], w[0], window_out(x[2], w[2], sh, ph), window_out(x[3], w[3], sw, pw))
    if op == "pool":
        _kind, kh, kw, sh, sw, ph, pw, _act = attrs
        (x,) = shapes
        if len(x) != 4:
            raise _fail(op, f"input must be 4-D, got {x}")
        return (x[0], x[1], window_out(x[2], kh, sh, ph), window_out(x[3], kw, sw, pw))
    if op == "concat":
        (axis,) = attrs
        first = shapes[0]
        if not 0 <= axis < len(first):
            raise _fail(op, f"axis {axis} out of range for rank {len(first)}")
        total = 0
        for s in shapes:
            if len(s) != len(first) or any(s[i] != first[i] for i in range(len(s)) if i != axis):
                raise _fail(op, f"operands {tuple(shapes)} differ outside axis {axis}")
            total += s[axis]
        return tuple(first[:axis]) + (total,) + tuple(first[axis + 1 :])
    if op == "slice":
        axis, start, end = attrs
        (x,) = shapes
        if not 0 <= axis < len(x) or not 0 <= start < end <= x[axis]:
            raise _fail(op, f"slice [{start}:{end}] of axis {axis} out of range for {x}")
        return tuple(x[:axis]) + (end - start,) + tuple(x[axis + 1 :])
    if op == "transpose":
        perm = attrs
        (x,) = shapes
        if sorted(perm) != list(range(len(x))):
            raise _fail(op, f"permutation {perm} does not fit rank {len(x)}")
        return tuple(x[p] for p in perm)
    if op == "reshape":
        target = tuple(attrs)
        (x,) = shapes
        if _volume(target) != _volume(x):
            raise _fail(op, f"cannot reshape {x} to {target}")
        return target
    if op == "merge":
        groups, count = attrs
        (w,) = shapes
        if len(w) != 4 or count <= 0 or groups % count != 0 or w[0] % groups != 0:
            raise _fail(op, f"cannot merge {groups} groups of weight {w} by {count}")
        return (w[0], w[1] * count, w[2], w[3])
    if op == "enlarge":
        w, ref = shapes
        if len(w) != 4 or len(ref) != 4 or w[2] > ref[2] or w[3] > ref[3]:
            raise _fail(op, f"cannot enlarge kernel {w} to {ref}")
        if (ref[2] - w[2]) % 2 or (ref[3] - w[3]) % 2:
            raise _fail(op, f"kernel {w} cannot be centred in {ref}")
        return (w[0], w[1], ref[2], ref[3])
    if op == "batchnorm":
        x = shapes[0]
        if len(x) != 4 or any(tuple(s) != (x[1],) for s in shapes[1:]):
            raise _fail(op, f"expects a 4-D input and four [C] parameters, got {tuple(shapes)}")
        return tuple(x)
    if op in ("bn_scale", "bn_shift"):
        first = shapes[0]
        if len(first) != 1 or any(tuple(x) != tuple(first) for x in shapes):
            raise _fail(op, f"expects [C] parameters, got {tuple(shapes)}")
        return tuple(first)
    if op == "noop":
        return ()
    raise _fail(op, f"no shape rule (operands {tuple(shapes)}, {n} inputs)")


def _volume(shape: Sequence[int]) -> int:
    v = 1
    for d in shape:
        v *= d
    return v


volume = _volume
