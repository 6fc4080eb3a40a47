"""Which of the original's Reshapes a candidate's Reshape stands for, read off the elements it reshapes
(:func:`reading_by_data`): where the original's targets of the same entries at the representative sizes read the
symbols otherwise, the sizes cannot tell them apart, and the data can.

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
SAMPLE = 512
"""the elements of a value compared, evenly spread over it in memory order"""
CHUNK = 64
"""the original's values asked in one run (its Reshapes' inputs: all of them held at once would be a copy of
most of the model's activations)"""

Sample = tuple[int, np.ndarray]
"""a value's element count, and its :data:`SAMPLE` elements as float64"""


def reading_by_data(w: Rewrite, data: str, readings: Mapping[str, tuple[list[Mono], Sequence[str], bool]]
                    ) -> list[Mono] | None:
    """The one of ``readings`` (key -> the symbolic target, the names of the original's targets read so, whether it
    is a target the original computes without a ``-1``) whose original Reshapes reshape the elements the program's
    value ``data`` holds, both run at the representative sizes on the same seeded inputs. None where no reading's
    does, or two do, or a Reshape of another target does (its reading is not known here), or a run fails."""
    users: dict[str, list[str]] = {}
    for node in w.original.graph.node:
        if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and len(node.input) > 1:
            key = next((k for k, (_, names, _) in readings.items() if node.input[1] in names), "")
            users.setdefault(key, []).append(node.input[0])
    if not any(users.get(k) for k in readings):
        return None
    try:
        theirs = _original_elements(w)
        feeds = _feeds(w.original, w.values)
        mine = _sample(_run(probe(w, [data]), [data], feeds)[0])  # (pruned to ``data`` already)
    except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: undecided
        return None
    if mine is None:
        return None
    found = {key for key, names in users.items() if any(_alike(mine, theirs.get(n)) for n in names)}
    if len(found) != 1 or "" in found:
        return None
    return readings[found.pop()][0]


def _original_elements(w: Rewrite) -> dict[str, Sample | None]:
    """A sample of the input of each of the original's Reshapes (once per model: :attr:`.original.Original.elements`)."""
    if w.facts.elements is None:
        names = list(dict.fromkeys(n.input[0] for n in w.original.graph.node
                                   if n.op_type == "Reshape" and n.domain in ("", "ai.onnx") and n.input))
        feeds = _feeds(w.original, w.values)
        out: dict[str, Sample | None] = {}
        for start in range(0, len(names), CHUNK):
            part = names[start:start + CHUNK]
            out.update(zip(part, (_sample(v) for v in _run(_asking(w.original, part), part, feeds))))
        w.facts.elements = out
    return w.facts.elements


def _feeds(model: onnx.ModelProto, values: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Seeded normal draws for the float inputs at ``values``, and 0 or 1 for the integer ones that index (token
    ids: rows that differ, so that a value and its rows in another order are told apart); the others as
    :func:`zero_feeds` gives them."""
    rng = np.random.default_rng(SEED)
    out = {}
    for name, v in zero_feeds(model, values).items():
        if v.dtype.kind == "f":
            out[name] = rng.standard_normal(v.shape).astype(v.dtype)
        elif v.dtype.kind in "iu" and not v.any():
            out[name] = rng.integers(0, 2, v.shape).astype(v.dtype)
        else:
            out[name] = v
    return out


def _asking(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` computing ``names`` as its outputs, pruned to what they read."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.output[:]
    out.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    return prune(out)


def _run(model: onnx.ModelProto, names: list[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``names`` computed by ``model`` (which has them among its outputs) on those of ``feeds`` it reads."""
    sess = session(model)
    wanted = {i.name for i in sess.get_inputs()}
    return [np.asarray(v) for v in sess.run(names, {k: v for k, v in feeds.items() if k in wanted}, QUIET)]


def _sample(value: np.ndarray) -> Sample | None:
    """``value``'s element count and :data:`SAMPLE` of its elements in memory order; None where it holds no float,
    or a NaN or infinity."""
    if value.dtype.kind != "f" or value.size == 0:
        return None
    flat = value.reshape(-1)
    picked = flat[np.linspace(0, flat.size - 1, min(flat.size, SAMPLE)).astype(np.int64)].astype(np.float64)
    return (int(flat.size), picked) if np.isfinite(picked).all() else None


def _alike(a: Sample, b: Sample | None) -> bool:
    """The same element count and the same sampled elements, to float32 rounding (a candidate's Gemm against the
    original's MatMul and Add)."""
    if b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    scale = max(float(np.abs(b[1]).max(initial=0.0)), 1e-6)
    return bool(np.abs(a[1] - b[1]).max(initial=0.0) <= 1e-3 * scale)
