"""The symbolic dimensions (:mod:`eqsat.dims`) of an imported dynamic-axes model: its inputs' symbols, the
targets of its reshapes and the shapes of its opaque operators.

A reshape's target is folded to numbers at the representative sizes (its ``Shape`` computations, its ``0`` and
``-1``): :func:`symbolic_target` reads which symbols each target dimension is off the input's symbolic shape
(:func:`eqsat.onnx.axes.targets.reshape_target`, the same reading the shape-generic writer makes), so that the
reshape of ``[batch, seq, 768]`` to ``[batch*seq, 768]`` stays symbolic; a size no monomial fits (an audio model's
frames) is a symbol of its own there. An opaque operator's output shapes are inferred again at its inputs'
fingerprints (:func:`opaque_fingerprints`), with the small values computed from shapes taken where every symbol is at
its fingerprint (:func:`values_at_fingerprints`: a ``Range`` over the frames read off a shape, or computed from the
samples by an integer floor division), else read off runs of the model at several sizes of each symbol
(:func:`fitted_fingerprints`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from ...dims import (
    Dim,
    Mono,
    combine,
    current,
    derived_symbols,
    fingerprint,
    fp_of,
    from_mono,
    is_symbolic,
    volume_fp,
)
from ...ir import Node
from ..folding import ModelRuns
from ..subgraphs import subgraphs
from ..windows import pooled, rounds_up
from .fitting import fit_runs, run_values
from .targets import leading, reshape_target


def input_dims(vi: onnx.ValueInfoProto, dims: Sequence[int]) -> tuple[int, ...]:
    """An input's shape at the sizes ``dims``, each dynamic dimension the symbol it is (its ``dim_param``, or
    ``INPUT:AXIS`` for an unnamed one: :func:`eqsat.onnx.axes.interface.symbols`' names)."""
    out: list[int] = []
    for k, (d, size) in enumerate(zip(vi.type.tensor_type.shape.dim, dims)):
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(size))
        else:
            out.append(Dim.symbol(d.dim_param or f"{vi.name}:{k}", int(size)))
    return tuple(out)


def symbolic_target(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """A reshape target (numbers, at the representative sizes) of a value of symbolic ``shape``, its dimensions
    symbolic where the input's symbols go; the numbers unchanged where that cannot be read.

    A dimension that is no monomial of the symbols (an audio model's frames, a floor of a quotient of the samples
    through strided convolutions) is read as a symbol of its own, so that the symbols beside it are not lost
    (``[frames, batch, 384]`` to ``[frames*batch, 384]``); where a symbol at 1 could go with either of two axes, it
    goes as networks write it (:func:`eqsat.onnx.axes.targets.leading`: with the rows, not the features)."""
    monos: list[Mono] = []
    sizes: dict[str, int] = {}
    fps: dict[str, int] = {}
    for k, d in enumerate(shape):
        if not isinstance(d, Dim):
            monos.append(Mono.const(int(d)))
            continue
        m = d.mono
        if m is None:
            m = _opaque(d, f"@{k}", sizes, fps)
        else:
            sizes.update(d.sizes or {})
        monos.append(m)
    # beside a size no monomial fits, a symbol at 1 is read as networks write it; elsewhere as the e-graph's
    # reshape rules read it (``[b*s, 64]`` to ``[s, 1, 64]`` keeps b with s there)
    ones = {s for s, v in sizes.items() if v == 1 and s not in fps} if fps else set()
    out = reshape_target(monos, [int(t) for t in target], sizes, ones_before=bool(ones))
    if out is None or len(out) != len(target):
        return tuple(target)
    if ones:
        out = leading(out, ones)
    try:
        dims = tuple(from_mono(m, sizes, fps) for m in out)
    except (KeyError, ValueError):  # a symbol never imported, or a quotient that is no whole size
        return tuple(target)
    return dims if [int(d) for d in dims] == [int(t) for t in target] else tuple(target)


def carried(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether a reshape ``target`` of a value of ``shape`` carries its symbols: a :class:`~eqsat.dims.Dim` where a
    size follows them, as the mapper wrote it from the node's own semantics (an Unsqueeze's or a Squeeze's axes, a
    Reshape's ``0`` and ``-1``: :mod:`eqsat.ops.layout`), the same number of elements at every size.
    Nothing is then read off the numbers, where a reading could hand a symbol at 1 to an axis of 1 (``[2*b*s]``
    unsqueezed to ``[256, 1, 1]`` at ``b = 1`` read as ``[2*s, b, 1]``)."""
    return any(isinstance(d, Dim) for d in target) and volume_fp(target) == volume_fp(shape)


def _opaque(d: Dim, name: str, sizes: dict[str, int], fps: dict[str, int]) -> Mono:
    """A dimension no monomial fits as a monomial: the symbols whose fingerprints divide its own
    (:meth:`eqsat.dims.SymbolTable.split`) times a symbol ``name`` of its own for the rest (its size and fingerprint
    put in ``sizes`` and ``fps``)."""
    rest, powers = current().split(d.fp)
    m, value = Mono.symbol(name), int(d)
    for (symbol, size), k in powers:
        for _ in range(k):
            m, value = m * Mono.symbol(symbol), value // size if value % size == 0 else -1
        sizes[symbol] = size
    if value <= 0:  # the sizes do not divide it out: the whole dimension a symbol of its own
        m, value, rest = Mono.symbol(name), int(d), d.fp
    sizes[name], fps[name] = value, rest
    return m


def opaque_fingerprints(runs: ModelRuns, node: onnx.NodeProto, names: list[str], ins: list[Node],
                        weights: dict[str, np.ndarray], known: Mapping[str, np.ndarray] | None = None
                        ) -> list[tuple[int, ...] | None]:
    """Each output shape of an opaque ``node`` at its inputs' fingerprints (onnx's shape inference on the node
    alone, its small integer weights and the inputs' values at the fingerprints, ``known``, given as constants: a
    ``Range`` to a number of frames read off a shape); None where it is not inferred. Nothing (all None) when no
    input is symbolic or known there."""
    known = known or {}
    unique = dict(zip(names, ins))
    if not any(is_symbolic(n.shape) or name in known for name, n in unique.items()):
        return [None] * len(node.output)
    inits = [numpy_helper.from_array(weights[n.name], name) for name, n in unique.items()
             if n.op == "weight" and n.name is not None and n.name in weights and weights[n.name].dtype.kind in "iub"
             and weights[n.name].size <= FP_VALUES_LIMIT]  # shape-like (the values data propagation reads)
    inits = [t for t in inits if t.name not in known] + [numpy_helper.from_array(known[name], name)
                                                         for name in unique if name in known]
    fps = [(fingerprint(n.shape), n.dtype) for n in unique.values()]
    model = runs.node_model(node, list(unique), fps, inits)
    given = {t.name for t in inits}
    # onnx's data propagation builds the values of an integer input it is not given, at its shape: at the
    # fingerprints, Longformer's chunk indices (a Gather's, 166M entries) took gigabytes; such a value sizes nothing
    # (nor a vector of any type: onnx propagates a Sub of two float [T] as T dimensions, T at its fingerprint 2e8)
    propagate = not any(name not in given and (_integer(dtype) or len(shape) <= 1)
                        and int(np.prod(shape, dtype=object)) > FP_VALUES_LIMIT
                        for name, (shape, dtype) in zip(unique, fps))
    # nor inside a subgraph, where nothing bounds what it builds (a mixture of experts' If over its block: a OneHot
    # of the tokens at their fingerprint, 20 GB)
    propagate = propagate and not any(subgraphs(node))
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=propagate)
    except Exception:  # noqa: BLE001 - no inference: no symbolic shape
        return [None] * len(node.output)
    found = {v.name: v for v in list(inferred.graph.output) + list(inferred.graph.value_info)}
    out: list[tuple[int, ...] | None] = []
    for o in node.output:
        v = found.get(o)
        tt = v.type.tensor_type if v is not None else None
        if tt is None or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            out.append(None)
        else:
            out.append(tuple(int(d.dim_value) for d in tt.shape.dim))
    if out and out[0] is not None and rounds_up(node):  # onnxruntime's lengths, not onnx's (:mod:`..windows`)
        lengths = pooled(node, fps[0][0])
        out[0] = tuple(lengths) if lengths is not None else None
    return out


def _integer(dtype: str) -> bool:
    try:
        return np.dtype(dtype).kind in "iub"
    except TypeError:  # a type numpy does not name (bfloat16): a float
        return False


FP_VALUES_LIMIT = 64
"""the most entries a value at the fingerprints is kept with (a shape, a size, a few positions' bounds)"""
FP_VALUE_OPS = frozenset({"Gather", "Unsqueeze", "Squeeze", "Concat", "Add", "Sub", "Mul", "Div", "Mod", "Cast",
                          "Slice", "Neg", "Abs", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where",
                          "Min", "Max", "Floor", "Ceil", "Identity", "Reshape", "Sqrt"})
"""the operators a value at the fingerprints is computed through: none makes more entries than the product of its
inputs' (``Range``, ``ConstantOfShape``, ``Expand`` at a fingerprint would: their shapes are inferred instead)"""


def values_at_fingerprints(runs: ModelRuns, node: onnx.NodeProto, shapes: Mapping[str, Sequence[int]],
                           consts: Mapping[str, np.ndarray], known: Mapping[str, np.ndarray],
                           opaque: Collection[str] = ()) -> tuple[dict[str, np.ndarray], bool]:
    """The small values an ONNX ``node`` computes where every symbol is at its fingerprint, and whether they follow
    a size no monomial fits: a ``Shape`` of a symbolic value (``shapes``: its inputs' imported shapes) its
    fingerprints (following such a size where it reads one); a computation (:data:`FP_VALUE_OPS`) on such values
    (``known``; ``opaque``: those that follow such a size) and small constants (``consts``), the node run on them
    (following such a size where an input does, or where it is an integer division that does not divide:
    :func:`_floored`; a float ``Floor(x / 320.0)`` is not read so).
    Read by :func:`opaque_fingerprints` where a value follows such a size, so that a shape that follows a value
    computed from a shape (the frames of an audio model's relative position bias, ``Range(Cast(Shape(x)[1]))``, tiled
    by the batch read off another shape) is a fingerprint too, where no monomial of the symbols fits it and runs of
    the model at nearby sizes cannot fit it (the frames change every 320 samples)."""
    names = [i for i in node.input if i]
    if node.op_type == "Shape":
        shape = shapes.get(names[0]) if names else None
        if shape is None:
            return {}, False
        attrs = {a.name: a.i for a in node.attribute}
        picked = list(shape)[slice(attrs.get("start", 0), attrs.get("end", len(shape)))]
        if not is_symbolic(picked):
            return {}, False
        full = np.array(fingerprint(shape), np.int64)
        read = full[slice(attrs.get("start", 0), attrs.get("end", len(shape)))]
        return {node.output[0]: read}, any(isinstance(d, Dim) and d.mono is None for d in picked)
    if node.op_type not in FP_VALUE_OPS or node.domain not in ("", "ai.onnx") or not any(n in known for n in names):
        return {}, False
    feeds: dict[str, np.ndarray] = {}
    for name in names:
        value = known.get(name)
        if value is None:
            value = consts.get(name)
        if value is None or np.asarray(value).size > FP_VALUES_LIMIT:
            return {}, False
        feeds[name] = np.asarray(value)
    out = runs.fold(node, [], feeds) or {}
    kept = {k: v for k, v in out.items() if v.dtype.kind in "iufb" and v.size <= FP_VALUES_LIMIT}
    return kept, bool(kept) and (any(n in opaque for n in names) or _floored(node, feeds, names, known))


def _floored(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray], names: Sequence[str],
             known: Mapping[str, np.ndarray]) -> bool:
    """Whether ``node`` divides a size at the fingerprints by a whole number that does not divide it: the result
    is then no monomial of the symbols (a strided convolution's frames, computed from the samples by the exporter:
    ``(samples - 400) // 320 + 1``), a size of its own as the convolution's output is."""
    if node.op_type not in ("Div", "Mod") or len(names) != 2 or names[0] not in known:
        return False
    a, b = np.asarray(feeds[names[0]]), np.asarray(feeds[names[1]])
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu" or not np.all(b != 0):
        return False
    return bool(np.any(np.mod(a, b) != 0))


def fitted_fingerprints(model: onnx.ModelProto, names: list[str], values: Mapping[str, int]
                        ) -> dict[str, tuple[int, ...]]:
    """The shapes of the values ``names`` at the fingerprints, read off runs of ``model`` at ``values`` and at
    further sizes of each symbol (:func:`eqsat.onnx.axes.fitting.fit_runs`): for the opaque operators whose shapes
    follow the data (an ``Expand`` or a ``Reshape`` to a size computed from ``Shape``), which shape inference
    cannot give. A value with an axis no monomial explains is left out."""
    fitted = fit_runs(run_values(model, names, shapes=True), values, derived_symbols(list(values)))
    if fitted is None:
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for name, monos in zip(names, fitted):
        if all(m is not None for m in monos):
            try:
                out[name] = tuple(fp_of(from_mono(m, values)) for m in monos if m is not None)
            except (KeyError, ValueError):
                continue
    return out


def opaque_shape(shape: Sequence[int], fps: tuple[int, ...] | None) -> tuple[int, ...]:
    """An opaque output's shape: symbolic where its shape at the fingerprints says so."""
    if fps is None or len(fps) != len(shape):
        return tuple(int(d) for d in shape)
    return combine(shape, fps)


__all__ = ["FP_VALUES_LIMIT", "FP_VALUE_OPS", "fitted_fingerprints", "input_dims", "opaque_fingerprints", "opaque_shape",
           "carried", "symbolic_target", "values_at_fingerprints"]
