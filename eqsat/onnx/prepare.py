"""Checks and one rewrite run on an ONNX model before any work (:doc:`docs/robustness.md`): what is read, what
eqsat refuses up front (exit 2, naming the cause) and the preparation pass that makes a valid model importable.

- What is read (a regular file, standard input, bytes): :mod:`.reading`.
- :func:`prepare`: non-tensor graph inputs and outputs are refused, model-local functions are inlined, an ``If``
  whose condition is constant is its branch (:mod:`.constant_ifs`), and the inputs' sizes are checked against
  :func:`memory_cap`.
- :func:`check_loads`: the model loads in onnxruntime (eqsat verifies every result there).
- :func:`check_value_sizes`: no value of the imported graph is larger than :func:`memory_cap`.
- What the importer keeps: :data:`QUANTIZATION` operators are never folded; :func:`removable_pass_through`
  tells which Identity and Dropout nodes it may drop (not a training Dropout, nor one whose mask is read).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
from onnx import helper

from ..errors import InputError, ModelRefused
from ..ir import Graph
from .constant_ifs import inline_constant_ifs
from .io import inference_session
from .reading import gib

MEMORY_FRACTION = 8
"""a value (input, weight or intermediate) may take at most 1/MEMORY_FRACTION of the machine's memory"""
QUANTIZATION = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
"""operators never folded to constants: a weight's DequantizeLinear stays an (opaque) operator on its integer
weight, so the weight keeps its precision and size, and onnxruntime fuses the QDQ pattern as in the original"""
MAX_ELEMENTS = 2**62
"""no value may have this many elements or more (eqsat's e-graph stores sizes as 64-bit integers)"""


def memory_cap() -> int:
    """The most bytes one value may take: 1/:data:`MEMORY_FRACTION` of the machine's physical memory."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        total = 16 * 2**30
    return int(total) // MEMORY_FRACTION


def _type_kind(t: onnx.TypeProto) -> str | None:
    """The kind of a non-tensor type (``sequence``, ``map``, ``optional``, ``sparse tensor``); None for a tensor
    or a value with no declared type."""
    kind = t.WhichOneof("value")
    if kind in (None, "tensor_type"):
        return None
    return {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional",
            "sparse_tensor_type": "sparse tensor"}.get(kind, kind)


def describe_type(t: onnx.TypeProto) -> str:
    """A type as ONNX spells it: ``seq(map(int64, tensor(float)))``."""
    kind = t.WhichOneof("value")
    if kind == "tensor_type" or kind == "sparse_tensor_type":
        inner = getattr(t, kind)
        name = helper.tensor_dtype_to_string(inner.elem_type).removeprefix("TensorProto.").lower() \
            if inner.elem_type else "?"
        return f"{'sparse_' if kind == 'sparse_tensor_type' else ''}tensor({name})"
    if kind == "sequence_type":
        return f"seq({describe_type(t.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({describe_type(t.optional_type.elem_type)})"
    if kind == "map_type":
        key = helper.tensor_dtype_to_string(t.map_type.key_type).removeprefix("TensorProto.").lower()
        return f"map({key}, {describe_type(t.map_type.value_type)})"
    return kind or "no type"


def check_tensor_interface(model: onnx.ModelProto) -> None:
    """Refuse graph inputs and outputs that are not tensors (a sequence, a map, ai.onnx.ml ZipMap's sequence of
    maps, an optional): eqsat's program computes tensors only."""
    for side, values in (("input", model.graph.input), ("output", model.graph.output)):
        for v in values:
            kind = _type_kind(v.type)
            if kind is not None:
                raise InputError(f"model {side} {v.name!r} is a {kind} ({describe_type(v.type)}), not a "
                                 f"tensor; eqsat optimizes graphs whose inputs and outputs are tensors: cut the "
                                 f"model before the {kind} (or optimize the part that computes tensors)")


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its model-local functions (FunctionProto: TorchScript's export_modules_as_functions, the
    dynamo exporter's) inlined into the graph, nested ones and attribute references included."""
    if not model.functions:
        return model
    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as exc:  # noqa: BLE001 - a function that cannot be expanded
        raise InputError(f"the model's local functions cannot be inlined ({str(exc).splitlines()[0]}); eqsat "
                         "optimizes a flat graph") from None


def _declared_shape(vi: onnx.ValueInfoProto, fixed: Mapping[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    if vi.name in fixed:
        return tuple(fixed[vi.name])
    dims = vi.type.tensor_type.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        return None  # dynamic: the importer asks for --input-shape
    return tuple(d.dim_value for d in dims)


def check_size(what: str, shape: tuple[int, ...], itemsize: int) -> None:
    """Refuse a value of ``shape`` whose size is over :data:`MAX_ELEMENTS` or :func:`memory_cap` bytes."""
    count = math.prod(int(d) for d in shape)
    cap = memory_cap()
    shown = "x".join(str(d) for d in shape)
    if count >= MAX_ELEMENTS:
        raise InputError(f"{what} has shape [{shown}]: {count:.3g} elements, more than eqsat handles (2^62); "
                         "give smaller dimensions (--input-shape NAME=D1,D2,...)")
    if count * itemsize > cap:
        raise InputError(f"{what} has shape [{shown}]: {count:,} elements, {gib(count * itemsize)}; a value may "
                         f"take at most {gib(cap)} (1/{MEMORY_FRACTION} of this machine's memory) for eqsat to "
                         "verify the result: give smaller dimensions (--input-shape NAME=D1,D2,...)")


def _itemsize(elem_type: int) -> int:
    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # noqa: BLE001 - strings, undefined: counted as pointers
        return 8


def _ir_itemsize(dtype: str | None) -> int:
    try:
        return int(np.dtype(dtype).itemsize) if dtype else 8
    except TypeError:  # a dtype numpy does not name (e.g. float8 kinds): counted as 8 bytes
        return 8


def check_input_sizes(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Each graph input's size (declared, or fixed by ``--input-shape``) against :func:`check_size`."""
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in input_shapes and any(d.HasField("dim_value") and d.dim_value == 0 for d in dims):
            shown = ",".join(str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in dims)
            raise InputError(f"input {vi.name!r} has shape [{shown}], with a dimension of size 0 (an empty tensor): "
                             "eqsat cannot optimize empty tensors; export the model with a non-empty example input")
        shape = _declared_shape(vi, input_shapes)
        if shape is not None:
            check_size(f"input {vi.name!r}", shape, _itemsize(vi.type.tensor_type.elem_type))


def check_value_sizes(graph: Graph) -> None:
    """Every value of the imported ``graph`` (inputs, weights, intermediates) against :func:`check_size`."""
    for node in graph.nodes():
        what = f"input {node.name!r}" if node.op == "input" else f"the {node.op} value"
        check_size(what, tuple(node.shape), _ir_itemsize(node.dtype))


_LOADED_FROM = re.compile(r"Load model from (.+?) failed:")
"""onnxruntime's words for the file it read: eqsat's temporary copy of the model (a weight pool's
``eqsat-weights-*/model-*.onnx``, a large model's ``eqsat-*/model.onnx``), never a name the user gave"""


def check_loads(model: onnx.ModelProto, source: str | None = None) -> None:
    """Refuse a model onnxruntime cannot load (duplicate node names, an initializer shadowing an input with another
    shape, an operator or opset it lacks, a model it optimized and saved that its optimizer then trips on, ...):
    eqsat verifies every result in onnxruntime, with the session options used here (its default optimizations).
    ``source``: the user's name of the model (its path), which the message gives in place of the temporary copy
    onnxruntime read."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # the reason is in the message; no log line besides it
    opts.add_session_config_entry("session.disable_prepacking", "1")  # loaded, never run: no packed weight copies
    try:
        inference_session(model, opts)  # the weights from the run's pool, where one is current (no copy)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own Fail, InvalidGraph, ...
        reason = " ".join(str(exc).split()) or type(exc).__name__
        copy = _LOADED_FROM.search(reason)
        if copy is not None:  # the path of eqsat's copy, if any, named nowhere else in the message either
            reason = (reason.replace(copy.group(0), f"Load model from {source} failed: " if source else
                                     "Load model failed: ").replace(copy.group(1), source or "the model"))
        node = next((n for n in model.graph.node if f"{n.domain}:{n.op_type}(" in reason), None)
        where = f"{node.op_type} node {node.name!r} (domain {node.domain}): " if node is not None else ""
        raise ModelRefused(f"{source + ': ' if source else ''}{where}onnxruntime cannot load the model: "
                         f"{reason[:500]}; eqsat verifies every result in onnxruntime, so it cannot optimize this "
                         "model") from None


def removable_pass_through(node: onnx.NodeProto, consts: Mapping[str, np.ndarray]) -> bool:
    """Whether an Identity or Dropout ``node`` only passes its input on, so that the importer may drop it: a
    Dropout only in inference (``training_mode`` absent or a constant false) and with its mask output unused.
    A training-mode Dropout, or one whose mask is read, is kept (carried as an opaque operator)."""
    if node.op_type != "Dropout":
        return True
    if len(node.output) > 1 and node.output[1]:
        return False
    training = node.input[2] if len(node.input) > 2 else ""
    return not training or training in consts and not np.asarray(consts[training]).any()


def prepare(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """The model the importer reads: non-tensor interfaces refused, local functions inlined, input sizes
    checked (the onnxruntime load check, :func:`check_loads`, runs after the importer's dtype checks), and each
    ``If`` whose condition is the same at every size replaced by the branch it takes (:mod:`.constant_ifs`)."""
    check_tensor_interface(model)
    check_input_sizes(model, input_shapes)
    return inline_constant_ifs(inline_functions(model))


__all__ = ["MAX_ELEMENTS", "MEMORY_FRACTION", "QUANTIZATION", "check_input_sizes", "check_loads", "check_size", "check_tensor_interface", "check_value_sizes", "describe_type", "inline_functions", "memory_cap", "prepare", "removable_pass_through"]
