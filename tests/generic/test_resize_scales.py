"""A Resize by constant scales typed by its arithmetic (eqsat.onnx.axes.symbolic's ``_by_scales``, eqsat.generic.strided's
``_scaled``): a whole-number scale of a size of the symbols is that multiple, any other scale of a known size an opaque
symbol whose size follows onnxruntime's rule; a depth head's features upsampled by 2 after a patch grid, then resized
to another feature map's size read off its Shape, is written without a run of the program. Oracles: onnxruntime's
output shapes, and the original in onnxruntime at sizes the program was not tuned at."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from run_records import written_without_runs

from eqsat.dims import Mono
from eqsat.generic import Original
from eqsat.generic.strided import opaque_at
from eqsat.generic.typed_original import typed
from eqsat.onnx.axes.symbolic import infer_node

OPSET = [helper.make_opsetid("", 17)]


def _scaled(scales: list[float], stride: int, mode: str = "asymmetric") -> onnx.ModelProto:
    """A Conv of kernel and stride ``stride`` over an image (a patch grid of ``floor(side / stride)``), then a Resize
    by ``scales``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, stride, stride)).astype(np.float32), "k"),
             numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "k"], ["grid"], kernel_shape=[stride, stride], strides=[stride, stride]),
             helper.make_node("Resize", ["grid", "", "scales"], ["up"], mode="linear",
                              coordinate_transformation_mode=mode)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("up", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def _sized_as_onnxruntime_sizes_it(model, side: int, value: str, sides: list[tuple[int, int]]) -> None:
    """``model`` (one input ``x``, ``[batch, 3, height, width]``) typed once at a square ``side``: ``value``'s spatial
    sizes are typed, and at each of ``sides`` their arithmetic gives onnxruntime's output sizes."""
    w = typed(Original(model, {"batch": 1, "height": side, "width": side}))
    shape = w.shapes[value]
    assert shape is not None and all(d is not None for d in shape[2:]), shape
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for h, wd in sides:
        at = opaque_at(w, {"batch": 1, "height": h, "width": wd})
        assert at is not None
        (got,) = sess.run(None, {"x": np.zeros((1, 3, h, wd), np.float32)})
        assert [int(d.value(at)) for d in shape[2:] if d is not None] == list(got.shape[2:]), (h, wd)


@pytest.mark.parametrize("scales, stride", [([1, 1, 2, 2], 1), ([1, 1, 2, 3], 4), ([1, 1, 1.5, 0.5], 4),
                                            ([1, 1, 0.25, 1.3], 3), ([1, 1, 2, 1], 16)])
def test_a_resize_by_constant_scales_is_sized_as_onnxruntime_sizes_it(scales, stride):
    _sized_as_onnxruntime_sizes_it(_scaled(scales, stride), 224, "up",
                                   [(224, 224), (stride, stride), (37, 61), (100, 17), (255, 256), (513, 31)])


def test_a_whole_number_scale_of_a_symbol_is_its_multiple_and_a_crop_is_left_unknown():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    h = Mono.symbol("h")
    shapes, types = {"x": [Mono.const(1), Mono.const(8), h, h]}, {"x": TensorProto.FLOAT, "scales": TensorProto.FLOAT}
    scales = numpy_helper.from_array(np.array([1, 1, 2, 0.5], np.float32), "scales")
    ((_, shape),) = infer_node(node, shapes, types, {"scales": scales}, OPSET).values()
    assert shape == [Mono.const(1), Mono.const(8), Mono.const(2) * h, None]
    crop = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], coordinate_transformation_mode="tf_crop_and_resize")
    roi = numpy_helper.from_array(np.array([0, 0, 0, 0, 1, 1, 0.5, 0.5], np.float32), "roi")
    ((_, shape),) = infer_node(crop, shapes, {**types, "roi": TensorProto.FLOAT}, {"scales": scales, "roi": roi},
                               OPSET).values()
    assert shape is None or shape[2] is None


def _depth_head() -> onnx.ModelProto:
    """A patch grid (``floor(side / 4)``), its features upsampled by 2 and by 2 again through Convs, each resized to
    the size of the map before it read off that map's Shape (``interpolate(x, size=skip.shape[2:])``, as a depth
    model's fusion stage and metric head write it), added to it."""
    rng = np.random.default_rng(3)
    w = {"patch": (8, 3, 4, 4), "c1": (8, 8, 3, 3), "c2": (8, 8, 3, 3)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n) for n, s in w.items()]
    inits += [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "two"),
              numpy_helper.from_array(np.array([2], np.int64), "a2"), numpy_helper.from_array(np.array([4], np.int64),
                                                                                           "a4")]
    nodes = [helper.make_node("Conv", ["x", "patch"], ["grid"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Resize", ["grid", "", "two"], ["up1"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Conv", ["up1", "c1"], ["f1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["f1", "", "two"], ["up2"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Conv", ["up2", "c2"], ["f2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["f2"], ["r2"]),
             helper.make_node("Shape", ["f1"], ["s1"]),
             helper.make_node("Slice", ["s1", "a2", "a4"], ["hw1"]),
             helper.make_node("Shape", ["r2"], ["s2"]),
             helper.make_node("Slice", ["s2", "a2", "a4"], ["hw2"]),
             helper.make_node("Shape", ["r2"], ["s3"], end=2),
             helper.make_node("Concat", ["s3", "hw1"], ["to1"], axis=0),
             helper.make_node("Resize", ["r2", "", "", "to1"], ["down"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Add", ["down", "f1"], ["mixed"]),
             helper.make_node("Shape", ["mixed"], ["s4"], end=2),
             helper.make_node("Concat", ["s4", "hw2"], ["to2"], axis=0),
             helper.make_node("Resize", ["mixed", "", "", "to2"], ["back"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Add", ["back", "r2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, "h", "w"])], inits)
    return helper.make_model(graph, opset_imports=OPSET)


def test_a_depth_heads_resized_features_are_written_without_a_run_of_the_program(monkeypatch):
    """Before, every Shape read after the first Resize was fitted from runs of the program's prefix, for every
    candidate (a ZoeDepth's metric head: 28 fits of 1,500-1,900 nodes each, about a minute a candidate)."""
    written_without_runs(monkeypatch, _depth_head(), (1, 3, 64, 64),
                         [(1, 3, 64, 64), (2, 3, 37, 50), (1, 3, 4, 4), (1, 3, 61, 19), (3, 3, 130, 66)], seed=2,
                         atol=1e-4)


@pytest.mark.parametrize("attrs", [{"strides": [2, 2]}, {"strides": [4, 4]}, {"strides": [2, 3], "pads": [1, 0, 1, 2]},
                                   {"strides": [2, 2], "output_padding": [1, 0], "dilations": [1, 2]}])
def test_a_transposed_convolutions_output_is_sized_as_onnxruntime_sizes_it(attrs):
    """A patch grid (``floor(side / 4)``) upsampled by a ConvTranspose (a depth model's neck), typed by onnx's rule."""
    rng = np.random.default_rng(1)
    kernel = attrs["strides"]
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 4, 4)).astype(np.float32), "k"),
             numpy_helper.from_array(rng.standard_normal((4, 2, *kernel)).astype(np.float32), "up")]
    nodes = [helper.make_node("Conv", ["x", "k"], ["grid"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("ConvTranspose", ["grid", "up"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    _sized_as_onnxruntime_sizes_it(helper.make_model(graph, opset_imports=OPSET), 64, "y",
                                   [(64, 64), (8, 8), (37, 61), (100, 17), (255, 130)])


def test_an_infinite_or_zero_scale_is_not_typed():
    """A scale onnxruntime would not size by (infinite, 0) is left to onnx: no size is made of it, and no error."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    shapes, types = {"x": [Mono.const(1), Mono.symbol("h")]}, {"x": TensorProto.FLOAT, "scales": TensorProto.FLOAT}
    for bad in (np.inf, 0.0):
        scales = numpy_helper.from_array(np.array([1, bad], np.float32), "scales")
        got = infer_node(node, shapes, types, {"scales": scales}, OPSET)
        assert not got or got["y"][1] is None or got["y"][1][1] is None
