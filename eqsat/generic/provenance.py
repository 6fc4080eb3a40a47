"""Which of the original's Reshapes a candidate's Reshape stands for, read off the elements it reshapes
(:func:`reading_by_data`): where the original computes two targets of the same entries at the representative sizes
that read the symbols otherwise, the sizes cannot tell them apart, and the data can.

A Swin's last stage at 224 pixels is one window of 7 x 7: its q, k and v go to ``[windows, 49, 12, 32]`` with
``windows = batch*height*width/50176`` at 1, while a MaskFormer decoder's keys over the same 49 tokens go to
``[batch, height*width/1024, 12, 32]``. A candidate's Reshape to the constant ``[1, 49, 12, 32]`` is one of them;
read as the other, the program fails at 448 pixels. The elements it reshapes are those of the original's Reshape it
stands for (the rewrites keep values equal), not the other's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from eqsat.dims import Mono
from eqsat.onnx.axes.dataflow import prune
from eqsat.onnx.axes.interface import QUIET, zero_feeds
from eqsat.onnx.io import session

from .probes import probe
from .state import Rewrite

SEED = 0
"""the seed of the inputs both programs are run on"""


def reading_by_data(w: Rewrite, data: str, readings: Mapping[str, tuple[list[Mono], Sequence[str]]]
                    ) -> list[Mono] | None:
    """The one of ``readings`` (key -> the symbolic target, the names of the original's targets read so) whose
    original Reshapes reshape the elements the program's value ``data`` holds, both run at the representative
    sizes on the same seeded inputs; None where no one reading does (none, or two), or a run fails."""
    users: dict[str, list[str]] = {}
    for node in w.original.graph.node:
        if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and len(node.input) > 1:
            for key, (_, names) in readings.items():
                if node.input[1] in names:
                    users.setdefault(key, []).append(node.input[0])
    if len(users) < 2:
        return None
    asked = list(dict.fromkeys(n for names in users.values() for n in names))
    try:
        feeds = _feeds(w.original, w.values)
        mine = _run(probe(w, [data]), [data], feeds)[0]
        theirs = dict(zip(asked, _run(w.original, asked, feeds)))
    except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: undecided
        return None
    found = [key for key, names in users.items() if any(_alike(mine, theirs[n]) for n in names)]
    return readings[found[0]][0] if len(found) == 1 else None


def _feeds(model: onnx.ModelProto, values: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Seeded normal draws for the float inputs at ``values``; the others as :func:`zero_feeds` gives them."""
    rng = np.random.default_rng(SEED)
    feeds = zero_feeds(model, values)
    return {name: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
            for name, v in feeds.items()}


def _run(model: onnx.ModelProto, names: list[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    probe_model = onnx.ModelProto()
    probe_model.CopyFrom(model)
    del probe_model.graph.output[:]
    probe_model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = session(prune(probe_model))
    wanted = {i.name for i in sess.get_inputs()}
    return [np.asarray(v) for v in sess.run(names, {k: v for k, v in feeds.items() if k in wanted}, QUIET)]


def _alike(a: np.ndarray, b: np.ndarray) -> bool:
    """The same elements in the same order, to float32 rounding (a candidate's Gemm against the original's MatMul
    and Add)."""
    if a.size != b.size or a.dtype.kind != "f" or b.dtype.kind != "f":
        return False
    x, y = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return False
    scale = max(float(np.abs(y).max(initial=0.0)), 1e-6)
    return bool(np.abs(x - y).max(initial=0.0) <= 1e-3 * scale)
