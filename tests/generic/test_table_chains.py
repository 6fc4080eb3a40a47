"""A table the import wrote of a value the user's program computes at any size (positions read off the encoder's
output shape: ``Range(seq)``, the length from ``Shape(hidden)``) is guarded by an If whose else-branch computes the
value as the original does beyond the table. That chain is the original's, copied; a Shape in it of a value whose
symbolic shape is known is written from the inputs' shapes (eqsat.generic.guards._shape_read), so the else-branch
does not run the encoder again (it did, and a check of the guard beyond a table of 4096 ran the whole model there:
ten minutes on CLIP's text model). The table of the original's value is found where it is shorter than the
import's (its run cost more: eqsat.generic.tables.TABLE_BYTES) but equal where both hold it (tables.same_prefix).
The oracle: onnxruntime on the original, beyond the table."""

from __future__ import annotations

import collections

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.generic import import_generic, make_generic
from eqsat.onnx import export_model, session
from eqsat.onnx.footprint import activation_bytes

H, F, V, LAYERS = 16, 32, 50, 2
SHAPES = {"input_ids": (1, 4)}


def _positioned() -> onnx.ModelProto:
    """An embedding, two MLP blocks, a LayerNorm, and its output plus each position's index (``Range`` of the length
    read off the output's Shape) times 0.01."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((V, H)).astype(np.float32), "emb"),
             numpy_helper.from_array(np.ones(H, np.float32), "lnw"), numpy_helper.from_array(np.zeros(H, np.float32), "lnb"),
             numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array(0.01, np.float32), "step"), numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    nodes, x = [helper.make_node("Gather", ["emb", "input_ids"], ["x0"])], "x0"
    for i in range(LAYERS):
        inits += [numpy_helper.from_array(rng.standard_normal((H, F)).astype(np.float32) * 0.2, f"w1_{i}"),
                  numpy_helper.from_array(rng.standard_normal((F, H)).astype(np.float32) * 0.2, f"w2_{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w1_{i}"], [f"a{i}"]), helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
                  helper.make_node("MatMul", [f"r{i}", f"w2_{i}"], [f"b{i}"]),
                  helper.make_node("Add", [x, f"b{i}"], [f"x{i + 1}"])]
        x = f"x{i + 1}"
    nodes += [helper.make_node("LayerNormalization", [x, "lnw", "lnb"], ["hidden"], axis=-1),
              helper.make_node("Shape", ["hidden"], ["shp"]),
              helper.make_node("Gather", ["shp", "i1"], ["ns"], axis=0),
              helper.make_node("Range", ["i0", "ns", "i1"], ["pos"]),
              helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["posf", "step"], ["scaled"]),
              helper.make_node("Unsqueeze", ["scaled", "ax1"], ["col"]),
              helper.make_node("Add", ["hidden", "col"], ["y"])]
    graph = helper.make_graph(nodes, "positioned", [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                                                  ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _written(model: onnx.ModelProto):
    program = export_model(import_generic(model, SHAPES))
    return program, make_generic(program, model, {"batch": 1, "seq": 4})


def _check_beyond(model: onnx.ModelProto, written: onnx.ModelProto, sizes) -> None:
    want, got = session(model), session(written)
    rng = np.random.default_rng(3)
    for b, s in sizes:
        feeds = {"input_ids": rng.integers(0, V, (b, s)).astype(np.int64)}
        for x, y in zip(want.run(None, feeds), got.run(None, feeds)):
            np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5, err_msg=f"batch {b}, length {s}")


def _beyond_ops(written: onnx.ModelProto) -> collections.Counter:
    ifs = [n for n in written.graph.node if n.op_type == "If"]
    assert len(ifs) == 1
    return collections.Counter(n.op_type for a in ifs[0].attribute if a.name == "else_branch" for n in a.g.node)


def test_the_else_branch_reads_the_sizes_off_the_inputs_not_the_encoder(monkeypatch):
    from eqsat.generic import tables

    monkeypatch.setattr(tables, "TABLE_SIZE", 8)
    model = _positioned()
    _, generic = _written(model)
    ops = _beyond_ops(generic.model)
    assert ops["Range"] == 1 and ops["MatMul"] == ops["LayerNormalization"] == 0, ops
    _check_beyond(model, generic.model, [(1, 4), (3, 8), (2, 9), (1, 12)])


def test_a_table_of_the_original_shorter_than_the_import_s_is_found_for_the_chain(monkeypatch):
    from eqsat.generic import tables

    monkeypatch.setattr(tables, "TABLE_SIZE", 64)
    model = _positioned()
    # a run of the original to its positions at a length of 64 (the encoder's) is over the budget; the import's
    # (the input's Shape to a Range) is not
    monkeypatch.setattr(tables, "TABLE_BYTES", activation_bytes(model, {"input_ids": (1, 64)}) // 2)
    program, generic = _written(model)
    consts = {t.name: t for t in program.graph.initializer}
    imported = [consts[n.input[0]] for n in program.graph.node if n.op_type == "Slice" and n.input[0] in consts
                and n.input[2] not in consts]
    assert [t.dims[0] for t in imported] == [64]  # the import's table: its own run was cheap
    assert not any("stops at its bound" in note for note in generic.notes), generic.notes
    assert _beyond_ops(generic.model)["MatMul"] == 0
    _check_beyond(model, generic.model, [(1, 4), (2, 64), (1, 65), (3, 70)])


def test_two_values_alike_within_the_table_keep_their_own_chains_beyond_it(monkeypatch):
    """A position column and that column clipped at 24 agree over a table of 16 positions: each is computed as its
    own chain beyond it (one was the other's: the clipped column unclipped past 24 tokens, and no check at the
    table's bound + 1 sees that)."""
    from eqsat.generic import tables

    monkeypatch.setattr(tables, "TABLE_SIZE", 16)
    model = _positioned()
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.array(24, np.int64), "clip"))
    g.node.extend([helper.make_node("Min", ["pos", "clip"], ["pos_c"]),
                   helper.make_node("Cast", ["pos_c"], ["pos_cf"], to=TensorProto.FLOAT),
                   helper.make_node("Mul", ["pos_cf", "step"], ["scaled_c"]),
                   helper.make_node("Unsqueeze", ["scaled_c", "ax1"], ["col_c"]),
                   helper.make_node("Add", ["hidden", "col_c"], ["y_c"])])
    g.output.append(helper.make_tensor_value_info("y_c", TensorProto.FLOAT, ["batch", "seq", H]))
    _, generic = _written(model)
    _check_beyond(model, generic.model, [(1, 4), (1, 16), (1, 17), (2, 30), (1, 40)])


def test_values_cut_by_splits_of_other_counts_are_not_one(monkeypatch):
    """Two Splits without sizes of one value (its columns ``[p, p, min(p, 24), p, p, p]``), one in halves and one in
    thirds: their first parts' minima (``min(p, 24)`` and ``p``) agree over a table of 16 positions, and are computed
    alike but for the number of parts (a Split's outputs decide where it cuts): each keeps its own chain beyond the
    table. Oracle: onnxruntime without its graph optimizations (with them, its common-subexpression pass takes the
    two Splits for one and computes the original's second output wrongly too)."""
    import onnxruntime as ort

    from eqsat.generic import tables

    monkeypatch.setattr(tables, "TABLE_SIZE", 16)
    model = _positioned()
    g = model.graph
    g.initializer.extend([numpy_helper.from_array(np.array(24, np.int64), "clip"),
                          numpy_helper.from_array(np.array([1], np.int64), "ax1v")])
    n = helper.make_node
    g.node.extend([n("Min", ["pos", "clip"], ["pos_c"]), n("Unsqueeze", ["pos", "ax1v"], ["p1"]),
                   n("Unsqueeze", ["pos_c", "ax1v"], ["c1"]),
                   n("Concat", ["p1", "p1", "c1", "p1", "p1", "p1"], ["V"], axis=1),
                   n("Split", ["V"], ["h0", "h1"], axis=1), n("Split", ["V"], ["t0", "t1", "t2"], axis=1)])
    del g.output[:]
    for part, out in (("h0", "y_a"), ("t0", "y_b")):
        g.node.extend([n("ReduceMin", [part], [f"{out}_m"], axes=[1], keepdims=0),
                       n("Cast", [f"{out}_m"], [f"{out}_f"], to=TensorProto.FLOAT),
                       n("Mul", [f"{out}_f", "step"], [f"{out}_s"]), n("Unsqueeze", [f"{out}_s", "ax1"], [f"{out}_c"]),
                       n("Add", ["hidden", f"{out}_c"], [out])])
        g.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", "seq", H]))
    _, generic = _written(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want, got = (ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                 for m in (model, generic.model))
    rng = np.random.default_rng(3)
    for b, s in [(1, 4), (1, 16), (2, 30), (1, 40)]:
        feeds = {"input_ids": rng.integers(0, V, (b, s)).astype(np.int64)}
        for x, y in zip(want.run(None, feeds), got.run(None, feeds)):
            np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5, err_msg=f"batch {b}, length {s}")


def _pooled(offsets: np.ndarray | None = None) -> onnx.ModelProto:
    """CLIP text's pooled rows: the flattened output's row of each sequence's largest id, at ``Range(batch) * seq
    + argmax`` (the batch and length read off the output's Shape); ``offsets``: ``Range(batch) * seq`` read off a
    table instead (a Slice of it to the batch), as a program that took it for a table of the batch alone does."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((V, H)).astype(np.float32), "emb"),
             numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1, H], np.int64), "flat_shape")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["hidden"])]
    if offsets is None:
        nodes += [helper.make_node("Shape", ["hidden"], ["shp"]),
                  helper.make_node("Gather", ["shp", "i0"], ["nb"], axis=0),
                  helper.make_node("Gather", ["shp", "i1"], ["ns"], axis=0),
                  helper.make_node("Range", ["i0", "nb", "i1"], ["rows"]), helper.make_node("Mul", ["rows", "ns"], ["off"])]
    else:
        inits.append(numpy_helper.from_array(offsets, "table"))
        nodes += [helper.make_node("Shape", ["input_ids"], ["b1"], start=0, end=1),
                  helper.make_node("Slice", ["table", "zero", "b1", "zero"], ["off"])]
    nodes += [helper.make_node("ArgMax", ["input_ids"], ["am"], axis=-1, keepdims=0),
              helper.make_node("Add", ["off", "am"], ["flat_idx"]),
              helper.make_node("Reshape", ["hidden", "flat_shape"], ["flat"]),
              helper.make_node("Gather", ["flat", "flat_idx"], ["pooled"], axis=0)]
    graph = helper.make_graph(nodes, "pooled", [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                                              ["batch", "seq"])],
                              [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_value_of_two_sizes_is_no_table_of_one():
    """``Range(batch) * seq`` is the first rows of its value at a larger batch, and the same at every length, where
    one size changes at a time (at a batch of 1 it is 0 at every length): the runs read for tables change both at
    once too (eqsat.generic.uniform.shape_patterns), so no table of the batch is written (one was, at the length
    tuned at: the program failed at a batch of 2 and 77 tokens, its rows out of range)."""
    model = _pooled()
    _, generic = _written(model)
    assert not [n for n in generic.model.graph.node if n.op_type == "If" or n.op_type == "Slice"]
    _check_beyond(model, generic.model, [(2, 77), (3, 5), (1, 4)])


def test_a_program_right_where_one_size_changes_is_checked_where_both_do():
    """The check at further sizes (eqsat.onnx.axes.interface.probe_shapes) changes every symbol at once too: a program
    whose offsets are a table at the length tuned at (4) passes at every size where only one symbol changes, and
    fails where both do (a batch of 2 and 37 tokens)."""
    from eqsat.onnx.axes.interface import probe_shapes
    from eqsat.verification import verify_shapes

    model = _pooled()
    fixed = _pooled(np.arange(64, dtype=np.int64) * 4)
    probes = probe_shapes(model, {"batch": 1, "seq": 4})
    alone = [(label, shapes) for label, shapes in probes if "," not in label]
    assert verify_shapes(model, fixed, alone).passed
    check = verify_shapes(model, fixed, probes)
    assert not check.passed and "batch=2,seq=" in check.detail, check.detail


def test_where_the_original_refuses_both_sizes_changed_it_is_checked_at_twice_them():
    """A model that takes lengths of a multiple of 4 only (a Reshape of the ids into rows of 4) refuses a batch of 2
    and 37 tokens: the check then changes both to twice their sizes (a batch of 2, 8 tokens; near_shapes), where
    the program whose offsets are a table at the length tuned at fails."""
    from eqsat.onnx.axes.interface import near_shapes, probe_shapes
    from eqsat.verification import ShapesVerifier

    def fours(model: onnx.ModelProto) -> onnx.ModelProto:
        model.graph.initializer.append(numpy_helper.from_array(np.array([-1, 4], np.int64), "rows4"))
        model.graph.node.insert(0, helper.make_node("Reshape", ["input_ids", "rows4"], ["in_fours"]))
        model.graph.node.append(helper.make_node("Identity", ["in_fours"], ["fours"]))
        model.graph.output.append(helper.make_tensor_value_info("fours", TensorProto.INT64, None))
        return model

    model, fixed = fours(_pooled()), fours(_pooled(np.arange(64, dtype=np.int64) * 4))
    values = {"batch": 1, "seq": 4}
    probes, near = probe_shapes(model, values), near_shapes(model, values)
    check = ShapesVerifier(model, probes, near=near).check(fixed)
    assert not check.passed and "at batch=2,seq=8 " in check.detail, check.detail
    assert "batch=2,seq=37" in check.skipped
    assert ShapesVerifier(model, probes, near=near).check(model).passed
