"""The ONNX layer.

* Reading and writing: reading a model (:mod:`.reading`), the checks and preparation before any work
  (:mod:`.prepare`; a model whose outputs are random refused, :mod:`.determinism`), writing models (:mod:`.io`,
  staged in :mod:`.staging`, the input's metadata kept by :mod:`.metadata`; weights in a file beside the model, or
  set aside for onnx's tools, :mod:`.external`), the run's one copy of the weights shared by every session
  (:mod:`.pool`), the memory a run takes, estimated before it runs (:mod:`.footprint`).
* ONNX -> IR (:mod:`.importer`), through the operator table's mappers (:data:`eqsat.ops.IMPORTS`), with the
  composites of :mod:`.patterns`, what onnxruntime folds and types in :mod:`.folding`, a sliding window's output
  lengths as onnxruntime computes them (:mod:`.windows`) and operands that change nothing dropped (:mod:`.neutral`).
* IR -> ONNX (:mod:`.export`), in the spellings of :mod:`.forms`, for onnxruntime's CPU fusions (:mod:`.fusions`);
  runtime kernels of a newer opset through the opset upgrade of :mod:`.kernels`; a written program's masked Softmax
  scores floored by :mod:`.softmax_floor`. Subgraph attributes (:mod:`.subgraphs`) and the provenance of imported
  nodes (:mod:`.origins`).
* Passes on the whole model, outside the e-graph: routed expert products in their dense form (:mod:`.experts`), a
  mixture of experts' block as onnxruntime's ``MoE`` kernel (:mod:`.moe`); where a model rounds coarsely, so that a
  candidate differing there is left out (:mod:`.rounding`).
* Dynamic axes: the interface and its representative sizes (:mod:`.axes.interface`), symbols tied to others
  (:mod:`.axes.tied`), inputs read at their head only (:mod:`.axes.heads`), sizes as monomials of its symbols
  (:mod:`.axes.symbolic`), the IR's symbolic dimensions at import (:mod:`.axes.dimensions`, reading Reshape targets with
  :mod:`.axes.targets`), the shape vectors read off the nodes without a run (:mod:`.axes.shape_values`), sizes fitted from
  runs (:mod:`.axes.fitting`), the values computed from shapes alone and pruning (:mod:`.axes.dataflow`), the Shape
  computations kept live (:mod:`.axes.live`), the sizes past a constant axis that a model slices to a computed end,
  verified there too (:mod:`.axes.beyond`), and the branches of a written program's table guards (:mod:`.axes.branches`).

The shape-generic writer sits above this layer, in :mod:`eqsat.generic`; this layer never imports it: a generic
import that starts from its forms is given that rewrite as an argument (``import_model(simplify=...)``:
:func:`eqsat.generic.import_generic`).

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
