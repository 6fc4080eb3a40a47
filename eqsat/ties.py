"""Verification draws on which the original's top-k choices are decided.

A model that ranks values it computes (a mixture of experts' router: ``TopK`` over the logits) turns a rounding
difference into another choice wherever its k-th and next values lie within rounding of each other: any rewrite of
what computes them (another GEMM's summation order, onnxruntime's weights packed or not) may then choose the other
expert, and the output differs by a whole expert's product (a dynamo-exported GraniteMoE: one of 384 tokens with its
second and third logits 4 ulps apart, 0.24 off in every candidate). Such a draw says nothing of the candidate, so
the verification draws again where one occurs (:meth:`Screen.draw`, at most :data:`TRIES` draws, the last one kept
whatever it holds; where that happens, a top-k over values that are near-tied on most draws, a vocabulary's, the
later draws are taken as they come: no more runs of a slow original for them). Exact ties are not drawn again (``TopK`` takes the lower index among equal values, which a
candidate must keep), nor are rows holding NaN or infinities (the edge draws are made for them).

The screen is the original with each ``TopK`` of its main graph also giving its values and k as outputs, after the
original's own (:meth:`Screen.of`): the verification runs it in the original's place, so that no draw costs a
second run of the original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

TIE_SHARE = 2.0**-16
"""a row's k-th and next values closer than this share of its largest magnitude (and not equal) are within rounding
of each other: the choice between them is the summation order's (float32 rounds at 2^-24 of a value; a product of
a few hundred terms, to some 2^-20)"""
TRIES = 4
"""the most draws made for one verification draw"""


@dataclass
class Screen:
    """The model to run in the original's place (``model``), the original's own outputs (``outputs``: the first
    ones), each exposed ``TopK``'s axis and direction (its values and k follow, in that order), and whether a draw
    found no decided one in :data:`TRIES` (``spent``: the later ones are not screened)."""

    model: onnx.ModelProto
    outputs: int
    topks: tuple[tuple[int, bool], ...] = ()
    spent: bool = False

    @classmethod
    def of(cls, original: onnx.ModelProto) -> Screen:
        """``original`` with its main graph's ``TopK``s exposed; ``original`` itself where it has none."""
        g = original.graph
        found = [n for n in g.node if n.op_type == "TopK" and n.domain in ("", "ai.onnx") and len(n.input) > 1]
        if not found:
            return cls(original, len(g.output))
        model = onnx.ModelProto()
        model.CopyFrom(original)
        taken = {o for n in g.node for o in n.output} | {v.name for v in (*g.input, *g.output, *g.initializer)}
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

    def undecided(self, extra: Sequence[np.ndarray]) -> bool:
        """Whether any exposed ``TopK`` (its values and k in ``extra``) has a row whose k-th and next values are
        apart, by no more than :data:`TIE_SHARE` of the row's largest magnitude."""
        for (axis, largest), values, k in zip(self.topks, extra[0::2], extra[1::2]):
            x = np.asarray(values)
            if x.dtype.kind != "f" or x.ndim == 0 or x.size == 0:
                continue
            kk = int(np.asarray(k).reshape(-1)[0])
            x = np.moveaxis(x.astype(np.float64), axis, -1)
            if not 0 < kk < x.shape[-1]:
                continue
            ranked = -np.sort(-x, axis=-1) if largest else np.sort(x, axis=-1)
            gap = np.abs(ranked[..., kk - 1] - ranked[..., kk])
            with np.errstate(invalid="ignore"):
                scale = np.max(np.abs(x), axis=-1)
                near = (gap > 0) & (gap <= TIE_SHARE * scale) & np.isfinite(scale)
            if near.any():
                return True
        return False

    def run(self, sess: ort.InferenceSession, feeds: dict[str, np.ndarray],
            options: ort.RunOptions | None = None) -> list:
        """The original's outputs on ``feeds`` (``sess`` a session of :attr:`model`)."""
        return list(sess.run(None, feeds, options))[: self.outputs]

    def draw(self, sess: ort.InferenceSession, make: Callable[[], dict[str, np.ndarray]],
             options: ort.RunOptions | None = None) -> tuple[dict[str, np.ndarray], list]:
        """A draw of ``make`` on which every top-k choice is decided (at most :data:`TRIES` draws; one where an
        earlier draw found none), and the original's outputs on it."""
        for attempt in range(TRIES):
            feeds = make()
            outs = list(sess.run(None, feeds, options))
            if not self.topks or self.spent or not self.undecided(outs[self.outputs:]):
                return feeds, outs[: self.outputs]
            self.spent = attempt == TRIES - 1
        return feeds, outs[: self.outputs]
