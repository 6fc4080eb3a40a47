"""Runtime kernels of a newer opset than the model's: the opset upgrade that lets a program use them, and the probe
of whether onnxruntime runs them.

The decision (issue 26): a kernel of the default domain that appeared in opset 23 (``Attention``) is written
as is into a model of opset >= 23. Into an older model (torch's exporters write opset 17 and 18), the emitter
writes it in the placeholder domain :data:`~eqsat.ops.base.UPGRADE_DOMAIN`, and :func:`upgrade` converts the
whole model to opset 23 with ONNX's version converter (which leaves nodes of other domains alone), then moves
those nodes into the default domain and checks the result. Where the converter fails (an operator it has no
adapter for), :func:`eqsat.onnx.export.export_model` writes the program again with each such kernel as its
decomposition in the model's own opset, so an upgrade never stops an export. The program, upgraded or not, is
then verified against the original in onnxruntime like every candidate, and measured: the upgrade is kept only
when the candidate that holds it is the one shipped. ``--portable`` (``SearchConfig.portable``) keeps every
program to the standard operators of the model's own opset: the rules that make these kernels are left out.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx
from onnx import TensorProto, helper, version_converter

from ..ops.attention import causal_mask
from ..ops.base import UPGRADE_DOMAIN, UPGRADE_OPSET
from .external import check_aside, put_weights_back, set_weights_aside
from .io import check, is_large, session


class UpgradeError(Exception):
    """The model could not be converted to :data:`~eqsat.ops.base.UPGRADE_OPSET`."""


def pending(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds kernels written for an opset upgrade (nodes of the placeholder domain)."""
    return any(n.domain == UPGRADE_DOMAIN for n in model.graph.node)


def upgrade(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` converted to opset :data:`~eqsat.ops.base.UPGRADE_OPSET` (from an older one), its nodes of the
    placeholder domain moved to the default domain. Raises :class:`UpgradeError` where ONNX's converter or
    checker refuses it. A model too large for one message is converted with its weights set aside (the converter
    serializes the model), and checked so."""
    large = is_large(model)
    work, aside = set_weights_aside(model) if large else (model, [])
    try:
        out = version_converter.convert_version(work, UPGRADE_OPSET)
    except Exception as e:  # the converter raises bare RuntimeErrors and ValueErrors of its adapters
        raise UpgradeError(f"onnx's version converter cannot take the model to opset {UPGRADE_OPSET}: {e}") from e
    for node in out.graph.node:
        if node.domain == UPGRADE_DOMAIN:
            node.domain = ""
    kept = [o for o in out.opset_import if o.domain != UPGRADE_DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(kept)
    out.ir_version = min(out.ir_version, 10)
    try:
        if large:
            check_aside(out, full_check=False)
        else:
            check(out, full=False)  # where its weights are the run's pool's, it is checked where they resolve
    except onnx.checker.ValidationError as e:
        raise UpgradeError(f"the model upgraded to opset {UPGRADE_OPSET} does not check: {e}") from e
    put_weights_back(out, aside)
    return out


def opset_of(model: onnx.ModelProto) -> int:
    """The model's opset of the default domain (0: none)."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def converted(model: onnx.ModelProto, version: int, weights: bool = False) -> onnx.ModelProto:
    """``model``'s nodes (those of its subgraphs too) converted to opset ``version`` of the default domain by ONNX's
    version converter, with its weights set aside (stubs: a model to read nodes from, e.g. a chain of the original's
    copied into a newer program), or put back where ``weights`` (a model to run). Raises :class:`UpgradeError` where
    the converter refuses it."""
    if opset_of(model) == version:
        return model
    if model.functions:  # the converter drops a model's local functions (and would leave their bodies' opsets)
        raise UpgradeError(f"onnx's version converter cannot take a model with local functions to opset {version}")
    work, aside = set_weights_aside(model)
    try:
        out = version_converter.convert_version(work, version)
    except Exception as e:  # the converter raises bare RuntimeErrors and ValueErrors of its adapters
        raise UpgradeError(f"onnx's version converter cannot take the model to opset {version}: {e}") from e
    if weights:
        put_weights_back(out, aside)
    return out


def _runs(node: onnx.NodeProto, shapes: dict[str, list[int]], out: list[int], expected) -> bool:
    """Whether onnxruntime runs the one-node model of ``node`` (opset 23) and gives ``expected(feeds)``."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    graph = helper.make_graph([node], "probe", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", UPGRADE_OPSET)])
    model.ir_version = min(model.ir_version, 10)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    try:
        (y,) = session(model, threads=1).run(None, feeds)  # no thread pool left behind in this process
    except Exception:  # an onnxruntime without the kernel fails to load or to run it
        return False
    return bool(np.allclose(y, expected({k: v.astype(np.float64) for k, v in feeds.items()}), atol=1e-4))


def _attention(f: dict[str, np.ndarray]) -> np.ndarray:
    s = f["q"] @ f["k"].transpose(0, 1, 3, 2) * 0.5 + f["m"]
    z = np.exp(s - s.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)) @ f["v"]


def _grouped_causal(f: dict[str, np.ndarray]) -> np.ndarray:
    """4 query heads over 2 key/value heads (query head i reads key/value head i // 2), causal, scale 0.5."""
    k, v = (np.repeat(f[t], 2, axis=1) for t in ("k", "v"))
    return _attention({"q": f["q"], "k": k, "v": v, "m": causal_mask(f["q"].shape[-2])})


def _grouped_masked(f: dict[str, np.ndarray]) -> np.ndarray:
    """4 query heads over 2 key/value heads, an additive mask, scale 0.5."""
    k, v = (np.repeat(f[t], 2, axis=1) for t in ("k", "v"))
    return _attention({"q": f["q"], "k": k, "v": v, "m": f["m"]})


def _rotary(f: dict[str, np.ndarray]) -> np.ndarray:
    x, h = f["x"], f["x"].shape[-1] // 2
    c, s = (np.concatenate([f[t], f[t]], axis=-1)[:, None] for t in ("c", "s"))
    return x * c + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * s


@lru_cache(maxsize=1)
def runtime_runs_kernels() -> bool:
    """Whether this onnxruntime's CPU provider runs the kernels the rules of :mod:`eqsat.rules.ours.kernels` and
    the writer's ``grouped`` form write, opset 23's ``Attention`` (masked, 4-D; causal or masked over fewer
    key/value heads than query heads) and ``RotaryEmbedding`` (4-D, caches without position ids), each checked
    against numpy."""
    shape, grouped = [1, 2, 4, 8], [1, 4, 4, 8]
    attention = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], scale=0.5)
    causal = helper.make_node("Attention", ["q", "k", "v"], ["y"], scale=0.5, is_causal=1)
    rotary = helper.make_node("RotaryEmbedding", ["x", "c", "s"], ["y"])
    return _runs(attention, {"q": shape, "k": shape, "v": shape, "m": [1, 1, 4, 4]}, shape, _attention) \
        and _runs(causal, {"q": grouped, "k": shape, "v": shape}, grouped, _grouped_causal) \
        and _runs(attention, {"q": grouped, "k": shape, "v": shape, "m": [1, 1, 4, 4]}, grouped, _grouped_masked) \
        and _runs(rotary, {"x": shape, "c": [1, 4, 4], "s": [1, 4, 4]}, shape, _rotary)
