"""onnxruntime's CPU graph fusions that eqsat relies on, as data and small predicates: onnxruntime 1.32
(``onnxruntime.__version__`` of the venv these were checked with). Nothing here imports onnxruntime;
``tests/onnx/test_fusions.py`` checks every entry against it (the fusable spelling runs as the fused kernel, the
defeating one does not), so an onnxruntime that fuses otherwise fails that test, not a timing.

Each :class:`Fusion` names onnxruntime's transformer, the ONNX spelling it fuses (producer first, its epilogue
last), the IR operators that spelling writes, the fused kernel, the input constraints, and the spelling that
defeats it. The predicates state the constraints the code reads:

* :func:`stripped`: the shape a broadcast constant is written in (without its leading 1-dimensions): a
  ``[1, 1, N]`` bias as ``[N]``, the only one :data:`MATMUL_ADD` takes at rank > 2. Read by
  :mod:`eqsat.onnx.forms` (``_with_constant``) and :func:`eqsat.cost.ort.written_shape`.
* :func:`row_bias`: a bias along the last axis only (:data:`MATMUL_ADD`'s). Read by :mod:`eqsat.onnx.forms`
  (the bias of a split part, moved before the Split), :mod:`eqsat.generic.gemm` (``bias_add``) and
  :func:`epilogue`.
* :func:`channel_operand`: a ``[1, C, 1, 1]`` operand (:data:`CONV_ADD`, :data:`CONV_MUL`). Read by
  :mod:`eqsat.onnx.forms` (the ``conv_bias`` form) and :func:`epilogue`.
* :func:`static_shape_needed`: :data:`MATMUL_ADD` at rank > 2 only on static shapes. Read by
  :mod:`eqsat.generic.gemm`, which writes Reshape + Gemm + Reshape itself where the shapes are symbolic.
* :func:`activation_fusion`: the fusion that takes an IR operator's fused activation (``act``). Read by
  :mod:`eqsat.onnx.forms` (the ``gemm`` form: a 2-D matmul with an activation written as Gemm).
* :func:`epilogue`: which producer an epilogue's shape signature fuses into. Read by
  :func:`eqsat.cost.ort.epilogue_producer` (an epilogue is timed after its producer).
* :func:`valid_as_pads`: a Conv or pooling node's ``auto_pad`` VALID as explicit zero pads, the form
  :data:`PAD_CONV` folds a preceding Pad into. Read by :mod:`eqsat.onnx.export` for the user's nodes it writes
  back.
* :data:`UNFUSED`: the element-wise IR operators written in a spelling that fuses with no neighbour. Read by
  :func:`eqsat.app.selection.same_program`.
* :data:`BIAS_PRODUCERS`: the producers whose bias :data:`MATMUL_ADD` and :data:`CONV_ADD` fold in. Read by
  :mod:`eqsat.onnx.neutral` (``DENSE``: whose zero bias it drops).

The rules between a fused kernel and a spelling that stays unfused (``rules/ours/spelling.py``: ``addnorm``, which
:data:`SKIP_LAYER_NORM` fuses, and ``layernorm(ewsum(a, b))``, whose ``Sum`` defeats it) relate operators of the
table; the operator table's emitters (:mod:`eqsat.ops`, below this layer: their docstrings name the entries) write
them in these spellings, and ``tests/onnx/test_fusions.py`` checks each emitter against the table and onnxruntime
(``addnorm`` fused, ``ewsum`` the defeating ``Sum``). Where the fusion's input constraints do not hold (an
``addnorm`` of rank 2), onnxruntime runs both sides unfused, and the operator timing prices them so.

Not fused on the CPU, so not here: tanh-GELU (GPT-2's form), the rotary embedding, an activation after a MatMul.

>>> stripped((1, 1, 768)), stripped((1, 1, 1)), stripped((1, 8, 1, 1))
((768,), (), (8, 1, 1))
>>> fusion, operand = epilogue("ewadd", [(4, 32), (1, 32)], (4, 32))
>>> fusion.kernel, fusion.ir[0], operand
('Gemm', 'matmul', 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Shape = Sequence[int]

MS = "com.microsoft"


@dataclass(frozen=True)
class Fusion:
    """One fusion of onnxruntime's CPU graph optimizer (at ORT_ENABLE_ALL, as the end-to-end run optimizes)."""

    transformer: str
    """onnxruntime's graph transformer that performs it"""
    spelling: tuple[str, ...]
    """the ONNX op types it fuses, in order: the producer first, its epilogue last"""
    ir: tuple[str, ...]
    """the IR operators that spelling is written from (producer, epilogue; one for a composite)"""
    kernel: str
    """the op type of the fused kernel onnxruntime runs"""
    domain: str
    """the fused kernel's domain ("" the standard one)"""
    needs: str
    """the input constraints under which it fuses"""
    defeat: str | None
    """a spelling it leaves unfused: the same values written otherwise, or a constraint broken (None: none that
    eqsat writes or meets)"""
    prologue: bool = False
    """the first operator of the spelling is the one folded into the next (a Pad into the Conv that reads it), not
    the last into the one before"""

    @property
    def producer(self) -> str:
        return self.spelling[0]

    @property
    def epilogue(self) -> str:
        return self.spelling[-1]

    @property
    def absorbed(self) -> str:
        """The op type that no longer runs on its own once fused."""
        return self.producer if self.prologue else self.epilogue


MATMUL_ADD = Fusion(
    "MatMulAddFusion", ("MatMul", "Add"), ("matmul", "ewadd"), "Gemm", "",
    "a bias along the last axis only (row_bias): [N] at any rank of A, A of rank > 2 with a static shape (it "
    "writes Reshape + Gemm + Reshape); for a 2-D product also [1, N], [M, 1] and [M, N]; neither the weight nor "
    "the bias need be constant",
    "at rank > 2 the bias with its leading 1-dimensions ([1, 1, N], as the IR holds it), or A of a symbolic shape")
GEMM_ACTIVATION = Fusion(
    "GemmActivationFusion", ("Gemm", "Relu"), ("matmul",), "FusedGemm", MS,
    "an activation (Relu, Sigmoid, Tanh, LeakyRelu, ...) that alone reads a Gemm",
    "MatMul then the activation: none fuses into a MatMul")
MATMUL_SCALE = Fusion(
    "MatMulScaleFusion", ("MatMul", "Mul"), ("matmul", "scale"), "FusedMatMul", MS,
    "a constant scalar factor ([] or [1]): FusedMatMul's alpha",
    "a factor per column, or a computed one")
MATMUL_TRANSPOSE = Fusion(
    "MatMulTransposeFusion", ("Transpose", "MatMul"), ("transpose", "matmul"), "FusedMatMul", MS,
    "a Transpose of an operand's last two axes (attention's keys): FusedMatMul's transB",
    None)
CONV_ADD = Fusion(
    "ConvAddFusion", ("Conv", "Add"), ("conv2d", "ewadd"), "Conv", "",
    "a constant [1, C, 1, 1] (or [C, 1, 1]) operand (channel_operand): the Conv's bias",
    "the operand computed, or of another shape ([1, C, H, W])")
CONV_MUL = Fusion(
    "ConvMulFusion", ("Conv", "Mul"), ("conv2d", "ewmul"), "Conv", "",
    "a constant [1, C, 1, 1] (or [C, 1, 1]) operand (channel_operand): folded into the weights",
    "the operand computed, or of another shape ([1, C, H, W])")
CONV_BN = Fusion(
    "ConvBNFusion", ("Conv", "BatchNormalization"), ("conv2d", "batchnorm"), "Conv", "",
    "constant scale, bias, mean and variance: folded into the weights and bias",
    "the parameters computed")
CONV_ACTIVATION = Fusion(
    "ConvActivationFusion", ("Conv", "Relu"), ("conv2d",), "FusedConv", MS,
    "Relu, Sigmoid or Tanh that alone reads the Conv (at ORT_ENABLE_ALL the NCHWc Conv takes it instead)",
    "another reader of the Conv's output")
SKIP_LAYER_NORM = Fusion(
    "SkipLayerNormFusion", ("Add", "LayerNormalization"), ("addnorm",), "SkipLayerNormalization", MS,
    "the Add's operands 3-D and of one shape (known to onnxruntime: the generic writer annotates it), the Add read "
    "by the LayerNormalization alone",
    "Sum (ewsum), or an operand broadcast ([1, S, H], [H]), or another rank")
GELU = Fusion(
    "GeluFusion", ("Div", "Erf", "Add", "Mul", "Mul"), ("gelu",), "Gelu", MS,
    "the erf form 0.5 * x * (1 + Erf(x / sqrt 2)) with scalar constants (opset < 20; from 20 the standard Gelu)",
    None)
QUICK_GELU = Fusion(
    "QuickGeluFusion", ("Sigmoid", "Mul"), ("silu",), "QuickGelu", MS,
    "x * Sigmoid(x)",
    None)
SIMPLIFIED_LAYER_NORM = Fusion(
    "SimplifiedLayerNormFusion", ("Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul"), ("rmsnorm",),
    "SimplifiedLayerNormalization", "",
    "gamma * (x / Sqrt(ReduceMean(Pow(x, 2)) + eps)) over the last axis, x of rank > 1 (on a 1-D x the fusion "
    "writes a graph the session refuses)",
    "x * Reciprocal(Sqrt(..)) (LLaMA's form)")

PAD_CONV = Fusion(
    "PadFusion", ("Pad", "Conv"), ("Pad", "conv2d"), "Conv", "",
    "a constant-mode Pad of constant pads (spatial axes only, none negative) and a zero (or no) fill value, read by "
    "the Conv (or AveragePool, MaxPool) alone, whose auto_pad is NOTSET: the pads added to the Conv's own (the "
    "exporter writes a user's auto_pad VALID as explicit zero pads: :func:`valid_as_pads`)",
    "the Conv's auto_pad VALID (TorchScript's padding='valid' after EfficientNet's asymmetric same-padding Pad): the "
    "Pad runs, and at ORT_ENABLE_ALL its activation is reordered out of and back into the blocked layout around it",
    prologue=True)

FUSIONS: tuple[Fusion, ...] = (MATMUL_ADD, GEMM_ACTIVATION, MATMUL_SCALE, MATMUL_TRANSPOSE, CONV_ADD, CONV_MUL,
                               CONV_BN, CONV_ACTIVATION, SKIP_LAYER_NORM, GELU, QUICK_GELU, SIMPLIFIED_LAYER_NORM,
                               PAD_CONV)
"""every fusion eqsat relies on"""

UNFUSED = frozenset({"ewsum"})
"""the element-wise IR operators whose spelling onnxruntime fuses with no neighbour: ``ewsum``, written as ONNX Sum,
the spelling that defeats :data:`SKIP_LAYER_NORM`. On operands of its own shape one is the same kernel on the same
data whether a Reshape stands before or after it (Add, Mul, Gelu are not: a Reshape between one and its producer or
consumer decides a fusion)"""

BIAS_PRODUCERS = (MATMUL_ADD.producer, MATMUL_ADD.kernel, CONV_ADD.producer)
"""the ONNX producers a bias folds into (MatMul and Gemm, whose ``C`` it is: :data:`MATMUL_ADD`; Conv:
:data:`CONV_ADD`): a zero bias after one is dropped with no fusion lost, where a bias added to anything else may be
part of a form onnxruntime fuses (a LayerNorm's zero shift, an RMSNorm's unit scale)"""

DENSE_RANKS = (2, 3)
"""the ranks of the IR's dense layers ([rows, N], [B, S, N]): the bias signatures :func:`epilogue` reads as
:data:`MATMUL_ADD`'s"""


def stripped(shape: Shape) -> tuple[int, ...]:
    """``shape`` without its leading 1-dimensions, ``()`` where it holds one value: how a constant that broadcasts
    against the other operand is written (a ``[1, 1, N]`` bias as ``[N]``, which :data:`MATMUL_ADD` takes)."""
    out = tuple(shape)
    if all(d == 1 for d in out):
        return ()
    while len(out) > 1 and out[0] == 1:
        out = out[1:]
    return out


def row_bias(shape: Shape, n: int) -> bool:
    """A bias along the last axis only: ``[..., 1, n]`` (any 1-dimensions before ``n``), what :data:`MATMUL_ADD`
    adds to a product of ``n`` columns once written :func:`stripped`."""
    s = tuple(shape)
    return len(s) >= 1 and s[-1] == n and all(d == 1 for d in s[:-1])


def channel_operand(shape: Shape, out: Shape) -> bool:
    """A ``[1, C, 1, 1]`` operand against a 4-D ``[N, C, H, W]`` value: one number per channel, what
    :data:`CONV_ADD` and :data:`CONV_MUL` fold into the Conv that produces the value."""
    return len(out) == 4 and tuple(shape) == (1, out[1], 1, 1)


def static_shape_needed(rank: int) -> bool:
    """Whether :data:`MATMUL_ADD` fuses an A of this rank only where A's shape is static (rank > 2: it writes
    Reshape + Gemm + Reshape from the shape); a 2-D one it fuses on symbolic shapes too."""
    return rank > 2


def activation_fusion(op: str, rank: int) -> Fusion | None:
    """The fusion that takes IR operator ``op``'s fused activation (of an output of rank ``rank``):
    :data:`CONV_ACTIVATION` for conv2d, :data:`GEMM_ACTIVATION` for a 2-D matmul written as Gemm; None (the
    activation runs on its own) for any other, a matmul of another rank among them (none fuses into a MatMul)."""
    if op == "conv2d":
        return CONV_ACTIVATION
    if op == "matmul" and rank == 2:
        return GEMM_ACTIVATION
    return None


WINDOWED = ("Conv", "AveragePool", "MaxPool")
"""the ONNX operators with ``auto_pad`` that :data:`PAD_CONV` folds a Pad into"""


def valid_as_pads(op_type: str, attrs: dict[str, object], spatial: int) -> dict[str, object] | None:
    """The attributes of a :data:`WINDOWED` node of ``spatial`` spatial axes with its ``auto_pad`` VALID written as
    explicit zero pads (NOTSET; the same computation), which :data:`PAD_CONV` needs; None where it is not VALID.

    >>> valid_as_pads("Conv", {"auto_pad": b"VALID", "strides": [2, 2]}, 2)
    {'strides': [2, 2], 'pads': [0, 0, 0, 0]}
    >>> valid_as_pads("Conv", {"pads": [1, 1, 1, 1]}, 2) is None
    True
    """
    auto = attrs.get("auto_pad", b"NOTSET")
    if op_type not in WINDOWED or (auto.decode() if isinstance(auto, bytes) else auto) != "VALID":
        return None
    out = {k: v for k, v in attrs.items() if k != "auto_pad"}
    out["pads"] = [0] * (2 * spatial)
    return out


def epilogue(op: str, in_shapes: Sequence[Shape], out_shape: Shape) -> tuple[Fusion, int] | None:
    """(the fusion that folds IR operator ``op`` into the operator producing its operand, that operand) for an
    epilogue's shape signature, or None. The signature does not show the producer; in eqsat's programs these
    signatures follow one: a 4-D batchnorm and a per-channel ``[1, C, 1, 1]`` add or multiply a conv2d, a dense
    layer's bias (:data:`DENSE_RANKS`) a matmul, a ``scale`` attention's scores (FusedMatMul's alpha)."""
    out = tuple(out_shape)
    if op == "batchnorm" and len(out) == 4:
        return CONV_BN, 0
    if op == "scale" and len(out) >= 2:
        return MATMUL_SCALE, 0
    if op not in ("ewadd", "ewmul") or len(in_shapes) != 2:
        return None
    shapes = [tuple(s) for s in in_shapes]
    main = 0 if shapes[0] == out else 1
    other = shapes[1 - main]
    if shapes[main] != out or other == out:
        return None
    if channel_operand(other, out):
        return (CONV_ADD if op == "ewadd" else CONV_MUL), main
    if op == "ewadd" and len(out) in DENSE_RANKS and len(other) == len(out) and row_bias(other, out[-1]):
        return MATMUL_ADD, main
    return None


__all__ = ["BIAS_PRODUCERS", "CONV_ACTIVATION", "CONV_ADD", "CONV_BN", "CONV_MUL", "DENSE_RANKS", "FUSIONS", "GELU",
           "GEMM_ACTIVATION", "MATMUL_ADD", "MATMUL_SCALE", "MATMUL_TRANSPOSE", "PAD_CONV", "QUICK_GELU",
           "SIMPLIFIED_LAYER_NORM", "SKIP_LAYER_NORM", "UNFUSED", "WINDOWED", "Fusion", "activation_fusion", "channel_operand", "epilogue", "row_bias",
           "static_shape_needed", "stripped", "valid_as_pads"]
