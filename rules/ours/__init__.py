"""Our rules beyond TASO's, one family per module, each exporting ``rules``."""

from __future__ import annotations

from . import fusion, layout, merge

rules = [*fusion.rules, *layout.rules, *merge.rules]

__all__ = ["rules"]
