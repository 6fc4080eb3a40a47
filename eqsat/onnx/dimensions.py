"""The symbolic dimensions (:mod:`eqsat.dims`) of an imported dynamic-axes model: its inputs' symbols, the
targets of its reshapes and the shapes of its opaque operators.

A reshape's target is folded to numbers at the representative sizes (its ``Shape`` computations, its ``0`` and
``-1``): :func:`symbolic_target` reads which symbols each target dimension is off the input's symbolic shape
(:func:`eqsat.onnx.targets.reshape_target`, the same reading the shape-generic writer makes), so that the
reshape of ``[batch, seq, 768]`` to ``[batch*seq, 768]`` stays symbolic. An opaque operator's output shapes are
inferred again at its inputs' fingerprints (:func:`opaque_fingerprints`), else read off runs of the model at
several sizes of each symbol (:func:`fitted_fingerprints`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from ..dims import Dim, Mono, combine, derived_symbols, fingerprint, fp_of, from_mono, is_symbolic
from ..ir import Node
from .fitting import fit_runs, run_values
from .folding import ModelRuns
from .targets import reshape_target


def input_dims(vi: onnx.ValueInfoProto, dims: Sequence[int]) -> tuple[int, ...]:
    """An input's shape at the sizes ``dims``, each dynamic dimension the symbol it is (its ``dim_param``, or
    ``INPUT:AXIS`` for an unnamed one: :func:`eqsat.onnx.interface.symbols`' names)."""
    out: list[int] = []
    for k, (d, size) in enumerate(zip(vi.type.tensor_type.shape.dim, dims)):
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(size))
        else:
            out.append(Dim.symbol(d.dim_param or f"{vi.name}:{k}", int(size)))
    return tuple(out)


def symbolic_target(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """A reshape target (numbers, at the representative sizes) of a value of symbolic ``shape``, its dimensions
    symbolic where the input's symbols go; the numbers unchanged where that cannot be read."""
    monos: list[Mono] = []
    sizes: dict[str, int] = {}
    for d in shape:
        m = d.mono if isinstance(d, Dim) else Mono.const(int(d))
        if m is None:
            return tuple(target)
        monos.append(m)
        sizes.update((d.sizes or {}) if isinstance(d, Dim) else {})
    out = reshape_target(monos, [int(t) for t in target], sizes)
    if out is None or len(out) != len(target):
        return tuple(target)
    try:
        dims = tuple(from_mono(m, sizes) for m in out)
    except (KeyError, ValueError):  # a symbol never imported, or a quotient that is no whole size
        return tuple(target)
    return dims if [int(d) for d in dims] == [int(t) for t in target] else tuple(target)


def opaque_fingerprints(runs: ModelRuns, node: onnx.NodeProto, names: list[str], ins: list[Node],
                        weights: dict[str, np.ndarray]) -> list[tuple[int, ...] | None]:
    """Each output shape of an opaque ``node`` at its inputs' fingerprints (onnx's shape inference on the node
    alone); None where it is not inferred. Nothing (all None) when no input is symbolic."""
    unique = dict(zip(names, ins))
    if not any(is_symbolic(n.shape) for n in unique.values()):
        return [None] * len(node.output)
    inits = [numpy_helper.from_array(weights[n.name], name) for name, n in unique.items()
             if n.op == "weight" and n.name is not None and n.name in weights and weights[n.name].dtype.kind in "iub"]
    model = runs.node_model(node, list(unique), [(fingerprint(n.shape), n.dtype) for n in unique.values()], inits)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
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
    return out


def fitted_fingerprints(model: onnx.ModelProto, names: list[str], values: Mapping[str, int]
                        ) -> dict[str, tuple[int, ...]]:
    """The shapes of the values ``names`` at the fingerprints, read off runs of ``model`` at ``values`` and at
    further sizes of each symbol (:func:`eqsat.onnx.fitting.fit_runs`): for the opaque operators whose shapes
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


__all__ = ["fitted_fingerprints", "input_dims", "opaque_fingerprints", "opaque_shape", "symbolic_target"]
