"""A dynamic-axes model imports with symbolic dimensions (eqsat.dims): each IR value's dimensions, as monomials
of the interface's symbols, are the sizes the same value has when the model is imported at other sizes (the
importer at those sizes is the oracle); a static import has none, and its e-graph is the static one."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import audio_attention, audio_position_bias

from eqsat.dims import Dim, Mono, fp_of, from_mono, reshape_sym, symbol_table, symbol_value
from eqsat.egglog.egraph import EGraph
from eqsat.generic import import_generic
from eqsat.onnx import import_model
from eqsat.onnx.axes.dimensions import symbolic_target
from eqsat.onnx.axes.interface import shapes_at


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_symbolic_dimensions_are_the_sizes_at_other_sizes(exporter, tmp_path):
    model = zoo.export_dynamic("bert", exporter, str(tmp_path / "m.onnx"))
    at = {"batch": 2, "seq": 16}
    graph = import_generic(model, shapes_at(model, at))
    nodes = graph.nodes()
    keys = [[d.mono.key() if isinstance(d, Dim) and d.mono else d for d in n.shape] for n in nodes]
    assert ["batch", "seq", 32] in keys  # the hidden states
    assert any(n.op in ("attention", "matmul") and [k for k in key[:1]] == ["batch"] for n, key in zip(nodes, keys))
    symbolic = [n for n in nodes if any(isinstance(d, Dim) for d in n.shape)]
    assert len(symbolic) >= len(nodes) // 3
    for other in ({"batch": 3, "seq": 16}, {"batch": 2, "seq": 7}):
        again = import_generic(model, shapes_at(model, other)).nodes()
        assert [n.op for n in again] == [n.op for n in nodes]
        checked = 0
        for n, m in zip(nodes, again):
            monos = [d.mono if isinstance(d, Dim) else Mono.const(int(d)) for d in n.shape]
            if any(isinstance(d, Dim) for d in n.shape) and all(x is not None for x in monos):
                assert [int(x.value(other)) for x in monos if x is not None] == [int(d) for d in m.shape], n
                checked += 1
            elif not any(isinstance(d, Dim) for d in n.shape) and n.op != "opaque":
                assert tuple(map(int, n.shape)) == tuple(map(int, m.shape)), f"{n} is constant but changes"
        assert checked >= len(symbolic) // 2
    assert EGraph.from_graph(graph).symbolic
    static = import_model(model, shapes_at(model, at))
    assert not any(isinstance(d, Dim) for n in static.nodes() for d in n.shape)
    assert not EGraph.from_graph(static).symbolic


def test_a_value_typed_by_onnxruntime_runs_only_the_part_of_the_model_it_depends_on(monkeypatch):
    """A runtime operator (com.microsoft's Gelu) of a Slice of a position buffer to an end computed from the
    input's shape (BERT's position ids): onnx's shape inference on the node alone cannot type it, onnxruntime
    does, on the nodes it depends on only (not the whole model's values and weights: BERT-base's import held them
    all, 2.8 GB); the shape is the one onnxruntime gives running the whole model (the oracle)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from eqsat.onnx import folding

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Unsqueeze", ["seq", "zero_axis"], ["end"]),
             helper.make_node("Slice", ["positions", "start", "end", "axis1"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["pos_c"], to=TensorProto.FLOAT),
             helper.make_node("Gelu", ["pos_c"], ["pos_f"], domain="com.microsoft")]
    h = "x"
    for k in range(6):  # layers the position ids do not depend on
        nodes.append(helper.make_node("MatMul", [h, f"w{k}"], [f"h{k}"]))
        h = f"h{k}"
    nodes.append(helper.make_node("Add", [h, "pos_t"], ["y"]))
    nodes.insert(6, helper.make_node("Unsqueeze", ["pos_f", "last_axis"], ["pos_t"]))
    ints = {"one": [1], "zero_axis": [0], "start": [0], "axis1": [1], "last_axis": [2]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    inits[0] = numpy_helper.from_array(np.array(1, np.int64), "one")
    inits.append(numpy_helper.from_array(np.arange(64, dtype=np.int64)[None, :], "positions"))
    inits += [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{k}") for k in range(6)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    runs: list[onnx.ModelProto] = []
    real = folding.session

    def spy(m, *args, **kwargs):
        runs.append(m)
        return real(m, *args, **kwargs)
    monkeypatch.setattr(folding, "session", spy)
    graph_ir = import_generic(model, shapes_at(model, {"b": 2, "s": 16}))
    whole = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = whole.run(["y"], {"x": rng.standard_normal((2, 16, 8)).astype(np.float32)})[0]
    assert [int(d) for d in graph_ir.outputs[0].shape] == list(y.shape)
    whole_runs = [m for m in runs if len(m.graph.output) > 1]  # the runs that typed values (not one-node folds)
    assert whole_runs, "the Gelu was typed without onnxruntime: the test no longer covers the run"
    for m in whole_runs:
        assert not any(n.op_type == "MatMul" for n in m.graph.node)
        assert not any(t.name.startswith("w") for t in m.graph.initializer)


def test_an_expand_to_a_shape_computed_from_the_shapes_is_typed_without_a_run(monkeypatch):
    """transformers' ``repeat_kv`` as TorchScript writes it in every layer: an Expand to ``Where(Equal(t, -1),
    ones, t)`` of a target ``t`` concatenated from the sizes of a value the layers compute. onnx's inference on
    the Expand alone cannot type it, and each layer's ran the layers before it (a 30-layer decoder's import: 48
    runs, 29 s); read from the sizes the import holds (with the boolean in between), it is typed by inference,
    with no run; its shape and the output's are onnxruntime's on the whole model at two sizes (the oracle). (A
    model of fewer weights than ``SIMPLIFIED_WEIGHTS`` has the target written as a constant before.)"""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from eqsat.onnx import folding

    rng = np.random.default_rng(0)
    ints = {"zero": 0, "one": 1}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Shape", ["h"], ["shape"])]
    parts = []
    for k, name in enumerate(("zero", "one")):
        nodes += [helper.make_node("Gather", ["shape", name], [f"d{k}"], axis=0),
                  helper.make_node("Unsqueeze", [f"d{k}", "axes0"], [f"u{k}"])]
        parts.append(f"u{k}")
    nodes += [helper.make_node("Concat", [parts[0], parts[1], "two", "eight"], ["cat"], axis=0),
              helper.make_node("Reshape", ["cat", "flat"], ["target"]),
              helper.make_node("Shape", ["target"], ["tlen"]),
              helper.make_node("ConstantOfShape", ["tlen"], ["ones"],
                               value=numpy_helper.from_array(np.array([1], np.int64))),
              helper.make_node("Mul", ["ones", "minus"], ["minus_ones"]),
              helper.make_node("Equal", ["target", "minus_ones"], ["is_minus"]),
              helper.make_node("Where", ["is_minus", "ones", "target"], ["expand_to"]),
              helper.make_node("Unsqueeze", ["h", "axes2"], ["h4"]),
              helper.make_node("Expand", ["h4", "expand_to"], ["e"]),
              helper.make_node("Relu", ["e"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              {"axes0": [0], "axes2": [2], "two": [2], "eight": [8], "flat": [-1], "minus": -1}.items()]
    inits.append(numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 2, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    from eqsat.generic import importing

    # as a model past the weights the import rewrites first (the rewrite writes the target as a constant)
    monkeypatch.setattr(importing, "SIMPLIFIED_WEIGHTS", 0)
    runs: list[bool] = []
    real = folding.ModelRuns._run_all
    monkeypatch.setattr(folding.ModelRuns, "_run_all", lambda self, node, whole=False: (
        runs.append(whole), real(self, node, whole))[1])
    whole = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b, s in ((2, 16), (3, 5)):
        g = import_generic(model, shapes_at(model, {"b": b, "s": s}))
        y = whole.run(["y"], {"x": rng.standard_normal((b, s, 8)).astype(np.float32)})[0]
        assert y.shape == (b, s, 2, 8)
        assert [int(d) for d in g.outputs[0].shape] == list(y.shape)
    assert runs == []


def _batch_power(d: int, batch_fp: int) -> int:
    """How many times the batch's fingerprint divides a dimension's."""
    fp, k = fp_of(d), 0
    while isinstance(d, Dim) and fp % batch_fp == 0:
        fp, k = fp // batch_fp, k + 1
    return k


def test_a_size_no_monomial_fits_keeps_the_batch_beside_it():
    """An audio model's frames (a floor of a quotient of the samples) are no monomial of the symbols; a Reshape of
    ``[frames, batch, 8]`` to ``[frames*batch, 8]`` and back must still carry the batch on the axes that hold it,
    not lose it (the frames read as the constant they are at these sizes) nor put it on the features (the
    reading at a batch of 1 is ambiguous). Oracle: the same model imported at a batch of 2, value by value."""
    model = audio_attention(static=False)
    with symbol_table():
        one = import_generic(model, {"samples": (1, 64)}).nodes()
        batch = symbol_value("batch", 1)
        implied = [[int(d) * 2 ** _batch_power(d, batch) for d in n.shape] for n in one]
    two = import_generic(model, {"samples": (2, 64)}).nodes()
    assert [n.op for n in two] == [n.op for n in one]
    assert [n.op for n in one].count("reshape") >= 4  # the heads, the rows and back: all imported
    assert implied == [[int(d) for d in n.shape] for n in two]


@pytest.mark.parametrize("frames_from", ["shape", "samples"])
def test_a_shape_that_follows_a_size_read_off_a_shape_keeps_the_frames(frames_from):
    """A relative position bias over the frames, ``Range(Shape(t)[0])``: its shape follows a value, which runs of
    the model at nearby sizes cannot fit (the frames change every 5 samples there; every 320 in WavLM) and no
    monomial fits. Computed where every symbol is at its fingerprint, it has the frames' fingerprint, so the
    attention over it keeps the frames and the batch symbolic. The dynamo exporter computes the frames from the
    samples instead, ``(length - 10) // 5 + 1`` (``samples``): a floor division that does not divide, no monomial
    either (WavLM dynamo's bias was a constant and every layer after the first lost the frames). Oracles:
    onnxruntime's shapes (no value of the frames' size is a constant) and the model imported at a batch of 2."""
    model = audio_position_bias(frames_from)
    frames = (64 - 10) // 5 + 1
    with symbol_table():
        one = import_generic(model, {"samples": (1, 64)}).nodes()
        batch = symbol_value("batch", 1)
        implied = [[int(d) * 2 ** _batch_power(d, batch) for d in n.shape] for n in one]
        assert not [n for n in one if frames in [d for d in n.shape if not isinstance(d, Dim)]]
    two = import_generic(model, {"samples": (2, 64)}).nodes()
    assert [n.op for n in two] == [n.op for n in one]
    assert implied == [[int(d) for d in n.shape] for n in two]


def test_a_symbol_at_1_beside_monomials_is_read_as_the_e_graph_reads_it():
    """Only beside a size no monomial fits does the import read a symbol at 1 as networks write it: elsewhere its
    reading must be the one the e-graph's reshape rules make (``eqsat.dims.reshape_sym``, their twin: a second
    reader of the same target), or the search's shapes and the program's would differ. ``[b*s, 64]`` to
    ``[s, 1, 64]`` at a batch of 1 keeps b with s there."""
    with symbol_table():
        bs = from_mono(Mono.symbol("b") * Mono.symbol("s"), {"b": 1, "s": 128})
        out = symbolic_target((bs, 64), (128, 1, 64))
        assert tuple(fp_of(d) for d in out) == reshape_sym((128, 1, 64), (bs, 64))


def test_a_dimension_whose_fingerprint_is_zero_is_read_at_once():
    """A padding ``(-seq) % 8`` is 0 where every symbol is at its fingerprint (fingerprints are multiples of 64):
    no symbol's fingerprint divides out of 0 (it did forever)."""
    import signal

    def late(*_args):
        raise TimeoutError("symbolic_target did not return")

    with symbol_table():
        symbol_value("seq", 992)  # a symbol whose fingerprint could divide out
        signal.signal(signal.SIGALRM, late)
        signal.alarm(20)
        try:
            out = symbolic_target((Dim(992, 0), 64), (63488,))
        finally:
            signal.alarm(0)
    assert [int(d) for d in out] == [63488]


def _new_positions_model() -> onnx.ModelProto:
    """A decode step's causal mask: the new tokens' positions ``Range(past, past + seq)`` against the mask's
    ``Range(total)``, beside the past concatenated with the new tokens and summed into a mask sliced to their length
    (as transformers slices it). onnxruntime refuses ``seq`` or ``past`` grown alone, so no run fits the Range."""
    n = helper.make_node
    ints = {k: numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
            (("zero", 0), ("one", 1), ("i1", [1]), ("ax1", [1]), ("ax2", [2]), ("ax02", [0, 2]), ("ax01", [0, 1]),
             ("z1", [0]), ("four", [1, 1, 4]))}
    nodes = [
        n("Shape", ["ids"], ["ids_shape"]), n("Gather", ["ids_shape", "one"], ["seq"], axis=0),
        n("Shape", ["past"], ["past_shape"]), n("Gather", ["past_shape", "one"], ["p"], axis=0),
        n("Add", ["p", "seq"], ["end"]), n("Range", ["p", "end", "one"], ["positions"]),
        n("Unsqueeze", ["positions", "ax02"], ["rows"]),
        n("Shape", ["mask"], ["mask_shape"]), n("Gather", ["mask_shape", "one"], ["total"], axis=0),
        n("Range", ["zero", "total", "one"], ["columns"]), n("Unsqueeze", ["columns", "ax01"], ["cols"]),
        n("LessOrEqual", ["cols", "rows"], ["causal"]), n("Cast", ["causal"], ["causal_f"], to=TensorProto.FLOAT),
        n("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT), n("Unsqueeze", ["ids_f", "ax2"], ["ids_u"]),
        n("Expand", ["ids_u", "four"], ["new"]), n("Concat", ["past", "new"], ["both"], axis=1),
        n("ReduceSum", ["both", "ax2"], ["sums"], keepdims=0), n("Unsqueeze", ["end", "z1"], ["end1"]),
        n("Slice", ["mask", "z1", "end1", "i1"], ["cut"]), n("Add", ["sums", "cut"], ["y"]),
        n("Unsqueeze", ["mask", "ax1"], ["mask_u"]), n("Mul", ["causal_f", "mask_u"], ["z"]),
    ]
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("past", f, ["batch", "past", 4]),
              helper.make_tensor_value_info("mask", f, ["batch", "total"])]
    outputs = [helper.make_tensor_value_info("y", f, ["batch", "keys"]),
               helper.make_tensor_value_info("z", f, ["batch", "seq", "total"])]
    model = helper.make_model(helper.make_graph(nodes, "new_positions", inputs, outputs, list(ints.values())),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_range_over_the_new_positions_is_sized_by_the_symbol_where_no_run_fits_it():
    """At one new token, the Range's length 1 is the symbol ``seq`` (its bounds' fingerprints: ``past + seq``
    less ``past``), not the constant 1 a writer would keep; the mask's Range is ``total``."""
    model = _new_positions_model()
    with symbol_table():
        graph = import_generic(model, {"ids": (1, 1), "past": (1, 8, 4), "mask": (1, 9)})
        ranges = [n for n in graph.nodes() if n.op == "opaque" and n.attrs[0] == "Range"]
        keys = sorted(d.mono.key() for n in ranges for d in n.shape if isinstance(d, Dim) and d.mono is not None)
    assert keys == ["seq", "total"]


def test_a_range_of_another_step_is_not_sized_as_a_quotient_of_the_symbol():
    """``Range(0, T, 2)`` has ceil(T / 2) entries, no monomial of T: at T = 8 it is not read as ``1/2*T`` (wrong at
    every odd T), as its bounds' difference over the step would give."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["shape"]), n("Gather", ["shape", "one"], ["t"], axis=0),
             n("Range", ["zero", "t", "two"], ["r"]), n("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("zero", 0), ("one", 1), ("two", 2))]
    model = helper.make_model(helper.make_graph(
        nodes, "stepped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    with symbol_table():
        graph = import_generic(model, {"x": (1, 8)})
        sizes = [d.mono.key() for n in graph.nodes() if n.op == "opaque" and n.attrs[0] == "Range"
                 for d in n.shape if isinstance(d, Dim) and d.mono is not None]
    assert sizes == []
