"""The smallest size the original runs at, for each symbol the default sizes verified all lie below (a waveform's
samples: 1, 37 and 256 are too short for a convolutional front end's receptive field): the edge where a strided
front end leaves one frame and a count of frames is at its least. A written program is verified there too
(:func:`smallest_shapes`), since a size that equals another wherever both are large (``max(frames, 2)`` and the
frames, a Slice's count of frames left and a guard against 0) may differ only there, and the default sizes, refused
by the original or well above the edge, never reach it.

The edge is found by bisection between 1 (refused) and the tuned size (which runs), the others at their tuned sizes,
with zeros fed: a run of the original at sizes below the tuned one, once per model."""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from ...dims import derived_symbols, follow
from ..io import session
from .interface import OTHER_PROBES, QUIET, Shapes, batch_symbols, shapes_at, symbols, zero_feeds

RUNS = 24
"""runs of the original at most per symbol (a bisection over 2**24 sizes)"""


def smallest_shapes(model: onnx.ModelProto, values: Mapping[str, int]) -> list[tuple[str, Shapes]]:
    """(label, shapes): each free symbol that is no batch, represented above every one of
    :data:`~.interface.OTHER_PROBES` and refused at 1, at the smallest size above the largest one refused below its
    tuned size that the original runs at (a bisection: where the sizes it runs at are not one interval, an edge of
    one of them), the others at their ``values``; none where the original cannot be loaded."""
    syms = symbols(model)
    derived = derived_symbols(list(syms))
    batches = set(batch_symbols(model))
    wanted = [s for s in syms if s not in derived and s not in batches and values.get(s, 0) > max(OTHER_PROBES)]
    if not wanted:
        return []
    try:
        sess = session(model)
    except Exception:  # noqa: BLE001 - the verification at the other sizes says what is wrong with it
        return []
    out: list[tuple[str, Shapes]] = []
    for sym in wanted:
        def runs(v: int, sym: str = sym) -> bool:
            try:
                sess.run(None, zero_feeds(model, follow({**values, sym: v}, derived)), QUIET)
            except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: a size it refuses
                return False
            return True

        refused, running = 1, values[sym]
        if runs(refused):
            continue  # (1 is verified already)
        for _ in range(RUNS):
            if running - refused <= 1:
                break
            mid = (refused + running) // 2
            if runs(mid):
                running = mid
            else:
                refused = mid
        if running - refused <= 1 and running != values[sym]:
            out.append((f"{sym}={running}", shapes_at(model, follow({**values, sym: running}, derived))))
    return out


__all__ = ["RUNS", "smallest_shapes"]
