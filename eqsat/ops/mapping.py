"""The ONNX -> IR half of the operator table: what the family modules' mappers share.

Each family module maps the ONNX operators it covers in its ``IMPORTS`` (ONNX op type -> :data:`Mapper`);
:data:`eqsat.ops.IMPORTS` joins them, and the importer (:mod:`eqsat.onnx.importer`) calls the mapper of every
node of the default domain that it neither folds nor drops. A mapper takes the importer (an
:class:`ImportContext`), the ONNX node and the IR value of each of its inputs (None for an omitted optional
one), and returns the IR value of the node's output, or None when the IR has no operator for it (the node is
then carried as an opaque operator; a :class:`~eqsat.errors.ShapeError` from :meth:`ImportContext.make` means
the same). The context makes the IR nodes: the IR (:mod:`eqsat.ir`) imports this package, not the reverse.

>>> resolve_axis(-1, 4), resolve_axis(3, 4), resolve_axis(4, 4)
(3, 3, None)
>>> window_attrs({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (3, 3)), window_attrs({"ceil_mode": 1}, (2, 2))
((2, 2, -1, -1), None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from onnx import helper

from .base import SAME

if TYPE_CHECKING:
    import onnx


class Value(Protocol):
    """An IR value as a mapper reads it (an :class:`eqsat.ir.Node`)."""

    @property
    def op(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def name(self) -> str | None: ...


V = TypeVar("V", bound=Value)


class ImportContext(Protocol[V]):
    """What a mapper builds through: the importer of the model (:mod:`eqsat.onnx.importer`)."""

    @property
    def consts(self) -> Mapping[str, np.ndarray]:
        """the constant values known so far (initializers, Constant nodes, folded values), by ONNX name"""
        ...

    def make(self, op: str, inputs: Sequence[V], attrs: tuple = ()) -> V:
        """An IR node (shape inferred; raises ShapeError)."""
        ...

    def weight(self, array: np.ndarray, hint: str | None) -> V:
        """A new weight leaf holding ``array``, named after ``hint`` (``w`` without one)."""
        ...

    def data(self, node: V) -> np.ndarray:
        """The value of a weight leaf."""
        ...

    def rest(self, target: str, shape: Sequence[int], others: Sequence[int]) -> int:
        """The size a Reshape's ``-1`` takes on a value of ``shape``, its other entries ``others`` (the constant
        ``target``'s): the elements left over; symbolic where ``shape`` is and ``target`` is a constant the model
        gives (then its other entries hold at every size), not one folded at the representative sizes."""
        ...

    def reshape(self, node: V, shape: tuple[int, ...]) -> V:
        """``node`` in ``shape``: itself if it has it, a reshaped weight for a weight, else a ``reshape`` node."""
        ...


Mapper = Callable[[Any, "onnx.NodeProto", list[Any]], Any]
"""(context, ONNX node, input values) -> the output's IR value, or None (see the module's documentation)"""


def onnx_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes by name, as Python values."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def floats(ins: Sequence[V | None], count: int | None = None) -> list[V] | None:
    """The first ``count`` operands (all by default) when every one is present and float32 (the dtype the rules
    are verified in), else None."""
    head = list(ins if count is None else ins[:count])
    out = [v for v in head if v is not None and v.dtype == "float32"]
    return out if len(out) == len(head) else None


def resolve_axis(axis: int, rank: int) -> int | None:
    """``axis`` (negative: from the end) as an index in ``[0, rank)``, or None if out of range."""
    k = axis + rank if axis < 0 else axis
    return k if 0 <= k < rank else None


def same_rank(cx: ImportContext[V], a: V, b: V) -> tuple[V, V]:
    """Two operands at equal rank: the lower-ranked one reshaped with leading 1-dimensions (ONNX broadcasting)."""
    ra, rb = len(a.shape), len(b.shape)
    if ra < rb:
        a = cx.reshape(a, (1,) * (rb - ra) + tuple(a.shape))
    elif rb < ra:
        b = cx.reshape(b, (1,) * (ra - rb) + tuple(b.shape))
    return a, b


def window_attrs(at: Mapping[str, Any], kernel: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """``(sh, sw, ph, pw)`` of a Conv or pooling node's attributes ``at`` over a ``kernel``, the IR's SAME where
    the padding is ``k // 2`` on each side of an odd kernel; None where the IR has no such window (dilations,
    ceil mode, asymmetric padding, SAME of an even kernel or a stride)."""
    if any(d != 1 for d in at.get("dilations", [1, 1])) or at.get("ceil_mode", 0):
        return None
    sh, sw = at.get("strides", [1, 1])
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return sh, sw, 0, 0
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if sh == 1 and sw == 1 and kernel[0] % 2 and kernel[1] % 2:
            return sh, sw, SAME, SAME
        return None
    pads = at.get("pads", [0, 0, 0, 0])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        return None
    ph, pw = pads[0], pads[1]
    if kernel[0] % 2 and ph == kernel[0] // 2 and kernel[1] % 2 and pw == kernel[1] // 2:
        ph, pw = SAME, SAME  # the IR's canonical spelling of "k // 2 on each side"
    return sh, sw, ph, pw


def spelled_out(ph: int, pw: int, kh: int, kw: int) -> tuple[int, int]:
    """The padding with SAME spelled out when only one side of the window is SAME (the IR takes both or none)."""
    if (ph == SAME) != (pw == SAME):
        return (kh // 2 if ph == SAME else ph), (kw // 2 if pw == SAME else pw)
    return ph, pw
