"""Layout operators: ``concat``, ``slice``, ``transpose``, ``reshape``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Ctor, Emitter, OpDef, Shape, fail, volume
from .egglog_text import MAX_RANK, dim_vars, fold, rule, shape_of
from .mapping import ImportContext, Mapper, V, floats, onnx_attrs

if TYPE_CHECKING:
    import onnx


def _concat_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    (axis,) = attrs
    first = shapes[0]
    if not 0 <= axis < len(first):
        raise fail("concat", f"axis {axis} out of range for rank {len(first)}")
    total = 0
    for s in shapes:
        if len(s) != len(first) or any(s[i] != first[i] for i in range(len(s)) if i != axis):
            raise fail("concat", f"operands {tuple(shapes)} differ outside axis {axis}")
        total += s[axis]
    return tuple(first[:axis]) + (total,) + tuple(first[axis + 1:])


def _concat_rules() -> list[str]:
    """Binary ``Concat`` only: an n-ary ``ConcatN`` (imported models) has its shape set by the encoder."""
    out = []
    for r in range(1, MAX_RANK + 1):
        for ax in range(r):
            a = dim_vars("d", r)
            b, dims = list(a), list(a)
            b[ax], dims[ax] = "q", f"(+ {a[ax]} q)"
            out.append(rule(f"shape_Concat{r}_{ax}", [f"(= e (Concat {ax} x y))", f"(= {shape_of(a)} (shape x))",
                                                      f"(= {shape_of(b)} (shape y))"],
                            [f"(set (shape e) {shape_of(dims)})"]))
    return out


def _concat_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    return np.concatenate(args, axis=attrs[0])


def _concat_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    return em.emit("Concat", ins, "concat", axis=attrs[0])


def _concat_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    return lambda *xs: torch.cat(xs, dim=attrs[0])


def _concat_taso(args: tuple) -> tuple[tuple, tuple, int | None]:
    axis, ndim, a, b = args
    return (axis,), (a, b), int(ndim)


def _concat_sym(attrs: tuple, dims: list[list[str]]) -> list[str]:
    (axis,), (da, db) = attrs, dims
    return [f"(+ {x} {y})" if k == axis else x for k, (x, y) in enumerate(zip(da, db))]


CONCAT = OpDef("concat", "n-input concatenation along an axis", "(axis,)", _concat_shape,
               (Ctor("Concat", "itt"), Ctor("ConcatN", "il")), _concat_rules, _concat_numpy, _concat_onnx,
               _concat_torch, taso=_concat_taso, sym_shape=_concat_sym)


def _slice_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    axis, start, end = attrs
    (x,) = shapes
    if not 0 <= axis < len(x) or not 0 <= start < end <= x[axis]:
        raise fail("slice", f"slice [{start}:{end}] of axis {axis} out of range for {x}")
    return tuple(x[:axis]) + (end - start,) + tuple(x[axis + 1:])


def _slice_rules() -> list[str]:
    out = []
    for r in range(1, MAX_RANK + 1):
        for ax in range(r):
            a = dim_vars("d", r)
            dims = list(a)
            dims[ax] = "(- en st)"
            out.append(rule(f"shape_Slice{r}_{ax}", [f"(= e (Slice {ax} st en x))", f"(= {shape_of(a)} (shape x))",
                                                     "(>= st 0)", "(< st en)", f"(<= en {a[ax]})"],
                            [f"(set (shape e) {shape_of(dims)})"]))
    return out


def _slice_numpy(attrs: tuple, args: list[np.ndarray], modulus: int | None) -> np.ndarray:
    axis, start, end = attrs
    return np.take(args[0], np.arange(start, end), axis=axis)


def _slice_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    axis, start, end = attrs
    bounds = [em.const(np.array([v], dtype=np.int64), "idx") for v in (start, end, axis)]
    return em.emit("Slice", ins + bounds, "slice")


def _slice_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    axis, start, end = attrs
    return lambda x: x.narrow(axis, start, end - start).contiguous()


SLICE = OpDef("slice", "x[start:end] along an axis (TENSAT's split halves, with explicit bounds)",
              "(axis, start, end)", _slice_shape, (Ctor("Slice", "iiit"),), _slice_rules, _slice_numpy,
              _slice_onnx, _slice_torch, free=True, copies=True)


def _transpose_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    (x,) = shapes
    if sorted(attrs) != list(range(len(x))):
        raise fail("transpose", f"permutation {attrs} does not fit rank {len(x)}")
    return tuple(x[p] for p in attrs)


def _pick(p: str, dims: list[str]) -> str:
    """egglog arithmetic for ``dims[p]`` with ``p`` a variable in ``0 .. len(dims) - 1``: the sum of each dimension
    times its Lagrange indicator (1 at its own index, 0 at the others; exact integer division), so that one rule
    per rank reads every permutation (each dimension is multiplied by 0 or 1: no overflow, whatever its size)."""
    terms = []
    for j, d in enumerate(dims):
        others = [k for k in range(len(dims)) if k != j]
        indicator = f"(/ {fold('*', [f'(- {p} {k})' for k in others])} {math.prod(j - k for k in others)})"
        terms.append(f"(* {d} {indicator})")
    return fold("+", terms)


def _transpose_rules() -> list[str]:
    """One shape rule per rank: the permutation's entries are read as variables, checked to be a permutation
    (each in range, all distinct), and each output dimension picked by :func:`_pick` (egglog pays for every
    registered rule on each push and analysis run: one rule per permutation was 32 rules, and as many ``sym``
    twins)."""
    out = []
    for r in range(2, MAX_RANK + 1):
        a, p = dim_vars("d", r), dim_vars("p", r)
        valid = [c for q in p for c in (f"(>= {q} 0)", f"(< {q} {r})")]
        valid += [f"(!= {p[i]} {p[j]})" for i in range(r) for j in range(i + 1, r)]
        out.append(rule(f"shape_Transpose{r}", [f"(= e (Transpose {shape_of(p)} x))", f"(= {shape_of(a)} (shape x))",
                                                *valid], [f"(set (shape e) {shape_of([_pick(q, a) for q in p])})"]))
    return out


def _transpose_torch(torch: Any, attrs: tuple, shapes: Sequence[Shape]) -> Callable[..., Any]:
    return lambda x: x.permute(*attrs).contiguous()


TRANSPOSE = OpDef("transpose", "out[i] = in[perm[i]] (egglog: ranks 2-4)", "perm", _transpose_shape,
                  (Ctor("Transpose", "ht"),), _transpose_rules, lambda attrs, args, modulus: np.transpose(args[0], attrs),
                  lambda em, attrs, ins, shapes: em.emit("Transpose", ins, "transpose", perm=list(attrs)),
                  _transpose_torch, free=True, copies=True)


def _reshape_shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    (x,) = shapes
    if volume(attrs) != volume(x):
        raise fail("reshape", f"cannot reshape {x} to {tuple(attrs)}")
    return tuple(attrs)


def _reshape_rules() -> list[str]:
    out = []
    for r in range(1, MAX_RANK + 1):
        for q in range(1, MAX_RANK + 1):
            a, b = dim_vars("a", r), dim_vars("b", q)
            out.append(rule(f"shape_Reshape{r}_{q}", [f"(= e (Reshape {shape_of(b)} x))", f"(= {shape_of(a)} (shape x))",
                                                      f"(= {fold('*', a)} {fold('*', b)})"], [f"(set (shape e) {shape_of(b)})"]))
    return out


def _reshape_onnx(em: Emitter, attrs: tuple, ins: list[str], shapes: Sequence[Shape]) -> str:
    """A Reshape; one that only inserts or removes axes of 1 beside a size no monomial of the symbols fits (the frames
    of a 1-D convolution written 2-D) an Unsqueeze or a Squeeze, which hold at every size with no target to write
    (the shape-generic writer reads such a size off runs at nearby sizes, where a strided convolution's frames may
    not change); so too beside a size that is a product of symbols one of which is at 1 (a mixture of experts'
    routed rows, ``2*batch*seq`` at a batch of 1, unsqueezed to ``[256, 1, 1]``: a target written in numbers could
    be read with the batch on an axis of 1), and a reshape of a value to such a size along one axis beside axes of
    1 (``[b*s, 2]`` to ``[2*b*s, 1]``) a Reshape to ``[-1]`` and an Unsqueeze of the 1s."""
    if shapes and any(getattr(d, "mono", 0) is None or _hides_one(d) for d in (*shapes[0], *attrs)):
        if (axes := _unit_axes(shapes[0], attrs)) is not None:
            return em.emit("Unsqueeze", ins + [em.const(np.array(axes, dtype=np.int64), "axes")], "unsqueeze")
        if (axes := _unit_axes(attrs, shapes[0])) is not None:
            return em.emit("Squeeze", ins + [em.const(np.array(axes, dtype=np.int64), "axes")], "squeeze")
        if (axes := _flat_axes(attrs)) is not None:  # the whole value along one axis: flattened, the 1s inserted
            flat = em.emit("Reshape", ins + [em.const(np.array([-1], dtype=np.int64), "shape")], "reshape")
            return em.emit("Unsqueeze", [flat, em.const(np.array(axes, dtype=np.int64), "axes")], "unsqueeze")
    return em.emit("Reshape", ins + [em.const(np.array(attrs, dtype=np.int64), "shape")], "reshape")


def _hides_one(d: int) -> bool:
    """Whether ``d`` is a product of several symbols one of which is at 1 (:attr:`eqsat.dims.Dim.sizes`)."""
    sizes: dict[str, int] | None = getattr(d, "sizes", None)
    return sizes is not None and len(sizes) > 1 and 1 in sizes.values()


def _flat_axes(target: Sequence[int]) -> list[int] | None:
    """The axes of ``target`` other than its one axis that holds a product of symbols one of which is at 1, where each
    of them is a constant 1 (``[2*b*s, 1]``: the rows of a value flattened, an axis of 1 beside them); None else."""
    big = [k for k, d in enumerate(target) if hasattr(d, "mono") or int(d) != 1]
    if len(big) != 1 or len(target) < 2 or not _hides_one(target[big[0]]):
        return None
    return [k for k in range(len(target)) if k != big[0]]


def _unit_axes(short: Sequence[int], long: Sequence[int]) -> list[int] | None:
    """The axes of ``long`` that are a constant 1 and whose removal leaves ``short`` (each size compared with its
    symbols, :attr:`eqsat.dims.Dim.fp`); None where there are none such."""
    def fp(d: int) -> int:
        return int(getattr(d, "fp", d))
    ones = [k for k, d in enumerate(long) if not hasattr(d, "mono") and int(d) == 1]
    extra = len(long) - len(short)
    if extra <= 0 or extra > len(ones):
        return None
    for axes in itertools.combinations(ones, extra):
        if [fp(d) for k, d in enumerate(long) if k not in axes] == [fp(d) for d in short]:
            return list(axes)
    return None


RESHAPE = OpDef("reshape", "the same elements in a new shape (egglog: ranks 1-4)", "target shape", _reshape_shape,
                (Ctor("Reshape", "ht"),), _reshape_rules, lambda attrs, args, modulus: args[0].reshape(attrs),
                _reshape_onnx, free=True)


# -- ONNX -> IR (:mod:`eqsat.ops.mapping`) -----------------------------------------------------------------------------
def _import_concat(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    args = floats(ins)
    if args is None or len(args[0].shape) > 4:
        return None
    axis = onnx_attrs(node)["axis"] % len(args[0].shape)
    return cx.make("concat", args, (axis,)) if len(args) > 1 else args[0]


def _import_transpose(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    (x,) = ins
    if x is None or len(x.shape) > 4:
        return None
    perm = tuple(onnx_attrs(node).get("perm", list(reversed(range(len(x.shape))))))
    return cx.make("transpose", [x], perm)


def _target(cx: ImportContext[V], node: onnx.NodeProto, x: V) -> tuple[int, ...] | None:
    """The shape a Reshape, Flatten, Squeeze or Unsqueeze of ``x`` gives; None where it depends on a value that is
    not a constant (or an Unsqueeze has no axes)."""
    at = onnx_attrs(node)
    if node.op_type == "Reshape":
        if node.input[1] not in cx.consts:
            return None
        shape = [int(d) for d in np.asarray(cx.consts[node.input[1]]).reshape(-1)]
        allowzero = at.get("allowzero", 0)
        shape = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
        if -1 in shape:
            k = shape.index(-1)
            shape[k] = cx.rest(node.input[1], x.shape, [d for j, d in enumerate(shape) if j != k])
        return tuple(shape)
    if node.op_type == "Flatten":
        axis = at.get("axis", 1) % (len(x.shape) + 1) if x.shape else 0
        return (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
    axes = at.get("axes")  # Squeeze / Unsqueeze
    if axes is None and len(node.input) > 1:
        if node.input[1] not in cx.consts:
            return None
        axes = [int(a) for a in np.asarray(cx.consts[node.input[1]]).reshape(-1)]
    if node.op_type == "Squeeze":
        if not axes:  # every axis of 1 at these sizes; one that is a symbol at 1 (a batch) is not one at others:
            # the value's rank depends on the sizes, which no reshape holds (carried as an opaque operator)
            return None if any(hasattr(d, "fp") and int(d) == 1 for d in x.shape) \
                else tuple(d for d in x.shape if hasattr(d, "fp") or int(d) != 1)
        axes = [a % len(x.shape) for a in axes]
        return tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if not axes:
        return None  # Unsqueeze without axes: not a valid node; carried as an opaque operator
    rank = len(x.shape) + len(axes)
    dims = list(x.shape)
    for a in sorted(a % rank for a in axes):
        dims.insert(a, 1)
    return tuple(dims)


def _import_reshape(cx: ImportContext[V], node: onnx.NodeProto, ins: list[V | None]) -> V | None:
    """A Reshape, Flatten, Squeeze or Unsqueeze: one ``reshape`` (none when the shape stays)."""
    x = ins[0]
    if x is None:
        return None
    target = _target(cx, node, x)
    if target is None or not target or len(target) > 4 or int(np.prod(target)) != int(np.prod(x.shape)):
        return None
    if tuple(target) == tuple(x.shape):
        return x
    return cx.make("reshape", [x], target)


IMPORTS: dict[str, Mapper] = {"Concat": _import_concat, "Transpose": _import_transpose, "Reshape": _import_reshape,
                              "Flatten": _import_reshape, "Squeeze": _import_reshape, "Unsqueeze": _import_reshape}
"""ONNX op type -> mapper (:mod:`eqsat.ops.mapping`)"""
