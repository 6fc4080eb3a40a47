"""The operator table: one :class:`OpDef` per IR operator, the single source of what an operator means.

An entry holds the operator's egglog constructor(s) and argument kinds, its attributes, the Python shape
function and the egglog shape rules (its twin; ``tests/core/test_ops.py`` checks that they agree on random
shapes), numpy semantics (float64 and, where defined, integers modulo a prime), the ONNX emitter, the
torch function used for timing, flops and bytes moved, and whether it is free. Everything else derives
from the table: the egglog schema and terms (:mod:`eqsat.egglog.schema`, :mod:`eqsat.egglog.codec`), shape
inference (:func:`eqsat.shapes.infer`), evaluation (:mod:`eqsat.evaluate`), export (:mod:`eqsat.onnx.export`),
the cost models (:mod:`eqsat.cost`) and the rule compiler and verifier (:mod:`eqsat.rules`).

The table is two-way: beside its entries, each family module maps the ONNX operators it covers to the IR in its
``IMPORTS`` (ONNX op type -> mapper, :mod:`eqsat.ops.mapping`), joined in :data:`IMPORTS` below, through which
the importer (:mod:`eqsat.onnx.importer`) maps every node; a family whose operators ONNX models spell as several
nodes (the composites: GELU, LayerNorm, attention, ...) also holds their matchers in its ``PATTERNS``
(:mod:`eqsat.ops.matching`), joined in :data:`PATTERNS` below, which :mod:`eqsat.onnx.patterns` runs.

Adding an operator is one entry in the family module it belongs to (listed in ``_ENTRIES`` below), the mapper
of the ONNX operator that computes it in that module's ``IMPORTS`` (a new family module's ``IMPORTS`` joins
:data:`IMPORTS` below), plus a sampler of valid attributes and shapes in ``tests/op_samplers.py``; ``tests/core/test_ops.py``
then checks it like every other. For example, an element-wise ``neg`` in :mod:`eqsat.ops.elementwise`::

    NEG = OpDef("neg", "-x", "()", lambda attrs, shapes: tuple(shapes[0]), (Ctor("Neg", "t"),),
                lambda: [rule("shape_Neg", ["(= e (Neg x))", "(= s (shape x))"], ["(set (shape e) s)"])],
                numpy=lambda attrs, args, modulus: -args[0],
                onnx=lambda em, attrs, ins, shapes: em.emit("Neg", ins, "neg"),
                torch=lambda torch, attrs, shapes: torch.neg)
    IMPORTS = {..., "Neg": _unary_import("neg")}

A composite also needs its matcher in its family module's ``PATTERNS`` (a new family module's joins
:data:`PATTERNS` below). What is not in the table: an IR pattern that onnxruntime fuses only in another spelling
is written in it by :mod:`eqsat.onnx.forms`, and the ort-cpu cost model (:mod:`eqsat.cost.ort`) knows which
operators onnxruntime fuses as epilogues; both read onnxruntime's fusions from :mod:`eqsat.onnx.fusions`.

>>> OPS["conv2d"].ctors[0].name, get("relu").free, get("slice").free
('Conv2d', False, True)
>>> infer_shape("matmul", (0,), [(2, 3), (3, 4)])
(2, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from . import (
    attention,
    attention_nz,
    batchnorm,
    composite,
    conv,
    elementwise,
    heads,
    layout,
    leaf,
    matmul,
    norm,
    opaque,
    pool,
    rotary,
    rotary_part,
)
from .base import (
    ACT_NONE,
    ACT_RELU,
    ACT_SIGMOID,
    ACT_TANH,
    SAME,
    Ctor,
    Emitter,
    NotEvaluable,
    OpDef,
    Shape,
    activation,
    broadcast,
    conv_pad,
    fail,
    volume,
    window_out,
)
from .egglog_text import MAX_RANK, shape_term
from .mapping import ImportContext, Mapper
from .matching import Matcher

__all__ = ["ACT_NONE", "ACT_RELU", "ACT_SIGMOID", "ACT_TANH", "CONSTRUCTORS", "Ctor", "Emitter", "FREE_OPS",
           "IMPORTS", "IMPORT_ATTRS", "ImportContext", "MAX_RANK", "Mapper", "Matcher", "PATTERNS", "NotEvaluable", "OPS", "OpDef", "SAME", "Shape", "activation", "broadcast", "conv_pad",
           "WRITTEN_ANEW", "describe", "evaluate", "get", "infer_shape", "shape_rules", "shape_term", "volume",
           "window_out"]

_ENTRIES: tuple[OpDef, ...] = (
    leaf.INPUT, leaf.WEIGHT,
    elementwise.EWADD, elementwise.EWMUL, elementwise.RELU, elementwise.TANH, elementwise.SIGMOID,
    elementwise.DROPOUT,
    matmul.MATMUL, conv.CONV2D, pool.POOL,
    layout.CONCAT, layout.SLICE, layout.TRANSPOSE, layout.RESHAPE,
    conv.MERGE, conv.ENLARGE,
    batchnorm.BATCHNORM, batchnorm.BN_SCALE, batchnorm.BN_SHIFT,
    composite.GELU, norm.LAYERNORM, composite.SOFTMAX, composite.SILU, norm.RMSNORM, composite.LINEAR,
    composite.SCALE, attention.ATTENTION,
    opaque.OPAQUE, leaf.NOOP,
    elementwise.EWSUM, norm.ADDNORM, attention.SDPA, rotary.ROTARY, rotary.ROPE,
    attention.SDPA_CAUSAL, heads.REPEAT_HEADS, rotary_part.ROTARY_PART, rotary_part.ROPE_PART,
    attention_nz.ATTENTION_NZ, attention_nz.SDPA_NZ,
)
"""in this order (it fixes the order of the egglog schema's constructors and rules)"""

OPS: Mapping[str, OpDef] = MappingProxyType({d.op: d for d in _ENTRIES})
"""op name -> entry (read-only)"""

CONSTRUCTORS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {c.name: (d.op, c.kinds) for d in _ENTRIES for c in d.ctors})
"""egglog constructor -> (IR op, argument kinds)"""

FREE_OPS = frozenset(d.op for d in _ENTRIES if d.free)
"""TASO's zero-cost operators"""


def _imports(*tables: Mapping[str, Mapper]) -> Mapping[str, Mapper]:
    joined: dict[str, Mapper] = {}
    for table in tables:
        twice = set(joined) & set(table)
        if twice:
            raise ValueError(f"ONNX operators mapped by two family modules: {sorted(twice)}")
        joined.update(table)
    return MappingProxyType(joined)


IMPORTS: Mapping[str, Mapper] = _imports(elementwise.IMPORTS, matmul.IMPORTS, conv.IMPORTS, pool.IMPORTS,
                                         layout.IMPORTS, batchnorm.IMPORTS, composite.IMPORTS)
"""ONNX op type (default domain) -> its mapper to the IR (:mod:`eqsat.ops.mapping`), joined from the family
modules' ``IMPORTS``"""

WRITTEN_ANEW: Mapping[str, Callable[[Any], bool]] = MappingProxyType({"Conv": conv.one_d})
"""ONNX op type -> whether a node's mapped IR value is a form the runtime runs faster than the node (a 1-D Conv as
the 2-D one): the exporter writes that form even where the program keeps the node unchanged (no origin record)"""


def _patterns(*tables: Mapping[str, Matcher | tuple[Matcher, ...]]) -> Mapping[str, tuple[Matcher, ...]]:
    joined: dict[str, tuple[Matcher, ...]] = {}
    for table in tables:
        for anchor, matchers in table.items():
            joined[anchor] = joined.get(anchor, ()) + (matchers if isinstance(matchers, tuple) else (matchers,))
    return MappingProxyType(joined)


PATTERNS: Mapping[str, tuple[Matcher, ...]] = _patterns(attention.PATTERNS, composite.PATTERNS, norm.PATTERNS,
                                                         rotary_part.PATTERNS, rotary.PATTERNS)
"""op type of an anchor node -> the matchers of composites that start there (:mod:`eqsat.ops.matching`), in this
order (a MatMul is an attention's before a linear's; a LayerNormalization an addnorm's before a layernorm's; an Add
a partial rotary's before a whole one's), joined
from the family modules' ``PATTERNS`` (one matcher per anchor, or a tuple tried in order); the first match that
holds is taken"""

IMPORT_ATTRS: Mapping[str, Callable[[tuple, Sequence[Shape]], tuple | None]] = MappingProxyType(
    dict(rotary_part.IMPORT_ATTRS))
"""IR op -> its matches' IR attributes given the operands' shapes (None: the match does not hold at these shapes),
where a matcher cannot read them off the nodes alone (:meth:`eqsat.onnx.patterns.Match.ir_attrs`)"""


def get(op: str) -> OpDef:
    """The entry of ``op``; raises KeyError naming the known operators."""
    try:
        return OPS[op]
    except KeyError:
        raise KeyError(f"unknown operator {op!r}; known: {', '.join(OPS)}") from None


def infer_shape(op: str, attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    """Output shape of ``op`` with ``attrs`` on operands of ``shapes``; raises ShapeError."""
    d = OPS.get(op)
    if d is None:
        raise fail(op, f"no shape rule (operands {tuple(shapes)}, {len(shapes)} inputs)")
    return d.shape(tuple(attrs), shapes)


def evaluate(op: str, attrs: tuple, args: list[np.ndarray], modulus: int | None = None) -> np.ndarray:
    """The value of ``op`` on operand values (float64, or modulo ``modulus``); raises NotEvaluable."""
    d = OPS.get(op)
    if d is None or d.numpy is None:
        raise NotEvaluable(f"no numpy semantics for {op}{tuple(attrs)}")
    out = d.numpy(tuple(attrs), args, modulus)
    if modulus is not None:
        out = np.mod(out, modulus)
    return np.asarray(out)


def shape_rules() -> list[str]:
    """Every entry's egglog shape rules (the ``analysis`` ruleset), in table order."""
    return [r for d in _ENTRIES for r in d.shape_rules()]


def describe() -> str:
    """The table as text: op, attributes, constructors, meaning."""
    rows = [f"{d.op:<10} {d.attrs:<36} {' '.join(c.name for c in d.ctors) or '-':<16} {d.doc}" for d in _ENTRIES]
    return "\n".join(rows)
