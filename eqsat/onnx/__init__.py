"""The ONNX layer: reading a model (:mod:`.reading`), the checks and preparation before any work (:mod:`.prepare`),
writing models (:mod:`.io`, staged in :mod:`.staging`, the input's metadata kept by :mod:`.metadata`), the run's one copy of
the weights shared by every session (:mod:`.pool`), ONNX -> IR (:mod:`.importer`, through the
operator table's mappers (:data:`eqsat.ops.IMPORTS`), with the composites of :mod:`.patterns` and what onnxruntime
folds and types in :mod:`.folding`), IR -> ONNX (:mod:`.export`, in the spellings of :mod:`.forms`; runtime kernels of a
newer opset through the opset upgrade of :mod:`.kernels`; a written program's masked Softmax scores floored by
:mod:`.softmax_floor`), subgraph
attributes (:mod:`.subgraphs`) and the provenance of imported nodes (:mod:`.origins`). Dynamic axes: the interface
and its representative sizes (:mod:`.interface`), sizes as monomials of its symbols (:mod:`.symbolic`), the IR's
symbolic dimensions at import (:mod:`.dimensions`, reading Reshape targets with :mod:`.targets`), sizes fitted from
runs (:mod:`.fitting`), the values computed from shapes alone and pruning (:mod:`.dataflow`), the Shape computations
kept live (:mod:`.live`) and the branches of a written program's table guards (:mod:`.branches`).

The shape-generic writer sits above this layer, in :mod:`eqsat.generic`; this layer imports it once, where a generic
import starts from its forms (:func:`.importer.simplified`).

Inside this package ``import onnx`` is the onnx library (imports are absolute); elsewhere, import this layer by
name (``from eqsat.onnx import import_model``), never as ``from eqsat import onnx``.
"""

from __future__ import annotations

from .export import export_model, fold_weights
from .importer import import_model, parse_input_shapes
from .io import as_path, check, is_large, save, session, weight_bytes, write_atomic, write_together
from .patterns import Match, find_composites
from .pool import WeightPool, pooled
from .reading import load_model

__all__ = ["Match", "WeightPool", "as_path", "check", "export_model", "find_composites", "fold_weights", "import_model",
           "is_large", "load_model", "parse_input_shapes", "pooled", "save", "session", "weight_bytes", "write_atomic",
           "write_together"]
