"""The table of onnxruntime's fusions (:mod:`eqsat.onnx.fusions`) against onnxruntime itself, the oracle: for each
fusion, a small model of its fusable spelling runs as the fused kernel after onnxruntime's graph optimizations
(the optimized model it writes, one thread) and one of its defeating spelling does not; the predicates the
exporter, the cost model and the generic writer read agree with what onnxruntime fuses; and the operator table's
emitters write the spellings the table names."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat import ir
from eqsat.cost.base import OpKey
from eqsat.cost.ort import epilogue_producer, op_model, runtime_nodes
from eqsat.ir import Graph
from eqsat.onnx import export_model
from eqsat.onnx import fusions as fu
from eqsat.ops.composite import float_bits

LEVELS = {"extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
N = helper.make_node


@dataclass
class Model:
    """A one-graph model: nodes, inputs and outputs (name -> shape; a str dimension symbolic), initializers."""

    nodes: list[onnx.NodeProto]
    inputs: dict[str, list]
    outputs: dict[str, list]
    inits: dict[str, np.ndarray]

    def proto(self, opset: int = 17) -> onnx.ModelProto:
        vi = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in self.inputs.items()]
        vo = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in self.outputs.items()]
        inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in self.inits.items()]
        m = helper.make_model(helper.make_graph(self.nodes, "fusion", vi, vo, initializer=inits),
                              opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


def optimized(model: onnx.ModelProto, level: str = "extended") -> list[tuple[str, str]]:
    """(domain, op type) of each node of the model onnxruntime writes after its graph optimizations."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = LEVELS[level]
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return [(n.domain, n.op_type) for n in onnx.load(opts.optimized_model_filepath).graph.node]


def fused(kernels: list[tuple[str, str]], fusion: fu.Fusion) -> bool:
    """The fused kernel runs and the operator folded into it (the epilogue, or a prologue) does not run on its own."""
    return (fusion.domain, fusion.kernel) in kernels and ("", fusion.absorbed) not in kernels


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _scalar(v: float) -> np.ndarray:
    return np.array(v, np.float32)


# -- one fusable and one defeating spelling per fusion --------------------------------------------------------
def _matmul_add(bias: tuple[int, ...], x: tuple = (2, 4, 8)) -> Model:
    return Model([N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["y"])], {"x": list(x)},
                 {"y": [*x[:-1], 5]}, {"w": _w(8, 5), "b": _w(*bias)})


def _gemm_act(producer: str) -> Model:
    return Model([N(producer, ["x", "w"], ["m"]), N("Relu", ["m"], ["y"])], {"x": [4, 8]}, {"y": [4, 5]},
                 {"w": _w(8, 5)})


def _matmul_scale(factor: np.ndarray) -> Model:
    return Model([N("MatMul", ["a", "b"], ["m"]), N("Mul", ["m", "s"], ["y"])], {"a": [2, 4, 8], "b": [2, 8, 5]},
                 {"y": [2, 4, 5]}, {"s": factor})


def _matmul_transpose() -> Model:
    return Model([N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["y"])],
                 {"q": [1, 2, 4, 8], "k": [1, 2, 5, 8]}, {"y": [1, 2, 4, 5]}, {})


CONV_IN, CONV_OUT = {"x": [1, 4, 6, 6]}, {"y": [1, 8, 6, 6]}


def _conv_then(op: str, operand: tuple[int, ...] | None) -> Model:
    """Conv then ``op`` with a constant operand of that shape (None: a graph input of shape [1, 8, 1, 1])."""
    inits = {"w": _w(8, 4, 3, 3)}
    inputs = dict(CONV_IN)
    if operand is None:
        inputs["k"] = [1, 8, 1, 1]
    else:
        inits["k"] = _w(*operand, seed=1)
    return Model([N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N(op, ["c", "k"], ["y"])], inputs, CONV_OUT, inits)


def _conv_bn(constant: bool) -> Model:
    params = {n: np.abs(_w(8, seed=k)) + 0.5 for k, n in enumerate(("g", "beta", "mu", "var"))}
    inputs = dict(CONV_IN) if constant else {**CONV_IN, **{n: [8] for n in params}}
    return Model([N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("BatchNormalization", ["c", *params], ["y"])],
                 inputs, CONV_OUT, {"w": _w(8, 4, 3, 3), **(params if constant else {})})


def _conv_act(second_reader: bool) -> Model:
    nodes = [N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"])]
    outputs = dict(CONV_OUT)
    if second_reader:
        nodes.append(N("Neg", ["c"], ["z"]))
        outputs["z"] = [1, 8, 6, 6]
    return Model(nodes, CONV_IN, outputs, {"w": _w(8, 4, 3, 3)})


def _addnorm(add: str, b: list[int], a: tuple = (2, 4, 16)) -> Model:
    return Model([N(add, ["a", "b"], ["s"]), N("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1)],
                 {"a": list(a), "b": b}, {"y": list(a)}, {"g": _w(a[-1]), "beta": _w(a[-1], seed=1)})


X3 = {"x": [2, 4, 16]}
Y3 = {"y": [2, 4, 16]}


def _gelu_erf() -> Model:
    nodes = [N("Div", ["x", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["e1"]),
             N("Mul", ["x", "e1"], ["m"]), N("Mul", ["m", "half"], ["y"])]
    return Model(nodes, X3, Y3, {"sqrt2": _scalar(np.sqrt(2.0)), "one": _scalar(1.0), "half": _scalar(0.5)})


def _quick_gelu() -> Model:
    return Model([N("Sigmoid", ["x"], ["s"]), N("Mul", ["x", "s"], ["y"])], X3, Y3, {})


def _rmsnorm(reciprocal: bool) -> Model:
    nodes = [N("Pow", ["x", "two"], ["p"]), N("ReduceMean", ["p"], ["ms"], axes=[-1], keepdims=1),
             N("Add", ["ms", "eps"], ["a"]), N("Sqrt", ["a"], ["sq"])]
    nodes += [N("Reciprocal", ["sq"], ["r"]), N("Mul", ["x", "r"], ["n"])] if reciprocal else \
        [N("Div", ["x", "sq"], ["n"])]
    return Model(nodes + [N("Mul", ["g", "n"], ["y"])], X3, Y3,
                 {"two": _scalar(2.0), "eps": _scalar(1e-6), "g": _w(16)})


def _pad_conv(**conv: object) -> Model:
    """EfficientNet's stride-2 same padding as TorchScript writes it: a Pad of one row and column after the image
    (constant pads, zero fill), then the Conv (``conv``: its padding attributes)."""
    pads = numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads")
    nodes = [N("Constant", [], ["p"], value=pads), N("Pad", ["x", "p"], ["xp"], mode="constant"),
             N("Conv", ["xp", "w"], ["y"], strides=[2, 2], kernel_shape=[3, 3], **conv)]
    return Model(nodes, CONV_IN, {"y": [1, 8, 3, 3]}, {"w": _w(8, 4, 3, 3)})


SPELLINGS: dict[str, tuple[Callable[[], Model], Callable[[], Model] | None]] = {
    fu.MATMUL_ADD.transformer: (lambda: _matmul_add((5,)), lambda: _matmul_add((1, 1, 5))),
    fu.GEMM_ACTIVATION.transformer: (lambda: _gemm_act("Gemm"), lambda: _gemm_act("MatMul")),
    fu.MATMUL_SCALE.transformer: (lambda: _matmul_scale(_scalar(0.125)), lambda: _matmul_scale(_w(5))),
    fu.MATMUL_TRANSPOSE.transformer: (_matmul_transpose, None),
    fu.CONV_ADD.transformer: (lambda: _conv_then("Add", (1, 8, 1, 1)), lambda: _conv_then("Add", (1, 8, 6, 6))),
    fu.CONV_MUL.transformer: (lambda: _conv_then("Mul", (1, 8, 1, 1)), lambda: _conv_then("Mul", None)),
    fu.CONV_BN.transformer: (lambda: _conv_bn(True), lambda: _conv_bn(False)),
    fu.CONV_ACTIVATION.transformer: (lambda: _conv_act(False), lambda: _conv_act(True)),
    fu.SKIP_LAYER_NORM.transformer: (lambda: _addnorm("Add", [2, 4, 16]), lambda: _addnorm("Sum", [2, 4, 16])),
    fu.GELU.transformer: (_gelu_erf, None),
    fu.QUICK_GELU.transformer: (_quick_gelu, None),
    fu.SIMPLIFIED_LAYER_NORM.transformer: (lambda: _rmsnorm(False), lambda: _rmsnorm(True)),
    fu.PAD_CONV.transformer: (lambda: _pad_conv(pads=[0, 0, 0, 0]), lambda: _pad_conv(auto_pad="VALID")),
}
"""transformer -> (its fusable spelling, its defeating spelling or None where the table names none)"""


def test_every_fusion_has_its_spellings():
    assert set(SPELLINGS) == {f.transformer for f in fu.FUSIONS}
    assert len(fu.FUSIONS) == len(SPELLINGS)
    for f in fu.FUSIONS:
        assert (SPELLINGS[f.transformer][1] is None) == (f.defeat is None), f.transformer


@pytest.mark.parametrize("fusion", fu.FUSIONS, ids=lambda f: f.transformer)
def test_onnxruntime_fuses_the_spelling_and_not_the_defeating_one(fusion):
    fusable, defeating = SPELLINGS[fusion.transformer]
    kernels = optimized(fusable().proto())
    assert fused(kernels, fusion), kernels
    everything = optimized(fusable().proto(), "all")  # as the end-to-end run optimizes: the epilogue is gone too
    assert ("", fusion.absorbed) not in everything, everything
    if "Conv" not in fusion.spelling:  # at ORT_ENABLE_ALL the NCHWc transformer makes the fused Conv its own Conv
        assert fused(everything, fusion), everything
    if defeating is not None:
        for level in LEVELS:
            kernels = optimized(defeating().proto(), level)
            assert not fused(kernels, fusion) and ("", fusion.absorbed) in kernels, (level, kernels)


# -- the predicates against onnxruntime -----------------------------------------------------------------------
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_a_row_bias_written_stripped_is_what_matmul_add_fuses(rank):
    x = (2, 3, 4, 8)[-rank:]
    for bias in [(1,) * (rank - 1) + (5,), (1,) * rank, (1,) * (rank - 2) + (x[-2], 5)]:
        written = fu.stripped(bias)
        assert fused(optimized(_matmul_add(written, x).proto()), fu.MATMUL_ADD) == (
            fu.row_bias(bias, 5) or rank == 2 and len(written) == 2), (bias, written)
        if rank > 2 and fu.row_bias(bias, 5):  # as the IR holds it, with its leading 1-dimensions: not fused
            assert not fused(optimized(_matmul_add(bias, x).proto()), fu.MATMUL_ADD)


def test_matmul_add_needs_a_static_shape_above_rank_two():
    for rank, x in [(2, ["rows", 8]), (3, ["batch", "seq", 8])]:
        symbolic = fused(optimized(_matmul_add((5,), tuple(x)).proto()), fu.MATMUL_ADD)
        assert symbolic != fu.static_shape_needed(rank), rank
    assert fused(optimized(_matmul_add((5,), (2, 4, 8)).proto()), fu.MATMUL_ADD)


@pytest.mark.parametrize("operand", [(1, 8, 1, 1), (1, 8, 6, 6), (1, 1, 1, 1), (1, 1, 1, 6)])
def test_a_channel_operand_is_what_conv_add_and_conv_mul_fuse(operand):
    for op, fusion in (("Add", fu.CONV_ADD), ("Mul", fu.CONV_MUL)):
        kernels = optimized(_conv_then(op, operand).proto())
        assert fused(kernels, fusion) == fu.channel_operand(operand, CONV_OUT["y"]), (op, kernels)


@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "Tanh"])  # the IR's fused activations (eqsat.ops.base)
def test_the_activation_fusions(act):
    assert fu.activation_fusion("matmul", 3) is None and fu.activation_fusion("relu", 2) is None
    cases = [("Gemm", fu.activation_fusion("matmul", 2)), ("Conv", fu.activation_fusion("conv2d", 4)),
             ("MatMul", None)]  # an activation after a MatMul runs on its own
    for producer, fusion in cases:
        conv = producer == "Conv"
        x, out, w = ([1, 4, 6, 6], [1, 8, 6, 6], _w(8, 4, 3, 3)) if conv else ([4, 8], [4, 5], _w(8, 5))
        nodes = [N(producer, ["x", "w"], ["m"], **({"pads": [1, 1, 1, 1]} if conv else {})), N(act, ["m"], ["y"])]
        kernels = optimized(Model(nodes, {"x": x}, {"y": out}, {"w": w}).proto())
        if fusion is None:
            assert ("", act) in kernels, kernels
        else:
            assert (fusion.domain, fusion.kernel) in kernels and ("", act) not in kernels, kernels


EPILOGUES = [
    OpKey("ewadd", (), ((1, 16, 8, 8), (1, 16, 1, 1)), (1, 16, 8, 8)),
    OpKey("ewmul", (), ((1, 16, 1, 1), (1, 16, 8, 8)), (1, 16, 8, 8)),
    OpKey("batchnorm", (float_bits(1e-5),), ((1, 16, 8, 8), (16,), (16,), (16,), (16,)), (1, 16, 8, 8)),
    OpKey("ewadd", (), ((4, 32), (1, 32)), (4, 32)),
    OpKey("ewadd", (), ((2, 16, 32), (1, 1, 32)), (2, 16, 32)),
    OpKey("scale", (float_bits(0.125),), ((2, 4, 16, 16),), (2, 4, 16, 16)),
]


@pytest.mark.parametrize("key", EPILOGUES, ids=lambda k: f"{k.op}{k.in_shapes}")
def test_an_epilogue_runs_fused_into_the_producer_the_cost_model_times_it_after(key):
    found = fu.epilogue(key.op, key.in_shapes, key.out_shape)
    assert found is not None
    fusion = found[0]
    built = op_model(key, epilogue_producer(key))
    assert built is not None
    nodes = runtime_nodes(built[0])
    assert fusion.kernel in nodes and fusion.epilogue not in nodes, nodes


def test_no_epilogue_for_other_signatures():
    for key in [OpKey("ewadd", (), ((1, 16, 8, 8), (1, 16, 8, 8)), (1, 16, 8, 8)),  # a residual sum
                OpKey("ewmul", (), ((4, 32), (1, 32)), (4, 32)),  # a scale per column: no MatMul fuses it
                OpKey("ewadd", (), ((2, 3, 4, 32), (1, 1, 1, 32)), (2, 3, 4, 32)),  # no dense layer of rank 4
                OpKey("batchnorm", (float_bits(1e-5),), ((4, 16), (16,), (16,), (16,), (16,)), (4, 16))]:
        assert fu.epilogue(key.op, key.in_shapes, key.out_shape) is None, key
        assert epilogue_producer(key) is None


# -- what the operator table writes, and the exporter's forms -------------------------------------------------
EPS = float_bits(1e-5)
COMPOSITES = [
    (fu.SKIP_LAYER_NORM, OpKey("addnorm", (EPS,), ((2, 4, 16), (2, 4, 16), (16,), (16,)), (2, 4, 16))),
    (fu.GELU, OpKey("gelu", (0,), ((2, 4, 16),), (2, 4, 16))),
    (fu.QUICK_GELU, OpKey("silu", (), ((2, 4, 16),), (2, 4, 16))),
    (fu.SIMPLIFIED_LAYER_NORM, OpKey("rmsnorm", (EPS,), ((2, 4, 16), (16,)), (2, 4, 16))),
]


@pytest.mark.parametrize("fusion,key", COMPOSITES, ids=lambda v: getattr(v, "transformer", ""))
def test_the_operator_tables_emitters_write_the_fusable_spelling(fusion, key):
    assert fusion.ir == (key.op,)
    built = op_model(key)
    assert built is not None
    assert fusion.kernel in runtime_nodes(built[0])


def test_ewsum_writes_the_spelling_that_defeats_skip_layer_normalization():
    built = op_model(OpKey("ewsum", (), ((2, 4, 16), (2, 4, 16)), (2, 4, 16)))
    assert built is not None
    written = [n.op_type for n in built[0].graph.node]
    assert written == ["Sum"] and fu.SKIP_LAYER_NORM.defeat is not None and "Sum" in fu.SKIP_LAYER_NORM.defeat


def test_the_exporter_writes_a_dense_layers_bias_as_matmul_add_fuses_it():
    x = ir.input_("x", (2, 4, 8))
    w, b = ir.weight("w", (8, 5)), ir.weight("b", (1, 1, 5))
    flat = ir.make("matmul", [ir.make("reshape", [x], (8, 8)), w], (0,))
    y = ir.make("ewadd", [ir.make("reshape", [flat], (2, 4, 5)), b])
    model = export_model(Graph((x,), (y,), ("y",), {"w": _w(8, 5), "b": _w(1, 1, 5)}))
    assert fused(optimized(model, "all"), fu.MATMUL_ADD)


def test_the_exporter_writes_a_one_dimensional_bias_add():
    """(The conv-bias form read ``shape[1]`` of any ``ewadd`` with a constant before checking its rank.)"""
    x, c = ir.input_("x", (5,)), ir.weight("c", (5,))
    model = export_model(Graph((x,), (ir.make("ewadd", [x, c]),), ("y",), {"c": _w(5)}))
    assert [n.op_type for n in model.graph.node] == ["Add"]


def test_the_exporter_writes_a_users_valid_conv_with_explicit_pads_so_a_pad_before_it_is_fused():
    """A model imported and written back (its nodes the user's own, verbatim but for this) computes what the user's
    does (onnxruntime on both, the oracle), and runs without the Pad where the user's runs it."""
    from eqsat.onnx import import_model

    users = _pad_conv(auto_pad="VALID").proto()
    written = export_model(import_model(users))
    conv = next(n for n in written.graph.node if n.op_type == "Conv")
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    assert "auto_pad" not in attrs and attrs["pads"] == [0, 0, 0, 0] and attrs["strides"] == [2, 2]
    assert ("", "Pad") in optimized(users, "all") and ("", "Pad") not in optimized(written, "all")
    x = np.random.default_rng(4).standard_normal((1, 4, 6, 6)).astype(np.float32)
    x[0, 0, 0, 0], x[0, 1, 5, 5] = np.nan, -np.inf  # the padded edge's neighbours included
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
           for m in (users, written)]
    np.testing.assert_array_equal(run[0], run[1])
