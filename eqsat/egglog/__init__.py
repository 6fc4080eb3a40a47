"""Everything that speaks egglog: the schema of the tensor language (:mod:`.schema`), the one codec that
writes and reads IR terms in egglog (:mod:`.codec`) and the runtime wrapper (:mod:`.egraph`, the
:class:`EGraph` class). The frozen e-graph they produce, :class:`eqsat.snapshot.Snapshot`, is plain data and
lives outside (extractors and cost models read it without importing egglog)."""

from __future__ import annotations

from .codec import Encoding
from .egraph import EGraph, Size, egglog_guard

__all__ = ["EGraph", "Encoding", "Size", "egglog_guard"]
