"""The shape-generic program runs as fast as the static one: the forms :mod:`eqsat.generic` writes
are the ones onnxruntime optimizes as well as constant shapes. Shape vectors computed from the inputs' shapes
(Shape, Gather, Unsqueeze, Concat, the Where/Equal of torch's ``expand(-1)``) are read off runs and written once
from the symbols (constants where they are, Reshape targets with 0 and -1, an Expand to its input's own shape
dropped). A program written for the user carries no inner shapes (``value_info``): onnxruntime then runs its
residual adds beside their LayerNormalization instead of fusing them (its fused kernel is slower on the CPU), and
plans its memory at run time; the import's rewrite, which eqsat reads again, keeps them. Oracles: onnxruntime's own
optimized graph of the static program (its kernel multiset), and the original model run in onnxruntime at several
sizes of each axis."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_builders as ob
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper

from eqsat.dims import Mono
from eqsat.generic import import_generic, make_generic, simplify_for_import
from eqsat.onnx import export_model, import_model, session
from eqsat.onnx.axes.dataflow import prune, shape_only
from eqsat.onnx.axes.fitting import fit_vectors, run_values

SIZES = [(1, 16), (2, 16), (3, 16), (2, 1), (2, 7), (3, 37)]
"""(batch, seq): the representative shape and 2+ further sizes of each axis"""

MATRIX = {"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}
NORMS = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
         "SkipSimplifiedLayerNormalization"}


def _feeds(name: str, b: int, s: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return zoo.sized_feeds(name, rng, b, s)


def _shape_chain_depth(model: onnx.ModelProto) -> int:
    """The longest chain of nodes computing a small integer value from the inputs' shapes alone (Shape,
    Concat: 2; Shape, Gather, Unsqueeze, Concat, Equal, Where: 6)."""
    g = model.graph
    only = shape_only(model)
    small: set[str] = set()
    for vi in g.value_info:
        tt = vi.type.tensor_type
        if vi.name in only and tt.elem_type == TensorProto.INT64 and len(tt.shape.dim) <= 1:
            small.add(vi.name)
    depth: dict[str, int] = {}
    for node in g.node:
        if node.op_type == "Shape":
            depth.update({o: 1 for o in node.output})
        elif any(o in small for o in node.output):
            d = 1 + max((depth.get(i, 0) for i in node.input), default=0)
            depth.update({o: d for o in node.output})
    return max(depth.values(), default=0)


@pytest.mark.parametrize("name,exporter", [("bert", "torchscript"), ("bert", "dynamo"), ("gpt2", "torchscript")])
def test_generic_and_static_programs_run_the_same_kernels_after_onnxruntime(name, exporter, tmp_path):
    model = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    static = export_model(import_model(model, shapes))
    written = make_generic(export_model(import_generic(model, shapes)), model, {"batch": 1, "seq": 16})
    assert not [n for n in written.notes if not n.startswith("output")]  # (an output axis the exporter left named)
    generic = written.model
    assert not generic.graph.value_info  # written for the user: no inner shapes
    read_again = simplify_for_import(model, shapes)  # the import's rewrite: its symbolic shapes kept for the importer
    assert read_again is not None and any(d.dim_param for vi in read_again.graph.value_info
                                          for d in vi.type.tensor_type.shape.dim)
    ks, kg = ob.ort_kernels(static), ob.ort_kernels(generic)
    unfused = ks["SkipLayerNormalization"] - kg["SkipLayerNormalization"]  # each an Add beside its LayerNormalization
    assert unfused >= 0
    if name == "bert":  # the encoder: no more kernels than the static program but the size computations, the
        # residual adds onnxruntime fuses only where it knows the shapes, and the embeddings' sum (below)
        sizing = ("Shape", "Slice", "Concat", "Unsqueeze", "Gather")
        assert sum(v for k, v in kg.items() if k not in sizing) <= \
            sum(v for k, v in ks.items() if k not in sizing) + unfused + 1, (kg, ks)
    # onnxruntime's fusions fire on both: the same matrix products, attention, softmax, normalizations
    assert sum(kg[op] for op in MATRIX) == sum(ks[op] for op in MATRIX)
    for op in ("Gemm", "FusedGemm", "Attention", "Softmax", "Transpose", "Split", "Gelu", "BiasGelu", "FastGelu"):
        assert kg[op] == ks[op], op  # Gemm: the bias added in the product (eqsat.generic.gemm), as on static shapes
    assert sum(kg[op] for op in NORMS) == sum(ks[op] for op in NORMS)
    # the residual adds onnxruntime fused on the static program run as Adds here (and nothing else is an Add more)
    assert kg["Add"] - ks["Add"] <= unfused + 1
    # the shape computations: each size one Shape of an input (with start and end), at most a Concat away from it
    assert kg["Shape"] + kg["Gather"] - ks["Gather"] <= 3 and kg["Equal"] == ks["Equal"]
    assert kg["Unsqueeze"] <= ks["Unsqueeze"] + 7
    assert _shape_chain_depth(generic) <= 2
    # both match the original (the generic one at every size, the static one at its own)
    ref, got_g, got_s = session(model), session(generic), session(static)
    rng = np.random.default_rng(0)
    for b, s in SIZES:
        feeds = _feeds(name, b, s, rng)
        expected = ref.run(None, feeds)
        for want, have in zip(expected, got_g.run(None, feeds)):
            assert have.shape == want.shape and have.shape[0] == b
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
        if (b, s) == (1, 16):
            for want, have in zip(expected, got_s.run(None, feeds)):
                np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


def _torch_style_model() -> onnx.ModelProto:
    """x[batch, seq, 32] split into heads the way torch exports it: the target computed from Shape (Gather,
    Unsqueeze, Concat) with allowzero; an Expand to the value's own shape (torch's ``expand(-1, ...)``: Equal
    against -1, Where); a Reshape back to [batch, seq, 32] from the same computation."""
    def const(name: str, *values: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    scalar0, scalar1 = (numpy_helper.from_array(np.array(v, np.int64), f"i{v}") for v in (0, 1))
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["s1"]),
             helper.make_node("Concat", ["b1", "s1", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["split"], allowzero=1),
             helper.make_node("Concat", ["b1", "minus", "s1", "minus"], ["wanted"], axis=0),
             helper.make_node("Equal", ["wanted", "minus4"], ["unset"]),
             helper.make_node("Where", ["unset", "ones4", "wanted"], ["size"]),
             helper.make_node("Transpose", ["split"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Expand", ["t", "size"], ["e"]),
             helper.make_node("Softmax", ["e"], ["p"], axis=-1),
             helper.make_node("Transpose", ["p"], ["q"], perm=[0, 2, 1, 3]),
             helper.make_node("Concat", ["b1", "s1", "width"], ["back"], axis=0),
             helper.make_node("Reshape", ["q", "back"], ["y"])]
    inits = [scalar0, scalar1, const("zero", 0), const("heads", 4, 8), const("minus", -1),
             const("minus4", -1, -1, -1, -1), const("ones4", 1, 1, 1, 1), const("width", 32)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 32])
    return helper.make_model(helper.make_graph(nodes, "heads", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_shape_vectors_are_written_from_the_symbols_and_the_chains_that_computed_them_go():
    model = _torch_style_model()
    written = make_generic(model, model, {"batch": 1, "seq": 8})
    g = written.model.graph
    ops = collections.Counter(n.op_type for n in g.node)
    assert ops["Unsqueeze"] == ops["Equal"] == ops["Where"] == ops["Expand"] == ops["Concat"] == 0, ops
    assert ops["Shape"] == ops["Gather"] == 0  # both targets need no size at run time
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in g.initializer}
    targets = [consts[n.input[1]] for n in g.node if n.op_type == "Reshape"]
    assert targets == [[0, 0, 4, 8], [0, 0, 32]]
    assert all(a.name != "allowzero" or a.i == 0 for n in g.node for a in n.attribute)
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(1)
    for b, s in [(1, 8), (2, 8), (3, 8), (2, 1), (2, 5), (4, 33)]:
        x = rng.standard_normal((b, s, 32)).astype(np.float32)
        (want,), (have,) = ref.run(None, {"x": x}), got.run(None, {"x": x})
        assert have.shape == want.shape == (b, s, 32)
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def test_a_size_clamped_above_the_tuned_one_is_fitted_from_sizes_below():
    """A position table of 64 rows sliced to the sequence length: above 64 the Slice clamps (its shape stays
    64) while the model refuses those sizes further on; the fit reads the sizes below and checks at 1 and 32."""
    table = numpy_helper.from_array(np.arange(64, dtype=np.int64).reshape(1, 64), "table")
    nodes = [helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "two"], ["seq"]),
             helper.make_node("Slice", ["table", "zero", "seq", "one"], ["positions"]),
             helper.make_node("Shape", ["positions"], ["sizes"]),
             helper.make_node("Concat", ["sizes", "minus"], ["target"], axis=0)]
    inits = [table, *(numpy_helper.from_array(np.array([v], np.int64), n)
                      for n, v in [("zero", 0), ("one", 1), ("two", 2), ("minus", -1)])]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("target", TensorProto.INT64, [3])
    model = helper.make_model(helper.make_graph(nodes, "clamp", [ids], [out], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    assert {"shape", "seq", "positions", "sizes", "target"} <= shape_only(model)
    run = run_values(model, ["sizes", "target", "positions"], shapes=False)
    assert run({"batch": 1, "seq": 66})[0] == [1, 64]  # clamped: read from above, 64 would look constant
    fitted = fit_vectors(run, {"batch": 1, "seq": 64})
    assert fitted is not None
    seq = Mono.symbol("seq")
    assert fitted[0] == [Mono.const(1), seq]
    assert fitted[1] == [Mono.const(1), seq, Mono.const(-1)]  # -1 agrees in every run: a constant
    assert fitted[2] == [None] * 64  # its length changes with seq: not a vector of fixed entries


def test_a_slice_from_minus_the_length_is_written_from_the_symbols():
    """LFM2's convolutions read the mask's last ``seq`` columns (``mask[:, -seq:]``, the start ``Neg`` of the
    hidden states' length): the start, folded at 16, is ``-seq`` at every length (a negative entry was fitted by no
    monomial, so the program kept -16 and failed above 16: no program for every size, input returned); a start of
    ``-seq / 4`` is no entry a program computes alike (it divides toward zero): not written from the symbols."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["h"]), helper.make_node("Shape", ["h"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Neg", ["seq"], ["minus"]),
             helper.make_node("Unsqueeze", ["minus", "zero"], ["start"]),
             helper.make_node("Slice", ["mask", "start", "last", "one_v"], ["tail"]),
             helper.make_node("Cast", ["tail"], ["tail_f"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["tail_f", "minus_one"], ["m"]),
             helper.make_node("Mul", ["h", "m"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("one", 1), ("zero", [0]), ("last", [2 ** 62]), ("one_v", [1]), ("minus_one", [-1])]]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])
    model = helper.make_model(helper.make_graph(nodes, "tail", [x, mask], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    written = make_generic(export_model(import_generic(model, {"x": (1, 16, 8), "mask": (1, 16)})),
                           model, {"batch": 1, "seq": 16})
    want, got = session(model), session(written.model)
    rng = np.random.default_rng(0)
    for b, n in [(1, 16), (2, 40), (1, 3), (3, 17)]:
        feeds = {"x": rng.standard_normal((b, n, 8)).astype(np.float32),
                 "mask": rng.integers(0, 2, (b, n)).astype(np.int64)}
        np.testing.assert_array_equal(got.run(None, feeds)[0], want.run(None, feeds)[0])
    fitted = fit_vectors(lambda at: [[-at["seq"], -(at["seq"] // 4), -1]], {"batch": 1, "seq": 64})
    assert fitted == [[Mono.const(-1) * Mono.symbol("seq"), None, Mono.const(-1)]]


def test_a_quotient_by_a_symbol_divides_its_numerator():
    """A Slice from ``60 // batch``: the start, ``60 / batch`` at the sizes fitted, is written ``Div(60, batch)``
    (it was ``Mul(Div(1, batch), 60)``: 0 at a batch above 1 as ONNX defines it; onnxruntime's arithmetic fusion
    made it right in its optimized session only). Oracle: onnx's reference evaluator on the written program."""
    from onnx.reference import ReferenceEvaluator

    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in [("zero", 0), ("sixty", 60), ("zero_v", [0]), ("last", [2 ** 62]), ("axis", [1])]]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0), helper.make_node("Div", ["sixty", "b"], ["q"]),
             helper.make_node("Unsqueeze", ["q", "zero_v"], ["start"]),
             helper.make_node("Slice", ["r", "start", "last", "axis"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])
    model = helper.make_model(helper.make_graph(nodes, "quotient", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    written = make_generic(export_model(import_generic(model, {"x": (1, 64)})), model, {"batch": 1})
    want, got = session(model), ReferenceEvaluator(written.model)
    for b in (1, 2, 3, 7):
        feeds = {"x": np.random.default_rng(b).standard_normal((b, 64)).astype(np.float32)}
        np.testing.assert_array_equal(got.run(None, feeds)[0], want.run(None, feeds)[0])


def test_prune_keeps_what_the_outputs_read_and_shape_only_stops_at_the_data():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "f"], ["y"]),
             helper.make_node("Neg", ["x"], ["dead"]),
             helper.make_node("Abs", ["dead"], ["dead2"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    assert shape_only(model) == {"s", "f"}
    pruned = prune(model)
    assert [n.op_type for n in pruned.graph.node] == ["Shape", "Cast", "Add"]
    x0 = np.array([1.0, -2.0, 3.0], np.float32)
    (got,) = session(pruned).run(None, {"x": x0})
    np.testing.assert_allclose(got, x0 + 3)


def _embedding_and_mask_model(spelling: str) -> onnx.ModelProto:
    """ids[batch, seq] and mask[batch, seq] the way torch exports BERT's embeddings and mask: token types from a
    zero buffer sliced to the sequence and expanded to the batch (one row of a table, repeated), and the mask
    indexed into [batch, 1, 1, seq] from two Ranges: at ``b * seq + s`` (``flat``: the flat index of each
    element, TorchScript) or at the pairs ``(b, s)`` (``nd``: a GatherND, dynamo)."""
    rng = np.random.default_rng(2)

    def ints(name: str, *values: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [numpy_helper.from_array(rng.standard_normal((50, 8)).astype(np.float32), "words"),
             numpy_helper.from_array(rng.standard_normal((2, 8)).astype(np.float32), "types"),
             numpy_helper.from_array(np.zeros((1, 64), np.int64), "buffer"),
             numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array(1, np.int64), "i1"),
             ints("zero", 0), ints("one", 1), ints("bcast", 1, 2, 3), ints("flat", -1)]
    nodes = [helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["s1"]),
             helper.make_node("Slice", ["buffer", "zero", "s1", "one"], ["type_ids"]),
             helper.make_node("Concat", ["b1", "s1"], ["bs"], axis=0),
             helper.make_node("Expand", ["type_ids", "bs"], ["type_ids_b"]),
             helper.make_node("Gather", ["types", "type_ids_b"], ["type_rows"]),
             helper.make_node("Gather", ["words", "ids"], ["word_rows"]),
             helper.make_node("Add", ["word_rows", "type_rows"], ["emb"]),
             helper.make_node("Range", ["i0", "b", "i1"], ["rb"]),
             helper.make_node("Unsqueeze", ["rb", "bcast"], ["rb4"]),
             helper.make_node("Range", ["i0", "s", "i1"], ["rs"])]
    if spelling == "flat":
        nodes += [helper.make_node("Mul", ["rb4", "s"], ["rows"]),
                  helper.make_node("Add", ["rows", "rs"], ["index"]),
                  helper.make_node("Reshape", ["mask", "flat"], ["mask_flat"]),
                  helper.make_node("Gather", ["mask_flat", "index"], ["mask4"], axis=0)]
    else:
        nodes += [helper.make_node("Concat", ["b1", "one", "one", "s1"], ["grid"], axis=0),
                  helper.make_node("Expand", ["rb4", "grid"], ["rb_all"]),
                  helper.make_node("Expand", ["rs", "grid"], ["rs_all"]),
                  helper.make_node("Unsqueeze", ["rb_all", "flat"], ["rb_last"]),
                  helper.make_node("Unsqueeze", ["rs_all", "flat"], ["rs_last"]),
                  helper.make_node("Concat", ["rb_last", "rs_last"], ["pairs"], axis=-1),
                  helper.make_node("GatherND", ["mask", "pairs"], ["mask4"])]
    nodes += [helper.make_node("Cast", ["mask4"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["emb", "one"], ["emb4"]),
             helper.make_node("Transpose", ["maskf"], ["maskt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["emb4", "maskt"], ["y"])]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, "seq", 8])
    return helper.make_model(helper.make_graph(nodes, "embeddings", [ids, mask], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("spelling", ["flat", "nd"])
def test_a_row_repeated_along_the_symbols_is_a_constant_and_a_gather_at_each_elements_index_a_reshape(spelling):
    model = _embedding_and_mask_model(spelling)
    written = make_generic(model, model, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in written.model.graph.node)
    # the token types' row is a constant the Add broadcasts; the mask's indexing is a Reshape
    assert ops["Range"] == ops["Expand"] == ops["Slice"] == 0, ops
    assert ops["Shape"] == 0 and ops["Gather"] == 1  # the words' lookup
    assert ops["GatherND"] == ops["Concat"] == 0  # the Reshape's target: [0, 1, 1, -1] from the mask's own shape
    (reshape,) = [n for n in written.model.graph.node if "mask4" in n.output]
    assert reshape.op_type == "Reshape" and reshape.input[0] == "mask"  # (the flat spelling's Reshape folded in)
    target = next(t for t in written.model.graph.initializer if t.name == reshape.input[1])
    assert numpy_helper.to_array(target).tolist() == [0, 1, 1, -1]
    add = next(n for n in written.model.graph.node if n.op_type == "Add")
    row = next(t for t in written.model.graph.initializer if t.name in add.input)
    types = next(t for t in model.graph.initializer if t.name == "types")
    np.testing.assert_array_equal(numpy_helper.to_array(row).reshape(-1), numpy_helper.to_array(types)[0])
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(3)
    for b, s in [(1, 16), (2, 16), (3, 16), (2, 1), (2, 5), (4, 64)]:
        feeds = {"ids": rng.integers(0, 50, (b, s)).astype(np.int64),
                 "mask": rng.integers(0, 2, (b, s)).astype(np.int64)}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, 1, s, 8)
        np.testing.assert_allclose(have, want, rtol=1e-6)


def test_an_and_with_all_true_is_dropped_and_a_mul_by_ones_kept():
    """The all-true constant a torch mask is combined with goes (the static program folds it); a Mul by a scale
    of ones stays (onnxruntime's RMSNorm fusion matches it)."""
    nodes = [helper.make_node("Cast", ["mask"], ["m0"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["m0", "last"], ["m"]),
             helper.make_node("And", ["true", "m"], ["both"]),
             helper.make_node("Where", ["both", "x", "zero"], ["picked"]),
             helper.make_node("Mul", ["ones", "picked"], ["y"])]
    inits = [numpy_helper.from_array(np.ones((1, 1), bool), "true"),
             numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(np.ones(4, np.float32), "ones"),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    model = helper.make_model(helper.make_graph(nodes, "mask", [mask, x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    written = make_generic(model, model, {"batch": 2, "seq": 8})
    ops = [n.op_type for n in written.model.graph.node]
    assert "And" not in ops and "Mul" in ops, ops
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(4)
    for b, s in [(2, 8), (1, 8), (3, 8), (2, 1), (2, 5)]:
        feeds = {"mask": rng.integers(0, 2, (b, s)).astype(np.int64),
                 "x": rng.standard_normal((b, s, 4)).astype(np.float32)}
        np.testing.assert_array_equal(got.run(None, feeds)[0], ref.run(None, feeds)[0])


def _mask_chain_model(folded: bool) -> onnx.ModelProto:
    """mask[batch, seq] indexed into [batch, 1, 1, seq] the way TorchScript exports T5's mask: Flatten, a Gather at
    each element's flat index, a Reshape to [-1] and one to [batch, 1, 1, seq] (``folded``: that target a constant
    at batch 1, sequence 16, as the importer folds it), consumed by a Where."""
    def ints(name: str, *values: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array(1, np.int64), "i1"),
             ints("zero", 0), ints("one", 1), ints("bcast", 1, 2, 3), ints("flat", -1),
             numpy_helper.from_array(np.array(0.0, np.float32), "keep"),
             numpy_helper.from_array(np.array(-1e9, np.float32), "drop")]
    nodes = [helper.make_node("Shape", ["mask"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["s1"]),
             helper.make_node("Range", ["i0", "b", "i1"], ["rb"]),
             helper.make_node("Unsqueeze", ["rb", "bcast"], ["rb4"]),
             helper.make_node("Range", ["i0", "s", "i1"], ["rs"]),
             helper.make_node("Mul", ["rb4", "s"], ["rows"]),
             helper.make_node("Add", ["rows", "rs"], ["index"]),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.BOOL),
             helper.make_node("Flatten", ["m"], ["m_flat"], axis=2),
             helper.make_node("Gather", ["m_flat", "index"], ["m5"], axis=0),
             helper.make_node("Reshape", ["m5", "flat"], ["m_line"])]
    if not folded:
        nodes.append(helper.make_node("Concat", ["b1", "one", "one", "s1"], ["target"], axis=0))
    nodes += [helper.make_node("Reshape", ["m_line", "target"], ["m4"]),
              helper.make_node("Where", ["m4", "keep", "drop"], ["bias"]),
              helper.make_node("Add", ["x", "bias"], ["y"])]
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])
    if folded:
        inits.append(ints("target", 1, 1, 1, 16))
    return helper.make_model(helper.make_graph(nodes, "mask", [mask, x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_chain_of_reshapes_is_one_reshape_whose_target_copies_the_input_sizes():
    """The Flatten, the flat Gather (a Reshape) and the Reshape to [-1] before a Reshape to a constant target go:
    one Reshape of the [batch, seq] mask to [0, 1, 1, -1], no size computed, where the chain's targets needed the
    batch and the sequence computed from the inputs' shapes."""
    original, program = _mask_chain_model(folded=False), _mask_chain_model(folded=True)
    written = make_generic(program, original, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in written.model.graph.node)
    assert ops["Reshape"] == 1 and ops["Flatten"] == ops["Gather"] == ops["Shape"] == ops["Concat"] == 0, ops
    reshape = next(n for n in written.model.graph.node if n.op_type == "Reshape")
    target = next(t for t in written.model.graph.initializer if t.name == reshape.input[1])
    assert numpy_helper.to_array(target).tolist() == [0, 1, 1, -1]
    ref, got = session(original), session(written.model)
    rng = np.random.default_rng(5)
    for b, s in [(1, 16), (2, 16), (3, 1), (2, 37), (1, 300)]:
        feeds = {"mask": rng.integers(0, 2, (b, s)).astype(np.int64),
                 "x": rng.standard_normal((b, 2, s, s)).astype(np.float32)}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, 2, s, s)
        np.testing.assert_array_equal(have, want)


def test_a_linear_over_one_symbolic_size_is_reshaped_back_to_a_constant_target():
    """A MatMul by a constant plus its bias over x[batch, 3, 8] (one symbolic size) is a Gemm between two Reshapes
    whose targets are constants ([-1, 8], [-1, 3, 4]): no size computed from the inputs' shapes."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "bias"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 4])
    model = helper.make_model(helper.make_graph(nodes, "linear", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    written = make_generic(model, model, {"batch": 1})
    ops = collections.Counter(n.op_type for n in written.model.graph.node)
    assert ops["Gemm"] == 1 and ops["Reshape"] == 2 and ops["Shape"] == ops["Concat"] == 0, ops
    ref, got = session(model), session(written.model)
    for b in (1, 2, 5):
        feeds = {"x": rng.standard_normal((b, 3, 8)).astype(np.float32)}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, 3, 4)
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def _broadcast_mask_model(covered: bool) -> onnx.ModelProto:
    """mask[batch, seq] as [batch, 1, 1, seq] combined by an And with an all-true [1, 1, seq, 1] computed from the
    shapes (T5's mask: [batch, 1, seq, seq]), made additive by a Where; ``covered``: added to x[batch, 2, seq, seq]
    (which broadcasts it along the queries anyway), else the Where's output is the model's."""
    inits = [numpy_helper.from_array(np.array([1, 1], np.int64), "ones2"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "mid"),
             numpy_helper.from_array(np.array(0.0, np.float32), "keep"),
             numpy_helper.from_array(np.array(-1e9, np.float32), "drop")]
    nodes = [helper.make_node("Shape", ["mask"], ["s1"], start=1, end=2),
             helper.make_node("Concat", ["ones2", "s1", "one"], ["rows"], axis=0),
             helper.make_node("ConstantOfShape", ["rows"], ["all"], value=helper.make_tensor("t", TensorProto.BOOL,
                                                                                             [1], [True])),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["m", "mid"], ["m4"]),
             helper.make_node("And", ["all", "m4"], ["both"]),
             helper.make_node("Where", ["both", "keep", "drop"], ["bias" if covered else "y"])]
    if covered:
        nodes.append(helper.make_node("Add", ["x", "bias"], ["y"]))
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "seq", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2 if covered else 1, "seq", "seq"])
    return helper.make_model(helper.make_graph(nodes, "mask", [mask, x] if covered else [mask], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("covered", [True, False])
def test_an_and_that_only_broadcasts_a_mask_goes_where_its_readers_broadcast_it(covered):
    """The And with an all-true [1, 1, seq, 1] goes (with its Expand) where the Add after the Where broadcasts the
    mask along the queries anyway; where the Where's output is the model's output, whose shape it gives, the mask
    is expanded instead (one Expand, no And)."""
    model = _broadcast_mask_model(covered)
    written = make_generic(model, model, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in written.model.graph.node)
    # covered: the And and its Expand go; else the And of the all-true slice is the mask expanded (one Expand)
    assert ops["ConstantOfShape"] == ops["And"] == 0 and ops["Expand"] == (0 if covered else 1), ops
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(7)
    for b, s in [(1, 16), (2, 16), (3, 1), (2, 37), (1, 300)]:
        feeds = {"mask": rng.integers(0, 2, (b, s)).astype(np.int64)}
        if covered:
            feeds["x"] = rng.standard_normal((b, 2, s, s)).astype(np.float32)
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, 2 if covered else 1, s, s)
        np.testing.assert_array_equal(have, want)


def test_the_import_s_rewrite_stops_at_its_deadline_and_the_model_imports_as_it_is(tmp_path, monkeypatch):
    """The import's rewrite of the user's model is a best effort: past ``SIMPLIFY_SECONDS`` (a 36,772-node RWKV
    export fitted sizes off runs of ever longer prefixes of itself for 13 minutes) it gives up, and the import reads
    the user's chains as they are; the program imported that way is the original's function (onnxruntime, the
    oracle)."""
    from eqsat.generic import rewrite

    model = zoo.export_dynamic("bert", "torchscript", str(tmp_path / "bert.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS["bert"].inputs}
    assert simplify_for_import(model, shapes) is not None
    monkeypatch.setattr(rewrite, "SIMPLIFY_SECONDS", 0.0)
    assert simplify_for_import(model, shapes) is None
    imported = export_model(import_generic(model, shapes))
    feeds = zoo.sized_feeds("bert", np.random.default_rng(0), 1, 16)
    want = session(model).run(None, feeds)[0]
    got = session(imported).run(None, {k: v for k, v in feeds.items() if k in {i.name for i in imported.graph.input}})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
