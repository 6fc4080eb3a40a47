"""The operator entry type and what entries share: shape arithmetic, activations, default costs.

Activation codes follow TENSAT: NONE=0, SIGMOID=1, RELU=2, TANH=3. Padding of conv2d and pooling is
explicit and symmetric (``ph``, ``pw``); ``-1`` means SAME, i.e. ``k // 2`` on each side for an odd
kernel (TASO's SAME for stride 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from eqsat.errors import ShapeError

Shape = tuple[int, ...]

ACT_NONE, ACT_SIGMOID, ACT_RELU, ACT_TANH = 0, 1, 2, 3
SAME = -1


class NotEvaluable(Exception):
    """The operator has no numpy semantics (opaque, leaves) or none in the prime-field mode."""


UPGRADE_DOMAIN = "eqsat.upgrade"
"""the placeholder domain of a default-domain operator newer than the model's opset (a runtime kernel such as
opset 23's ``Attention``): the writer of the model upgrades it to ``UPGRADE_OPSET`` and moves these nodes to
the default domain (:mod:`eqsat.onnx.kernels`)"""
UPGRADE_OPSET = 23
"""the opset the operators written in ``UPGRADE_DOMAIN`` need"""


class Emitter(Protocol):
    """What an ONNX emitter writes through (the exporter): nodes and constant initializers, at ``opset``."""

    opset: int
    """the default domain's opset of the model being written (emitters pick the operators it has)"""
    upgrade: bool
    """whether an operator of ``UPGRADE_OPSET`` may be written where ``opset`` is older (in ``UPGRADE_DOMAIN``,
    for the writer's opset upgrade); False: its decomposition in ``opset``'s operators"""

    def emit(self, op_type: str, inputs: list[str], base: str, **attrs: Any) -> str:
        """Append one ONNX node; returns the name of its output."""
        ...

    def const(self, array: np.ndarray, base: str) -> str:
        """Add an initializer; returns its name."""
        ...


@dataclass(frozen=True)
class Ctor:
    """One egglog constructor of an operator. Argument kinds: ``i`` an i64 attribute, ``s`` a String (a
    leaf's name), ``h`` a Shape value holding all attributes, ``t`` a tensor, ``l`` a list of tensors."""

    name: str
    kinds: str

    def fits(self, n_operands: int) -> bool:
        return "l" in self.kinds or self.kinds.count("t") == n_operands


ShapeFn = Callable[[tuple, Sequence[Shape]], Shape]
NumpyFn = Callable[[tuple, list[np.ndarray], "int | None"], np.ndarray]
OnnxFn = Callable[[Emitter, tuple, list[str], Sequence[Shape]], str]
TorchFn = Callable[[Any, tuple, Sequence[Shape]], "Callable[..., Any] | None"]
FlopsFn = Callable[[tuple, Sequence[Shape], Shape], float]
BytesFn = Callable[[Sequence[Shape], Shape, int], float]
TasoFn = Callable[[tuple], "tuple[tuple, tuple, int | None]"]
SymFn = Callable[[tuple, list[list[str]]], list[str]]


def dim_fp(d: int) -> int:
    """A dimension's fingerprint (a symbolic one's own, a constant's its size): ``eqsat.dims.fp_of``, which this
    package may not import (the layering, tests/core/test_layers.py)."""
    return int(getattr(d, "fp", d))


def volume(shape: Sequence[int]) -> int:
    v = 1
    for d in shape:
        v *= int(d)
    return v


def elementwise_flops(attrs: tuple, ins: Sequence[Shape], out: Shape) -> float:
    """One operation per output element."""
    return float(volume(out))


def bytes_moved(ins: Sequence[Shape], out: Shape, itemsize: int) -> float:
    """Every operand read once, the output written once."""
    return float(itemsize * (sum(volume(s) for s in ins) + volume(out)))


def no_rules() -> list[str]:
    return []


@dataclass(frozen=True)
class OpDef:
    """Everything the optimizer knows about one IR operator (see the package docstring for an example)."""

    op: str
    """the IR's name (``Node.op``)"""
    doc: str
    """one line: what it computes"""
    attrs: str
    """its attributes (``Node.attrs``), in order"""
    shape: ShapeFn
    """(attrs, operand shapes) -> output shape; raises ShapeError"""
    ctors: tuple[Ctor, ...] = ()
    """egglog constructors; a term takes the first that fits its operand count"""
    shape_rules: Callable[[], list[str]] = no_rules
    """the egglog ``analysis`` rules that fill ``shape`` for terms of ``ctors`` (the twin of ``shape``)"""
    numpy: NumpyFn | None = None
    """(attrs, operand values, modulus) -> value; float64, or integers modulo a prime where ``modulus`` is
    set (raises NotEvaluable where the operator is not defined over a prime field)"""
    onnx: OnnxFn | None = None
    """(emitter, attrs, operand names, operand shapes) -> output name"""
    torch: TorchFn | None = None
    """(torch module, attrs, operand shapes) -> a function of torch tensors, for timing (None: estimated)"""
    flops: FlopsFn = elementwise_flops
    bytes: BytesFn = bytes_moved
    free: bool = False
    """zero cost in TASO's model (layout-only ops, leaves, merge, dropout)"""
    copies: bool = False
    """free in TASO's model, but a copy in onnxruntime (the measured cost models time it)"""
    leaf: bool = False
    """a program leaf (input or weight): no operands, a value from outside"""
    fold_only: bool = False
    """no ONNX form: exported only when computable from weights (folded into an initializer)"""
    taso: TasoFn | None = None
    """TENSAT pattern arguments -> (attrs, operand patterns, concat rank hint); None: not in TASO's rules"""
    sym_shape: SymFn | None = None
    """(attrs, operands' symbolic egglog dims) -> the output's, for the rule compiler's conditions"""
    kernel: str | None = None
    """the runtime kernel its ONNX form is, where it is one of a newer opset than models commonly have (``sdpa``:
    ``Attention (opset 23)``); the report lists the kernels a program uses"""


def emit_newer(em: Emitter, op_type: str, inputs: list[str], base: str, **attrs: Any) -> str:
    """Write the default domain's ``op_type`` of opset ``UPGRADE_OPSET``: as is where the model's opset has it,
    else in ``UPGRADE_DOMAIN`` (the caller checked ``em.upgrade``)."""
    domain = {} if em.opset >= UPGRADE_OPSET else {"domain": UPGRADE_DOMAIN}
    return em.emit(op_type, inputs, base, **attrs, **domain)


def newer_allowed(em: Emitter) -> bool:
    """Whether ``em`` takes an operator of ``UPGRADE_OPSET`` (its model's opset has it, or it may be upgraded)."""
    return em.opset >= UPGRADE_OPSET or em.upgrade


def fail(op: str, why: str) -> ShapeError:
    return ShapeError(f"{op}: {why}")


def broadcast(a: Shape, b: Shape, op: str = "ewadd") -> Shape:
    """Numpy broadcasting restricted to operands of equal rank (the IR reshapes to equal rank first)."""
    if len(a) != len(b):
        raise fail(op, f"operands of rank {len(a)} and {len(b)}; reshape to equal rank first")
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise fail(op, f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def conv_pad(k: int, p: int) -> int:
    """The real padding of one side given a kernel size and the IR's pad code."""
    if p == SAME:
        if k % 2 == 0:
            raise ShapeError(f"SAME padding needs an odd kernel, got {k}")
        return k // 2
    if p < 0:
        raise ShapeError(f"negative padding {p}")
    return p


def window_out(n: int, k: int, s: int, p: int) -> int:
    pad = conv_pad(k, p)
    o = (n + 2 * pad - k) // s + 1
    if o <= 0 or s <= 0:
        raise ShapeError(f"window {k}/{s} with padding {pad} does not fit a dimension of {n}")
    return o


def activation(x: np.ndarray, act: int, modulus: int | None = None) -> np.ndarray:
    """A fused activation (TENSAT's codes) in numpy."""
    if act == ACT_NONE:
        return x
    if modulus is not None:
        raise NotEvaluable("activations are not defined over a prime field")
    if act == ACT_RELU:
        return np.maximum(x, 0)
    if act == ACT_SIGMOID:
        return 1.0 / (1.0 + np.exp(-x))
    if act == ACT_TANH:
        return np.tanh(x)
    raise ValueError(f"unknown activation code {act}")


_ACT_ONNX = {ACT_RELU: "Relu", ACT_SIGMOID: "Sigmoid", ACT_TANH: "Tanh"}
_ACT_TORCH = {ACT_SIGMOID: "sigmoid", ACT_RELU: "relu", ACT_TANH: "tanh"}


def emit_activation(em: Emitter, value: str, act: int) -> str:
    """A fused activation as its own ONNX node (none for ACT_NONE)."""
    if act == ACT_NONE:
        return value
    return em.emit(_ACT_ONNX[act], [value], "act")


def torch_activation(torch: Any, y: Any, act: int) -> Any:
    return getattr(torch, _ACT_TORCH[act])(y) if act in _ACT_TORCH else y


def act_flops(act: int, out: Shape) -> float:
    """What a fused activation adds to an operator's flops."""
    return float(volume(out)) if act else 0.0
