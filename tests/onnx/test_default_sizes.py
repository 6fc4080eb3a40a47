"""Where onnxruntime refuses a model at the default sizes of its dynamic dimensions because of one of them (a head's
size that must be 64, named as a symbol by onnxruntime-genai's builder: ``kv_cache_dim``), the others stay at their
defaults: the run halves them together until the model runs, then puts each back where the model still runs there.
The oracle is onnxruntime: the sizes chosen run, and the written model equals the original at sizes it was not
tuned at."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from eqsat.app.cli import main
from eqsat.onnx import footprint, session
from eqsat.onnx.axes.interface import OTHER_DEFAULT, batch_symbols, runnable_values, symbol_values

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _head_model() -> onnx.ModelProto:
    """``q [batch, seq, dim]`` times a ``[64, 8]`` weight (so ``dim`` must be 64), plus the mask's first ``seq``
    positions (``Gather`` of ``range(seq)`` from ``mask [batch, total]``: refused where seq > total)."""
    w = helper.make_tensor("w", F, [64, 8], np.linspace(-1, 1, 512, dtype=np.float32))
    nodes = [helper.make_node("MatMul", ["q", "w"], ["qw"]),
             helper.make_node("Shape", ["q"], ["qs"], start=1, end=2),
             helper.make_node("Squeeze", ["qs"], ["seq"]),
             helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", I64, [], [0])),
             helper.make_node("Constant", [], ["one"], value=helper.make_tensor("o", I64, [], [1])),
             helper.make_node("Range", ["zero", "seq", "one"], ["idx"]),
             helper.make_node("Gather", ["mask", "idx"], ["kept"], axis=1),
             helper.make_node("Cast", ["kept"], ["keptf"], to=F),
             helper.make_node("Unsqueeze", ["keptf", "two"], ["kept3"]),
             helper.make_node("Add", ["qw", "kept3"], ["y"])]
    two = helper.make_tensor("two", I64, [1], [2])
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("q", F, ["batch", "seq", "dim"]),
                                               helper.make_tensor_value_info("mask", I64, ["batch", "total"])],
                              [helper.make_tensor_value_info("y", F, ["batch", "seq", 8])], [w, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_only_the_refused_symbol_moves_from_its_default():
    """``dim`` refuses 128 and runs at 64 with the others halved too; ``seq`` goes back to 128 only once ``total``
    has (seq <= total), so one pass in order would have left it at 64."""
    model = _head_model()
    values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "seq", "dim", "total"])
    assert ran and values == {"batch": 1, "seq": OTHER_DEFAULT, "dim": 64, "total": OTHER_DEFAULT}
    sess = session(model)
    sess.run(None, {"q": np.zeros((1, values["seq"], 64), np.float32),
                    "mask": np.ones((1, values["total"]), np.int64)})  # the oracle: onnxruntime runs there


def test_a_model_refusing_one_default_is_optimized_at_the_others_and_equals_the_original(tmp_path, capsys):
    model = _head_model()
    path, out, rep = tmp_path / "h.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    report = json.loads(rep.read_text())
    assert report["interface"]["symbols"] == {"batch": 1, "seq": 128, "dim": 64, "total": 128}
    assert "128 of dim" in report["interface"]["note"] and "of seq" not in report["interface"]["note"]
    original, written = session(model), session(onnx.load(out))
    rng = np.random.default_rng(0)
    for batch, seq, total in ((2, 5, 9), (1, 200, 300)):
        feeds = {"q": rng.standard_normal((batch, seq, 64)).astype(np.float32),
                 "mask": rng.integers(0, 2, (batch, total)).astype(np.int64)}
        np.testing.assert_allclose(written.run(None, feeds)[0], original.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, dims", [
    ("past_key_values.0.key", ["batch_size", 2, "past_sequence_length", "kv_cache_dim"]),  # genai's builder
    ("past_key_values.0.key", ["batch", 2, "p", "d"]),  # named as a cache
    ("x", ["batch", 2, "past_sequence_length", "head_size"]),  # its sides named as a sequence and a head
])
def test_a_cache_of_up_to_four_heads_is_not_an_image(name, dims):
    nodes = [helper.make_node("Identity", [name], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(name, F, dims)],
                              [helper.make_tensor_value_info("y", F, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    values = symbol_values(model, {})
    assert all(values[d] == OTHER_DEFAULT for d in dims[2:]), values


def _step_model() -> onnx.ModelProto:
    """A decode step traced at one new token: ``x [batch, seq, 4]`` squeezed on its sequence axis (which runs at a
    sequence of 1 only), appended to ``past [batch, past, 4]``; the mask ``[batch, past + seq]`` as optimum names it."""
    nodes = [helper.make_node("Squeeze", ["x", "one"], ["token"]),
             helper.make_node("Unsqueeze", ["token", "one"], ["step"]),
             helper.make_node("Concat", ["past", "step"], ["present"], axis=1),
             helper.make_node("Cast", ["mask"], ["maskf"], to=F),
             helper.make_node("Unsqueeze", ["maskf", "two"], ["mask3"]),
             helper.make_node("Mul", ["present", "mask3"], ["y"])]
    graph = helper.make_graph(
        nodes, "step", [helper.make_tensor_value_info("x", F, ["batch", "seq", 4]),
                        helper.make_tensor_value_info("past", F, ["batch", "past", 4]),
                        helper.make_tensor_value_info("mask", I64, ["batch", "past + seq"])],
        [helper.make_tensor_value_info("y", F, ["batch", "past + seq", 4])],
        [helper.make_tensor("one", I64, [1], [1]), helper.make_tensor("two", I64, [1], [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_step_that_runs_at_one_new_token_only_is_tuned_there(tmp_path, capsys):
    """No halving or doubling of the defaults runs it (a sequence of 8 at the least): the sequence alone at 1 does,
    the past at its default; the written model equals the original at pasts it was not tuned at."""
    model = _step_model()
    values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "seq", "past", "past + seq"])
    assert ran and values == {"batch": 1, "seq": 1, "past": OTHER_DEFAULT, "past + seq": OTHER_DEFAULT + 1}
    path, out, rep = tmp_path / "s.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, path)
    code = main(["optimize-model", str(path), "-o", str(out), "--report", str(rep), "--scheduler", "none",
                 "--cost", "analytic", "--no-measure", "--allow-slower", "-q"])
    assert code == 0, capsys.readouterr().err
    assert "seq at 1, where it runs with its outputs" in json.loads(rep.read_text())["interface"]["note"]
    original, written = session(model), session(onnx.load(out))
    rng = np.random.default_rng(0)
    for batch, past in ((2, 0), (1, 5), (3, 300)):
        feeds = {"x": rng.standard_normal((batch, 1, 4)).astype(np.float32),
                 "past": rng.standard_normal((batch, past, 4)).astype(np.float32),
                 "mask": rng.integers(0, 2, (batch, past + 1)).astype(np.int64)}
        np.testing.assert_allclose(written.run(None, feeds)[0], original.run(None, feeds)[0], rtol=1e-6)


def test_a_table_added_whole_is_not_tuned_at_one_by_its_broadcast():
    """An encoder that adds its whole position table ``[1, 77, 4]`` runs at 77 positions and, broadcast, at 1:
    its output keeps 77 there, so 1 is no size of ``seq`` (the run asks for ``--input-shape``, as before)."""
    pos = helper.make_tensor("pos", F, [1, 77, 4], np.linspace(-1, 1, 308, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Add", ["x", "pos"], ["y"])], "table",
                              [helper.make_tensor_value_info("x", F, ["batch", "seq", 4])],
                              [helper.make_tensor_value_info("y", F, ["batch", "seq", 4])], [pos])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "seq"])
    assert not ran and values["seq"] == OTHER_DEFAULT
    assert session(model).run(None, {"x": np.zeros((1, 1, 4), np.float32)})[0].shape == (1, 77, 4)  # the broadcast


def test_samples_framed_by_80_are_tuned_at_a_multiple_of_80():
    """A speech model that frames its samples by 80 (``Reshape(x, [0, -1, 80])``: Moonshine) runs at no power of two,
    where every halving and doubling of the default 128 lies: the sizes are then doubled from 5/4 of it (160, 320,
    640) and tuned at the first with 8 frames or more. Before, the run asked for ``--input-shape`` (exit 2)."""
    t = helper.make_tensor("t", I64, [3], [0, -1, 80])
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["frames80"]),
                               helper.make_node("ReduceMean", ["frames80"], ["y"], axes=[2], keepdims=0)], "framed",
                              [helper.make_tensor_value_info("x", F, ["batch", "samples"])],
                              [helper.make_tensor_value_info("y", F, ["batch", "frames"])], [t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "samples"])
    assert ran and values == {"batch": 1, "samples": 640}
    (y,) = session(model).run(None, {"x": np.zeros((1, values["samples"]), np.float32)})  # the oracle
    assert y.shape == (1, 8)


def _framed(names: list[str], width: int = 1) -> onnx.ModelProto:
    """Samples framed by 80 (as in the test above), each frame projected to ``width`` features."""
    t = helper.make_tensor("t", I64, [3], [0, -1, 80])
    w = helper.make_tensor("w", F, [80, width], np.ones(80 * width, np.float32))
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["frames80"]),
                               helper.make_node("MatMul", ["frames80", "w"], ["projected"]),
                               helper.make_node("ReduceMean", ["projected"], ["y"], axes=[2], keepdims=0)], "framed",
                              [helper.make_tensor_value_info("x", F, names)],
                              [helper.make_tensor_value_info("y", F, [names[0], "frames"])], [t, w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_dimension_torch_export_named_itself_is_a_batch_at_axis_0():
    """torch's default exporter names a dimension it made symbolic itself ``s`` and a number (``s33``), which says
    nothing of what it is: at axis 0 it is the batch, as an unnamed axis is. Before, ``s33`` was a length, doubled
    with the samples (a wav2vec2's run tried a batch of 4096 at 4096 samples and took 20 GB)."""
    model = _framed(["s33", "s50"])
    assert batch_symbols(model) == ["s33"]
    values, ran = runnable_values(model, symbol_values(model, {}), ["s33", "s50"])
    assert ran and values == {"s33": 1, "s50": 640}


def test_a_default_size_whose_run_would_not_fit_the_memory_is_not_tried():
    """Where the default is refused and the sizes are doubled, a size whose run is estimated over the memory a run
    may take (eqsat.onnx.footprint, the run's limit) is not run: the sizes stop at the last that fits (320 samples,
    4 frames of 4096 features, 64 KB; 640 samples would take 128 KB, over a limit of 100 KB)."""
    model = _framed(["batch", "samples"], width=4096)
    assert runnable_values(model, symbol_values(model, {}), ["batch", "samples"])[0]["samples"] == 640
    with footprint.limited(budget=100_000):
        values, ran = runnable_values(model, symbol_values(model, {}), ["batch", "samples"])
    assert ran and values == {"batch": 1, "samples": 320}
    (y,) = session(model).run(None, {"x": np.zeros((1, 320), np.float32)})  # the oracle: it runs there
    assert y.shape == (1, 4)
