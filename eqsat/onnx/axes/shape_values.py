"""The small integer vectors a dynamic-axes model computes from its inputs' shapes (a Reshape target concatenated
from ``Shape`` entries, a Slice's bound, the ``Where(Equal(t, -1), 1, t)`` torch writes before an Expand), as
monomials of the interface's symbols, read off the model's nodes without running it.

The shape-generic writer needs these vectors' entries at every size (:class:`eqsat.generic.original.Original`):
runs of the original at further sizes fit them (:func:`eqsat.onnx.axes.fitting.fit_vectors`), which for a 30-layer
decoder of 650 MB is twenty runs of the whole model. Most are shape arithmetic onnx's shape inference types: each
value's shape is inferred over the whole model with the symbols as ``dim_param``\\ s (its data propagation carries
them through the Reshapes), and the vectors are then evaluated from those shapes and the constants, node by node,
over the operators below. An entry that is not one monomial at every size (a sum of two symbols, a floor of a
quotient, a comparison that depends on the sizes) is unknown, and so is every vector holding one: those are
fitted by runs as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from fractions import Fraction

import numpy as np
import onnx
from onnx import numpy_helper

from eqsat.dims import Mono
from eqsat.ops.mapping import onnx_attrs

from ..external import infer_shapes_aside
from ..folding import constant_value
from .interface import symbols
from .symbolic import constant_value as symbolic_constant
from .symbolic import infer_node

Entry = Mono | bool | None
"""an entry of an integer vector (a monomial of the symbols), of a boolean one, or unknown"""
Vector = tuple[bool, list[Entry]]
"""(whether the value is a scalar, its entries)"""

LONGEST = 8
"""entries of the longest vector evaluated (a Reshape target of rank 8)"""
_INTS = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
         onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}


def _of_array(a: np.ndarray) -> Vector | None:
    if a.ndim > 1 or a.size > LONGEST or a.dtype.kind not in "iub":
        return None
    if a.dtype.kind == "b":
        return a.ndim == 0, [bool(v) for v in a.reshape(-1)]
    return a.ndim == 0, [Mono.const(int(v)) for v in a.reshape(-1)]


def _const(e: Entry) -> int | bool | None:
    """An entry's value where it is a constant."""
    if isinstance(e, bool):
        return e
    if isinstance(e, Mono) and e.is_const and e.coef.denominator == 1:
        return int(e.coef)
    return None


def _positive(e: Entry) -> bool:
    """Whether the entry is a size of at least 1 at every size of the symbols (each symbol at least 1)."""
    return isinstance(e, Mono) and not isinstance(e, bool) and not e.is_const and e.coef >= 1 \
        and e.coef.denominator == 1 and all(p > 0 for _, p in e.powers)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _binary(op: str, a: Entry, b: Entry) -> Entry:
    """``a op b`` where every size gives one monomial (or one truth value); None where it does not."""
    if a is None or b is None:
        return None
    x, y = _const(a), _const(b)
    if op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        if x is not None and y is not None:
            return {"Equal": x == y, "Less": x < y, "Greater": x > y, "LessOrEqual": x <= y,
                    "GreaterOrEqual": x >= y}[op]
        if op == "Equal" and isinstance(a, Mono) and isinstance(b, Mono) and not isinstance(a, bool) \
                and not isinstance(b, bool) and a == b:
            return True
        # a size (at least 1 at every size) against a constant below 1: decided at every size
        if _positive(a) and y is not None and not isinstance(y, bool) and y < 1:
            return {"Equal": False, "Less": False, "Greater": True, "LessOrEqual": False, "GreaterOrEqual": True}[op]
        if _positive(b) and x is not None and not isinstance(x, bool) and x < 1:
            return {"Equal": False, "Less": True, "Greater": False, "LessOrEqual": True, "GreaterOrEqual": False}[op]
        return None
    if op in ("And", "Or"):
        if isinstance(a, bool) and isinstance(b, bool):
            return (a and b) if op == "And" else (a or b)
        return None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, Mono) or not isinstance(b, Mono):
        return None
    if op == "Mul":  # a floor (a fractional coefficient: ``1/16*h`` is ``floor(h / 16)``) times anything but 1 is no
        # monomial: ``2 * floor(h / 16)`` is not ``floor(h / 8)`` (3 against 2 at a side of 24)
        if (a.coef.denominator != 1 and b != Mono.const(1)) or (b.coef.denominator != 1 and a != Mono.const(1)):
            return None
        return a * b
    if x is not None and y is not None:
        if op == "Add":
            return Mono.const(x + y)
        if op == "Sub":
            return Mono.const(x - y)
        if op == "Div" and y != 0:
            return Mono.const(_trunc_div(int(x), int(y)))
        if op == "Max":
            return Mono.const(max(x, y))
        if op == "Min":
            return Mono.const(min(x, y))
        return None
    if op in ("Add", "Sub") and y == 0:
        return a
    if op == "Add" and x == 0:
        return b
    if op == "Div" and y is not None and y > 0 and a.coef.denominator == 1 and int(a.coef) % int(y) == 0 \
            and all(p > 0 for _, p in a.powers):
        return a * Mono.const(Fraction(1, int(y)))  # exact at every size: the coefficient divides
    return None


def _broadcast(xs: Sequence[Vector]) -> tuple[bool, list[list[Entry]]] | None:
    n = max(len(e) for _, e in xs)
    if any(len(e) not in (1, n) for _, e in xs):
        return None
    return all(s for s, _ in xs), [e * n if len(e) == 1 and n > 1 else list(e) for _, e in xs]


def _ints(v: Vector | None) -> list[int] | None:
    if v is None:
        return None
    out = [_const(e) for e in v[1]]
    return None if any(x is None or isinstance(x, bool) for x in out) else [int(x) for x in out]  # type: ignore[arg-type]


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    return onnx_attrs(node).get(name, default)


def _int_attr(node: onnx.NodeProto, name: str, default: int | None) -> int | None:
    got = _attr(node, name, default)
    return int(got) if isinstance(got, (int, np.integer)) else default


def _ints_attr(node: onnx.NodeProto, name: str) -> list[int] | None:
    got = _attr(node, name)
    return [int(v) for v in got] if isinstance(got, (list, tuple)) else None


Shapes = dict[str, list[Mono | None]]


def _slice(node: onnx.NodeProto, vals: dict[str, Vector]) -> Vector | None:
    data = vals.get(node.input[0])
    if data is None or data[0]:
        return None
    if len(node.input) > 1:  # opset 10+: bounds are inputs
        parts = [_ints(vals.get(i)) if i else None for i in list(node.input[1:5]) + [""] * (5 - len(node.input))]
        starts, ends, axes, steps = parts
        if starts is None or ends is None or (len(node.input) > 3 and node.input[3] and axes is None) \
                or (len(node.input) > 4 and node.input[4] and steps is None):
            return None
    else:
        starts, ends, axes, steps = (_ints_attr(node, "starts"), _ints_attr(node, "ends"), _ints_attr(node, "axes"),
                                     None)
    if starts is None or ends is None or len(starts) != 1 or (axes is not None and list(axes) not in ([0], [-1])):
        return None
    step = steps[0] if steps else 1
    if step == 0:
        return None
    return False, data[1][slice(int(starts[0]), int(ends[0]), int(step))]


def _evaluated(node: onnx.NodeProto, vals: dict[str, Vector], shapes: Shapes) -> Vector | None:
    op, ins = node.op_type, list(node.input)
    if op == "Constant":
        return _of_array(np.asarray(constant_value(node.attribute[0]))) if node.attribute else None
    if op == "Shape":
        dims = shapes.get(ins[0])
        if dims is None:
            return None
        kept = dims[_int_attr(node, "start", 0): _int_attr(node, "end", None)]
        return (False, list(kept)) if len(kept) <= LONGEST else None
    if op == "Size":
        sizes = shapes.get(ins[0])
        if sizes is None:
            return None
        count = Mono.const(1)
        for d in sizes:
            if d is None:
                return None
            count = count * d
        return True, [count]
    if op in ("Identity", "Cast"):
        if op == "Cast" and _attr(node, "to") not in _INTS | {onnx.TensorProto.BOOL}:
            return None
        v = vals.get(ins[0])
        if v is None or (op == "Cast" and _attr(node, "to") == onnx.TensorProto.BOOL):
            return v if op == "Identity" else None
        return v
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten"):
        v = vals.get(ins[0])
        if v is None:
            return None
        written = shapes.get(node.output[0])
        if written is not None:
            rank = len(written)
        elif op == "Reshape":
            target = _ints(vals.get(ins[1])) if len(ins) > 1 else None
            rank = len(target) if target is not None else 2
        else:  # one axis added to a scalar, one taken from a vector of one entry
            rank = {"Unsqueeze": 1 if v[0] else 2, "Squeeze": 0 if len(v[1]) == 1 else 1, "Flatten": 2}[op]
        return (rank == 0, list(v[1])) if rank <= 1 else None
    if op == "Gather":
        v, idx = vals.get(ins[0]), vals.get(ins[1])
        at = _ints(idx)
        if v is None or v[0] or idx is None or at is None or _int_attr(node, "axis", 0) != 0:
            return None
        n = len(v[1])
        if any(not -n <= i < n for i in at):
            return None
        return idx[0], [v[1][i] for i in at]
    if op == "Concat":
        parts = [p for i in ins if (p := vals.get(i)) is not None and not p[0]]
        if len(parts) != len(ins) or _int_attr(node, "axis", 0) not in (0, -1):
            return None
        return False, [e for p in parts for e in p[1]]
    if op == "Slice":
        return _slice(node, vals)
    if op == "ConstantOfShape":
        dims_of = _ints(vals.get(ins[0]))
        value = _attr(node, "value")
        fill = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.zeros(1, np.float32)
        if dims_of is None or len(dims_of) > 1 or fill.dtype.kind not in "iub":
            return None
        size = int(np.prod(dims_of)) if dims_of else 1
        return _of_array(np.full(dims_of, fill.reshape(-1)[0], fill.dtype)) if size <= LONGEST else None
    if op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
              "And", "Or"):
        xs = [vals.get(i) for i in ins]
        if any(x is None for x in xs) or (op in ("Max", "Min") and len(xs) != 2):
            return None
        b = _broadcast(xs)  # type: ignore[arg-type]
        if b is None:
            return None
        scalar, (a, c) = b[0], b[1][:2]
        return scalar, [_binary(op, x, y) for x, y in zip(a, c)]
    if op == "Not":
        v = vals.get(ins[0])
        return None if v is None or not all(isinstance(e, bool) for e in v[1]) else (v[0], [not e for e in v[1]])
    if op == "Where":
        xs = [vals.get(i) for i in ins]
        if any(x is None for x in xs):
            return None
        b = _broadcast(xs)  # type: ignore[arg-type]
        if b is None:
            return None
        cond, x, y = b[1]
        if not all(isinstance(e, bool) for e in cond):
            return None
        return b[0], [p if c else q for c, p, q in zip(cond, x, y)]
    return None


def _declared_symbols(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """A copy of ``model``'s interface for the inference: each dynamic input axis a ``dim_param`` named by its
    symbol (:func:`eqsat.onnx.axes.interface.symbols`: a declared name, or ``INPUT:AXIS`` for an unnamed one)."""
    found = symbols(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for sym, places in found.items():
        for name, axis in places:
            vi = next(v for v in copy.graph.input if v.name == name)
            d = vi.type.tensor_type.shape.dim[axis]
            d.Clear()
            d.dim_param = sym
    return copy, set(found)


def _read(model: onnx.ModelProto, syms: Collection[str]) -> tuple[Shapes, dict[str, int]]:
    shapes: Shapes = {}
    types: dict[str, int] = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        if tt.elem_type:
            types[vi.name] = tt.elem_type
        if tt.HasField("shape"):
            shapes[vi.name] = [Mono.const(d.dim_value) if d.HasField("dim_value")
                               else Mono.symbol(d.dim_param) if d.dim_param in syms else None for d in tt.shape.dim]
    for t in model.graph.initializer:
        shapes[t.name] = [Mono.const(int(d)) for d in t.dims]
        types[t.name] = t.data_type
    return shapes, types


def shape_values(model: onnx.ModelProto, sums: Mapping[str, Callable[[Mapping[str, int]], int]] | None = None,
                 infer: Callable[..., onnx.ModelProto] = infer_shapes_aside) -> dict[str, list[Mono]]:
    """The main graph's integer values of at most :data:`LONGEST` entries whose every entry is one monomial of
    the interface's symbols at every size, with their entries (a scalar as one), read without a run: each value's
    shape from onnx's inference over the whole model (``infer``), and where it left a size unknown (a Reshape's
    ``-1`` among symbols) from :func:`eqsat.onnx.axes.symbolic.infer_node` node by node, which reads the vectors
    evaluated so far as constants; the vectors evaluated from those shapes and the constants. ``sums``: the
    interface's symbols that are sums of others (:func:`eqsat.dims.derived_symbols`)."""
    declared, syms = _declared_symbols(model)
    try:
        inferred = infer(declared, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - no inference: nothing decided (the runs fit every vector)
        return {}
    shapes, types = _read(inferred, syms)
    constants: dict[str, onnx.TensorProto] = {t.name: t for t in model.graph.initializer
                                              if t.data_type in _INTS and int(np.prod(t.dims)) <= LONGEST}
    vals: dict[str, Vector] = {}
    for t in model.graph.initializer:
        if t.data_type in _INTS | {onnx.TensorProto.BOOL} and int(np.prod(t.dims)) <= LONGEST and len(t.dims) <= 1:
            got = _of_array(numpy_helper.to_array(t))
            if got is not None:
                vals[t.name] = got
    vectors: dict[str, list[Mono] | None] = {}
    for node in model.graph.node:
        small = symbolic_constant(node)  # (shape inference reads the small integer ones by value)
        if small is not None:
            constants[small.name] = small
        outs = [o for o in node.output if o]
        if any(shapes.get(o) is None or None in shapes[o] for o in outs):  # onnx's inference left a size unknown
            for name, (elem, shape) in infer_node(node, shapes, types, constants, model.opset_import, sums,
                                                  vectors).items():
                old = shapes.get(name)
                if shape is not None:
                    shapes[name] = shape if old is None or len(old) != len(shape) else \
                        [a if a is not None else b for a, b in zip(old, shape)]
                types.setdefault(name, elem)
        if node.domain not in ("", "ai.onnx") or len(outs) != 1 or len(node.output) != 1:
            continue
        try:
            got = _evaluated(node, vals, shapes)
        except (ValueError, TypeError, IndexError, ZeroDivisionError):
            got = None
        if got is not None and len(got[1]) <= LONGEST:
            vals[outs[0]] = got
            whole = _whole(got)
            if whole is not None:
                vectors[outs[0]] = whole
            ints = _ints(got) if whole is not None else None
            if ints is not None and outs[0] not in constants:  # a vector of the same entries at every size
                constants[outs[0]] = numpy_helper.from_array(np.asarray(ints[0] if got[0] else ints, np.int64),
                                                             outs[0])
    out: dict[str, list[Mono]] = {}
    for name, got in vals.items():
        whole = _whole(got)
        if whole is not None:
            out[name] = whole
    return out


def evaluate(name: str, producer: Callable[[str], onnx.NodeProto | None],
             vectors: Mapping[str, Sequence[Mono] | None], constants: Mapping[str, onnx.TensorProto],
             shapes: Mapping[str, Sequence[Mono | None] | None], depth: int = 8) -> list[Mono] | None:
    """The entries of the integer vector ``name`` as monomials, each one at every size, evaluated from the node that
    computes it (``producer``) and, up to ``depth`` nodes back, the nodes computing its inputs (a boolean between
    them: ``Where(Equal(t, -1), 1, t)``); the inputs' entries read from ``vectors`` (known as monomials),
    ``constants`` (small integer tensors) and ``shapes`` (a ``Shape`` of a value of known shape). None where an
    entry is not one monomial at every size, or an input is unknown."""
    memo: dict[str, Vector | None] = {}

    def value(v: str, left: int) -> Vector | None:
        if v in memo:
            return memo[v]
        got: Vector | None = None
        shape = shapes.get(v)
        if v in constants:
            t = constants[v]
            got = _of_array(numpy_helper.to_array(t)) if int(np.prod(t.dims)) <= LONGEST else None
        elif vectors.get(v) is not None:
            got = (shape == [], list(vectors[v] or []))
        elif left > 0 and (node := producer(v)) is not None and node.domain in ("", "ai.onnx") \
                and len(node.output) == 1:
            vals = {i: x for i in node.input if i and (x := value(i, left - 1)) is not None}
            try:
                got = _evaluated(node, vals, {k: list(s) for k, s in ((i, shapes.get(i)) for i in [*node.input, v])
                                              if s is not None})
            except (ValueError, TypeError, IndexError, ZeroDivisionError):
                got = None
        memo[v] = got
        return got

    got = value(name, depth)
    return None if got is None else _whole(got)


def _whole(v: Vector) -> list[Mono] | None:
    """The entries of an integer vector each of which is a monomial at every size, None where one is not."""
    entries = v[1]
    if all(isinstance(e, Mono) and not isinstance(e, bool) for e in entries):
        return [e for e in entries if isinstance(e, Mono)]
    return None


__all__ = ["LONGEST", "evaluate", "shape_values"]
