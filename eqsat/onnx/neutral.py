"""Operands that change nothing: ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1`` with a constant of
the neutral element throughout that does not broadcast ``x`` up, a ``Gemm``'s all-zero ``C`` and a ``Conv``'s all-zero
``B``. Freshly initialized layers carry them (transformers sets every Linear and Conv bias to zero), so a third-party
export with random weights holds one such Add per dense layer; onnxruntime fuses none of them away at rank 3, and each
is a pass over the layer's output (2-4% of a decoder at width 384).

The importer drops the elementwise ones as it reads a model (:func:`kept_operand`); a dense layer's zero bias stays
in its ``linear`` composite, which the rules and the attention recognition read, and :func:`without_neutral` drops it
where a program is written. The written value is the same in IEEE arithmetic (``NaN + 0`` is NaN, ``inf + 0`` is
inf); the one difference is the sign of a zero (``-0.0 + 0.0`` is ``+0.0``), which compares equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from .folding import dtype_name
from .fusions import BIAS_PRODUCERS
from .pool import array_of
from .subgraphs import rename_outer, subgraphs

NEUTRAL = {"Add": 0, "Sub": 0, "Mul": 1, "Div": 1}
"""op type -> the constant it passes its other operand through with"""

DENSE = BIAS_PRODUCERS
"""the producers whose zero bias :func:`without_neutral` drops (:data:`eqsat.onnx.fusions.BIAS_PRODUCERS`: MatMul,
Gemm, Conv): a bias added to anything else may be part of a form onnxruntime fuses (a LayerNorm's zero shift, an
RMSNorm's unit scale: dropped, the norm is no longer fused)"""

OPTIONAL_ZERO = {"Gemm": 2, "Conv": 2}
"""op type -> the position of an optional additive operand that is nothing where it is all zero"""


def kept_operand(node: onnx.NodeProto, const: Callable[[str], np.ndarray | None],
                 value: Callable[[str], tuple[tuple[int | None, ...], str] | None]) -> str | None:
    """The operand ``node`` passes on unchanged (``x + 0`` ...: :data:`NEUTRAL`), else None. ``const``: a name's
    constant value or None; ``value``: a non-constant name's shape (None for a dimension not known) and element
    type (numpy's name), or None where unknown. The constant must be the neutral element throughout, of ``x``'s own type, and must not broadcast
    ``x`` up (``x [n] + zeros [m, n]`` is not ``x``)."""
    neutral = NEUTRAL.get(node.op_type)
    if neutral is None or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    for k in ((0, 1) if node.op_type in ("Add", "Mul") else (1,)):
        kept = node.input[1 - k]
        known = value(kept)
        if known is None:
            continue
        shape, dtype = known
        c = const(node.input[k])
        if c is None or c.dtype.name != dtype or c.size == 0:
            continue
        if _within(c.shape, shape) and np.all(c == neutral):
            return kept
    return None


def _within(c: tuple[int, ...], x: tuple[int | None, ...]) -> bool:
    """Whether a constant of shape ``c`` broadcasts to ``x`` without changing it (a dimension of ``x`` that is not
    known, None, takes only a 1)."""
    return len(c) <= len(x) and all(a == 1 or a == b for a, b in zip(reversed(c), reversed(x)))


def without_neutral(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (concrete shapes, as :func:`eqsat.onnx.export.export_model` writes it) without the zero biases of
    dense layers (an ``Add``/``Sub`` of :func:`kept_operand` whose kept operand a :data:`DENSE` node computes) and the
    all-zero optional operands of :data:`OPTIONAL_ZERO`, edited in place and returned.
    A node whose output is a graph output stays (its name is the interface). Initializers no node reads any more
    are removed."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    if not any(n.op_type in NEUTRAL or n.op_type in OPTIONAL_ZERO for n in graph.node):
        return model
    cache: dict[str, np.ndarray | None] = {}
    inferred: list[dict[str, tuple[tuple[int | None, ...], str]]] = []

    def value(name: str) -> tuple[tuple[int | None, ...], str] | None:
        if not inferred:  # shape inference only once a zero bias after a dense layer is found
            inferred.append(_values(model))
        return inferred[0].get(name)

    def const(name: str) -> np.ndarray | None:
        if name not in cache:
            cache[name] = array_of(inits[name]) if name in inits else None
        return cache[name]

    def zero(name: str) -> bool:
        c = const(name) if name else None
        return c is not None and c.size > 0 and not np.any(c)

    outputs = {o.name for o in graph.output}
    producers = {o: n.op_type for n in graph.node for o in n.output if n.domain in ("", "ai.onnx")}
    renamed: dict[str, str] = {}
    kept_nodes = []
    for node in graph.node:
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
        for sub in subgraphs(node):
            rename_outer(sub, renamed)
        if node.op_type in OPTIONAL_ZERO and node.domain in ("", "ai.onnx"):
            slot = OPTIONAL_ZERO[node.op_type]
            if len(node.input) == slot + 1 and zero(node.input[slot]):
                del node.input[slot]
        kept = kept_operand(node, const, value) if _zero_after_dense(node, zero, producers, renamed) \
            and node.output[0] not in outputs else None
        if kept is not None and producers.get(renamed.get(kept, kept)) not in DENSE:
            kept = None
        if kept is None:
            kept_nodes.append(node)
        else:
            renamed[node.output[0]] = renamed.get(kept, kept)
    if len(kept_nodes) == len(graph.node) and not renamed:
        return model
    del graph.node[:]
    graph.node.extend(kept_nodes)
    read = {i for n in graph.node for i in n.input} | outputs
    read |= {i for n in graph.node for sub in subgraphs(n) for i in _all_reads(sub)}
    unread = [t for t in graph.initializer if t.name not in read]
    for t in unread:
        graph.initializer.remove(t)
    return model


def _zero_after_dense(node: onnx.NodeProto, zero: Callable[[str], bool], producers: dict[str, str],
                      renamed: dict[str, str]) -> bool:
    """Whether ``node`` is an Add/Sub of an all-zero constant to (or from) a value a :data:`DENSE` node computes: the
    cheap test before :func:`kept_operand` asks for shapes."""
    if node.op_type not in ("Add", "Sub") or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return False
    a, b = node.input
    return (zero(b) and producers.get(renamed.get(a, a)) in DENSE) or \
        (node.op_type == "Add" and zero(a) and producers.get(renamed.get(b, b)) in DENSE)


def _all_reads(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for n in graph.node:
        names.update(n.input)
        for sub in subgraphs(n):
            names |= _all_reads(sub)
    return names


def _values(model: onnx.ModelProto) -> dict[str, tuple[tuple[int | None, ...], str]]:
    """Every value's shape (None for a dimension not known as a number) and element type where onnx's shape inference
    knows its rank."""
    graph = model.graph
    bare = onnx.GraphProto()  # the nodes and the initializers' dims only: shape inference never copies the weights
    bare.node.extend(graph.node)
    bare.input.extend(graph.input)
    bare.output.extend(graph.output)
    bare.value_info.extend(graph.value_info)
    declared = {v.name for v in graph.input}
    bare.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                      for t in graph.initializer if t.name not in declared)
    shell = onnx.helper.make_model(bare, opset_imports=list(model.opset_import))
    shell.ir_version = model.ir_version
    try:
        inferred = onnx.shape_inference.infer_shapes(shell)
    except Exception:  # noqa: BLE001 (an operator onnx cannot infer: the graph's own value_info only)
        inferred = shell
    g = inferred.graph
    out: dict[str, tuple[tuple[int | None, ...], str]] = {}
    for v in [*g.input, *g.value_info, *g.output]:
        t = v.type.tensor_type
        if not v.type.HasField("tensor_type") or not t.HasField("shape") or not t.elem_type:
            continue
        dims = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in t.shape.dim)
        out[v.name] = (dims, dtype_name(t.elem_type))
    return out
