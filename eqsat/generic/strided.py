"""Sizes that no monomial of the symbols is, typed by their arithmetic instead of fitted from runs: a strided
Conv's or pooling's output along a symbolic axis (an audio front-end's frames: ``(samples - 10) // 5 + 1``), a Resize's
by constant scales and a ConvTranspose's (a depth model's neck and head upsampling a patch grid), and
a Slice that drops a constant count from such an axis (a convolutional position embedding's ``x[..., :-1]`` after a
Conv padded to ``frames + 1``).

A window that is a floor of a quotient of the interface's symbols (``floor(h / 4)``: a kernel as long as its stride,
no padding, over an image's side) is the monomial of fractional coefficient that stands for that floor (``1/4*h``),
as a fit finds it. Each other
such size of a program written for the user is an **opaque symbol** (:meth:`.state.Rewrite.opaque_shape`:
read at run time off the value it sizes) that also carries its arithmetic of the symbols (:attr:`.state.Fits.formulas`),
so its size at any sizes of the interface follows without a run (:func:`opaque_at`); a size an axis' own plus a
constant is kept as that pair (:attr:`.state.Fits.offsets`), so a Slice that takes back what a Conv's padding added
gives the Conv's input axis itself, and an Add of the two lines up. Before this, each candidate's writer ran
prefixes of it at several sizes to fit these sizes (46 runs a candidate of a HuBERT export); the verification at
further sizes stays the independent check of what is written."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx

from eqsat.dims import Mono, SymShape
from eqsat.onnx.axes.symbolic import int_values, resize_scales, scaled_length
from eqsat.onnx.windows import WINDOWED, Window

from .affine import affine, difference
from .state import Rewrite

INT64_MAX = 2**63 - 1

TYPED = WINDOWED | {"Slice", "Concat", "Pad", "Range", "Resize", "ConvTranspose"}
"""the operators whose output sizes :func:`typed` reads off their arithmetic"""


def window(w: Rewrite, node: onnx.NodeProto, spatial: int) -> Callable[[int], int] | None:
    """A Conv's or pooling's output length along its spatial axis ``spatial`` (0 for the first after the channels)
    as a function of the input's, as onnxruntime computes it (:class:`eqsat.onnx.windows.Window`); None where its
    kernel is not a constant size, or :meth:`~eqsat.onnx.windows.Window.length` reads no length."""
    found = _window(w, node)
    return None if found is None else found.length(spatial)


def _window(w: Rewrite, node: onnx.NodeProto) -> Window | None:
    kernels: list[int] = []
    if node.op_type == "Conv":  # a Conv that names no kernel_shape: its weight's spatial sizes, where constants
        weight = w.shapes.get(node.input[1]) if len(node.input) > 1 else None
        if weight is not None and all(d is not None and d.is_const for d in weight[2:]):
            kernels = [int(d.value({})) for d in weight[2:] if d is not None]
    return Window.of(node, kernels)


def canonical(w: Rewrite, d: Mono) -> tuple | None:
    """``d``'s arithmetic of the interface's symbols, the same in every rewrite of the same model that computes the
    same size (:attr:`.state.Fits.canon`); None where one of its symbols is fitted from runs (no arithmetic known)."""
    powers = []
    for s, p in d.powers:
        key = ("symbol", s) if s in w.values else w.fits.canon.get(s)
        if key is None:
            return None
        powers.append((key, p))
    return ("mono", d.coef, tuple(sorted(powers, key=repr)))


def _along(found: Window, spatial: int) -> tuple:
    """The window's parameters along one spatial axis: those its length there follows (a 1-D Conv and the 2-D one
    over a height of 1 eqsat writes for it alike)."""
    rank = len(found.kernels)
    return (found.kernels[spatial], found.strides[spatial], found.dilations[spatial], found.pads[spatial],
            found.pads[rank + spatial], found.auto, found.ceil)


def _bounds(w: Rewrite, node: onnx.NodeProto, axis: int) -> tuple[int, int, int] | None:
    """A Slice's constant (start, end, step) along ``axis`` (``(0, INT64_MAX, 1)`` where it does not slice it); None
    where one of them is not a constant."""
    consts = [w.known.get(node.input[k]) if len(node.input) > k and node.input[k] else None for k in (1, 2, 3, 4)]
    starts, ends, axes, steps = consts
    if starts is None or ends is None or (len(node.input) > 3 and node.input[3] and axes is None) \
            or (len(node.input) > 4 and node.input[4] and steps is None):
        return None
    rank = len(w.shapes.get(node.input[0]) or [])
    along = [a % rank for a in int_values(axes)] if axes is not None else list(range(len(int_values(starts))))
    if axis not in along:
        return 0, INT64_MAX, 1
    j = along.index(axis)
    return int_values(starts)[j], int_values(ends)[j], int_values(steps)[j] if steps is not None else 1


def _dropped(bounds: tuple[int, int, int]) -> int | None:
    """The constant a Slice of ``bounds`` adds to its axis' size (a negative count), where it slices by a step of 1
    from a constant start at or after 0 to a constant end before the axis' end (negative) or to its end; None
    otherwise."""
    start, end, step = bounds
    if step != 1 or start < 0:
        return None
    if end >= INT64_MAX // 2:
        return -start
    return end - start if end < 0 else None


def _head(w: Rewrite, d: Mono, bounds: tuple[int, int, int]) -> Mono | None:
    """The size a Slice of ``bounds`` leaves of an axis of size ``d`` where it keeps a constant count from its head:
    a step of 1 from a start at or after 0 to an end that a size its own plus a count of at least the end
    (:attr:`.state.Fits.offsets`: the class and register tokens before a ViT's patches) never falls short of."""
    start, end, step = bounds
    _, offset = _offset(w, d)
    if step != 1 or start < 0 or end <= 0 or end >= INT64_MAX // 2 or offset < end:
        return None
    return Mono.const(max(0, end - start))


def _offset(w: Rewrite, d: Mono) -> tuple[Mono, int]:
    """``d`` as a size and a constant added to it: an opaque symbol that is its base plus a count, else ``d`` + 0."""
    if d.coef == 1 and len(d.powers) == 1 and d.powers[0][1] == 1 and d.powers[0][0] in w.fits.offsets:
        return w.fits.offsets[d.powers[0][0]]
    return d, 0


def _symbol(w: Rewrite, out: str, axis: int, key: tuple, formula: Callable[[Mapping[str, int]], int],
            canon: tuple | None) -> Mono:
    """The opaque symbol of ``out``'s ``axis`` (one per ``key``: the same arithmetic of the same size is one symbol),
    its representative size its formula's at the representative sizes; ``canon``: its arithmetic as any rewrite of
    the model keys it (:func:`canonical`), where known."""
    if key in w.fits.arithmetic:
        return Mono.symbol(w.fits.arithmetic[key])
    symbol = Mono.symbol(f"{out}@{axis}")
    name = symbol.powers[0][0]
    w.places.setdefault(name, (out, axis))
    w.fits.opaque[name] = formula(w.sizes_at)
    w.fits.formulas[name] = formula
    w.fits.arithmetic[key] = name
    if canon is not None:
        w.fits.canon[name] = canon
    return symbol


def _plus(base: Mono, total: int) -> Callable[[Mapping[str, int]], int]:
    def size(values: Mapping[str, int]) -> int:
        return max(0, int(base.value(values)) + total)  # (a Slice clamps at 0)
    return size


def _windowed(d: Mono, length: Callable[[int], int]) -> Callable[[Mapping[str, int]], int]:
    def size(values: Mapping[str, int]) -> int:
        return length(int(d.value(values)))
    return size


def shifted(w: Rewrite, out: str, axis: int, d: Mono, count: int) -> Mono:
    """The size ``d`` plus ``count``: ``d``'s own base where the counts cancel (a Slice that takes back what a
    Conv's padding added), else the opaque symbol of that base plus their sum. A size that dropped a count (a Slice,
    clamped at 0: ``max(0, frames - 9)``) and then gains one is not its base plus their sum (``max(0, frames - 9) +
    9`` is not ``frames`` below 9 frames): it is the base of what it gains."""
    base, offset = _offset(w, d)
    if offset < 0 < count:
        base, offset = d, 0
    total = offset + count
    if total == 0:
        return base
    based = canonical(w, base)
    sym = _symbol(w, out, axis, ("offset", base, total), _plus(base, total),
                  None if based is None else ("offset", based, total))
    w.fits.offsets.setdefault(sym.powers[0][0], (base, total))
    return sym


def typed(w: Rewrite, node: onnx.NodeProto, shape: SymShape | None) -> SymShape | None:
    """``shape`` (of ``node``'s first output, as inferred) with each unknown axis that is a strided window's, a
    Resize's by constant scales, a ConvTranspose's, a Slice's constant drop of a known size or a Concat of one known size and constants typed by that arithmetic (the
    module's docstring); in a program written for the user only (:attr:`.state.Rewrite.final`)."""
    if not w.final or shape is None or None not in shape or node.domain not in ("", "ai.onnx") \
            or node.op_type not in TYPED:
        return shape
    if node.op_type == "Concat":
        return _joined(w, node, shape)
    if node.op_type == "Range":
        return _counted(w, node, shape)
    dims = w.shapes.get(node.input[0])
    if dims is None or len(dims) != len(shape):
        return shape
    if node.op_type == "Pad":
        return _padded(w, node, shape, dims)
    if node.op_type == "Resize":
        return _scaled(w, node, shape, dims)
    if node.op_type == "ConvTranspose":
        return _upsampled(w, node, shape, dims)
    out = list(shape)
    for axis, (have, d) in enumerate(zip(shape, dims)):
        if have is not None or d is None or d.is_const:
            continue
        if node.op_type == "Slice":
            bounds = _bounds(w, node, axis)
            drop = None if bounds is None else _dropped(bounds)
            if drop is not None:
                out[axis] = shifted(w, node.output[0], axis, d, drop)
            elif bounds is not None:
                out[axis] = _head(w, d, bounds)
            continue
        whole = _window(w, node) if axis >= 2 else None
        length = whole.length(axis - 2) if whole is not None else None
        if length is None:
            continue
        at = int(d.value(w.sizes_at))
        found = Window.of(node)
        stride = found.strides[axis - 2] if found is not None and axis - 2 < len(found.strides) else 1
        if stride > 1 and all(s in w.values for s, _ in d.powers) and at % stride == 0 \
                and all(length(n) == n // stride for n in range(1, 4 * stride + 2)):
            out[axis] = Mono(d.coef / stride, d.powers)  # a floor of a quotient: a monomial of fractional coefficient
            continue
        if all(length(n) == n + length(at) - at for n in (at, at + 1, at + 7, 2 * at + 3)):
            out[axis] = shifted(w, node.output[0], axis, d, length(at) - at)  # stride 1: a size plus a constant
            continue
        params = (node.op_type, tuple(sorted((a.name, tuple(a.ints), a.i, a.s) for a in node.attribute)),
                  tuple(w.shapes.get(node.input[1]) or []) if node.op_type == "Conv" else ())
        windowed = canonical(w, d)
        canon = None if windowed is None or whole is None else ("window", windowed, _along(whole, axis - 2))
        out[axis] = _symbol(w, node.output[0], axis, ("window", d, axis, params), _windowed(d, length), canon)
    return out


def _scaled(w: Rewrite, node: onnx.NodeProto, shape: SymShape, dims: SymShape) -> SymShape:
    """A Resize's ``shape`` by constant scales with each unknown axis typed where its input's size there is known:
    that size scaled as onnxruntime computes it (:func:`eqsat.onnx.axes.symbolic.scaled_length`; a whole-number
    scale of a size of integer coefficient is a monomial already: ``infer_node``), an opaque symbol (a depth
    head's features upsampled by 2 after a patch grid of ``floor(h / 16)``, then read off by a Resize to their size)."""
    scales = resize_scales(node, w.known)
    if scales is None or len(scales) != len(shape):
        return shape
    out = list(shape)
    for axis, (have, d, s) in enumerate(zip(shape, dims, scales)):
        if have is None and d is not None and not d.is_const:
            based = canonical(w, d)
            out[axis] = _symbol(w, node.output[0], axis, ("scaled", d, s), _resized(d, s),
                                None if based is None else ("scaled", based, s))
    return out


def _transposed(w: Rewrite, node: onnx.NodeProto) -> list[Callable[[int], int]] | None:
    """A ConvTranspose's output length along each spatial axis as a function of the input's (onnx's rule:
    ``stride * (n - 1) + output_padding + (kernel - 1) * dilation + 1 - pads``), where it names no ``output_shape``
    nor ``auto_pad`` and its kernel is a constant size; else None."""
    at = {a.name: a for a in node.attribute}
    if "output_shape" in at or at.get("auto_pad", onnx.AttributeProto(s=b"NOTSET")).s not in (b"NOTSET", b""):
        return None
    weight = w.shapes.get(node.input[1]) if len(node.input) > 1 else None
    if weight is None or any(d is None or not d.is_const for d in weight[2:]):
        return None
    kernels = [int(d.value({})) for d in weight[2:] if d is not None]  # (each one, checked above)
    rank = len(kernels)

    def ints(name: str, default: int, count: int) -> list[int]:
        return list(at[name].ints) if name in at else [default] * count

    strides, dilations = ints("strides", 1, rank), ints("dilations", 1, rank)
    extra, pads = ints("output_padding", 0, rank), ints("pads", 0, 2 * rank)
    if not all(len(v) == rank for v in (strides, dilations, extra)) or len(pads) != 2 * rank:
        return None

    def along(k: int) -> Callable[[int], int]:
        def length(n: int) -> int:
            return strides[k] * (n - 1) + extra[k] + (kernels[k] - 1) * dilations[k] + 1 - pads[k] - pads[rank + k]
        return length

    return [along(k) for k in range(rank)]


def _upsampled(w: Rewrite, node: onnx.NodeProto, shape: SymShape, dims: SymShape) -> SymShape:
    """A ConvTranspose's ``shape`` with each unknown spatial axis typed where its input's size there is known: an
    opaque symbol of its arithmetic (:func:`_transposed`; a depth model's neck upsampling a patch grid)."""
    lengths = _transposed(w, node)
    if lengths is None or len(lengths) != len(shape) - 2:
        return shape
    out = list(shape)
    attrs = tuple(sorted((a.name, tuple(a.ints), a.i, a.s) for a in node.attribute))
    params = attrs + tuple(w.shapes.get(node.input[1]) or [])
    for axis in range(2, len(shape)):
        d = dims[axis]
        if shape[axis] is None and d is not None and not d.is_const:
            based = canonical(w, d)
            length = lengths[axis - 2]
            out[axis] = _symbol(w, node.output[0], axis, ("transposed", d, axis, params), _windowed(d, length),
                                None if based is None else ("transposed", based, axis, params))
    return out


def _resized(d: Mono, scale: float) -> Callable[[Mapping[str, int]], int]:
    def size(values: Mapping[str, int]) -> int:
        return scaled_length(scale, int(d.value(values)))
    return size


def _padded(w: Rewrite, node: onnx.NodeProto, shape: SymShape, dims: SymShape) -> SymShape:
    """A Pad's ``shape`` with each unknown axis typed where its input's size there is known and the pads are
    constants at or above 0: that size plus the two counts (the original typed once only:
    :attr:`.state.Rewrite.typing`)."""
    if not w.typing or len(node.input) < 2 or (len(node.input) > 3 and node.input[3]):
        return shape
    pads = w.known.get(node.input[1])
    entries = w.sized.get(node.input[1]) if pads is None else None
    if pads is not None:
        counts = int_values(pads)
    elif entries is not None and all(m.is_const and m.coef.denominator == 1 for m in entries):
        counts = [int(m.coef) for m in entries]  # (computed from constants)
    else:
        return shape
    rank = len(shape)
    if len(counts) != 2 * rank:
        return shape
    out = list(shape)
    for axis, (have, d) in enumerate(zip(shape, dims)):
        if have is None and d is not None and not d.is_const and counts[axis] >= 0 and counts[rank + axis] >= 0:
            # (a negative count crops, clamped at 0: no sum)
            out[axis] = shifted(w, node.output[0], axis, d, counts[axis] + counts[rank + axis])
    return out


def _counted(w: Rewrite, node: onnx.NodeProto, shape: SymShape) -> SymShape:
    """A Range's ``shape`` typed where its delta is a constant 1 or -1 and its start and limit are each a size plus
    a constant (:mod:`.affine`) whose difference is one monomial: that difference over the delta, clamped at 0 as the
    Range is (``range(frames - 1, -frames, -1)``: ``2 * frames - 1`` relative positions, at every size)."""
    if len(shape) != 1 or len(node.input) < 3:
        return shape
    delta = w.known.get(node.input[2])
    steps = int_values(delta) if delta is not None and delta.data_type in (onnx.TensorProto.INT64,
                                                                        onnx.TensorProto.INT32) else []
    start, limit = affine(w, node.input[0]), affine(w, node.input[1])
    if steps not in ([1], [-1]) or start is None or limit is None:
        return shape
    base = difference(limit[0], start[0]) if steps == [1] else difference(start[0], limit[0])
    if base is None or base.coef <= 0:
        return shape
    return [shifted(w, node.output[0], 0, base, (limit[1] - start[1]) * steps[0])]


def _joined(w: Rewrite, node: onnx.NodeProto, shape: SymShape) -> SymShape:
    """A Concat's ``shape`` with its axis typed where one input's size there is a size of the symbols and the others'
    constants: that size plus their sum (a ViT's tokens, the class and register tokens before the patches: a Slice
    that drops them gives the patches' size again)."""
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % len(shape)
    if shape[axis] is not None:
        return shape
    sizes = [(w.shapes.get(i) or [])[axis:axis + 1] for i in node.input if i]
    if any(len(d) != 1 or d[0] is None for d in sizes):
        return shape
    moving = [d[0] for d in sizes if d[0] is not None and not d[0].is_const]
    fixed = [d[0].coef for d in sizes if d[0] is not None and d[0].is_const]
    if len(moving) != 1 or any(c.denominator != 1 or c < 0 for c in fixed):
        return shape
    out = list(shape)
    out[axis] = shifted(w, node.output[0], axis, moving[0], int(sum(fixed)))
    return out


def opaque_at(w: Rewrite, at: Mapping[str, int]) -> dict[str, int] | None:
    """``at`` (sizes of the interface's symbols) with every opaque symbol's size there, each by its arithmetic
    (:attr:`.state.Fits.formulas`, in the order they were made: a later one may read an earlier one); None where an
    opaque symbol has none (a size fitted from runs)."""
    if any(s not in w.fits.formulas for s in w.fits.opaque):
        return None
    return typed_sizes(w, at)


def typed_sizes(w: Rewrite, at: Mapping[str, int]) -> dict[str, int]:
    """``at`` with the size there of each opaque symbol typed by its arithmetic (:attr:`.state.Fits.formulas`, in the
    order they were made), whether or not every opaque symbol is (:mod:`.products` reads them among fitted ones); one
    whose arithmetic reads a size it has none of is left out."""
    out = dict(at)
    for s, f in w.fits.formulas.items():
        try:
            out[s] = int(f(out))
        except (KeyError, ZeroDivisionError, ValueError):
            continue
    return out


__all__ = ["TYPED", "canonical", "opaque_at", "shifted", "typed", "typed_sizes", "window"]
