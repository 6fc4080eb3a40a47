"""How well a cost model predicts measured speedups: Spearman's rank correlation and the mean absolute error.

>>> spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0])
0.5
>>> round(mean_abs_error([1.0, 1.1], [1.0, 1.0]), 3)
0.05
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing their average rank."""
    x = np.asarray(values, float)
    order = np.argsort(x, kind="stable")
    out = np.empty(x.size)
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and x[order[j + 1]] == x[order[i]]:
            j += 1
        out[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long series (Pearson's of their tie-averaged ranks); NaN
    when either series is constant or shorter than 2."""
    if len(a) != len(b):
        raise ValueError(f"need two equally long series, got {len(a)} and {len(b)}")
    if len(a) < 2:
        return math.nan
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denom) if denom > 0 else math.nan


def mean_abs_error(estimated: Sequence[float], measured: Sequence[float]) -> float:
    """Mean of |estimated - measured| (speedups: 0.05 is five percentage points)."""
    if len(estimated) != len(measured) or not len(estimated):
        raise ValueError(f"need two equally long, non-empty series, got {len(estimated)} and {len(measured)}")
    return float(np.mean(np.abs(np.asarray(estimated, float) - np.asarray(measured, float))))
