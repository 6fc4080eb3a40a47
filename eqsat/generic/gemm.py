"""The linear layers of a shape-generic program (:mod:`eqsat.generic`) in the form onnxruntime gives them on
static shapes: a ``MatMul`` of a batch of rows ``x[..., K]`` by a constant ``W[K, N]`` followed by an ``Add`` of a
constant bias ``[N]`` is a ``Gemm`` (the bias added as the product is written) between two Reshapes, to
``[-1, K]`` and back to ``x``'s leading sizes and ``N``.

onnxruntime's MatMulAddFusion writes that form itself only where ``x``'s shape is constant
(:data:`eqsat.onnx.fusions.MATMUL_ADD`, whose predicates :func:`bias_add` reads); on a program with dynamic axes
the bias stays a separate pass over the output, which costs as much as a small product at a sequence of 128.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from eqsat.dims import Mono, product
from eqsat.onnx.fusions import row_bias, static_shape_needed
from eqsat.onnx.pool import array_of

from .sizes import SizeWriter

FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                    onnx.TensorProto.BFLOAT16})


def consumers(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    """value -> the main graph's nodes that read it."""
    out: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in dict.fromkeys(node.input):
            out.setdefault(name, []).append(node)
    return out


def bias_add(writer: SizeWriter, matmul: onnx.NodeProto, readers: list[onnx.NodeProto],
             outputs: set[str]) -> tuple[onnx.NodeProto, str] | None:
    """(the Add, its bias) where ``matmul`` (its ``readers``) is a linear layer of :func:`write_gemm`'s form."""
    if matmul.domain not in ("", "ai.onnx") or matmul.op_type != "MatMul" or len(readers) != 1 \
            or matmul.output[0] in outputs:
        return None
    add = readers[0]
    weight = writer.constants.get(matmul.input[1])
    if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or weight is None or len(weight.dims) != 2 \
            or weight.data_type not in FLOATS:
        return None
    bias = next((i for i in add.input if i != matmul.output[0]), None)
    tensor = writer.constants.get(bias or "")
    dims = writer.shapes.get(matmul.input[0])
    if bias is None or tensor is None or tensor.data_type != weight.data_type or dims is None or None in dims \
            or add.input[0] == add.input[1]:
        return None
    if not static_shape_needed(len(dims)):  # a 2-D x: onnxruntime fuses it on symbolic shapes too
        return None
    if not (row_bias(tensor.dims, weight.dims[1]) or all(d == 1 for d in tensor.dims)):  # or one number
        return None
    return add, bias


def write_gemm(writer: SizeWriter, matmul: onnx.NodeProto, add: onnx.NodeProto, bias: str) -> None:
    """``matmul`` and its ``add`` of ``bias`` written as Reshape, Gemm, Reshape (into :attr:`SizeWriter.nodes`),
    the last one computing ``add``'s output."""
    x, weight = matmul.input[0], writer.constants[matmul.input[1]]
    k, n = (int(d) for d in weight.dims)
    lead = [d for d in writer.shapes[x] or [] if d is not None][:-1]
    elem = writer.types.get(x, weight.data_type)
    tensor = writer.constants[bias]
    if len(tensor.dims) != 1:  # a bias of [1, ..., N] (or one number): Gemm takes it as [N]
        values = array_of(tensor).reshape(-1)
        bias = writer.const(np.broadcast_to(values, (n,)).copy(), "bias")
    rows = writer.fresh("rows")
    writer.nodes.append(helper.make_node("Reshape", [x, writer.const(np.array([-1, k], np.int64), "shape")], [rows],
                                         name=rows))
    product_ = writer.fresh("gemm")
    writer.nodes.append(helper.make_node("Gemm", [rows, matmul.input[1], bias], [product_], name=product_))
    sizes = [*lead, Mono.const(n)]
    loose = [j for j, d in enumerate(sizes) if not d.is_const]  # one symbolic size: -1, a constant target
    if len(loose) == 1:
        target = writer.vector([Mono.const(-1) if loose == [j] else d for j, d in enumerate(sizes)])
    else:  # the sizes, or -1 for one of them: whichever writes fewer nodes (the sequence length a mask or a
        # position table reads already, -1 for the batch: one Concat, where [batch, seq, N] takes a Shape more)
        options = [[Mono.const(-1) if j == k else d for j, d in enumerate(sizes)] for k in loose] + [sizes]
        target = writer.vector(min(options, key=writer.cost))
    out = add.output[0]
    writer.nodes.append(helper.make_node("Reshape", [product_, target], [out], name=writer.fresh("unrows")))
    count = product(lead)
    for name, shape in ((rows, [count, Mono.const(k)]), (product_, [count, Mono.const(n)]),
                        (out, [*lead, Mono.const(n)])):
        writer.types[name] = elem
        writer.shapes[name] = list[Mono | None](shape)


__all__ = ["bias_add", "consumers", "write_gemm"]
