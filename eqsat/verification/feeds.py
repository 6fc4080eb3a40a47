"""Seeded random inputs for verification and timing in onnxruntime.

Shapes come from the model, with the dimensions the user fixed (``--input-shape``) in place of dynamic
ones. Integer inputs that reach a Gather's indices (token ids, positions, through Cast, Unsqueeze and
other index-preserving operators) are drawn across ``[0, size)`` of the axis they index; other integer
inputs from a small safe range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from ..dims import derived_symbols
from ..errors import InputError
from ..onnx.external import infer_shapes_aside
from ..onnx.io import is_large

SAFE_INT_HIGH = 2
"""Exclusive upper bound of integer inputs whose use is unknown (masks, flags)."""

_ORT_DTYPES = {
    "tensor(float16)": np.float16, "tensor(float)": np.float32, "tensor(double)": np.float64,
    "tensor(bool)": np.bool_, "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32,
    "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64,
}

# Operators whose output carries its first input's values unchanged (only their layout or dtype changes).
_PASS_THROUGH = {"Cast", "CastLike", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand",
                 "Transpose", "Tile", "Concat", "Slice", "Gather", "Clip"}
# (operator, index of the indices input)
_INDEXING = {"Gather": 1, "GatherElements": 1}
_INT_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
              onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}


def fixed_shape(name: str, dims: list, fixed: Mapping[str, tuple[int, ...]] | None,
                sizes: Mapping[str, int] | None = None) -> list[int]:
    """The concrete shape of input ``name``: the user's fixed shape where given (checked against the static
    dimensions), else the static dimensions with each dynamic one at its symbol's size in ``sizes``
    (:func:`symbol_sizes`), or 1."""
    if fixed and name in fixed:
        shape = [int(d) for d in fixed[name]]
        if len(shape) != len(dims) or any(isinstance(d, int) and d > 0 and d != s for d, s in zip(dims, shape)):
            shown = ",".join(str(d) if isinstance(d, int) and d > 0 else (str(d) if d else "?") for d in dims)
            raise InputError(f"--input-shape {name}={','.join(map(str, shape))} contradicts the model's input "
                             f"shape [{shown}]; only dynamic dimensions can be fixed")
        return shape
    return [d if isinstance(d, int) and d > 0 else (sizes or {}).get(d, 1) if isinstance(d, str) else 1
            for d in dims]


def symbol_sizes(inputs: Sequence[tuple[str, list]], fixed: Mapping[str, tuple[int, ...]] | None) -> dict[str, int]:
    """The size of each ``dim_param`` of ``inputs`` ((name, dims) as onnxruntime gives them) where no fixed shape
    gives it: read off the fixed shapes where an input named there has it, else 1; a symbol written as arithmetic
    of others (dynamo's ``past + 1``: :func:`eqsat.dims.derived_symbols`) from theirs, so that the feeds agree."""
    sizes: dict[str, int] = {}
    for name, dims in inputs:
        if fixed and name in fixed and len(fixed[name]) == len(dims):
            sizes.update((d, int(v)) for d, v in zip(dims, fixed[name]) if isinstance(d, str) and d)
    names = sorted({d for _, dims in inputs for d in dims if isinstance(d, str) and d})
    derived = derived_symbols(names)
    for d in names:
        if d not in derived:
            sizes.setdefault(d, 1)
    for d, f in derived.items():
        sizes.setdefault(d, f(sizes))
    return sizes


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Exclusive upper bound of each integer graph input used as Gather indices: the smallest size of an axis
    it indexes. Inputs whose indexed axis has no static size are left out."""
    g = model.graph
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in g.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    sizes = _StaticShapes(model)
    inits = {t.name for t in g.initializer}
    bounds: dict[str, int] = {}
    for vi in g.input:
        if vi.name in inits or vi.type.tensor_type.elem_type not in _INT_TYPES:
            continue
        seen, frontier = {vi.name}, [vi.name]
        while frontier:
            value = frontier.pop()
            for node in consumers.get(value, []):
                k = _INDEXING.get(node.op_type)
                if k is not None and len(node.input) > k and node.input[k] == value:
                    shape = sizes.get(node.input[0])
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    if shape is not None and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                        size = shape[axis]
                        bounds[vi.name] = min(bounds.get(vi.name, size), size)
                elif node.op_type in _PASS_THROUGH and (node.input[0] == value or node.op_type == "Concat"):
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            frontier.append(out)
    return bounds


class _StaticShapes:
    """Static shapes of the initializers and constants; of other values by shape inference, run once on demand."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.known: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
                self.known[node.output[0]] = tuple(node.attribute[0].t.dims)
        self.inferred = False

    def get(self, name: str) -> tuple[int, ...] | None:
        if name not in self.known and not self.inferred:
            self.inferred = True
            self._infer()
        return self.known.get(name)

    def _infer(self) -> None:
        if is_large(self.model):
            return
        try:
            inferred = infer_shapes_aside(self.model, strict_mode=False)
        except Exception:  # a model inference cannot type: initializers and constants only
            return
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input):
            tt = vi.type.tensor_type
            dims = tt.shape.dim
            if vi.name not in self.known and tt.HasField("shape") and all(d.HasField("dim_value") for d in dims):
                self.known[vi.name] = tuple(d.dim_value for d in dims)


def random_inputs(sess: ort.InferenceSession, rng: np.random.Generator,
                  input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                  int_bounds: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """One seeded random feed for every input of ``sess`` (see the module docstring)."""
    feeds: dict[str, np.ndarray] = {}
    sizes = symbol_sizes([(i.name, list(i.shape)) for i in sess.get_inputs()], input_shapes)
    for i in sess.get_inputs():
        shape = fixed_shape(i.name, list(i.shape), input_shapes, sizes)
        dtype = _ORT_DTYPES.get(i.type)
        if dtype is None:
            raise InputError(f"input {i.name!r} has type {i.type}, which eqsat cannot generate test inputs for; "
                             "convert it to float32, float16, float64, an integer type or bool")
        if np.dtype(dtype).kind == "f":
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[i.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            high = (int_bounds or {}).get(i.name, SAFE_INT_HIGH)
            high = min(high, int(np.iinfo(dtype).max) + 1)
            feeds[i.name] = rng.integers(0, max(high, 1), shape).astype(dtype)
    return feeds


def flags_alternated(feeds: dict[str, np.ndarray], draw: int) -> dict[str, np.ndarray]:
    """``feeds`` with each bool input of one element (a flag: a merged decoder's ``use_cache_branch``) True on even
    draws and False on odd ones, so that the draws of a verification take both sides of what it selects (drawn at
    random, three draws took one side an eighth of the time)."""
    for name, v in feeds.items():
        if v.dtype == np.bool_ and v.size == 1:
            feeds[name] = np.full(v.shape, draw % 2 == 0)
    return feeds


def with_values(feeds: Mapping[str, np.ndarray], items: Sequence[str]) -> dict[str, np.ndarray]:
    """``feeds`` with each ``NAME=V1,V2,...`` of ``items`` as that input's values, in its drawn dtype and shape (a
    flag such as a merged decoder's ``use_cache_branch`` chosen rather than drawn: ``use_cache_branch=1``); raises
    InputError naming an input that is not fed or values that do not fill its shape."""
    out = dict(feeds)
    for item in items:
        key, _, values = item.partition("=")
        if key not in out:
            raise InputError(f"{item!r} names {key!r}, which is no input (inputs: {sorted(out)})")
        drawn = out[key]
        try:
            out[key] = np.array([float(v) for v in values.split(",")]).astype(drawn.dtype).reshape(drawn.shape)
        except ValueError as exc:
            raise InputError(f"{item!r}: {exc}; give {drawn.size} value(s), comma-separated") from exc
    return out


def _mask_like(name: str, v: np.ndarray, bounds: Mapping[str, int]) -> bool:
    """A bool input, or an integer input that indexes nothing (:func:`index_bounds`: a mask's, a flag's, drawn from
    ``[0, SAFE_INT_HIGH)``)."""
    return v.dtype == np.bool_ or (v.dtype.kind in "iu" and name not in bounds)


def unmasked(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` with every mask-like input (:func:`_mask_like`) set to ones: the input as a batch without padding
    feeds it."""
    bounds = index_bounds(model)
    return {name: np.ones_like(v) if _mask_like(name, v, bounds) else v for name, v in feeds.items()}


def served(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None, seed: int = 0
           ) -> dict[str, np.ndarray] | None:
    """``feeds`` with each mask-like input (:func:`_mask_like`) of rank 2 (``[batch, positions]``) as a server feeds
    it, the batch padded on the right to its longest row: the first row kept throughout, each other row kept up to a
    length drawn (seeded) from 1 to every position. A batch of one row is not padded: all kept. The inputs a program
    is timed on (:func:`eqsat.measurement.timing.timing_feeds`): masked at random, as the verification draws them,
    about half of each row would be masked, where a masked score can cost several times an unmasked one
    (:mod:`eqsat.onnx.softmax_floor`). Other inputs as they were; None for None."""
    if feeds is None:
        return None
    bounds, rng = index_bounds(model), np.random.default_rng(seed)
    out = dict(feeds)
    for name, v in feeds.items():
        if v.ndim == 2 and v.size and _mask_like(name, v, bounds):
            rows, width = v.shape
            kept = np.concatenate([[width], rng.integers(1, width + 1, rows - 1)])
            out[name] = (np.arange(width)[None, :] < kept[:, None]).astype(v.dtype)
    return out


def one_row(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> bool:
    """Whether every mask-like input of ``feeds`` (:func:`_mask_like`) of rank 2 or more holds one row (its first
    dimension 1): a batch a server never pads."""
    bounds = index_bounds(model)
    return all(v.shape[0] == 1 for name, v in feeds.items() if v.ndim >= 2 and _mask_like(name, v, bounds))


EDGES = ("rows of -inf", "a NaN", "near the range")
"""the edge draws of :func:`edge_inputs`, by name"""
NONFINITE_EDGES = ("rows of -inf", "a NaN")
"""those that feed values that are not finite"""
RANGE_HEADROOM = 2.0 ** -12
"""the near-the-range draw's largest magnitude, as a fraction of the type's largest finite value: within the
equivalence contract's stated magnitude (docs/robustness.md), each input's values spread over [1/2, 1] of it"""


EDGE_INPUTS = 8
"""the float inputs that get edge draws of their own, at most (:func:`edge_cases`)"""


def edge_inputs(feeds: Mapping[str, np.ndarray], edge: str, rng: np.random.Generator,
                only: str | None = None) -> dict[str, np.ndarray] | None:
    """``feeds`` with every float input (``only``: that one) turned into an edge case users feed (:data:`EDGES`):
    ``rows of -inf``, a third of its rows along the last axis -inf throughout (a padded query, fully masked), and
    one other entry in ten -inf; ``a NaN``, one NaN at a random place; ``near the range``, random signs at
    magnitudes in [1/2, 1] of :data:`RANGE_HEADROOM` times the type's largest value. Other inputs are unchanged;
    None where none is float (the draw would repeat ``feeds``)."""
    if edge not in EDGES:
        raise ValueError(f"unknown edge draw {edge!r}; one of {EDGES}")
    out = dict(feeds)
    changed = False
    for name, value in feeds.items():
        if value.dtype.kind != "f" or value.size == 0 or only not in (None, name):
            continue
        changed = True
        x = np.array(value, copy=True)
        if edge == "rows of -inf":
            rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
            rows[rng.random(rows.shape) < 0.1] = -np.inf
            rows[::3] = -np.inf
        elif edge == "a NaN":
            x.reshape(-1)[int(rng.integers(x.size))] = np.nan
        else:
            top = float(np.finfo(x.dtype).max) * RANGE_HEADROOM
            x = (rng.choice([-1.0, 1.0], x.shape) * rng.uniform(0.5, 1.0, x.shape) * top).astype(x.dtype)
        out[name] = x
    return out if changed else None


def edge_cases(feeds: Mapping[str, np.ndarray], edges: Sequence[str] = EDGES) -> list[tuple[str, str | None]]:
    """The edge draws (of ``edges``) to make from ``feeds``, in order, as (edge, float input) pairs for
    :func:`edge_inputs`: rows of -inf and a NaN in each float input in turn, the others as drawn (a -inf in the
    queries would hide what a -inf mask does), up to :data:`EDGE_INPUTS` of them; values near the range in every
    float input at once (None)."""
    floats = [n for n, v in feeds.items() if v.dtype.kind == "f" and v.size][:EDGE_INPUTS]
    return [(edge, name) for edge in edges for name in (floats if edge != "near the range" else [None])]


def edge_label(edge: str, name: str | None) -> str:
    """What an edge draw holds, said."""
    return edge if name is None else f"{edge} in {name!r}"


__all__ = ["EDGES", "NONFINITE_EDGES", "edge_cases", "edge_inputs", "edge_label", "fixed_shape", "flags_alternated", "index_bounds", "random_inputs",
           "with_values"]
