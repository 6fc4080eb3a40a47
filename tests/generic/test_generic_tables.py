"""The values a decoder computes from its inputs' shapes alone (a causal mask, position ids, rotary cos and sin,
a position embedding's rows), written by the shape-generic rewrite (:mod:`eqsat.generic.tables`) as a Trilu or a
Slice of a constant table instead of their run-time computation; checked in onnxruntime against the original
at several sizes, and on zoo decoders exported with dynamic axes, whose generic and static programs both match
the original."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper
from rule_cases import as_kernels

from eqsat import ir
from eqsat.dims import Mono
from eqsat.generic import import_generic, make_generic, simplify_for_import
from eqsat.generic.tables import TABLE_SIZE, triangle
from eqsat.onnx import export_model, session

LOWEST = float(np.finfo(np.float32).min)


def _taken(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The main graph's nodes with each ``If`` on a table's bound as its then-branch's: what runs at the sizes the
    table covers."""
    out: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if node.op_type == "If":
            out += next(a.g for a in node.attribute if a.name == "then_branch").node
        else:
            out.append(node)
    return out


def _decoder(mask: str, positions: str) -> onnx.ModelProto:
    """ids[batch, seq] and x[batch, seq, 8] the way torch exports a decoder's shape computations: positions
    ``Range(seq)``; the rotary angles ``positions x inv_freq`` (``positions="rotary"``: x cos + x sin) or a position
    embedding's rows (``"table"``: Gather of a 64-row table, which refuses longer sequences); a causal mask
    ``LessOrEqual`` of two Ranges, additive through a Where (``mask="additive"``) or boolean one position wider
    (``"boolean"``: keys up to one past the query, consumed by a Where)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"), numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array((1.0 / 10000 ** (np.arange(4) / 4)).astype(np.float32), "inv_freq"),
             numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "pe"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(LOWEST, np.float32), "lowest")]
    nodes = [helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
             helper.make_node("Range", ["i0", "s", "i1"], ["pos"])]
    if positions == "rotary":
        nodes += [helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
                  helper.make_node("Unsqueeze", ["posf", "ax1"], ["posc"]),
                  helper.make_node("Mul", ["posc", "inv_freq"], ["angles"]),
                  helper.make_node("Concat", ["angles", "angles"], ["emb"], axis=-1),
                  helper.make_node("Cos", ["emb"], ["cos"]), helper.make_node("Sin", ["emb"], ["sin"]),
                  helper.make_node("Mul", ["x", "cos"], ["xc"]), helper.make_node("Mul", ["x", "sin"], ["xs"]),
                  helper.make_node("Add", ["xc", "xs"], ["h"])]
    else:
        nodes += [helper.make_node("Gather", ["pe", "pos"], ["rows"], axis=0),
                  helper.make_node("Add", ["x", "rows"], ["h"])]
    nodes += [helper.make_node("Unsqueeze", ["pos", "ax0"], ["keys"]),
              helper.make_node("Unsqueeze", ["pos", "ax1"], ["queries"]),
              helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["h", "ht"], ["scores"])]
    if mask == "additive":
        nodes += [helper.make_node("LessOrEqual", ["keys", "queries"], ["allowed"]),
                  helper.make_node("Where", ["allowed", "zero", "lowest"], ["bias"]),
                  helper.make_node("Add", ["scores", "bias"], ["masked"])]
    else:
        nodes += [helper.make_node("Add", ["queries", "i1"], ["reach"]),
                  helper.make_node("LessOrEqual", ["keys", "reach"], ["allowed"]),
                  helper.make_node("Where", ["allowed", "scores", "lowest"], ["masked"])]
    nodes += [helper.make_node("Softmax", ["masked"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "h"], ["y"])]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])
    return helper.make_model(helper.make_graph(nodes, "decoder", [ids, x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _feeds(b: int, s: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"ids": rng.integers(0, 50, (b, s)).astype(np.int64), "x": rng.standard_normal((b, s, 8)).astype(np.float32)}


@pytest.mark.parametrize("mask", ["additive", "boolean"])
def test_a_causal_mask_is_a_trilu_and_rotary_angles_a_slice_of_a_table(mask):
    model = _decoder(mask, "rotary")
    written = make_generic(model, model, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in _taken(written.model))
    # the static program folds them; the generic one writes each in one or two nodes
    assert ops["Range"] == ops["Cos"] == ops["Sin"] == ops["LessOrEqual"] == ops["Cast"] == 0, ops
    assert ops["Trilu"] == ops["ConstantOfShape"] == 1 and ops["Slice"] == 2, ops
    assert ops["Where"] == (1 if mask == "boolean" else 0), ops  # the boolean mask's Where reads the data
    tables = {t.name: numpy_helper.to_array(t) for t in written.model.graph.initializer}
    sliced = [tables[n.input[0]] for n in _taken(written.model) if n.op_type == "Slice"]
    assert all(t.shape == (TABLE_SIZE, 8) for t in sliced)
    assert not any("inv_freq" in n.input for n in written.model.graph.node)  # its chain: in the If's else-branch
    inv = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "inv_freq")
    angles = np.arange(TABLE_SIZE, dtype=np.float32)[:, None] * np.concatenate([inv, inv])
    sin, cos = sorted(sliced, key=lambda t: float(t[0, 0]))  # (cos 0 = 1, sin 0 = 0)
    np.testing.assert_allclose(cos, np.cos(angles), atol=1e-5)
    np.testing.assert_allclose(sin, np.sin(angles), atol=1e-5)
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(6)
    for b, s in [(1, 16), (2, 16), (3, 16), (2, 1), (1, 2), (3, 37), (1, 128), (1, 300)]:
        feeds = _feeds(b, s, rng)
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, s, 8)
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_a_table_the_model_bounds_is_cut_where_the_model_stops():
    """A position embedding's rows: the table is the 64 rows the original accepts; at 65 both programs fail."""
    model = _decoder("additive", "table")
    written = make_generic(model, model, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in _taken(written.model))
    assert ops["Range"] == 0 and ops["Slice"] == 1, ops
    assert all(n.input[0].startswith("shape_of") for n in _taken(written.model) if n.op_type == "Gather")  # sizes
    table = next(numpy_helper.to_array(t) for t in written.model.graph.initializer
                 if t.name == next(n.input[0] for n in _taken(written.model) if n.op_type == "Slice"))
    pe = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "pe")
    np.testing.assert_array_equal(table, pe)
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(7)
    for b, s in [(1, 16), (2, 1), (3, 37), (2, 64)]:
        feeds = _feeds(b, s, rng)
        np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    for program in (ref, got):
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime's error types vary by operator
            program.run(None, _feeds(1, 65, rng))


def test_triangle_reads_the_diagonal_and_refuses_what_is_not_one():
    s = Mono.symbol("s")
    dims = [Mono.symbol("b"), Mono.const(1), s, s]

    def runs(make):
        return [({"b": b, "s": n}, np.broadcast_to(make(n), (b, 1, n, n))) for b, n in [(1, 16), (2, 16), (1, 1), (1, 7)]]

    tri = triangle(runs(lambda n: ~np.triu(np.ones((n, n), bool), 3)), dims)
    assert tri is not None and tri.k == 2 and bool(tri.below) and not bool(tri.above)
    assert tri.shape == [Mono.const(1), Mono.const(1), s, s]  # one slice along the batch: broadcast where used
    assert triangle(runs(lambda n: np.tril(np.arange(n * n).reshape(n, n))), dims) is None  # not two values
    assert triangle(runs(lambda n: np.eye(n)), dims) is None  # two values, not a triangle
    per_batch = [({"b": b, "s": n}, np.arange(b).reshape(b, 1, 1, 1) + np.triu(np.ones((1, 1, n, n)), 1))
                 for b, n in [(1, 16), (2, 16), (3, 5)]]
    assert triangle(per_batch, dims) is None  # not the same along the batch


@pytest.mark.parametrize("name,exporter,seqs", [("llama", "torchscript", (1, 37, 128)),
                                                ("llama", "dynamo", (1, 37, 64)),
                                                ("gpt2", "torchscript", (1, 37, 64))])
def test_a_dynamic_decoders_generic_and_static_programs_match_the_original(name, exporter, seqs, tmp_path):
    """The zoo's LLaMA (its rotary table computed: any length) and GPT-2 (a 64-row position table) exported with
    dynamic axes: the generic program computes no mask or rotary chain (a Trilu, Slices of tables) and matches
    the original at batch 1, 2, 3 and each sequence length; the static one at its own shape."""
    model = zoo.export_dynamic(name, exporter, str(tmp_path / f"{name}.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS[name].inputs}
    graphs = [import_generic(model, shapes, generic=g) for g in (False, True)]
    # the attention composites are imported as on static shapes (GPT-2's padding mask, flattened from [batch, seq],
    # keeps its batch axis first: eqsat.onnx.axes.targets)
    counts = [collections.Counter(n.op for n in ir.topo_order(list(g.outputs))) for g in graphs]
    assert counts[1]["attention"] == counts[0]["attention"] >= 1, counts
    static = export_model(graphs[0])
    generic = make_generic(export_model(graphs[1]), model, {"batch": 1, "seq": 16}).model
    ops = collections.Counter(n.op_type for n in _taken(generic))
    assert ops["Trilu"] == 1 and ops["Range"] == ops["Cos"] == ops["Sin"] == ops["LessOrEqual"] == 0, ops
    ref, got_g, got_s = session(model), session(generic), session(static)
    rng = np.random.default_rng(8)
    for b in (1, 2, 3):
        for s in (16, *seqs):
            feeds = zoo.sized_feeds(name, rng, b, s)
            expected = ref.run(None, feeds)
            for want, have in zip(expected, got_g.run(None, feeds)):
                assert have.shape == want.shape
                np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
            if (b, s) == (1, 16):
                for want, have in zip(expected, got_s.run(None, feeds)):
                    np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


def test_the_qkv_merge_fires_on_the_generic_import_as_on_the_static_one(tmp_path):
    """The zoo's LLaMA exported with dynamic axes: its live shape computations (mask, rotary tables, now a Trilu
    and Slices) block no rule around them: TASO's merge of MatMuls sharing an input (Q/K/V, gate/up) matches as
    often on the generic import as on the static one, grows the e-graph as much, and its merged product (one
    MatMul reading the concatenated weights) is in both e-graphs."""
    from eqsat.egglog.egraph import EGraph
    from eqsat.rules import RuleEngine, rule_set

    model = zoo.export_dynamic("llama", "torchscript", str(tmp_path / "llama.onnx"))
    shapes = {"input_ids": (1, 128)}
    found = {}
    for generic in (False, True):
        graph = import_generic(model, shapes, generic=generic)
        assert not any(n.op == "opaque" and n.attrs and n.attrs[0] in ("Cos", "Sin", "Range", "LessOrEqual")
                       for n in ir.topo_order(list(graph.outputs)))
        eg = EGraph.from_graph(graph)
        engine = RuleEngine(eg, rule_set("default"))
        before = eg.size().enodes
        step = engine.apply("taso_m04")
        concats = [n for n in eg.snapshot().nodes if n.op.lower() == "concat"]
        found[generic] = (step.matches, eg.size().enodes - before, len(concats))
    assert found[True] == found[False] and found[False][0] >= 2 and found[False][2] >= 1, found


def test_the_generic_llama_import_holds_the_rotary_embedding_and_its_kernel_runs_at_every_size(tmp_path):
    """The dynamo LLaMA's rotary embeddings are imported as ``rotary`` on the generic import as on the static one
    (their cos and sin: Slices of constant tables whose halves repeat); written as opset 23's RotaryEmbedding,
    the generic program reads the tables' rows through one If (the tables stop where the original does not) and
    matches the original at batch 1-3."""
    model = zoo.export_dynamic("llama", "dynamo", str(tmp_path / "llama.onnx"))
    shapes = {"input_ids": (1, 16)}
    counts = [collections.Counter(n.op for n in ir.topo_order(list(import_generic(model, shapes, generic=g).outputs)))
              for g in (False, True)]
    assert counts[0]["rotary"] == counts[1]["rotary"] == 2
    graph = as_kernels(import_generic(model, shapes), {"rotary": "rope"})
    generic = make_generic(export_model(graph), model, {"batch": 1, "seq": 16}).model
    ops = collections.Counter(n.op_type for n in _taken(generic))
    assert ops["RotaryEmbedding"] == 2 and ops["Cos"] == ops["Sin"] == 0, ops
    # the cos and sin the kernels read: one If shared by both (its then-branch the Slices of the tables, within
    # TABLE_SIZE; beyond it the user's computation: the original computes them at any length)
    ifs = [n for n in generic.graph.node if n.op_type == "If"]
    assert len(ifs) == 1 and ops["Slice"] == 2 and ops["Cos"] == 0, ops
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(9)
    for b, s in [(1, 16), (2, 16), (3, 16), (2, 1), (3, 37), (1, 64)]:
        feeds = zoo.sized_feeds("llama", rng, b, s)
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_rotary_kernels_halves_of_a_table_are_computed_beyond_it_as_the_original_computes_them(name, tmp_path,
                                                                                                 monkeypatch):
    """The dynamo LLaMA (and Qwen2) as the e-graph writes it (opset 23's RotaryEmbedding reads the first half of each of the
    import's cos and sin tables, values the original does not hold) with the tables capped at 64 positions: the
    If's else-branch computes the halves from the original's Cos and Sin (not from the import's tables, which stop
    at 64 too), so that the program matches the original beyond the tables (at 100 it failed), and the import's
    tables are gone from the program."""
    from eqsat.generic import tables

    monkeypatch.setattr(tables, "TABLE_SIZE", 64)
    model = zoo.export_dynamic(name, "dynamo", str(tmp_path / f"{name}.onnx"))
    graph = as_kernels(import_generic(model, {"input_ids": (1, 16)}), {"rotary": "rope"})
    program = export_model(graph)
    consts = {t.name for t in program.graph.initializer}
    imported = {n.input[0] for n in program.graph.node  # the import's tables: Slices of a constant to a size
                if n.op_type == "Slice" and n.input[0] in consts and n.input[2] not in consts}
    assert len(imported) == 2
    generic = make_generic(program, model, {"batch": 1, "seq": 16}).model
    ifs = [n for n in generic.graph.node if n.op_type == "If"]
    assert len(ifs) == 1 and [n.op_type for n in generic.graph.node].count("RotaryEmbedding") == 2
    beyond = next(a.g for a in ifs[0].attribute if a.name == "else_branch")
    ops = collections.Counter(n.op_type for n in beyond.node)
    assert ops["Cos"] == ops["Sin"] == 1, ops
    assert not imported & {t.name for t in generic.graph.initializer}  # the import's tables: read nowhere
    # what only the else-branch reads runs in it: no node outside computes a value for the else-branch alone
    from eqsat.onnx.subgraphs import implicit_inputs

    outside = {i for n in generic.graph.node if n is not ifs[0] for i in n.input} | \
        {o.name for o in generic.graph.output} | set(ifs[0].input)
    computed = {o for n in generic.graph.node for o in n.output}
    within = next(a.g for a in ifs[0].attribute if a.name == "then_branch")
    only_beyond = set(implicit_inputs(helper.make_node("If", [], [], then_branch=beyond, else_branch=beyond))) \
        - set(implicit_inputs(helper.make_node("If", [], [], then_branch=within, else_branch=within))) - outside
    assert not only_beyond & computed, only_beyond & computed
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(15)
    for b, s in [(1, 16), (2, 64), (2, 100), (3, 37)]:
        feeds = zoo.sized_feeds(name, rng, b, s)
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
        ran = _ran(generic, feeds, tmp_path)
        assert ran["Cos"] == ran["Sin"] == (1 if s > 64 else 0), ran


def _relative_bias(heads: int) -> onnx.ModelProto:
    """x[batch, seq, 8] attended with T5's bidirectional relative position bias the way torch exports it:
    ``Range(seq)`` differences log-bucketed (32 buckets, max distance 128), an embedding Gather of [32, heads], a
    permute to [1, heads, seq, seq] added to the scores (any length: the buckets stop at the max distance)."""
    rng = np.random.default_rng(9)
    consts = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "ax0": np.array([0], np.int64),
              "ax1": np.array([1], np.int64), "half": np.array(16, np.int64), "exact": np.array(8, np.int64),
              "exactf": np.array(8.0, np.float32), "logspan": np.array(np.log(128 / 8), np.float32),
              "last": np.array(15, np.int64), "emb": rng.standard_normal((32, heads)).astype(np.float32)}
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
             helper.make_node("Range", ["i0", "s", "i1"], ["pos"]),
             helper.make_node("Unsqueeze", ["pos", "ax0"], ["keys"]),
             helper.make_node("Unsqueeze", ["pos", "ax1"], ["queries"]),
             helper.make_node("Sub", ["keys", "queries"], ["rel"]),
             helper.make_node("Greater", ["rel", "i0"], ["ahead"]),
             helper.make_node("Cast", ["ahead"], ["aheadi"], to=TensorProto.INT64),
             helper.make_node("Mul", ["aheadi", "half"], ["side"]),
             helper.make_node("Abs", ["rel"], ["n"]),
             helper.make_node("Less", ["n", "exact"], ["small"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["nf", "exactf"], ["ratio"]),
             helper.make_node("Log", ["ratio"], ["logn"]),
             helper.make_node("Div", ["logn", "logspan"], ["frac"]),
             helper.make_node("Mul", ["frac", "exactf"], ["scaled"]),
             helper.make_node("Cast", ["scaled"], ["scaledi"], to=TensorProto.INT64),
             helper.make_node("Add", ["scaledi", "exact"], ["large"]),
             helper.make_node("Min", ["large", "last"], ["capped"]),
             helper.make_node("Where", ["small", "n", "capped"], ["inner"]),
             helper.make_node("Add", ["side", "inner"], ["bucket"]),
             helper.make_node("Gather", ["emb", "bucket"], ["values"], axis=0),
             helper.make_node("Transpose", ["values"], ["heads"], perm=[2, 0, 1]),
             helper.make_node("Unsqueeze", ["heads", "ax0"], ["bias"]),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["x", "xt"], ["raw"]),
             helper.make_node("Unsqueeze", ["raw", "ax1"], ["scores"]),
             helper.make_node("Add", ["scores", "bias"], ["biased"]),
             helper.make_node("Softmax", ["biased"], ["p"], axis=-1),
             helper.make_node("Unsqueeze", ["x", "ax1"], ["v"]),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", heads, "seq", 8])
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    return helper.make_model(helper.make_graph(nodes, "relative", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_relative_position_bias_is_the_top_left_block_of_a_table():
    """T5's bucketed relative position bias (seq x seq, one symbol on two axes): the generic program slices it
    out of a constant table (its value at the largest size whose table holds TABLE_ELEMENTS: 512 for 4 heads)
    instead of computing it, and matches the original at every size up to the table's, one longer than the
    representative included; past it (513, 600) the written program computes it as the original does (an If)."""
    model = _relative_bias(4)
    written = make_generic(model, model, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in _taken(written.model))
    assert ops["Range"] == ops["Log"] == ops["Gather"] == 0 and ops["Slice"] == 1, ops
    table = next(numpy_helper.to_array(t) for t in written.model.graph.initializer
                 if t.name == next(n.input[0] for n in _taken(written.model) if n.op_type == "Slice"))
    assert table.shape == (1, 4, 512, 512)
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(10)
    for b, s in [(1, 16), (2, 16), (3, 1), (2, 37), (1, 128), (2, 300), (1, 512)]:
        feeds = {"x": rng.standard_normal((b, s, 8)).astype(np.float32)}
        (want,), (have,) = ref.run(None, feeds), got.run(None, feeds)
        assert have.shape == want.shape == (b, 4, s, 8)
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)
    assert [n.op_type for n in written.model.graph.node].count("If") == 1
    for s in (513, 600):  # the original runs at any length, and so does the written program
        feeds = {"x": rng.standard_normal((1, s, 8)).astype(np.float32)}
        np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_block_table_too_small_for_the_verified_sizes_is_not_taken():
    """With 32 heads the table would stop at 181 positions, below the 256 a generic result is verified at: the
    bias is computed as the user's program computes it, at every size."""
    model = _relative_bias(32)
    written = make_generic(model, model, {"batch": 1, "seq": 16})
    ops = collections.Counter(n.op_type for n in _taken(written.model))
    assert ops["Log"] == 1 and ops["Slice"] == 0, ops
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(11)
    for b, s in [(2, 3), (1, 600)]:
        feeds = {"x": rng.standard_normal((b, s, 8)).astype(np.float32)}
        np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_the_dynamic_t5_encoders_generic_program_slices_its_bias_and_matches_the_original(exporter, tmp_path):
    """The zoo's T5 encoder exported with dynamic axes: its generic program computes no relative position bucket
    (no Log: a Slice of the bias table) and matches the original at batch 1, 2 and sequences 1, 37, 128 and 300
    (longer than the representative 128)."""
    model = zoo.export_dynamic("t5_encoder", exporter, str(tmp_path / "t5.onnx"))
    shapes = {n: (1, 128) for n, _, _ in zoo.SPECS["t5_encoder"].inputs}
    generic = make_generic(export_model(import_generic(model, shapes)), model,
                           {"batch": 1, "seq": 128}).model
    ops = collections.Counter(n.op_type for n in _taken(generic))
    assert ops["Log"] == ops["Range"] == 0 and ops["Slice"] >= 1, ops
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(12)
    for b, s in [(1, 128), (2, 1), (2, 37), (1, 300)]:
        feeds = zoo.sized_feeds("t5_encoder", rng, b, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


def _ran(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path) -> collections.Counter:
    """The operators onnxruntime ran for ``feeds`` (its profile: an If's taken branch's nodes among them)."""
    import json

    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "profile")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    return collections.Counter(e["args"]["op_name"] for e in events
                               if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_the_t5_bias_table_is_taken_within_its_bound_and_computed_beyond_it(exporter, tmp_path):
    """The zoo's T5 encoder (4 heads: a 512-position bias table) written generic: an If on the sequence length;
    at the representative 128 it runs the then-branch (the Slice, no Log), at 600 the user's bucket computation,
    and matches the original at both (the original itself has no bound)."""
    model = zoo.export_dynamic("t5_encoder", exporter, str(tmp_path / "t5.onnx"))
    shapes = {n: (1, 128) for n, _, _ in zoo.SPECS["t5_encoder"].inputs}
    generic = make_generic(export_model(import_generic(model, shapes)), model,
                           {"batch": 1, "seq": 128}).model
    ifs = [n for n in generic.graph.node if n.op_type == "If"]
    assert len(ifs) == 1 and not any(n.op_type == "Log" for n in generic.graph.node)
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(13)
    for s, taken in [(128, "Slice"), (600, "Log")]:
        feeds = zoo.sized_feeds("t5_encoder", rng, 1, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
        ran = _ran(generic, feeds, tmp_path)
        assert ran[taken] >= 1 and ran["Log" if taken == "Slice" else "Slice"] == 0, ran


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_rotary_table_is_taken_within_its_bound_and_computed_beyond_it(exporter, tmp_path, monkeypatch):
    """The zoo's LLaMA (its rotary cos and sin computed from the positions: any length) written generic with the
    tables capped at 64 positions: one If; within 64 the Slices run, beyond (100) the user's Cos and Sin, and the
    program matches the original at both."""
    from eqsat.generic import tables

    monkeypatch.setattr(tables, "TABLE_SIZE", 64)
    model = zoo.export_dynamic("llama", exporter, str(tmp_path / "llama.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS["llama"].inputs}
    generic = make_generic(export_model(import_generic(model, shapes)), model,
                           {"batch": 1, "seq": 16}).model
    assert [n.op_type for n in generic.graph.node].count("If") == 1
    assert not any(n.op_type in ("Cos", "Sin") for n in generic.graph.node)
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(14)
    for b, s, taken in [(1, 16, "Slice"), (2, 64, "Slice"), (2, 100, "Cos")]:
        feeds = zoo.sized_feeds("llama", rng, b, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
        ran = _ran(generic, feeds, tmp_path)
        assert ran[taken] >= 1 and ran["Cos" if taken == "Slice" else "Slice"] == 0, ran


def test_a_table_the_users_own_buffer_bounds_takes_no_if(tmp_path):
    """BERT's position ids are a Slice of its own buffer (the original stops at the buffer's length): its position
    table is a Slice with no If (no guard to run, none needed); the written model matches the original within the
    buffer, and beyond it both refuse the input."""
    model = zoo.export_dynamic("bert", "torchscript", str(tmp_path / "bert.onnx"))
    shapes = {n: (1, 16) for n, _, _ in zoo.SPECS["bert"].inputs}
    generic = make_generic(export_model(import_generic(model, shapes)), model,
                           {"batch": 1, "seq": 16}).model
    assert "If" not in [n.op_type for n in generic.graph.node]
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(5)
    for b, s in [(1, 16), (2, 1), (3, 37)]:
        feeds = zoo.sized_feeds("bert", rng, b, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
    feeds = zoo.sized_feeds("bert", rng, 1, 4096)
    for sess in (ref, got):
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime's error at a size past the buffer, either kind
            sess.run(None, feeds)


def test_a_guards_else_branch_is_written_at_the_programs_opset_when_a_kernel_upgraded_it(tmp_path):
    """The TorchScript T5 encoder (opset 17) whose program was upgraded to opset 23 (a kernel's upgrade,
    eqsat.onnx.kernels) before it is written generic: the original's bucket computation copied into the If's
    else-branch is converted too, so the model passes ONNX's full check, and it matches the original within the
    table and beyond it (600). The chain reads the sequence's length off the Shape of a value after the first
    layer norm: that size is written from the inputs' shapes, so the layer norm is not computed again in the
    else-branch (it was, its ReduceMean converted to take ``axes`` as an input)."""
    model = zoo.export_dynamic("t5_encoder", "torchscript", str(tmp_path / "t5.onnx"))
    assert max(o.version for o in model.opset_import if o.domain == "") == 17
    shapes = {n: (1, 128) for n, _, _ in zoo.SPECS["t5_encoder"].inputs}
    upgraded = onnx.version_converter.convert_version(export_model(import_generic(model, shapes)), 23)
    generic = make_generic(upgraded, model, {"batch": 1, "seq": 128}).model
    (guard,) = [n for n in generic.graph.node if n.op_type == "If"]
    beyond = next(a.g for a in guard.attribute if a.name == "else_branch")
    ops = {n.op_type for n in beyond.node}
    assert "Range" in ops and "ReduceMean" not in ops and "MatMul" not in ops, ops
    onnx.checker.check_model(generic, full_check=True)
    ref, got = session(model), session(generic)
    rng = np.random.default_rng(14)
    for s in (128, 600):
        feeds = zoo.sized_feeds("t5_encoder", rng, 1, s)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


def test_where_the_converter_refuses_the_original_no_older_node_is_copied_and_the_note_says_why(monkeypatch,
                                                                                                tmp_path):
    """The same upgraded T5 where ONNX's version converter refuses the original: no chain of opset-17 nodes is
    copied into the opset-23 program (it passes ONNX's full check), and the notes say the original was not
    converted; within the table the program still matches the original."""
    from eqsat.generic import original
    from eqsat.onnx import kernels

    def refuse(model, version):
        raise kernels.UpgradeError(f"onnx's version converter cannot take the model to opset {version}: no adapter")

    monkeypatch.setattr(original, "converted", refuse)
    model = zoo.export_dynamic("t5_encoder", "torchscript", str(tmp_path / "t5.onnx"))
    shapes = {n: (1, 128) for n, _, _ in zoo.SPECS["t5_encoder"].inputs}
    upgraded = onnx.version_converter.convert_version(export_model(import_generic(model, shapes)), 23)
    written = make_generic(upgraded, model, {"batch": 1, "seq": 128})
    assert any("not copied into the written opset" in n and "no adapter" in n for n in written.notes), written.notes
    onnx.checker.check_model(written.model, full_check=True)
    feeds = zoo.sized_feeds("t5_encoder", np.random.default_rng(15), 1, 128)
    for want, have in zip(session(model).run(None, feeds), session(written.model).run(None, feeds)):
        np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)


def _declared(model: onnx.ModelProto, dims: list) -> onnx.ModelProto:
    """``model`` with its output ``y`` declared of ``dims``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.output[:]
    out.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, dims))
    return out


def test_an_output_axis_the_exporter_named_alone_leaves_the_import_simplified():
    """TorchScript names a cache's head size ``Concatpresent.0.key_dim_3``, a name no input carries, though it is a
    constant: the import's simplification still writes the causal mask as a Trilu (the note stays in the notes of
    a candidate's write). An output axis declared as an input's symbol where the program computes a constant is a
    specialization, and leaves the model as it is."""
    sizes = {"ids": (1, 16), "x": (1, 16, 8)}
    named = simplify_for_import(_declared(_decoder("additive", "rotary"), ["batch", "seq", "Matmuly_dim_2"]), sizes)
    assert named is not None and any(n.op_type == "Trilu" for n in _taken(named))
    note = make_generic(named, _declared(_decoder("additive", "rotary"), ["batch", "seq", "Matmuly_dim_2"]),
                        {"batch": 1, "seq": 16}).notes
    assert note == ["output 'y' axis 2 is 8 at every size; the original declares it 'Matmuly_dim_2', a name no input "
                    "carries, and so does the written model"]
    assert simplify_for_import(_declared(_decoder("additive", "rotary"), ["batch", "seq", "seq"]), sizes) is None
