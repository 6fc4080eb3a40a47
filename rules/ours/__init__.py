"""Our rules beyond TASO's, one family per module, each exporting ``rules``."""

from __future__ import annotations

from . import attention, flatten, fusion, kernels, layout, linear, merge, scale, spelling

rules = [*fusion.rules, *layout.rules, *flatten.rules, *merge.rules, *linear.rules, *scale.rules, *attention.rules,
         *spelling.rules, *kernels.rules]

__all__ = ["rules"]
