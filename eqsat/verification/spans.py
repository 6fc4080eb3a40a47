"""The original a program written for a span of sizes only carries beyond it (:mod:`eqsat.generic.within`: the
else-branch of the If named :data:`eqsat.onnx.axes.branches.WITHIN`) checked against the original itself
(:func:`verify_within`). Beyond a span the original often refuses to run at all (a relative-position table's slice
wraps), and a bound far out (1.6 million samples) is not run (:data:`eqsat.onnx.axes.beyond.SPAN_GROWTH`), so the
copy is run at the tuned sizes, where the original runs: a copy that computes otherwise (its opset converted, a name
read from the program beside it) fails here."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from ..errors import first_line
from ..onnx.axes.branches import WITHIN, taken
from ..onnx.axes.interface import QUIET, shapes_at
from ..onnx.io import session
from .feeds import index_bounds, random_inputs
from .outputs import compare_outputs
from .shapes import ShapesCheck


def verify_within(original: onnx.ModelProto, optimized: onnx.ModelProto, values: Mapping[str, int],
                  seed: int = 0) -> ShapesCheck:
    """The else-branch of each If that keeps ``optimized`` to a span, run alone at the symbols' ``values`` on seeded
    random inputs, against the original there: every output within tolerance, or the check fails."""
    guards = [n for n in optimized.graph.node if n.op_type == "If" and n.name.startswith(WITHIN)]
    if not guards:
        return ShapesCheck(True)
    label = "the original beyond the span (its copy at " + ", ".join(f"{k}={v}" for k, v in values.items()) + ")"
    try:
        s1 = session(original, prepacking=False)
        feeds = random_inputs(s1, np.random.default_rng(seed), shapes_at(original, values), index_bounds(original))
        ref = s1.run(None, feeds, QUIET)
        for guard in guards:
            s2 = session(taken(optimized, guard, "else_branch"), prepacking=False)
            *got, _ = s2.run(None, {i.name: feeds[i.name] for i in s2.get_inputs()}, QUIET)
            for out, a, b in zip(original.graph.output, ref, got):
                ok, e_abs, _ = compare_outputs(np.asarray(a), np.asarray(b))
                if not ok:
                    return ShapesCheck(False, detail=f"{label}: output {out.name!r} differs from the original's "
                                       f"(max abs error {e_abs:.3g})")
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors have no common type
        return ShapesCheck(False, detail=f"{label} fails in onnxruntime: {first_line(exc)}")
    return ShapesCheck(True, [label])


__all__ = ["verify_within"]
