"""The shapes of an ONNX model's values as monomials of the interface's symbols (:class:`eqsat.dims.Mono`):
:func:`infer_node` gives one node's output shapes from its inputs' with onnx's shape inference, each monomial
carried as a ``dim_param`` (:meth:`~eqsat.dims.Mono.key`)."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from eqsat.dims import Mono, SymShape, product

from ..windows import pooled, rounds_up


def _type_proto(elem: int, shape: SymShape | None, keys: dict[str, Mono]) -> onnx.TypeProto:
    if shape is None:
        return helper.make_tensor_type_proto(elem, None)
    dims: list[int | str | None] = []
    for d in shape:
        if d is None:
            dims.append(None)
        elif d.is_const and d.coef.denominator == 1:
            dims.append(int(d.coef))
        else:
            keys[d.key()] = d
            dims.append(d.key())
    return helper.make_tensor_type_proto(elem, dims)


def _read(tp: onnx.TypeProto, keys: Mapping[str, Mono]) -> tuple[int, SymShape | None]:
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    out: SymShape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(Mono.const(d.dim_value))
        else:
            out.append(keys.get(d.dim_param))
    return tt.elem_type, out


SMALL_CONSTANT = 64
"""initializers of at most this many integer elements are given to shape inference by value (axes, shapes, bounds)"""


def infer_node(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], types: Mapping[str, int],
               constants: Mapping[str, onnx.TensorProto], opsets: Sequence[onnx.OperatorSetIdProto],
               sums: Mapping[str, Callable[[Mapping[str, int]], int]] | None = None,
               vectors: Mapping[str, Sequence[Mono] | None] | None = None,
               ) -> dict[str, tuple[int, SymShape | None]]:
    """(element type, symbolic shape) of each output of ``node``, from its inputs' (``shapes``, ``types``; the
    small integer ``constants`` by value), by onnx's shape inference on a one-node model. Outputs it cannot type
    are left out. ``sums``: the interface's symbols that are sums of others (``past + 1``:
    :func:`eqsat.onnx.axes.interface.derived_symbols`), which a Concat's axis may be (a cache's past and its new
    entries). ``vectors``: the int64 size vectors whose entries are known as monomials (a Reshape target computed
    from the inputs' shapes), which the operators of :data:`COMPLETED` read as a constant one."""
    keys: dict[str, Mono] = {}
    inputs, inits = [], []
    for name in dict.fromkeys(i for i in node.input if i):
        const = constants.get(name)
        if const is not None and _small_ints(const):
            inits.append(const)
            inputs.append(helper.make_value_info(name, helper.make_tensor_type_proto(
                const.data_type, list(const.dims))))
        elif name in types:
            inputs.append(helper.make_value_info(name, _type_proto(types[name], shapes.get(name), keys)))
        else:
            return {}
    graph = helper.make_graph([node], "one", inputs, [], initializer=inits)
    model = helper.make_model(graph, opset_imports=list(opsets))
    try:
        value_info = list(shape_inference.infer_shapes(model, strict_mode=False).graph.value_info)
    except Exception:  # noqa: BLE001 - onnx raises several types; no inference is no knowledge
        if node.op_type != "If":
            return {}
        value_info = []  # (an If's branches are inferred below, over the outer values)
    out: dict[str, tuple[int, SymShape | None]] = {}
    for vi in value_info:
        if vi.name in node.output and vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = _read(vi.type, keys)
    if node.op_type in COMPLETED and node.domain in ("", "ai.onnx") and node.output and node.output[0] in out:
        elem, shape = out[node.output[0]]
        if shape is None or None in shape:
            done = COMPLETED[node.op_type](node, shapes, _Sizes(constants, vectors or {}))
            if done is not None and (shape is None or len(shape) == len(done)):
                out[node.output[0]] = (elem, done if shape is None else [a or b for a, b in zip(shape, done)])
    if rounds_up(node) and node.output[0] in out:  # onnxruntime's lengths, not onnx's (:mod:`..windows`)
        elem, shape = out[node.output[0]]
        dims = shapes.get(node.input[0])
        sizes = [int(d.value({})) for d in dims if d is not None and d.is_const] if dims is not None else []
        lengths = pooled(node, sizes) if dims is not None and len(sizes) == len(dims) else None
        if shape is not None:
            out[node.output[0]] = (elem, [Mono.const(n) for n in lengths] if lengths is not None
                                   else [*shape[:2], *(None for _ in shape[2:])])
    if node.op_type == "If" and node.domain in ("", "ai.onnx"):
        for name, (elem, shape) in _if_shapes(node, shapes, types, constants, opsets, sums, vectors).items():
            known = out[name][1] if name in out else None
            if known is None or None in known:
                out[name] = (elem, shape)
    if node.op_type == "Concat" and node.domain in ("", "ai.onnx") and node.output[0] in out:
        elem, shape = out[node.output[0]]
        axis = _attr(node, "axis", 0)
        if shape is not None and -len(shape) <= axis < len(shape) and shape[axis] is None:
            shape = list(shape)
            joined = [shapes.get(i) for i in node.input if i]
            shape[axis] = (concat_length(joined, axis, sums) if sums else None) or _stacked(joined, axis)
            out[node.output[0]] = (elem, shape)
    if node.op_type == "Split" and node.domain in ("", "ai.onnx"):
        _split_sizes(node, out, constants)
    return out


def _stacked(inputs: Sequence[SymShape | None], axis: int) -> Mono | None:
    """The length of a Concat along ``axis`` of inputs whose lengths there are one monomial of whole coefficient
    each, all of the same symbols (four layers' hidden states stacked on the batch: ``4*batch``): their sum."""
    lengths = [s[axis] if s is not None and -len(s) <= axis < len(s) else None for s in inputs]
    if not lengths or any(d is None or _size(d) is None for d in lengths):
        return None
    known = [d for d in lengths if d is not None]
    if any(d.powers != known[0].powers for d in known) or not known[0].powers:
        return None
    return Mono(sum((d.coef for d in known), Fraction(0)), known[0].powers)


def _split_sizes(node: onnx.NodeProto, out: dict[str, tuple[int, SymShape | None]],
                 constants: Mapping[str, onnx.TensorProto]) -> None:
    """A Split by constant sizes (its input 1, or the attribute before opset 13) along an axis onnx's inference left
    unknown (a symbol there: onnx cannot check the sizes' sum): each output is its size there (onnxruntime runs it
    only where they sum to the axis)."""
    const = constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    sizes = int_values(const) if const is not None and _small_ints(const) else \
        next((list(a.ints) for a in node.attribute if a.name == "split"), None)
    outputs = list(node.output)
    if sizes is None or len(sizes) != len(outputs):
        return
    axis = _attr(node, "axis", 0)
    for name, size in zip(outputs, sizes):
        if name not in out:
            continue
        elem, shape = out[name]
        if shape is not None and -len(shape) <= axis < len(shape) and shape[axis] is None and size >= 0:
            shape = list(shape)
            shape[axis] = Mono.const(int(size))
            out[name] = (elem, shape)


def _if_shapes(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], types: Mapping[str, int],
               constants: Mapping[str, onnx.TensorProto], opsets: Sequence[onnx.OperatorSetIdProto],
               sums: Mapping[str, Callable[[Mapping[str, int]], int]] | None,
               vectors: Mapping[str, Sequence[Mono] | None] | None) -> dict[str, tuple[int, SymShape | None]]:
    """An ``If``'s outputs whose shape is the same, fully known, in both branches: each branch's nodes inferred in
    turn (:func:`infer_node`) over the outer values' shapes (onnx's inference of the one-node model does not see
    them), its Constant nodes' small integers read by value. Where a branch leaves an output's shape unknown, or the
    two differ, the output is left out (the shape is whichever branch runs)."""
    branches = [a.g for a in node.attribute if a.name in ("then_branch", "else_branch")]
    if len(branches) != 2:
        return {}
    given: list[list[tuple[int | None, SymShape | None]]] = []
    # (the outer mappings copied once: a ChainMap writes to its first map only, but is typed for mutable ones)
    outer_shapes, outer_types, outer_consts = dict(shapes), dict(types), dict(constants)
    for g in branches:
        local_shapes: dict[str, SymShape | None] = {t.name: [Mono.const(d) for d in t.dims] for t in g.initializer}
        local_types: dict[str, int] = {t.name: t.data_type for t in g.initializer}
        local_consts: dict[str, onnx.TensorProto] = {t.name: t for t in g.initializer}
        shapes_in, types_in = ChainMap(local_shapes, outer_shapes), ChainMap(local_types, outer_types)
        consts_in = ChainMap(local_consts, outer_consts)
        for n in g.node:
            if (const := constant_value(n)) is not None:
                local_consts[const.name] = const
            for name, (elem, shape) in infer_node(n, shapes_in, types_in, consts_in, opsets, sums, vectors).items():
                local_types[name], local_shapes[name] = elem, shape
        given.append([(types_in.get(o.name), shapes_in.get(o.name)) for o in g.output])
    out: dict[str, tuple[int, SymShape | None]] = {}
    for k, name in enumerate(node.output):
        if not name or k >= min(len(b) for b in given):
            continue
        (then_elem, then_shape), (else_elem, else_shape) = given[0][k], given[1][k]
        if then_elem is not None and then_elem == else_elem and then_shape is not None and None not in then_shape \
                and then_shape == else_shape:
            out[name] = (then_elem, then_shape)
    return out


def constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a standard ``Constant`` node of one ``value`` attribute holds, named as its output (what shape
    inference reads by value); None for any other node."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1 \
            or node.attribute[0].name != "value" or not node.attribute[0].HasField("t") or not node.output:
        return None
    value = onnx.TensorProto()
    value.CopyFrom(node.attribute[0].t)
    value.name = node.output[0]
    return value


def _small_ints(const: onnx.TensorProto) -> bool:
    """Whether shape inference reads ``const`` by value: integers, at most :data:`SMALL_CONSTANT` of them."""
    return const.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) \
        and int(np.prod(const.dims)) <= SMALL_CONSTANT


def _whole(shape: SymShape | None) -> list[Mono] | None:
    """``shape``'s sizes where each is known and a monomial of integer coefficient: one of a fractional coefficient
    stands for a floor (``floor(h/4)`` after a strided Conv), which a product of monomials does not keep."""
    if shape is None or any(d is None or d.coef.denominator != 1 for d in shape):
        return None
    return [d for d in shape if d is not None]


@dataclass(frozen=True)
class _Sizes:
    """Where a node's size vector (a Reshape target, a Tile's repeats) is read: a small integer constant, or a
    vector whose entries are known as monomials."""

    constants: Mapping[str, onnx.TensorProto]
    vectors: Mapping[str, Sequence[Mono] | None]

    def entries(self, node: onnx.NodeProto, k: int) -> list[Mono] | None:
        name = node.input[k] if len(node.input) > k else ""
        const = self.constants.get(name)
        if const is not None:
            return [Mono.const(v) for v in int_values(const)] if _small_ints(const) else None
        got = self.vectors.get(name)
        return None if got is None else list(got)


def _is(m: Mono, n: int) -> bool:
    return m.is_const and m.coef == n


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _size(m: Mono) -> Mono | None:
    """``m`` where it is a size at every value of the symbols (a positive integer coefficient, no symbol divided)."""
    return m if m.coef > 0 and m.coef.denominator == 1 and all(p > 0 for _, p in m.powers) else None


def _reshaped(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    dims, target = _whole(shapes.get(node.input[0])), sizes.entries(node, 1)
    if dims is None or target is None:
        return None
    free = [k for k, t in enumerate(target) if _is(t, -1)]
    allowzero = _attr(node, "allowzero", 0)
    out: list[Mono | None] = []
    for k, t in enumerate(target):
        if _is(t, 0) and not allowzero:
            if k >= len(dims):
                return None
            out.append(dims[k])
        elif k in free or _size(t) is None and not _is(t, 0):
            out.append(None)
        else:
            out.append(t)
    if len(free) > 1 or sum(d is None for d in out) > len(free):
        return None
    if free:
        rest = product([d for d in out if d is not None])
        if rest.coef == 0:
            return None
        out[free[0]] = _size(product(dims) / rest)
    return out


def _flattened(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    dims = _whole(shapes.get(node.input[0]))
    if dims is None:
        return None
    axis = _attr(node, "axis", 1)
    axis = axis + len(dims) if axis < 0 else axis
    return [product(dims[:axis]), product(dims[axis:])] if 0 <= axis <= len(dims) else None


def _tiled(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    shape, repeats = shapes.get(node.input[0]), sizes.entries(node, 1)
    if shape is None or repeats is None or len(repeats) != len(shape):
        return None
    return [None if d is None or d.coef.denominator != 1 or _size(r) is None else d * r
            for d, r in zip(shape, repeats)]


def _expanded(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    shape, target = shapes.get(node.input[0]), sizes.entries(node, 1)
    if shape is None or target is None:
        return None
    rank = max(len(shape), len(target))
    ins = [Mono.const(1)] * (rank - len(shape)) + list(shape)
    wants = [Mono.const(1)] * (rank - len(target)) + target
    out: list[Mono | None] = []
    for d, t in zip(ins, wants):
        if _is(t, 1) or t == d:
            out.append(d)
        elif d is not None and _is(d, 1) and _size(t) is not None:
            out.append(t)
        else:
            out.append(None)  # a symbol broadcast to another size: the run decides (or fails)
    return out


def _ranged(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    """A Range from 0 by 1 to a size (position ids up to the sequence's length): that many entries."""
    start, limit, delta = (sizes.entries(node, k) for k in range(3))
    if start is None or limit is None or delta is None or len(limit) != 1 or [len(start), len(delta)] != [1, 1] \
            or not _is(start[0], 0) or not _is(delta[0], 1):
        return None
    end = limit[0]
    return [end] if _size(end) is not None or (end.is_const and end.coef >= 0 and end.coef.denominator == 1) else None


TO_END = 2**31 - 1
"""a Slice's end at least this runs to the axis' end (torch writes INT64_MAX)"""


def _sliced(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    """A Slice by steps of 1 whose bounds are constants or size vectors of known monomials (a rotary half's bound
    computed from the head's size, a table's first ``seq`` rows read off an input's Shape): each sliced axis of a
    constant size sliced as Python slices it; one of a symbolic size kept where it is sliced from 0 to its own size
    or to its end; a constant table's axis sliced from 0 to a size of the symbols that size (wherever the table is
    long enough, beyond which the writer guards the table; another value's axis of a constant size is
    ``min(end, size)``, unknown). Other bounds are left unknown."""
    shape = shapes.get(node.input[0])
    starts, ends = sizes.entries(node, 1), sizes.entries(node, 2)
    given = [k for k in (3, 4) if len(node.input) > k and node.input[k]]
    axes = sizes.entries(node, 3) if 3 in given else [Mono.const(k) for k in range(len(starts or []))]
    steps = sizes.entries(node, 4) if 4 in given else [Mono.const(1)] * len(starts or [])
    if shape is None or starts is None or ends is None or axes is None or steps is None \
            or not len(starts) == len(ends) == len(axes) == len(steps) or not all(_is(b, 1) for b in steps):
        return None
    out = list(shape)
    for axis, start, end in zip(axes, starts, ends):
        if not axis.is_const or axis.coef.denominator != 1 or not -len(shape) <= int(axis.coef) < len(shape):
            return None
        k = int(axis.coef) % len(shape)
        d = shape[k]
        if d is not None and all(m.is_const and m.coef.denominator == 1 for m in (d, start, end)):
            # every bound a number: Python's slice, as onnx's (clamped, negatives from the end)
            out[k] = Mono.const(len(range(int(d.coef))[int(start.coef):int(end.coef)]))
        elif not _is(start, 0) or d is None:
            out[k] = None
        elif end.is_const and end.coef >= TO_END or end == d:
            continue
        else:  # a table's rows (a constant's axis) to a size of the symbols; any other value's axis is min(end, d)
            table = node.input[0] in sizes.constants
            out[k] = _size(end) if table and d.is_const and not end.is_const else None
    return out


def _filled(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    """A ConstantOfShape to a size vector computed at run time (``torch.zeros(x.shape[0], x.shape[1], 8)``): the
    vector's entries are the output's sizes."""
    target = sizes.entries(node, 0)
    return None if target is None else [_size(t) for t in target]


def resize_scales(node: onnx.NodeProto, constants: Mapping[str, onnx.TensorProto]) -> list[float] | None:
    """The constant scales of a Resize by scales (no sizes input, no ``axes``, no crop to a region), one per axis as
    float32 values (finite, above 0), each output length their float32 product with its input's, truncated
    (:func:`scaled_length`); else None."""
    if node.op_type != "Resize" or node.domain not in ("", "ai.onnx") or len(node.input) < 3 \
            or (len(node.input) > 3 and node.input[3]) or any(a.name == "axes" for a in node.attribute):
        return None
    mode = next((a.s.decode() for a in node.attribute if a.name == "coordinate_transformation_mode"), "half_pixel")
    const = constants.get(node.input[2])
    if mode == "tf_crop_and_resize" or const is None or const.data_type not in (onnx.TensorProto.FLOAT,
                                                                                onnx.TensorProto.DOUBLE):
        return None
    scales = numpy_helper.to_array(const).reshape(-1).astype(np.float32)
    return [float(v) for v in scales] if scales.size and bool(np.all(np.isfinite(scales) & (scales > 0))) else None


def scaled_length(scale: float, length: int) -> int:
    """A Resize's output length over ``length`` by ``scale``, as onnxruntime computes it: their float32 product,
    truncated.

    >>> scaled_length(2.0, 14), scaled_length(0.5, 15), scaled_length(1.5, 7)
    (28, 7, 10)
    """
    return int(np.float32(scale) * np.float32(length))


def _by_scales(node: onnx.NodeProto, shape: SymShape, sizes: _Sizes) -> SymShape | None:
    """A Resize of ``shape`` by constant scales: an axis scaled by 1 keeps its size, one of an integer size scaled by
    a whole number is that multiple of it (exact); any other is left unknown."""
    scales = resize_scales(node, sizes.constants)
    if scales is None or len(scales) != len(shape):
        return None
    out: list[Mono | None] = []
    for d, s in zip(shape, scales):
        whole = d is not None and _size(d) is not None
        out.append(d if s == 1 else Mono(d.coef * int(s), d.powers) if whole and s == int(s) and d is not None
                   else None)
    return out


def _resized(node: onnx.NodeProto, shapes: Mapping[str, SymShape | None], sizes: _Sizes) -> SymShape | None:
    """A Resize to a size vector (its input 3, over its ``axes`` where given), which it takes as the output's sizes
    under the default ``keep_aspect_ratio_policy`` ("stretch"); one by constant ``scales``: :func:`_by_scales`."""
    shape, target = shapes.get(node.input[0]), sizes.entries(node, 3)
    policy = next((a.s.decode() for a in node.attribute if a.name == "keep_aspect_ratio_policy"), "stretch")
    if shape is not None and target is None and (len(node.input) < 4 or not node.input[3]):
        return _by_scales(node, shape, sizes)
    if shape is None or target is None or policy != "stretch":
        return None
    axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), list(range(len(shape))))
    if len(axes) != len(target) or any(not -len(shape) <= a < len(shape) for a in axes):
        return None
    out = list(shape)
    for a, t in zip(axes, target):
        out[a % len(shape)] = _size(t)
    return out


COMPLETED: dict[str, Callable[[onnx.NodeProto, Mapping[str, SymShape | None], _Sizes], SymShape | None]] = {
    "Reshape": _reshaped, "Flatten": _flattened, "Tile": _tiled, "Expand": _expanded, "Resize": _resized,
    "Range": _ranged, "ConstantOfShape": _filled, "Slice": _sliced}
"""the operators whose output sizes onnx's inference leaves unknown where they are products of symbols (a Reshape's
``-1`` over ``[batch*seq, 384]``, a Flatten, a Tile of a symbolic axis) or read off a size vector computed at run time
(a Resize to sizes, a Range to a length, a ConstantOfShape to sizes, a Slice to an end): each given by monomial arithmetic from its
input's symbolic shape and its size vector, constant or of known monomials (``infer_node`` fills the sizes onnx left
unknown only)"""


PROBES = (1009, 2003, 3001, 4001, 5003, 6007, 7001, 8009, 9001, 10007, 11003, 12007)
"""primes each symbol takes in turn, at which :func:`concat_length` compares a sum with a symbol's own arithmetic"""


def concat_length(inputs: Sequence[SymShape | None], axis: int,
                  sums: Mapping[str, Callable[[Mapping[str, int]], int]]) -> Mono | None:
    """The length of a Concat of ``inputs`` along ``axis`` as the one symbol of ``sums`` it equals, None where it is
    none of them.

    >>> past = Mono.symbol("past")
    >>> concat_length([[past], [Mono.const(1)]], 0, {"past + 1": lambda v: v["past"] + 1}).key()
    'past + 1'
    """
    terms: list[Mono] = []
    for shape in inputs:
        if shape is None or not -len(shape) <= axis < len(shape) or shape[axis] is None:
            return None
        terms.append(shape[axis])  # type: ignore[arg-type]
    names = sorted({s for t in terms for s, _ in t.powers})
    if not names:
        return None

    def total(values: Mapping[str, int]) -> Fraction:
        return sum((t.value(values) for t in terms), Fraction(0))

    for name, f in sums.items():
        try:
            if all(total(v) == f(v) for shift in range(3)
                   for v in [{n: PROBES[(k + 4 * shift) % len(PROBES)] for k, n in enumerate(names)}]):
                return Mono.symbol(name)
        except (KeyError, NameError, ZeroDivisionError):  # the symbol reads another symbol than the sum's
            continue
    return None


def constant_shape(t: onnx.TensorProto) -> SymShape:
    return [Mono.const(int(d)) for d in t.dims]


def int_values(t: onnx.TensorProto) -> list[int]:
    return [int(v) for v in numpy_helper.to_array(t).reshape(-1)]


__all__ = ["COMPLETED", "SMALL_CONSTANT", "concat_length", "constant_shape", "constant_value", "infer_node", "int_values",
           "resize_scales", "scaled_length"]
