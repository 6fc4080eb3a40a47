"""Small ONNX models built inline for the tests (onnx.helper and torch exports)."""

from __future__ import annotations

import collections

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _w(rng, name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "test", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def residual_block(seed=0, batch=1):
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, 12, 12])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    return model(nodes, [x], [y], [_w(rng, "w1", 8, 8, 3, 3), _w(rng, "b1", 8), _w(rng, "w2", 8, 8, 3, 3)])


def mlp(seed=0):
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Tanh", ["h"], ["t"]),
        helper.make_node("MatMul", ["t", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["y"]),
    ]
    return model(nodes, [x], [y], [_w(rng, "w1", 32, 16), _w(rng, "b1", 32), _w(rng, "w2", 32, 10), _w(rng, "b2", 10)])


def attention(seed=0, seq=8, d=16, heads=2):
    """Q/K/V projections with biases on a [1, S, D] input, softmax attention, layer norm."""
    rng = np.random.default_rng(seed)
    hd = d // heads
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])
    inits = [_w(rng, n, d, d) for n in ("wq", "wk", "wv", "wo")] + [_w(rng, n, d) for n in ("bq", "bk", "bv")]
    inits += [numpy_helper.from_array(np.array([1, seq, heads, hd], dtype=np.int64), "split_shape"),
              numpy_helper.from_array(np.array([1, seq, d], dtype=np.int64), "merge_shape"),
              numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
              numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
              numpy_helper.from_array(np.array(1.0 / np.sqrt(hd), np.float32), "scale")]
    nodes = []
    for p in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}m"]),
                  helper.make_node("Add", [f"{p}m", f"b{p}"], [f"{p}b"]),
                  helper.make_node("Reshape", [f"{p}b", "split_shape"], [f"{p}r"]),
                  helper.make_node("Transpose", [f"{p}r"], [f"{p}t"], perm=[0, 2, 1, 3] if p != "k" else [0, 2, 3, 1])]
    nodes += [helper.make_node("MatMul", ["qt", "kt"], ["logits"]),
              helper.make_node("Mul", ["logits", "scale"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "vt"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx_m"]),
              helper.make_node("MatMul", ["ctx_m", "wo"], ["o"]),
              helper.make_node("Add", ["o", "x"], ["res"]),
              helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1)]
    return model(nodes, [x], [y], inits)


def torch_export(module, example, path, dynamic_batch=False):
    import torch

    kwargs = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {"x": {0: "batch"}}
    torch.onnx.export(module.eval(), (example,), path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False, **kwargs)
    return onnx.load(path)


def ort_kernels(m: onnx.ModelProto) -> collections.Counter[str]:
    """The operators onnxruntime runs for ``m`` after its own optimizations (ORT_ENABLE_ALL, one thread), by type."""
    import os
    import tempfile

    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return collections.Counter(n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node)


def waveform_model(kernel: int, stride: int = 2) -> onnx.ModelProto:
    """An audio front-end: samples [batch, samples] -> two strided 1-D convolutions (the first ``kernel`` wide,
    so the model refuses fewer samples than that; the second of ``stride``) -> Relu."""
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 1, kernel)).astype(np.float32) / kernel ** 0.5, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3)).astype(np.float32), "w2")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Unsqueeze", ["samples", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "w1"], ["c1"], strides=[5]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[stride]),
             helper.make_node("Relu", ["c2"], ["y"])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "frames"])
    return helper.make_model(helper.make_graph(nodes, "wave", [x], [y], [w1, w2, axes]),
                             opset_imports=[helper.make_opsetid("", 17)])


def windowed_rows(kernel: int, windows: list[onnx.NodeProto]) -> onnx.ModelProto:
    """samples ``x`` [batch, 1, samples] -> ``windows`` (a Conv of weight ``k``, [4, 1, ``kernel``], reading ``x``,
    and what follows it, the last writing ``w``) -> Relu -> ``[batch, frames, 4]`` -> rows through a MatMul and a
    Softmax over the rows (no rewrite removes the Reshapes) -> back to ``[batch, frames, 4]`` through the Shape, as
    exporters write it."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 1, kernel)) * 0.3).astype(np.float32), "k"),
             numpy_helper.from_array((rng.standard_normal((4, 4)) * 0.3).astype(np.float32), "m")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("rows", [-1, 4]), ("i0", [0]), ("i1", [1]), ("c", [4]))]
    nodes = [*windows,
             helper.make_node("Relu", ["w"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "rows"], ["flat"]),
             helper.make_node("MatMul", ["flat", "m"], ["mm0"]),
             helper.make_node("Softmax", ["mm0"], ["mm"], axis=0),
             helper.make_node("Shape", ["t"], ["ts"]),
             helper.make_node("Gather", ["ts", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["ts", "i1"], ["f"], axis=0),
             helper.make_node("Concat", ["b", "f", "c"], ["back"], axis=0),
             helper.make_node("Reshape", ["mm", "back"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, "samples"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


AUDIO_HEADS, AUDIO_WIDTH = 2, 8


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def audio_attention(static: bool, names: str = "", halved: bool = False) -> onnx.ModelProto:
    """samples[batch, length] -> a strided Conv to [batch, 8, frames] -> [frames, batch, 8] -> heads folded with the
    batch ``[frames, 2*batch, 4]`` (scaled) -> rows ``[frames*batch, 8]`` -> x W + b -> ``[frames, batch, 8]`` ->
    ``[batch, frames, 8]``: a WavLM attention's reshapes. ``static``: the program at the representative sizes
    (constant targets, named ``names`` + the original's names: another name is a target the original does not
    compute, a layer replayed from the first one's program); else the original, its targets computed from the
    shapes. ``halved``: the samples taken one in two (a Slice by a step of 2) before the Conv, a size the writer
    fits from runs (the Conv's alone it types by its arithmetic: eqsat.generic.strided)."""
    rng = np.random.default_rng(5)
    frames = ((32 if halved else 64) - 10) // 5 + 1  # at the representative sizes, a batch of 1 and 64 samples
    b = 1
    inits = [numpy_helper.from_array(rng.standard_normal((AUDIO_WIDTH, 1, 10)).astype(np.float32), "conv_w"),
             numpy_helper.from_array(rng.standard_normal((AUDIO_WIDTH, AUDIO_WIDTH)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(AUDIO_WIDTH).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"), _ints("axes", 1)]
    if halved:
        inits += [_ints("s_start", 0), _ints("s_end", 2**62), _ints("s_axis", 1), _ints("s_step", 2)]
    if static:
        inits += [_ints(names + "heads_t", frames, AUDIO_HEADS * b, AUDIO_WIDTH // AUDIO_HEADS), _ints(names + "rows_t", frames * b, AUDIO_WIDTH),
                  _ints(names + "back_t", frames, b, AUDIO_WIDTH)]
        sizes: list[onnx.NodeProto] = []
    else:
        inits += [_ints("c_heads", AUDIO_HEADS), _ints("c_head", AUDIO_WIDTH // AUDIO_HEADS), _ints("c_width", AUDIO_WIDTH)]
        sizes = [helper.make_node("Shape", ["t"], ["f1"], start=0, end=1),
                 helper.make_node("Shape", ["t"], ["b1"], start=1, end=2),
                 helper.make_node("Mul", ["b1", "c_heads"], ["bh"]),
                 helper.make_node("Concat", ["f1", "bh", "c_head"], ["heads_t"], axis=0),
                 helper.make_node("Mul", ["f1", "b1"], ["fb"]),
                 helper.make_node("Concat", ["fb", "c_width"], ["rows_t"], axis=0),
                 helper.make_node("Concat", ["f1", "b1", "c_width"], ["back_t"], axis=0)]
    halving = [helper.make_node("Slice", ["samples", "s_start", "s_end", "s_axis", "s_step"], ["every"])] if halved else []
    nodes = [*halving,
             helper.make_node("Unsqueeze", ["every" if halved else "samples", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "conv_w"], ["c"], strides=[5]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1]),
             *sizes,
             helper.make_node("Reshape", ["t", names + "heads_t" if static else "heads_t"], ["h"]),
             helper.make_node("Mul", ["h", "half"], ["hs"]),
             helper.make_node("Reshape", ["hs", names + "rows_t" if static else "rows_t"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["prod"]),
             helper.make_node("Add", ["prod", "bias"], ["lin"]),
             helper.make_node("Reshape", ["lin", names + "back_t" if static else "back_t"], ["back"]),
             helper.make_node("Transpose", ["back"], ["y"], perm=[1, 0, 2])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", AUDIO_WIDTH])
    return helper.make_model(helper.make_graph(nodes, "front", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _biased_attention() -> list[onnx.NodeProto]:
    """``heads = softmax(scores + 0.1 * (i - j)) @ q`` over positions ``Range(frames)`` (a relative position bias;
    the names ``start``, ``step``, ``zero``, ``axes`` and ``tenth`` are the builder's constants)."""
    return [helper.make_node("Range", ["start", "frames", "step"], ["positions"]),
            helper.make_node("Unsqueeze", ["positions", "zero"], ["row"]),
            helper.make_node("Unsqueeze", ["positions", "axes"], ["column"]),
            helper.make_node("Sub", ["row", "column"], ["offsets"]),
            helper.make_node("Cast", ["offsets"], ["offsets_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["offsets_f", "tenth"], ["bias"]),
            helper.make_node("Add", ["scores", "bias"], ["biased"]),
            helper.make_node("Softmax", ["biased"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "q"], ["heads"])]


def audio_residual_rows(static: bool) -> onnx.ModelProto:
    """samples[batch, length] -> a strided Conv -> ``x`` [batch, frames, 8] -> attention over the frames (2 heads)
    with a relative position bias over ``Range(frames)`` -> ``(attention + x) @ W`` -> ``[batch, frames, 8]``.
    ``static``: the program as a search writes it at the representative sizes (a batch of 1, 64 samples: 11
    frames): both summands flattened to rows ``[11, 8]`` by constant targets the original does not compute, summed
    (``Sum``), the product reshaped back by the constant ``[1, 11, 8]``; else the original (``0`` and ``-1``
    targets). The rows' two summands hold the frames under two readings (the convolution's, the bias's), so the
    sum's shape is unknown to shape inference and fitted off runs."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 1, 10)).astype(np.float32), "conv_w"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.1, np.float32), "tenth"), _ints("axes", 1), _ints("zero", 0),
             numpy_helper.from_array(np.array(0, np.int64), "start"), numpy_helper.from_array(np.array(1, np.int64), "step"),
             numpy_helper.from_array(np.array(1, np.int64), "one")]
    if static:
        inits += [_ints("k_heads", 1, 11, 2, 4), _ints("k_rows", 11, 8), _ints("k_back", 1, 11, 8)]
    else:
        inits += [_ints("c_heads", 0, -1, 2, 4), _ints("c_merge", 0, -1, 8)]
    nodes = [helper.make_node("Unsqueeze", ["samples", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "conv_w"], ["c"], strides=[5]),
             helper.make_node("Transpose", ["c"], ["x"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["x", "k_heads" if static else "c_heads"], ["h4"]),
             helper.make_node("Transpose", ["h4"], ["q"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["h4"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Shape", ["x"], ["f1"], start=1, end=2),
             helper.make_node("Squeeze", ["f1"], ["frames"]),
             *_biased_attention(),
             helper.make_node("Transpose", ["heads"], ["back_heads"], perm=[0, 2, 1, 3])]
    if static:
        nodes += [helper.make_node("Reshape", ["back_heads", "k_rows"], ["a_rows"]),
                  helper.make_node("Reshape", ["x", "k_rows"], ["x_rows"]),
                  helper.make_node("Sum", ["a_rows", "x_rows"], ["s"]),
                  helper.make_node("MatMul", ["s", "w"], ["p2"]),
                  helper.make_node("Reshape", ["p2", "k_back"], ["y"])]
    else:
        nodes += [helper.make_node("Reshape", ["back_heads", "c_merge"], ["attn"]),
                  helper.make_node("Add", ["attn", "x"], ["s"]),
                  helper.make_node("MatMul", ["s", "w"], ["y"])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 8])
    return helper.make_model(helper.make_graph(nodes, "rows", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])


def audio_position_bias(frames_from: str = "shape") -> onnx.ModelProto:
    """samples[batch, length] -> a strided Conv (10 wide, stride 5) -> time first ``t`` [frames, batch, 8] ->
    attention over the frames with 2 heads folded with the batch (``[frames, 2*batch, 4]``), plus a relative
    position bias over the frames (``Range(frames)``, differences of positions: WavLM's) -> rows
    ``[frames*batch, 8]`` x W -> ``[batch, frames, 8]``. The targets are computed from the shapes; at 64 samples
    there are 11 frames. ``frames_from``: the bias's frames read off ``t``'s shape (``"shape"``: TorchScript's
    WavLM), or computed from the samples as the convolution does, ``(length - 10) // 5 + 1`` (``"samples"``: the
    dynamo exporter's)."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 1, 10)).astype(np.float32), "conv_w"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.1, np.float32), "tenth"), _ints("axes", 1), _ints("zero", 0),
             _ints("c_heads", 2), _ints("c_head", 4), _ints("c_width", 8),
             numpy_helper.from_array(np.array(0, np.int64), "start"),
             numpy_helper.from_array(np.array(1, np.int64), "step"),
             numpy_helper.from_array(np.array(0, np.int64), "first"),
             numpy_helper.from_array(np.array(10, np.int64), "c_kernel"),
             numpy_helper.from_array(np.array(5, np.int64), "c_stride")]
    nodes = [helper.make_node("Unsqueeze", ["samples", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "conv_w"], ["c"], strides=[5]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Shape", ["t"], ["f1"], start=0, end=1),
             helper.make_node("Shape", ["t"], ["b1"], start=1, end=2),
             helper.make_node("Mul", ["b1", "c_heads"], ["bh"]),
             helper.make_node("Concat", ["f1", "bh", "c_head"], ["heads_t"], axis=0),
             helper.make_node("Reshape", ["t", "heads_t"], ["h"]),
             helper.make_node("Transpose", ["h"], ["q"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["h"], ["kt"], perm=[1, 2, 0]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             *([helper.make_node("Shape", ["t"], ["shape_t"]),
                helper.make_node("Gather", ["shape_t", "first"], ["frames"], axis=0)] if frames_from == "shape" else
               [helper.make_node("Shape", ["samples"], ["length1"], start=1, end=2),
                helper.make_node("Squeeze", ["length1"], ["length"]),
                helper.make_node("Sub", ["length", "c_kernel"], ["span"]),
                helper.make_node("Div", ["span", "c_stride"], ["steps"]),
                helper.make_node("Add", ["steps", "step"], ["frames"])]),
             *_biased_attention(),
             helper.make_node("Transpose", ["heads"], ["back_heads"], perm=[1, 0, 2]),
             helper.make_node("Mul", ["f1", "b1"], ["fb"]),
             helper.make_node("Concat", ["fb", "c_width"], ["rows_t"], axis=0),
             helper.make_node("Reshape", ["back_heads", "rows_t"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["lin"]),
             helper.make_node("Concat", ["f1", "b1", "c_width"], ["back_t"], axis=0),
             helper.make_node("Reshape", ["lin", "back_t"], ["back"]),
             helper.make_node("Transpose", ["back"], ["y"], perm=[1, 0, 2])]
    x = helper.make_tensor_value_info("samples", TensorProto.FLOAT, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 8])
    return helper.make_model(helper.make_graph(nodes, "bias", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])
