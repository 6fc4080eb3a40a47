"""Composite operators in ONNX graphs: the decompositions torch exports (TorchScript and dynamo exporters,
opsets 13-20) of GELU, LayerNorm, Softmax, SiLU, RMSNorm, attention, rotary embeddings and MatMul with a bias, found so that the
importer makes each one IR node (:mod:`eqsat.ops.composite`, :mod:`eqsat.ops.attention`) instead of a chain of
opaque and element-wise nodes. The matchers live beside their operators (the ``PATTERNS`` of those family modules,
joined in :data:`eqsat.ops.PATTERNS`, over a :class:`~eqsat.ops.matching.View` of the graph); this module runs them
over a graph and keeps the valid matches.

Recognized forms (``*`` and ``+`` in either operand order, a product in any association; ``c`` scalar
constants, from initializers or Constant nodes):

* ``gelu`` erf: ``Erf(x / sqrt 2)`` (or ``x * (1/sqrt 2)``) ``+ 1``, times ``x`` and ``0.5``; a ``Gelu`` node.
* ``gelu`` tanh: ``Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))) + 1``, times ``x`` and ``0.5``.
* ``addnorm``: an ``Add`` whose only reader is a ``LayerNormalization`` node (as ``layernorm``): the pair that
  onnxruntime fuses into SkipLayerNormalization (:data:`eqsat.onnx.fusions.SKIP_LAYER_NORM`, where its operands
  are 3-D of one shape; where the Add is another match's, the LayerNormalization alone;
  where the operands' shapes differ, the importer takes the Add, then the LayerNormalization alone).
* ``layernorm``: a ``LayerNormalization`` node over the last axis with a bias; before opset 17,
  ``d = x - ReduceMean(x)``; ``d / Sqrt(ReduceMean(Pow(d, 2)) + eps) * gamma + beta``.
* ``softmax``: a ``Softmax`` node (before opset 13, which flattens at its axis, one over the last axis only).
* ``silu``: ``x * Sigmoid(x)``.
* ``rmsnorm``: ``x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps))`` (or ``1 / Sqrt(..)``, or ``x / Sqrt(..)``),
  optional ``Cast``s to float, times ``gamma``.
* ``attention``: ``MatMul(q, kt)``, times a scalar (``Mul``, or ``Div`` by it; or ``q`` and ``kt`` each times one,
  as torch's SDPA export writes it; or none), plus an optional mask (``Add``; or two in turn, T5's position bias
  and padding mask, which the importer adds into one), optional ``Cast`` s to float, ``Softmax`` over the last
  axis (``-1``, or its positive index as some exporters and older opsets write it), optional ``Cast`` s to float,
  ``MatMul`` by ``v``; with ``Where(IsNaN(p), 0, p)`` between the ``Softmax`` and that ``MatMul`` (torch's SDPA
  export: a query row of NaN scores attends to nothing), ``attention_nz`` (:mod:`eqsat.ops.attention_nz`).
* ``linear``: ``MatMul(x, W) + b`` with constant ``W`` [k, n] and ``b`` [n] (the importer makes a ``Gemm`` one too).
* ``rotary``: ``x * cos + Concat(Neg(Slice(x, h:)), Slice(x, :h), axis=-1) * sin`` (:mod:`eqsat.ops.rotary`), cos
  and sin constants whose halves repeat (checked by the importer once folded where torch computes them).

Recognition that survives exporter changes (issue 26, point 4): where the e-graph can tell a composite from its
parts, a rule does it too, so that an exporter's variant that other rewrites normalize meets the composite:
``attention`` (``attention_split``, parts -> attention), ``addnorm`` (``addnorm_fuse``), ``silu`` (``fuse_silu``),
``linear`` (``linear_split``, both ways). The matchers here stay the only recognition where the e-graph cannot
do it: ``gelu``, ``layernorm`` (decomposed) and ``rmsnorm`` need the values of scalar constants (0.5, sqrt 2,
0.044715, the exponent 2, eps), which the e-graph holds as weights without values; ``rotary`` needs the values
of its cos and sin tables (their halves repeat) and its Slices and Neg are opaque operators there; the
attention matcher also takes scales written as constant factors and Casts the rules do not see; ``softmax``
and the one-node forms map one ONNX node each.

The graph carries no shapes the matchers could rely on, so a Softmax axis that only the operand's rank can tell
to be the last (a positive index; any axis before opset 13) is recorded in :attr:`Match.last_axis` and checked
by :meth:`Match.ir_attrs` once the importer knows the shapes.

Reductions must be over the last axis (``axes = [-1]``, kept). A match is valid only when no value inside
it (every output of its nodes but the last) is used outside it: by another node, a subgraph, or as a graph
output. Each node belongs to at most one match.

>>> from onnx import helper, TensorProto
>>> g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
...                       "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
>>> [(m.op, m.inputs, m.output) for m in find_composites(g)]
[('silu', ('x',), 'y')]
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from .. import ops
from ..ops.attention import MATCHED as ATTENTION_OPS
from ..ops.mapping import resolve_axis
from ..ops.matching import View
from .subgraphs import implicit_inputs


@dataclass(frozen=True)
class Match:
    """One composite found in a graph."""

    op: str
    """the IR operator (:mod:`eqsat.ops.composite`, :mod:`eqsat.ops.attention`)"""
    attrs: tuple
    """its attributes; a softmax axis may still be negative (:meth:`ir_attrs` normalizes it)"""
    inputs: tuple[str, ...]
    """the operands' value names, in the operator's order (x, then gamma, beta; q, kt, v, then a mask)"""
    output: str
    """the value the composite computes"""
    nodes: tuple[onnx.NodeProto, ...]
    """the covered nodes, in graph order (Constant nodes not included: they may be shared)"""
    last_axis: int | None = None
    """the axis of a Softmax inside the match that must be the last axis of the first operand (attention's: the
    scores have q's rank; a Softmax before opset 13, which flattens at its axis), or None"""

    def ir_attrs(self, shapes: Sequence[tuple[int, ...]]) -> tuple | None:
        """The IR attributes given the operands' shapes; None when the match does not hold at these ranks (a
        Softmax axis out of range, or not the last where it must be): the importer then takes its nodes one by one."""
        rank = len(shapes[0])
        if self.op in ops.IMPORT_ATTRS:
            return ops.IMPORT_ATTRS[self.op](self.attrs, shapes)
        if self.last_axis is not None and resolve_axis(self.last_axis, rank) != rank - 1:
            return None
        if self.op == "softmax":
            axis = resolve_axis(self.attrs[0], rank)
            return None if axis is None else (axis,)
        return self.attrs


def find_composites(graph: onnx.GraphProto, consts: Mapping[str, np.ndarray] | None = None,
                    opset: int = 13, kept: Collection[str] = ()) -> list[Match]:
    """The composites in ``graph`` (its top level), in graph order of their anchors; ``consts`` are the values
    known besides the Constant nodes (the importer's initializers); ``opset`` is the model's (ai.onnx): it decides
    what a Softmax computes; ``kept``, the ``Shape`` values a shape-generic program keeps (:class:`View`)."""
    v = View(graph, consts or {}, opset, implicit_inputs, kept)
    claimed: set[int] = set()
    matches = []
    for node in v.nodes:
        matchers = ops.PATTERNS.get(node.op_type, ())
        if not matchers or node.domain not in ("", "ai.onnx") or id(node) in claimed:
            continue
        candidates = (fn(v, node) for fn in matchers)  # in order; the first that holds here is taken
        found = next((f for f in candidates if f is not None and not any(id(n) in claimed for n in f[3])
                      and all(f[2]) and v.valid(f[3], f[4])), None)
        if found is None:
            continue
        op, attrs, inputs, nodes, output = found
        claimed.update(id(n) for n in nodes)
        ordered = tuple(sorted(nodes, key=lambda n: v.order[id(n)]))
        soft = next((n for n in nodes if n.op_type == "Softmax"), None)
        axis = v.softmax_axis(soft) if soft is not None else -1  # -1 is the last axis at every rank
        last = axis if axis != -1 and (op in ATTENTION_OPS or opset < 13) else None
        matches.append(Match(op, attrs, tuple(inputs), output, ordered, last))
    return matches


__all__ = ["Match", "find_composites"]
