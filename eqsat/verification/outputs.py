"""Two programs' outputs compared: within the element type's tolerance, NaNs and infinities where the original's are
(:func:`compare_outputs`), or within onnxruntime's own spread on the original (:class:`Spread`); what a check found
(:class:`Verification`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from ..onnx.axes.interface import QUIET
from ..onnx.io import session

_RTOL = {"float16": 1e-2, "float32": 1e-3, "float64": 1e-7}


@dataclass
class Verification:
    passed: bool
    max_abs_error: float
    max_rel_error: float
    draws: int
    detail: str = ""
    edge: str = ""
    """the edge draw the first mismatch was on (:data:`eqsat.verification.feeds.EDGES`' label); "" where the
    candidate matched, or failed on the random draws (or could not load or run)"""
    spread: float = 0.0
    """where an output matched only within the runtime's own spread (:class:`Spread`), the largest such spread"""


SPREAD_FACTOR = 2.0
"""a candidate's output may differ from the original's by at most this many times as much as onnxruntime's run of
the original without its graph optimizations does (:class:`Spread`)"""


class Spread:
    """How far onnxruntime's own graph optimizations move the original's outputs: the original run as written (no
    fusion, no constant folding) beside the reference, which runs it optimized. In a float32 graph the two agree to
    rounding, far inside :func:`compare_outputs`' tolerance; in a float16 graph, or one that quantizes its
    activations at run time, they do not (a sum reordered before a quantizer moves a value across a quantization
    step: a dynamically quantized BERT's differ by up to 1.3e-2, a per-channel LLaMA's by 0 to 2.7e-2 from one draw to
    the next), and a program eqsat writes, run optimized, moves them as much (its import alone, no rule applied:
    8.4e-3, the original refused before). Such an output matches where its error is at most :data:`SPREAD_FACTOR`
    times the widest spread of the original's on the draws at those input shapes, with its NaNs and infinities where
    the original's are: the runtime gives no closer answer for the user's own model. Made only where an output
    fails the tolerance (one more run of the original on each of those draws, kept for the next candidates)."""

    def __init__(self, original: onnx.ModelProto):
        self.original = original
        self._session: ort.InferenceSession | None = None
        self._outs: dict[int, list | None] = {}
        self.largest = 0.0
        """the largest spread an output was allowed so far"""

    def allows(self, draws: Sequence[tuple[dict[str, np.ndarray], Sequence]], index: int, ref: np.ndarray,
               got: np.ndarray, nan_spreads: bool = False) -> bool:
        """Whether output ``index`` of a program (``got``) is the original's (``ref``) within the runtime's own
        spread over ``draws`` (each draw's inputs and the original's outputs on them, the draw ``got`` ran on among
        them)."""
        if ref.dtype.kind != "f" or got.dtype.kind != "f":
            return False
        _ok, err, _rel = compare_outputs(ref, got, nan_spreads)
        if not np.isfinite(err):  # NaNs or infinities elsewhere than the original's: no spread excuses that
            return False
        widest = 0.0
        for feeds, outs in draws:
            off = self._unoptimized(feeds)
            if off is not None and index < len(off) and index < len(outs):
                spread = compare_outputs(np.asarray(outs[index]), np.asarray(off[index]))[1]
                widest = max(widest, spread) if np.isfinite(spread) else widest
        if err > SPREAD_FACTOR * widest:
            return False
        self.largest = max(self.largest, widest)
        return True

    def _unoptimized(self, feeds: dict[str, np.ndarray]) -> list | None:
        key = id(feeds)  # (each draw's feeds are held by the verifier for as long as this is)
        if key not in self._outs:
            try:
                if self._session is None:
                    self._session = session(self.original, prepacking=False, optimized=False)
                with np.errstate(all="ignore"):
                    self._outs[key] = list(self._session.run(None, feeds, QUIET))
            except MemoryError:
                raise
            except Exception:  # noqa: BLE001 - onnxruntime's errors have no common type: no spread known
                self._outs[key] = None
        return self._outs[key]

    def close(self) -> None:
        self._session, self._outs = None, {}


def compare_outputs(ref: np.ndarray, got: np.ndarray, nan_spreads: bool = False) -> tuple[bool, float, float]:
    """Pass iff NaNs and infinities sit at the same positions (same signs) and, elsewhere,
    |got - ref| <= atol + rtol |ref|; tolerances from the dtype and the magnitude of the finite outputs.
    ``nan_spreads`` (a NaN or an infinity was fed): ``got`` may also be NaN where ``ref`` is not (a NaN reaching
    more places, or an infinity multiplied by a kernel's zero, as when a kernel is enlarged with zeros to merge
    two: the equivalence contract, docs/robustness.md), never a number or an infinity where ``ref`` is NaN. Returns (passed, max abs error, max rel error), errors over the finite positions (inf on
    a mismatch)."""
    if ref.shape != got.shape:
        return False, float("inf"), float("inf")
    if ref.dtype.kind != "f" or got.dtype.kind != "f":
        ok = bool(np.array_equal(ref, got))
        return ok, 0.0 if ok else float("inf"), 0.0 if ok else float("inf")
    if np.isfinite(ref).all() and np.isfinite(got).all():  # the common case, in fewer passes (a model's logits)
        return _compare_finite(ref.astype(np.float64), got.astype(np.float64), _RTOL.get(ref.dtype.name, 1e-3))
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    if nan_spreads:  # a NaN of got's where ref has none is excused; ref's NaNs must stay NaN
        kept = ~(np.isnan(got64) & ~np.isnan(ref64))
        ref64, got64 = ref64[kept], got64[kept]
    finite = np.isfinite(ref64)
    same_special = np.array_equal(np.isnan(ref64), np.isnan(got64)) and np.array_equal(finite, np.isfinite(got64)) \
        and np.array_equal(ref64[np.isinf(ref64)], got64[np.isinf(got64)])
    if not same_special:
        return False, float("inf"), float("inf")
    return _compare_finite(ref64[finite], got64[finite], _RTOL.get(ref.dtype.name, 1e-3))


def _compare_finite(ref64: np.ndarray, got64: np.ndarray, rtol: float) -> tuple[bool, float, float]:
    """:func:`compare_outputs` of finite float64 values: |got - ref| <= atol + rtol |ref|, atol a tenth of rtol of
    the largest |ref|; the relative error is over that largest |ref| (no |ref| exceeds it)."""
    if not ref64.size:
        return True, 0.0, 0.0
    size = np.abs(ref64)
    scale = float(size.max())
    atol = rtol * max(scale, 1e-6) * 0.1
    err = np.abs(got64 - ref64, out=got64)  # got64 is a copy made for this comparison
    max_abs = float(err.max())
    max_rel = max_abs / max(scale, 1e-12)
    size *= rtol
    size += atol
    ok = bool(np.all(err <= size))
    return ok, max_abs, max_rel


def _on(label: str) -> str:
    return "" if label == "random" else f" on inputs with {label}"


def _difference(ref: np.ndarray, got: np.ndarray) -> str:
    """How ``got`` differs from ``ref`` (:func:`compare_outputs` failed): where the NaNs or infinities differ, or
    the largest errors."""
    if ref.shape != got.shape:
        return f"shape {got.shape} vs {ref.shape}"
    if ref.dtype.kind == "f" and got.dtype.kind == "f":
        ref_nan, got_nan = np.isnan(ref), np.isnan(got)
        if not np.array_equal(ref_nan, got_nan):
            return (f"the original gives NaN at {int(ref_nan.sum())} places, this program at {int(got_nan.sum())} "
                    f"({int((ref_nan & ~got_nan).sum())} of the original's NaNs made numbers)")
        ref_inf, got_inf = np.isinf(ref), np.isinf(got)
        if not np.array_equal(ref_inf, got_inf) or not np.array_equal(ref[ref_inf], got[got_inf]):
            return (f"the original gives an infinity at {int(ref_inf.sum())} places, this program at "
                    f"{int(got_inf.sum())}")
    _ok, e_abs, e_rel = compare_outputs(ref, got)
    return f"max abs error {e_abs:.3g}, max rel error {e_rel:.3g}"
