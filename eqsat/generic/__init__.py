"""The shape-generic writer: a program exported at one representative shape rewritten to work at every size of the
interface's symbols, with the original's interface (:func:`make_generic`); and the forms the importer starts a
dynamic-axes model from (:func:`simplify_for_import`).
"""

from __future__ import annotations

from .rewrite import Generic, make_generic, simplify_for_import

__all__ = ["Generic", "make_generic", "simplify_for_import"]
