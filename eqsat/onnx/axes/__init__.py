"""A dynamic-axes model's sizes as symbols: what the import, the shape-generic writer (:mod:`eqsat.generic`) and the
verification share about the axes a user's model leaves dynamic.

- The interface: its inputs and outputs, their symbols and representative sizes, the sizes a program is checked
  at (:mod:`.interface`); symbols tied to others though their names do not say so (:mod:`.tied`), and inputs a
  program then reads at their head only (:mod:`.heads`).
- Sizes as monomials of the symbols (:class:`eqsat.dims.Mono`): each value's shape by onnx's inference completed
  with monomial arithmetic (:mod:`.symbolic`), the small integer vectors a model computes from its shapes read
  off its nodes (:mod:`.shape_values`), the IR's symbolic dimensions at import (:mod:`.dimensions`) and the
  symbols a Reshape target stands for (:mod:`.targets`).
- What only a run shows: sizes and vectors fitted from runs at several sizes (:mod:`.fitting`).
- The Shape computations: which values are computed from shapes alone, and pruning (:mod:`.dataflow`), which
  must stay in the program (:mod:`.live`).
- Checks of a written program: the branches of its table guards as models of their own (:mod:`.branches`), the
  sizes past each constant axis the original slices to a computed end (:mod:`.beyond`), the smallest size the
  original runs at where the default sizes all lie below it (:mod:`.smallest`: a front end's one frame).

Part of the ONNX layer (:mod:`eqsat.onnx`): these modules import the layer's others (reading, running, folding),
and the layer's importer reads them.
"""
