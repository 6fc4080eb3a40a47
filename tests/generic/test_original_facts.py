"""What the writer learns of the user's model is worked out once per model (eqsat.generic.original.Original) and
carried from one candidate's rewrite to the next: the programs written are the same bytes as with each candidate
learning it anew, the original is run at further sizes fewer times, and what is written computes what the
original computes at other sizes (onnxruntime on both, the oracle)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from onnx import helper, numpy_helper
from ort_check import assert_symbolic_shapes

from eqsat.generic import Original, import_generic, make_generic, simplify_for_import
from eqsat.generic import original as original_module
from eqsat.onnx import export_model, session
from eqsat.onnx.axes.interface import symbol_values

SHAPES = {"input_ids": (1, 64), "attention_mask": (1, 64)}


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> onnx.ModelProto:
    """BERT exported by TorchScript with dynamic batch and sequence: its embeddings' position ids are a constant the
    original computes from the sequence's size (the import folds it; the writer reads it off runs of the original)."""
    return zoo.export_dynamic("bert", "torchscript", str(tmp_path_factory.mktemp("facts") / "bert.onnx"))


def _candidates(model: onnx.ModelProto) -> list[onnx.ModelProto]:
    """Two programs of the model at its representative sizes: the generic import's, and the same with its first
    output passed through an Identity (another program asking the same of the original)."""
    first = export_model(import_generic(model, SHAPES))
    second = onnx.ModelProto()
    second.CopyFrom(first)
    out = second.graph.output[0].name
    for node in second.graph.node:
        node.output[:] = [o + "_inner" if o == out else o for o in node.output]
        node.input[:] = [i + "_inner" if i == out else i for i in node.input]
    second.graph.node.append(helper.make_node("Identity", [out + "_inner"], [out]))
    return [first, second]


def _counted(monkeypatch, original: onnx.ModelProto) -> list[int]:
    """The runs of ``original`` the writer makes (each of a batch of names, or of the whole model, at some sizes),
    counted."""
    runs = [0]
    real = original_module.run_values

    def counting(model, names, shapes, **whole):
        run = real(model, names, shapes, **whole)

        def counted(at):
            runs[0] += model is original
            return run(at)
        return counted
    monkeypatch.setattr(original_module, "run_values", counting)
    return runs


def _runs_only(monkeypatch) -> None:
    """The writer with no vector decided by the shapes (:mod:`eqsat.onnx.axes.shape_values`, and no Range's length read
    off its limit): each fitted from runs, as a vector the shapes do not decide is (a size read off a value the data
    computes), which the tests below count."""
    from eqsat.generic import inference
    from eqsat.onnx.axes import symbolic

    monkeypatch.setattr(original_module, "shape_values", lambda *args, **kwargs: {})
    monkeypatch.setattr(inference, "evaluate", lambda *args, **kwargs: None)
    monkeypatch.setattr(symbolic, "COMPLETED", {k: v for k, v in symbolic.COMPLETED.items() if k != "Range"})


def test_carried_facts_write_the_same_programs_with_fewer_runs_of_the_original(bert, monkeypatch):
    _runs_only(monkeypatch)
    values = symbol_values(bert, SHAPES)
    candidates = _candidates(bert)
    runs = _counted(monkeypatch, bert)
    fresh = [make_generic(c, bert, values) for c in candidates]
    anew = runs[0]
    runs[0] = 0
    facts = Original(bert, values)
    carried = [make_generic(c, bert, values, facts) for c in candidates]
    assert [w.model.SerializeToString() for w in carried] == [w.model.SerializeToString() for w in fresh]
    assert [w.notes for w in carried] == [w.notes for w in fresh]
    # each candidate ran the original anew, for its small vectors and for the Reshape targets a batch of 1 leaves
    # open (:func:`eqsat.generic.reshapes.alike_target`); carried, the second reads the first's
    assert anew > 0 and runs[0] * 2 == anew, (anew, runs[0])
    assert facts.runs == 2


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_vectors_the_shapes_decide_write_the_programs_the_runs_wrote(name, bert, tmp_path, monkeypatch):
    """The original's small vectors and the program's read off the shapes (:mod:`eqsat.onnx.axes.shape_values`) where
    each entry is one monomial at every size: the same bytes as each fitted from runs of the original at further
    sizes (the oracle: onnxruntime's values there), with fewer runs of it."""
    model = bert if name == "bert" else zoo.export_dynamic(name, "torchscript", str(tmp_path / f"{name}.onnx"))
    shapes = {i.name: (1, 64) for i in model.graph.input}
    values = symbol_values(model, shapes)
    program = export_model(import_generic(model, shapes))
    runs = _counted(monkeypatch, model)
    with monkeypatch.context() as only:
        _runs_only(only)
        fitted = make_generic(program, model, values, Original(model, values))
    fitted_runs, runs[0] = runs[0], 0
    decided = make_generic(program, model, values, Original(model, values))
    assert decided.model.SerializeToString() == fitted.model.SerializeToString()
    assert decided.notes == fitted.notes
    assert runs[0] < fitted_runs, (runs[0], fitted_runs)


def test_what_is_written_from_carried_facts_computes_what_the_original_does(bert):
    values = symbol_values(bert, SHAPES)
    facts = Original(bert, values)
    written = [make_generic(c, bert, values, facts).model for c in _candidates(bert)]
    ref = session(bert)
    rng = np.random.default_rng(3)
    for batch, seq in [(1, 64), (2, 5), (3, 37)]:
        feeds = zoo.sized_feeds("bert", rng, batch, seq)
        feeds["attention_mask"][0, : seq // 2] = 0  # a padded row
        want = ref.run(None, feeds)
        for program in written:
            for a, b in zip(session(program).run(None, feeds), want):
                assert a.shape == b.shape
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_facts_of_another_original_or_other_sizes_are_refused(bert):
    values = symbol_values(bert, SHAPES)
    program = _candidates(bert)[0]
    copy = onnx.ModelProto()
    copy.CopyFrom(bert)  # a copy of the original (the import reads the user's model as prepared): its facts are read
    assert make_generic(program, bert, values, Original(copy, values)).model == \
        make_generic(program, bert, values, Original(bert, values)).model
    other = onnx.ModelProto()
    other.CopyFrom(bert)
    other.graph.node[-1].output[0] += "_other"  # another program
    with pytest.raises(ValueError, match="another original"):
        make_generic(program, bert, values, Original(other, values))
    with pytest.raises(ValueError, match="other sizes"):
        make_generic(program, bert, values, Original(bert, {**values, "seq": values["seq"] + 1}))


def _layers(count: int = 8) -> onnx.ModelProto:
    """x [batch, seq, 8] plus its positions (a Range of the sequence's length: a shape that reaches the data, so
    the import rewrites the shape computations), then ``count`` layers, each a MatMul and a Relu between two
    Reshapes whose targets are computed from the MatMul's shape, as TorchScript writes ``h.view(h.size(0),
    h.size(1), 2, 4)``: 18 vectors the import's rewrite fits."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in [("ax0", [0]), ("ax02", [0, 2]), ("i0", 0), ("i1", 1), ("zero", 0), ("one", 1),
                          ("two_four", [2, 4]), ("eight", [8])]]
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Gather", ["xs", "i1"], ["xq"]),
             helper.make_node("Range", ["zero", "xq", "one"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["posf", "ax02"], ["posu"]),
             helper.make_node("Add", ["x", "posu"], ["h0"])]
    for k in range(count):
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{k}"))
        h, m = f"h{k}", f"m{k}"
        nodes += [helper.make_node("MatMul", [h, f"w{k}"], [m]),
                  helper.make_node("Shape", [m], [f"s{k}"]),
                  helper.make_node("Gather", [f"s{k}", "i0"], [f"b{k}"]),
                  helper.make_node("Gather", [f"s{k}", "i1"], [f"q{k}"]),
                  helper.make_node("Unsqueeze", [f"b{k}", "ax0"], [f"bu{k}"]),
                  helper.make_node("Unsqueeze", [f"q{k}", "ax0"], [f"qu{k}"]),
                  helper.make_node("Concat", [f"bu{k}", f"qu{k}", "two_four"], [f"t{k}"], axis=0),
                  helper.make_node("Reshape", [m, f"t{k}"], [f"r{k}"]),
                  helper.make_node("Relu", [f"r{k}"], [f"a{k}"]),
                  helper.make_node("Concat", [f"bu{k}", f"qu{k}", "eight"], [f"u{k}"], axis=0),
                  helper.make_node("Reshape", [f"a{k}", f"u{k}"], [f"h{k + 1}"])]
    graph = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                              ["batch", "seq", 8])],
                              [helper.make_tensor_value_info(f"h{count}", onnx.TensorProto.FLOAT,
                                                             ["batch", "seq", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_import_fits_the_originals_vectors_in_one_batch(monkeypatch):
    _runs_only(monkeypatch)
    # the import's rewrite is of the original itself: the small integer vectors it writes are the original's; once
    # the runs of the program written so far have run more nodes than PREFETCH_AFTER times the original's (Swin
    # V2: 237 runs of growing prefixes; here from the first), the rest are read off one batch of runs of it;
    # what is imported is the same, byte for byte, as where each is fitted off the program so far
    from eqsat.generic import probes

    monkeypatch.setattr(probes, "PREFETCH_AFTER", 0.0)
    model = _layers()
    shapes = {"x": (1, 16, 8)}

    def imported(batched: bool) -> tuple[bytes, int]:
        runs = [0]
        real = Original.runs_of

        def counting(self, program, names, keys, shapes):  # each program so far made to be run, counted
            def made():
                runs[0] += 1
                return program()
            return real(self, made, names, keys, shapes)
        with monkeypatch.context() as m:
            m.setattr(Original, "runs_of", counting)
            if not batched:
                m.setattr(Original, "prefetch", lambda self, names: None)
            program = export_model(import_generic(model, shapes)).SerializeToString()
        return program, runs[0]

    batched, few = imported(True)
    alone, many = imported(False)
    assert batched == alone
    # (unbatched, the layers' vectors, written from the input's shape alike in every layer, are read off the first
    # layer's runs under their content keys: eqsat.generic.keys)
    assert few < many, (few, many)
    ref, got = session(model), session(export_model(import_generic(model, shapes)))
    x = np.random.default_rng(1).standard_normal((1, 16, 8)).astype(np.float32)
    np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def _front_end() -> onnx.ModelProto:
    """samples [batch, length] -> a strided Conv 300 wide -> frames [batch, F, 4] -> Reshape to [batch, F, 2, 2]
    with the target computed from the frames' shape (a vector no run at fewer than 300 samples computes)."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 1, 300)).astype(np.float32), "w")
    consts = [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in [("ax1", [1]), ("ax0", [0]), ("i0", 0), ("i1", 1), ("two", [2, 2])]]
    nodes = [helper.make_node("Unsqueeze", ["samples", "ax1"], ["u"]),
             helper.make_node("Conv", ["u", "w"], ["c"], strides=[5]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Shape", ["t"], ["s"]),
             helper.make_node("Shape", ["samples"], ["ss"]),
             helper.make_node("Gather", ["s", "i0"], ["b"]),
             helper.make_node("Gather", ["s", "i1"], ["f"]),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
             helper.make_node("Unsqueeze", ["f", "ax0"], ["fu"]),
             helper.make_node("Concat", ["bu", "fu", "two"], ["target"], axis=0),
             helper.make_node("Reshape", ["t", "target"], ["y"])]
    graph = helper.make_graph(nodes, "front", [helper.make_tensor_value_info("samples", onnx.TensorProto.FLOAT,
                                                                               ["batch", "length"])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT,
                                                             ["batch", "frames", 2, 2])], [w, *consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_batch_that_fails_at_a_size_keeps_only_the_values_that_run_at_every_size():
    # at 1 and 256 samples (the fit's checks below 512) the Conv refuses its input: the batch fails there, its
    # halves are run, and only the input's own shape, which runs at every size, is fitted from the batch; the
    # frames' shape and target are left to the runs of the program written so far
    from eqsat.dims import Mono

    facts = Original(_front_end(), {"batch": 1, "length": 512})
    facts.prefetch(["ss", "s", "target"])
    assert facts.prefetched(["ss", "s", "target"]) == {"ss": [Mono.symbol("batch"), Mono.symbol("length")]}
    assert facts.runs == 1


def test_the_import_s_facts_are_carried_to_the_candidates_within_a_run(tmp_path, monkeypatch):
    """Within a run's scope (eqsat.generic.carried) the import's rewrite of the user's model and the candidates'
    share one Original: the symbolic shapes it knew of the original's values are carried (each the shape
    onnxruntime computes at other sizes), so a candidate's rewrite runs less (a Llama's: the original read as the
    import read it, for its guarded tables, fits none of its values again), the programs written are the bytes
    written without it, and outside a scope each ask makes its own."""
    _runs_only(monkeypatch)
    llama = zoo.export_dynamic("llama", "torchscript", str(tmp_path / "llama.onnx"))
    shapes = {i.name: (1, 64) for i in llama.graph.input}
    values = symbol_values(llama, shapes)
    program = export_model(import_generic(llama, shapes))
    fresh = Original(llama, values)
    alone = make_generic(program, llama, values, fresh).model
    with original_module.carried():
        simplify_for_import(llama, shapes)
        copy = onnx.ModelProto()
        copy.CopyFrom(llama)
        facts = Original.of(copy, values)
        assert Original.of(llama, values) is facts
        other = onnx.ModelProto()
        other.CopyFrom(llama)
        small = next(t for t in other.graph.initializer if len(t.dims) == 1 and t.dims[0] <= 64)
        small.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(small) + 1, small.name))
        assert Original.of(other, values) is not facts  # a small initializer's values differ: read as another model
        assert len(facts.shapes) >= 50  # the values' symbolic shapes the import's rewrite knew
        before = facts.runs + facts.probed
        assert make_generic(program, llama, values, facts).model == alone
        assert facts.runs + facts.probed - before < fresh.runs + fresh.probed  # fewer runs than learning it anew
    assert Original.of(llama, values) is not facts
    rng = np.random.default_rng(5)
    assert_symbolic_shapes(llama, facts.shapes, [({"batch": b, "seq": s}, zoo.sized_feeds("llama", rng, b, s))
                                                 for b, s in [(2, 5), (3, 37)]])


def test_the_original_s_targets_are_read_off_the_runs_that_say_it_runs(monkeypatch):
    _runs_only(monkeypatch)
    """Where the fits ask whether the original runs at a size (REFUSED, as the writer's rewrites of the candidates
    set it), that run of the whole original gives its small values there too: a fit of its Reshape targets runs a
    batch of its own only at the representative sizes (a mixture of experts' targets lie deep in the model, and a
    second run of almost all of it at each size cost 23 s); each entry fitted is onnxruntime's at other sizes."""
    from eqsat.onnx.axes.fitting import REFUSED

    model = _layers(4)
    values = {"batch": 1, "seq": 6}
    facts = Original(model, values)
    batches: list[dict] = []
    real = original_module.run_values

    def logged(m, names, shapes, whole=False):
        run = real(m, names, shapes, whole=whole)

        def at(sizes):
            if not whole and not shapes:  # (not the one run of every value's shape at these sizes)
                batches.append(dict(sizes))
            return run(sizes)
        return at
    monkeypatch.setattr(original_module, "run_values", logged)
    names = facts.computed_targets
    token = REFUSED.set(facts.refuses)
    try:
        fitted = facts.targets(names)
    finally:
        REFUSED.reset(token)
    assert len(names) == 8 and all(e is not None and None not in e for e in fitted)
    assert batches == [values]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = session(probe)
    for at in ({"batch": 2, "seq": 6}, {"batch": 3, "seq": 11}, {"batch": 1, "seq": 1}):
        x = np.zeros((at["batch"], at["seq"], 8), np.float32)
        for entries, got in zip(fitted, sess.run(None, {"x": x})):
            assert [int(m.value(at)) for m in entries] == list(got), at
