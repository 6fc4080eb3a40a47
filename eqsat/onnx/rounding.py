"""Where a model's computation rounds coarsely: through a quantizer (its activations quantized at run time, weights
of a few bits) or through a float type narrower than float32.

In such a model a legitimate reorder (a sum taken in another order before a quantizer, a kernel that accumulates
in another precision) moves a value across a rounding step, and an output by as much as that step amplified by the
layers after it: a per-channel int8 LLaMA's logits moved by 1.4e-2 under a program whose every rule holds on real
numbers. A candidate that differs there is left out, not taken as a rule's error (:func:`eqsat.app.candidates.verify_phase`).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from .subgraphs import subgraphs

ROUNDING_OPERATORS = frozenset({
    "DynamicQuantizeLinear", "QuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulNBits", "MatMulBnb4", "QGemm", "QAttention",
    "DynamicQuantizeLSTM", "QLinearAdd", "QLinearMul", "GatherBlockQuantized",
})
"""operators (standard and onnxruntime's contrib domain) that round their operands to a few bits"""

NARROW_FLOATS = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
                           TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ})


def _narrow(type_proto: onnx.TypeProto) -> bool:
    return type_proto.HasField("tensor_type") and type_proto.tensor_type.elem_type in NARROW_FLOATS


def rounding(model: onnx.ModelProto) -> str:
    """What ``model``'s computation rounds through (an operator of :data:`ROUNDING_OPERATORS`, a Cast to a narrow
    float, or narrow inputs or outputs), "" where it computes in float32 or wider throughout: its weights stored
    narrow and cast up to float32 (a float32 computation) do not count."""
    g = model.graph
    if any(_narrow(v.type) for v in (*g.input, *g.output)):  # (weights stored narrow and cast up: not so)
        return "float16 or narrower values"
    stack = [g]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            if node.op_type in ROUNDING_OPERATORS:
                return node.op_type
            if node.op_type == "Cast" and any(a.name == "to" and a.i in NARROW_FLOATS for a in node.attribute):
                return "a Cast to float16 or narrower"
            stack.extend(subgraphs(node))
    return ""


__all__ = ["NARROW_FLOATS", "ROUNDING_OPERATORS", "rounding"]
