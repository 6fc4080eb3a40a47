"""A run's own state (one :func:`eqsat.app.pipeline.optimize` call): the scopes the layers below read while the run
lasts, entered together, in one place, and held by one object (:class:`RunScope`).

- **the weight pool** (:mod:`eqsat.onnx.pool`): every onnxruntime session of the run reads its weights from one
  copy, whose memory the run gives back at its end;
- **the symbol table** (:func:`eqsat.dims.symbol_table`): the run's symbolic dimensions numbered apart from another
  run's (an IR graph given as the model was imported in its caller's table, where its Dims are read: that one);
- **the runs' memory limit** (:func:`eqsat.onnx.footprint.limited`): a run at sizes whose memory would not fit is
  left out;
- **the original's facts** (:func:`eqsat.generic.carried`): what the import's shape-generic rewrite of the model
  learnt of it, read by every candidate's rewrite instead of runs.

Each is a context variable of the layer that reads it (an onnxruntime session, a ``Dim``, a run deep in the
writer), so that the calls between need not pass it on; the pipeline reads what each is for this run from here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from eqsat import dims
from eqsat.generic import carried
from eqsat.onnx import footprint, pool


@dataclass(frozen=True)
class RunScope:
    """The state of one run, current while :meth:`entered` holds."""

    weights: pool.WeightPool
    symbols: dims.SymbolTable
    limit: footprint.Limit

    @classmethod
    @contextlib.contextmanager
    def entered(cls, own_symbols: bool = True) -> Iterator[RunScope]:
        """The run's scopes entered (an enclosing weight pool reused); ``own_symbols``: False where the model is an
        IR graph imported in the caller's symbol table, which stays in use."""
        with contextlib.ExitStack() as stack:
            weights = stack.enter_context(pool.pooled())
            symbols = stack.enter_context(dims.symbol_table()) if own_symbols else dims.current()
            limit = stack.enter_context(footprint.limited())
            stack.enter_context(carried())
            yield cls(weights, symbols, limit)


__all__ = ["RunScope"]
