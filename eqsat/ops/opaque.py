"""``opaque``: any other ONNX operator, carried exactly (built by :func:`eqsat.ir.opaque`, shape given).

attrs ``(op_type, domain, attr_bytes, out_index, n_outputs, slots, implicit)``: ``attr_bytes`` the serialized
AttributeProtos (subgraphs included); ``slots`` per ONNX input position the index into the operands (-1: an
omitted optional input); ``implicit`` the outer-scope names its subgraphs read, fed by the trailing operands.
In the e-graph it is ``(Opaque id operands)``, ``id`` indexing the encoder's table of such nodes. It has no
numpy semantics (never folded, never in a rule) and is exported and timed by its own code paths
(``onnx.export._Exporter._opaque``, ``cost.measure._opaque_runner``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from .base import Ctor, OpDef, Shape, fail, volume


def attribute(node: Any, name: str) -> Any:
    """The value of an opaque node's ONNX attribute ``name`` (None where it has none)."""
    for raw in node.attrs[2]:
        attr = onnx.AttributeProto.FromString(raw)
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return None


def _shape(attrs: tuple, shapes: Sequence[Shape]) -> Shape:
    raise fail("opaque", f"no shape rule (operands {tuple(shapes)}, {len(shapes)} inputs)")


def _flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    return 4.0 * volume(out)


OPAQUE = OpDef("opaque", "any other ONNX operator, carried exactly", "(op_type, domain, attr_bytes, out_index, "
               "n_outputs, slots, implicit)", _shape, (Ctor("Opaque", "il"),), flops=_flops)
