"""The shape-generic writer: a program exported at one representative shape (its Reshape targets and Slice bounds
are numbers: :mod:`eqsat.onnx.axes.interface`) rewritten so that it works for every value of the interface's symbols,
with the original's interface (names, element types, ``dim_param`` names).

The API:

- :func:`make_generic` ``(model, original, values, facts=None) ->`` :class:`Generic` (``.model``, ``.notes``): a
  candidate as written for the user (:mod:`eqsat.app.shaping`); ``facts``, an :class:`Original` made once per
  model (:meth:`Original.of`: within a run's :func:`carried` scope, the import's own), carries what runs of the original
  showed from one candidate to the next (:mod:`.original`). The notes say what could not be written shape-generic; the
  result is a best effort, which :func:`eqsat.verification.verify_shapes` runs at several values of each symbol (a
  program that fails at any is not written).
- :func:`import_generic` ``(model, input_shapes, source=None) ->`` :class:`eqsat.ir.Graph`: a generic import, the
  IR read (:func:`eqsat.onnx.import_model`) from the forms :func:`simplify_for_import` ``(model, input_shapes) ->
  model | None`` gives the model's computations from its shapes (:mod:`.importing`), so that the e-graph starts
  near the static program's size.

The writer sits above the ONNX layer (:mod:`eqsat.onnx`: the interface, symbolic sizes, runs that fit sizes,
dataflow, Reshape targets, the guards' form) and below the app; the ONNX layer never imports it (a generic import's
rewrite is passed to :func:`eqsat.onnx.import_model` as an argument).

The flow (:func:`.rewrite.run`, over one :class:`.state.Rewrite`: the program being written, each value's shape as
monomials of the symbols (:mod:`eqsat.onnx.axes.symbolic`), and what each pass learns):

1. **annotate** (:mod:`.annotate`): the original's interface declared, its inputs' shapes read as symbols;
2. **probes** (:mod:`.probes`): the values computed from the shapes alone, those the data reads, and the small
   constants the original computes from its shapes (read off runs of the original at further sizes, once per
   model: :mod:`.original`); a table of the sizes that the candidate holds folded and that changes with them (a
   rotary table over an image's patch grid) computed by a copy of the original's nodes (:mod:`.recompute`);
3. **the walk** (:func:`.rewrite.write_node`): each node in order, through the passes that take it:

   - **Gemm forms** (:mod:`.gemm`): a MatMul by a constant and its bias a Gemm between two Reshapes;
   - **targets and slices** (:mod:`.reshapes`): a ``Shape`` of a value of known symbolic shape read from the
     inputs' shapes; a Reshape target (read off the vector that computes it, the original's runs, or its input's
     symbolic shape: :func:`eqsat.onnx.axes.targets.reshape_target`; where the original's targets of the same
     entries read the symbols two ways, the one whose Reshape holds the same elements: :mod:`.provenance`) written
     with ``0`` and ``-1`` and the rest from the inputs' shapes (:mod:`.sizes`: a constant, an input's ``Shape``,
     Gathers of its sizes and a Concat), the targets back to ``[batch, seq, N]`` one vector ``[batch, seq, -1]`` (or ``[-1, seq, N]`` where that is one
     node fewer); a Reshape of a Reshape reads the first one's input, one to its input's own shape is dropped; a
     Split of rows reshaped to ``[batch, seq, 3*hidden]`` splits the rows; an Expand target written with 1 where
     the input has the size; a Slice to the end of a symbolic axis runs to its end at any size;
   - **strided sizes** (:mod:`.strided`): a strided Conv's or pooling's output along a symbolic axis, and a Slice
     that drops a constant count from one, typed by their arithmetic (an opaque symbol that carries it: an audio
     front-end's frames), not fitted from runs of the program so far;
   - **the original's sizes read exactly** (:mod:`.typed_original`): a small vector the import folded that no run
     fits (a size of the frames: a Slice of the data to them, read off another value), read off the original typed
     once by the same arithmetic (:mod:`.affine` for exact sums of a size and a constant), each of its opaque
     symbols the candidate's of the same arithmetic (:attr:`.state.Fits.canon`);
   - **values computed from the shapes alone** (:mod:`.values`, the patterns of :mod:`.uniform` and
     :mod:`.tables`): one slice repeated along the symbolic axes is that slice, a Gather at each element's flat
     (multi-) index a Reshape, a causal mask a Trilu, position ids, rotary tables or a position embedding's rows a
     Slice of a constant table; an ``And`` with all true is dropped;

4. **tables and guards** (:mod:`.values`' ``unexpand``, :mod:`.guards`; a candidate only): an Expand its readers
   broadcast anyway dropped; a table that stops below the sizes the user's program accepts guarded by an ``If``
   whose else-branch computes the value as the user's program does;
5. **prune** (:func:`eqsat.onnx.axes.dataflow.prune`): the chains no longer read;
6. **annotate** (:func:`.annotate.annotate`): the inner values' symbolic shapes as ``value_info``, in a program
   eqsat reads again only: a candidate written for the user carries none, as onnxruntime runs a program faster
   without them (its memory planner; the fusions that compare shapes, SkipLayerNormalization among them, slower
   here than what they replace).

What a rewrite writes is its :class:`.state.Forms`: every form for a candidate (``EXPORT``), every form but the
Gemm forms and the final pass for a model the importer reads again (``IMPORT``), or only the tables (``TABLES``).
As many kernels as the static program, size computations included, is the aim (``tests/generic/test_generic_rows.py``).
"""

from __future__ import annotations

from .importing import import_generic
from .original import Original, carried
from .rewrite import Generic, make_generic, simplify_for_import

__all__ = ["Generic", "Original", "carried", "import_generic", "make_generic", "simplify_for_import"]
