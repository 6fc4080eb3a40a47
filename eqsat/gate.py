"""The shipping gate's statistics.

>>> family_confidence(0.95, 4)
0.9875
"""

from __future__ import annotations


def family_confidence(confidence: float, comparisons: int) -> float:
    """The confidence of each of ``comparisons`` intervals so that all hold together with ``confidence``."""
    return 1 - (1 - confidence) / max(comparisons, 1)


__all__ = ["family_confidence"]
