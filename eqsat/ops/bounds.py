"""What the e-graph may assume of a value's range: an interval analysis over the IR, for the rules whose identity
holds only where a value is finite (:func:`finite_masks`, the ``Finite`` relation).

:func:`value_range` gives, for an IR node, an interval ``(lo, hi)`` that holds every element the node can compute,
none of them NaN, on every input the model can be fed; None where nothing is known (a float input can hold -inf,
+inf or NaN; an operator it does not read). Weights are read for their values (only the weights under the nodes
asked about: a built-in model's weights may be generated on first read); integer and boolean inputs range over their
type; a float input is unknown (``finite_inputs``: the caller vouches that none holds -inf, +inf or NaN, and it
ranges over its type's finite values). Float rounding is monotonic, so
an interval computed exactly in float64 from float32 bounds still holds after each float32 operation rounds.

>>> import numpy as np
>>> import onnx
>>> from eqsat import ir
>>> m = ir.input_("m", (2, 1, 1, 8), dtype="bool")
>>> to_float = onnx.helper.make_attribute("to", onnx.TensorProto.FLOAT).SerializeToString()
>>> cast = ir.opaque("Cast", [m], (2, 1, 1, 8), "float32", attr_bytes=(to_float,))
>>> lowest = ir.weight("lowest", (1, 1, 1, 1))
>>> mask = ir.make("ewmul", [ir.opaque("Sub", [ir.weight("one", ()), cast], (2, 1, 1, 8)), lowest])
>>> weights = {"one": np.float32(1), "lowest": np.finfo(np.float32).min}
>>> bool(value_range(mask, weights)[0] == np.finfo(np.float32).min)  # finite: an interval, not None
True
>>> x = ir.input_("mask", (1, 1, 4, 4))
>>> value_range(x, {}) is not None, value_range(x, {}, finite_inputs=True) is not None
(False, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx

from .composite import float_value
from .opaque import attribute

Range = tuple[float, float]

_LAYOUT = {"reshape", "transpose", "slice", "dropout", "concat"}
"""IR operators whose output holds only elements of their operands"""
_ONNX_LAYOUT = {"Identity", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Transpose", "Flatten", "Slice", "Gather",
                "GatherElements", "GatherND", "Tile", "Concat", "Pad", "ReduceMax", "ReduceMin", "Trilu"}
"""ONNX operators whose output holds only elements of their data operands (every operand for Concat, the first
otherwise; Pad's constant and Trilu's zeros are read from the operands and 0 below)"""
_BOOLEAN = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf"}
"""ONNX operators whose output is boolean whatever their operands hold (a comparison with NaN is false)"""


def _type_range(dtype: str) -> Range | None:
    """Every value of an integer or boolean type; a float type's finite values."""
    if dtype == "bool":
        return 0.0, 1.0
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        return None
    if kind in "iu":
        info = np.iinfo(np.dtype(dtype))
        return float(info.min), float(info.max)
    if kind == "f":
        top = float(np.finfo(np.dtype(dtype)).max)
        return -top, top
    return None


def _fits(r: Range | None, dtype: str) -> Range | None:
    """``r`` where a value of ``dtype`` within it is finite (None past the type's finite range or for a type that is
    not a number)."""
    whole = _type_range(dtype)
    if r is None or whole is None or not (np.isfinite(r[0]) and np.isfinite(r[1])):
        return None
    return r if whole[0] <= r[0] and r[1] <= whole[1] else None


def _union(ranges: Iterable[Range | None]) -> Range | None:
    rs = list(ranges)
    if not rs or any(r is None for r in rs):
        return None
    return min(r[0] for r in rs), max(r[1] for r in rs)  # type: ignore[index]


def _product(a: Range | None, b: Range | None) -> Range | None:
    if a is None or b is None:
        return None
    with np.errstate(all="ignore"):
        corners = [x * y for x in a for y in b]
    return None if any(np.isnan(c) for c in corners) else (min(corners), max(corners))


class _Ranges:
    def __init__(self, weights: Mapping[str, Any], finite_inputs: bool, known: Mapping[str, Range] | None = None):
        self.weights, self.finite_inputs, self.known = weights, finite_inputs, known or {}
        self.memo: dict[int, Range | None] = {}

    def of(self, node: Any) -> Range | None:
        key = id(node)
        if key not in self.memo:
            self.memo[key] = None  # a cycle (none in a DAG) reads as unknown
            self.memo[key] = _fits(self._compute(node), node.dtype)
        return self.memo[key]

    def _operands(self, node: Any) -> list[Any]:
        """An opaque node's operands by ONNX input position (None where an optional one is omitted)."""
        return [node.inputs[k] if k >= 0 else None for k in node.attrs[5]]

    def _compute(self, node: Any) -> Range | None:
        op = node.op
        if node.dtype == "bool":  # whatever computed it (a Cast of NaN to bool included)
            return 0.0, 1.0
        if op == "weight":
            if node.name not in self.weights:
                return None
            a = np.asarray(self.weights[node.name])
            if a.size == 0 or a.dtype.kind not in "biuf" or (a.dtype.kind == "f" and not np.all(np.isfinite(a))):
                return None
            return float(a.min()), float(a.max())
        if op == "input" and node.name in self.known:
            return self.known[node.name]
        if op == "input":
            whole = _type_range(node.dtype)
            floating = whole is not None and node.dtype != "bool" and np.dtype(node.dtype).kind == "f"
            return whole if not floating or self.finite_inputs else None
        if op == "scale":
            return _product(self.of(node.inputs[0]), (float_value(node.attrs[0]),) * 2)
        if op in _LAYOUT:
            return _union(self.of(i) for i in node.inputs)
        if op == "relu":
            r = self.of(node.inputs[0])
            return None if r is None else (max(r[0], 0.0), max(r[1], 0.0))
        if op in ("ewadd", "ewsum"):
            x, y = (self.of(i) for i in node.inputs)
            return None if x is None or y is None else (x[0] + y[0], x[1] + y[1])
        if op == "ewmul":
            return _product(self.of(node.inputs[0]), self.of(node.inputs[1]))
        if op == "opaque" and node.attrs[1] == "":
            return self._onnx(node)
        return None

    def _onnx(self, node: Any) -> Range | None:
        kind, ins = node.attrs[0], self._operands(node)
        if kind in _BOOLEAN:
            return 0.0, 1.0
        if kind == "Shape" or kind == "Size":
            return 0.0, float(np.iinfo(np.int64).max)
        if kind == "ConstantOfShape":
            value = attribute(node, "value")
            v = onnx.numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1)
            return (float(v[0]), float(v[0])) if v.size == 1 and np.all(np.isfinite(v)) else None
        if kind in ("Trilu", "Pad"):  # the zeros they write (Pad's default constant) beside the data
            parts = [self.of(ins[0]), (0.0, 0.0)]
            if kind == "Pad" and len(ins) > 2 and ins[2] is not None:
                parts.append(self.of(ins[2]))
            return _union(parts)
        if kind == "Concat":
            return _union(self.of(i) for i in ins if i is not None)
        if kind in _ONNX_LAYOUT:
            return self.of(ins[0]) if ins and ins[0] is not None else None
        if kind == "Cast":
            return self.of(ins[0])  # :meth:`of` checks it fits the target type
        if kind == "Where":
            return _union([self.of(ins[1]), self.of(ins[2])])
        if kind in ("Max", "Min") and ins and all(i is not None for i in ins):
            rs = [self.of(i) for i in ins]
            if any(r is None for r in rs):
                return None
            pick = max if kind == "Max" else min
            return pick(r[0] for r in rs), pick(r[1] for r in rs)  # type: ignore[index]
        if kind in ("Add", "Sub", "Mul") and len(ins) == 2 and all(i is not None for i in ins):
            a, b = self.of(ins[0]), self.of(ins[1])
            if a is None or b is None:
                return None
            if kind == "Add":
                return a[0] + b[0], a[1] + b[1]
            if kind == "Sub":
                return a[0] - b[1], a[1] - b[0]
            return _product(a, b)
        if kind == "Neg":
            r = self.of(ins[0])
            return None if r is None else (-r[1], -r[0])
        return None


def value_range(node: Any, weights: Mapping[str, Any], finite_inputs: bool = False,
                known: Mapping[str, Range] | None = None) -> Range | None:
    """The interval every element of ``node`` lies in, no element NaN, on every input (None: unknown); ``known``:
    input name -> the interval its values lie in (a repeated block's external inputs, computed in the whole
    model: :meth:`eqsat.blocks.Blocks.external_ranges`)."""
    return _Ranges(weights, finite_inputs, known).of(node)


def finite_masks(nodes: Iterable[Any], weights: Mapping[str, Any], vouched: bool = False,
                 known: Mapping[str, Range] | None = None) -> frozenset[int]:
    """The ids of the nodes among ``nodes`` that are an ``attention``'s mask operand and finite on every input
    (:func:`value_range` gives them an interval; every one where the user ``vouched`` for them,
    ``--assume-finite-masks``): the e-graph marks them ``Finite``, and only an attention masked by one becomes a
    runtime kernel (``attention_kernel``), whose fully masked rows differ from the decomposition's where a mask holds
    -inf (the decomposition gives NaN there, the kernel finite values). ``known``: as :func:`value_range`'s."""
    ranges = _Ranges(weights, False, known)
    masks = {id(n.inputs[3]): n.inputs[3] for n in nodes if n.op == "attention" and len(n.inputs) == 4}
    return frozenset(i for i, m in masks.items() if vouched or ranges.of(m) is not None)


class _FiniteParts(_Ranges):
    """Intervals of a value's finite elements only (its other elements may be -inf, +inf or NaN): a float input's
    span its type; an operator through which a non-finite element can become a finite one (a Relu of -inf, the Max
    of -inf and a finite value) is not read."""

    def __init__(self, weights: Mapping[str, Any], known: Mapping[str, Range] | None = None):
        super().__init__(weights, True, known)

    def _compute(self, node: Any) -> Range | None:
        op, kind = node.op, node.attrs[0] if node.op == "opaque" and node.attrs[1] == "" else None
        if op == "weight" and node.dtype != "bool" and node.name in self.weights:
            a = np.asarray(self.weights[node.name])
            finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
            if a.dtype.kind not in "biuf" or a.size == 0:
                return None
            return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)  # (0, 0): none finite
        if kind == "ConstantOfShape":
            value = attribute(node, "value")
            if value is not None and not np.all(np.isfinite(onnx.numpy_helper.to_array(value))):
                return 0.0, 0.0
        if op == "relu" or kind in ("Max", "Min"):
            return None
        return super()._compute(node)


MASK_FLOOR = -1e37
"""the least finite mask entry :func:`above_lowest_masks` admits: onnxruntime's attention kernel writes zeros for a
query row whose masked scores reach float32's lowest (-3.4e38), where the decomposition averages v; from entries at
or above this, scores within the equivalence contract's magnitude never reach it"""


def above_lowest_masks(nodes: Iterable[Any], weights: Mapping[str, Any],
                       known: Mapping[str, Range] | None = None) -> frozenset[int]:
    """The ids of the nodes among ``nodes`` that are an ``attention_nz``'s mask operand whose every finite element is
    at or above :data:`MASK_FLOOR` on every input (-inf, +inf and NaN elements allowed: torch's export of a boolean
    mask, ``Where(keep, 0, -inf)``); a float input is not (a user may feed float32's lowest). The e-graph marks them
    ``AboveLowest``: only an ``attention_nz`` masked by one becomes the runtime kernel (``attention_nz_kernel``)."""
    parts = _FiniteParts(weights, known)
    masks = {id(n.inputs[3]): n.inputs[3] for n in nodes if n.op == "attention_nz" and len(n.inputs) == 4}
    return frozenset(i for i, m in masks.items() if (r := parts.of(m)) is not None and r[0] >= MASK_FLOOR)
