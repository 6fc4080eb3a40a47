"""Verification draws on which the original's top-k choices are decided.

A model that ranks values it computes (a mixture of experts' router: ``TopK`` over the logits) turns a rounding
difference into another choice wherever its k-th and next values lie within rounding of each other: any rewrite of
what computes them (another GEMM's summation order, onnxruntime's weights packed or not) may then choose the other
expert, and the output differs by a whole expert's product (a dynamo-exported GraniteMoE: one of 384 tokens with its
second and third logits 4 ulps apart, 0.24 off in every candidate). Such a draw says nothing of the candidate, so
the verification draws again where one occurs (:meth:`Screen.draw`, at most :data:`TRIES` draws, the last one kept
whatever it holds; a top-k for which that happened, a vocabulary's near-tied on most draws, is screened no more for
those input shapes: no more runs of a slow original for it). Exact ties are not drawn again (``TopK`` takes the lower
index among equal values, which a candidate must keep), nor rows holding NaN or infinities; an edge draw (-inf rows,
a NaN, values near the range) made from a random draw is made again from another where the -inf strewn in it leaves
a near-tie among a row's finite values (:meth:`eqsat.verification.Verifier`).

The screen is the original with each ``TopK`` of its main graph also giving its values and k as outputs, after the
original's own (:meth:`Screen.of`): the verification runs it in the original's place, so that no draw costs a
second run of the original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

TIE_SHARE = 2.0**-16
"""a row's k-th and next values closer than this share of the row's largest magnitude and not equal are within
rounding of each other: the choice between them is the summation order's
(float32 rounds at 2^-24 of a value; a product of a few hundred terms, to some 2^-20); for a half type, 8 of its
ulps (:func:`share`)"""
TRIES = 4
"""the most draws made for one verification draw"""
FILL = 2.0**100
"""entries of this magnitude or more are a mask's fill, not a value: left out of a row's magnitude"""
SCREENED = 2**24
"""a top-k's values of more entries than this are not screened (a vocabulary's at a long sequence)"""


def share(dtype: np.dtype) -> float:
    """The gap, as a share of the values' magnitude, within which two values of ``dtype`` are near-tied."""
    return max(TIE_SHARE, 8 * float(np.finfo(dtype).eps))


@dataclass(frozen=True)
class Screen:
    """The model to run in the original's place (``model``), the original's own outputs (``outputs``: the first
    ones), and each exposed ``TopK``'s axis and direction (its values and k follow, in that order)."""

    model: onnx.ModelProto
    outputs: int
    topks: tuple[tuple[int, bool], ...] = ()

    @classmethod
    def of(cls, original: onnx.ModelProto) -> Screen:
        """``original`` with its main graph's ``TopK``s exposed; ``original`` itself where it has none."""
        g = original.graph
        found = [n for n in g.node if n.op_type == "TopK" and n.domain in ("", "ai.onnx") and len(n.input) > 1]
        if not found:
            return cls(original, len(g.output))
        model = onnx.ModelProto()
        model.CopyFrom(original)
        taken = {x for n in g.node for x in (n.name, *n.output)} | {v.name for v in (*g.input, *g.output,
                                                                                      *g.initializer)}
        topks = []
        for i, n in enumerate(found):
            for j, what in enumerate(("values", "k")):
                name = f"eqsat_screen_{i}_{what}"
                while name in taken:
                    name += "_"
                taken.add(name)
                model.graph.node.append(helper.make_node("Identity", [n.input[j]], [name], name=name))
                model.graph.output.append(helper.make_empty_tensor_value_info(name))
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            topks.append((int(attrs.get("axis", -1)), bool(attrs.get("largest", 1))))
        return cls(model, len(g.output), tuple(topks))

    def undecided(self, extra: Sequence[np.ndarray], spent: Set[int] = frozenset()) -> set[int]:
        """The exposed ``TopK``s (by index, those in ``spent`` left out; their values and k in ``extra``) with a row
        of finite values whose k-th and next are apart by no more than :func:`share` of the row's largest
        magnitude (what the terms that computed them round at; a mask's fill, :data:`FILL` or more, left out)."""
        out = set()
        for i, ((axis, largest), values, k) in enumerate(zip(self.topks, extra[0::2], extra[1::2])):
            x = np.asarray(values)
            if i in spent or x.dtype.kind != "f" or x.ndim == 0 or x.size == 0 or x.size > SCREENED:
                continue
            kk, n = int(np.asarray(k).reshape(-1)[0]), x.shape[axis]
            if not 0 < kk < n:
                continue
            rows = np.moveaxis(x, axis, -1).reshape(-1, n)
            at = (n - kk, n - kk - 1) if largest else (kk - 1, kk)  # the k-th and the next, ascending positions
            part = np.partition(rows, sorted(at), axis=-1)
            a, b = part[:, at[0]].astype(np.float64), part[:, at[1]].astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                size = np.abs(rows)
                size[size >= FILL] = 0  # a mask's fill (float32's lowest) is no value's size
                scale = np.maximum(np.maximum(np.abs(a), np.abs(b)), size.max(axis=-1).astype(np.float64))
                gap = np.abs(a - b)
                near = (gap > 0) & (gap <= share(x.dtype) * scale) & np.isfinite(rows).all(axis=-1)
            if near.any():
                out.add(i)
        return out

    def draw(self, sess: ort.InferenceSession, make: Callable[[], dict[str, np.ndarray]],
             options: ort.RunOptions | None = None, spent: set[int] | None = None
             ) -> tuple[dict[str, np.ndarray], list]:
        """A draw of ``make`` on which every top-k choice is decided (at most :data:`TRIES` draws), and the
        original's outputs on it. ``spent`` (the caller's, one per input shapes: the same draws whatever was checked
        before): the top-ks for which a draw found no decided one, screened no more (a vocabulary's top-k, near-tied
        on most draws, does not stop a router's from being screened); those of this draw are added."""
        spent = set() if spent is None else spent
        for attempt in range(TRIES):
            feeds = make()
            outs = list(sess.run(None, feeds, options))
            near = self.undecided(outs[self.outputs:], spent) if self.topks else set()
            if not near or attempt == TRIES - 1:
                spent |= near
                return feeds, outs[: self.outputs]
        raise AssertionError("unreachable")
