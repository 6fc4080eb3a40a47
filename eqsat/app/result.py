"""What :func:`eqsat.app.pipeline.optimize` returns: the input and returned models, the returned program and the
typed report, with the run's weight pool behind the models (their data given back only where asked)."""

from __future__ import annotations

import onnx

from eqsat.ir import Graph
from eqsat.onnx import io as onnx_io
from eqsat.onnx import pool

from .report import Report


class Result:
    """What an optimization produced: the input and returned models, the returned program, the typed report.

    ``original`` and ``optimized`` are self-contained ModelProtos. Where the run kept them as references into its
    weight pool (a model read from a path; every candidate), each gets its data back on first access only, so that
    a caller that writes the result (:meth:`write`, the CLI) never holds a copy of the weights in protobuf: the
    writer reads them from the pool a tensor at a time."""

    def __init__(self, original: onnx.ModelProto, optimized: onnx.ModelProto, graph: Graph, report: Report,
                 weights: pool.WeightPool | None = None):
        self._original, self._optimized = original, optimized
        self.graph, self.report = graph, report
        self.weights = weights
        """the run's weight pool where the models may refer to it (its file removed: the mapped arrays stay)"""

    def _restored(self, model: onnx.ModelProto) -> onnx.ModelProto:
        if self.weights is not None and self.weights.refers(model):
            self.weights.restore(model)
        return model

    @property
    def original(self) -> onnx.ModelProto:
        """The input model, self-contained (its data restored from the run's pool on first access)."""
        return self._restored(self._original)

    @original.setter
    def original(self, model: onnx.ModelProto) -> None:
        self._original = model

    @property
    def optimized(self) -> onnx.ModelProto:
        """The returned model (the original where no candidate shipped), self-contained (restored on first access)."""
        return self._restored(self._optimized)

    @optimized.setter
    def optimized(self, model: onnx.ModelProto) -> None:
        self._optimized = model

    def writes_data_file(self, external: bool = False) -> bool:
        """Whether :meth:`write` (``external`` asked or not) writes the weights to a data file beside the model."""
        return onnx_io.writes_data_file(self._optimized, external, self.weights)

    def write(self, path: str, others: dict[str, bytes] | None = None, external: bool = False) -> None:
        """Write the returned model to ``path`` (with ``others``, all or none: :func:`eqsat.onnx.io.write_together`),
        its weights read from the run's pool a tensor at a time where it refers to them: the same bytes as
        writing :attr:`optimized`, without restoring it."""
        onnx_io.write_together(self._optimized, path, others or {}, external, self.weights)

    def __getstate__(self) -> dict[str, object]:
        """A pickle or deep copy takes the models with their data (restored), not the pool: its mapped arrays and
        onnxruntime values do not cross a process, and its file is gone once the run ends."""
        return {"original": self.original, "optimized": self.optimized, "graph": self.graph, "report": self.report}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["original"], state["optimized"], state["graph"], state["report"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"Result(graph={self.graph.name!r}, returned={self.report.returned.program!r})"


__all__ = ["Result"]
