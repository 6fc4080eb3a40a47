"""Symbols of the interface tied to others, their names not saying so (eqsat.onnx.axes.tied): a decode step exported with
its mask's axis named ``total`` beside the cache's ``past``. Found by runs where onnxruntime runs the original only
where the tie holds; where it also runs with the mask longer (the mask sliced to the keys), only said, and read when
the user vouches for it (``--assume-dim``). Oracles: onnxruntime running the original, and the arithmetic."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from decode_helpers import DIM, HIDDEN, KV_HEADS, decode_step
from onnx import TensorProto, helper, numpy_helper

from eqsat import dims, optimize
from eqsat.app.cli import main
from eqsat.app.config import OptimizeConfig
from eqsat.app.shaping import Shaping
from eqsat.errors import InputError
from eqsat.onnx import session
from eqsat.onnx.axes.interface import derived_symbols, interface

SHAPES = {"x": (1, 1, HIDDEN), "attention_mask": (1, 128), "past_k": (1, KV_HEADS, 127, DIM),
          "past_v": (1, KV_HEADS, 127, DIM)}


def _named_total(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its ``past + 1`` axes named ``total``: the relation no longer in the names. Its mask is reshaped
    to [batch, the present's length] before use, as an export's index arithmetic refuses another length (added as it
    is, a mask of length 1 would broadcast)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in [*out.graph.input, *out.graph.output]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param == "past + 1":
                d.dim_param = "total"
    g = out.graph
    cast = next(node for node in g.node if node.op_type == "Cast" and node.input[0] == "attention_mask")
    cast.input[0] = "mask_rows"
    at = list(g.node).index(cast)
    g.node.insert(at, helper.make_node("Reshape", ["attention_mask", "mask_shape"], ["mask_rows"]))
    g.node.insert(at, helper.make_node("Concat", ["k_b", "k_len"], ["mask_shape"], axis=0))
    onnx.checker.check_model(out, full_check=True)
    return out


def _decode_equal(ref, got, rng: np.random.Generator, mask: np.ndarray, past: int) -> None:
    """The decode step's written model ``got`` computes what ``ref`` (the original) does on ``mask`` with a random
    new token and a random cache of ``past`` positions (onnxruntime both)."""
    batch = mask.shape[0]
    feeds = {"x": rng.standard_normal((batch, 1, HIDDEN)).astype(np.float32), "attention_mask": mask,
             "past_k": rng.standard_normal((batch, KV_HEADS, past, DIM)).astype(np.float32),
             "past_v": rng.standard_normal((batch, KV_HEADS, past, DIM)).astype(np.float32)}
    for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


def _sum_model(sliced: bool, added: bool = True, tail: bool = False) -> onnx.ModelProto:
    """[b, past, 4] and [b, seq, 4] concatenated and summed over the last axis, plus a mask [b, total] (``sliced``:
    the mask's first past + seq entries, as transformers slices its mask to the keys, or with ``tail`` its last ones;
    ``added`` False: the mask is an output of its own, the sizes free)."""
    n = helper.make_node
    nodes = [n("Concat", ["past", "new"], ["both"], axis=1),
             n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0)]
    mask = "mask"
    if sliced:
        nodes += [n("Shape", ["both"], ["shape"]), n("Gather", ["shape", "one"], ["length"], axis=0),
                  *([n("Neg", ["length"], ["back"])] if tail else []),
                  n("Slice", ["mask", "back", "big", "one"] if tail else ["mask", "zero", "length", "one"], ["cut"])]
        mask = "cut"
    if added:  # (reshaped to the sums' shape: a mask of length 1 would broadcast)
        nodes += [n("Shape", ["sums"], ["sums_shape"]), n("Reshape", [mask, "sums_shape"], ["mask_rows"])]
        mask = "mask_rows"
    nodes += [n("Add", ["sums", mask], ["y"])] if added else [n("Identity", ["sums"], ["y"]),
                                                             n("Identity", ["mask"], ["z"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             (("axis2", [2]), ("one", [1]), ("zero", [0]), ("big", [2**62]))]
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("past", f, ["batch", "past", 4]),
              helper.make_tensor_value_info("new", f, ["batch", "seq", 4]),
              helper.make_tensor_value_info("mask", f, ["batch", "total"])]
    outputs = [helper.make_tensor_value_info("y", f, ["batch", "total"])] + (
        [] if added else [helper.make_tensor_value_info("z", f, ["batch", "total"])])
    model = helper.make_model(helper.make_graph(nodes, "sums", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _ints(**values) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in values.items()]


def _model(name: str, nodes: list, inits: list, outputs: list[tuple[str, list]],
           mask: int = TensorProto.FLOAT) -> onnx.ModelProto:
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("past", f, ["batch", "past", 4]),
              helper.make_tensor_value_info("new", f, ["batch", "seq", 4]),
              helper.make_tensor_value_info("mask", mask, ["batch", "total"])]
    model = helper.make_model(helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info(o, f, dims)
                                                                      for o, dims in outputs], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _even_tail() -> onnx.ModelProto:
    """The past and the new tokens summed, plus the mask's entries past their length summed in pairs: runs where
    total >= past + seq and their difference is even only (so at total + 3 and - 3 alone it is refused), and its
    values read the mask's tail there."""
    n = helper.make_node
    nodes = [n("Concat", ["past", "new"], ["both"], axis=1), n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0),
             n("Shape", ["both"], ["shape"]), n("Gather", ["shape", "one"], ["length"], axis=0),
             n("Slice", ["mask", "length", "big", "one"], ["tail"]), n("Reshape", ["tail", "pairs"], ["paired"]),
             n("ReduceSum", ["paired", "ax12"], ["tsum"], keepdims=0), n("Unsqueeze", ["tsum", "one"], ["tsum1"]),
             n("Sub", ["length", "one"], ["before"]), n("Slice", ["mask", "before", "length", "one"], ["last"]),
             n("Reshape", ["last", "column"], ["last1"]),  # refused where the mask is shorter than the keys
             n("Mul", ["last1", "nought"], ["zero"]), n("Add", ["sums", "tsum1"], ["y0"]), n("Add", ["y0", "zero"], ["y"])]
    inits = _ints(axis2=[2], one=[1], big=[2**62], pairs=[0, -1, 2], ax12=[1, 2], column=[0, 1])
    return _model("even_tail", nodes, inits + [numpy_helper.from_array(np.array(0.0, np.float32), "nought")],
                  [("y", ["batch", "keys"])])


def _bounded_seq() -> onnx.ModelProto:
    """total = past + 2 (the past beside two fixed slots, added to the mask), and seq <= 4 (a table of 4 rows): at
    seq = 2 the mask's length is past + seq too, which holds at no other seq."""
    n = helper.make_node
    nodes = [n("Concat", ["past", "slots"], ["both"], axis=1), n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0),
             n("Shape", ["sums"], ["sums_shape"]), n("Reshape", ["mask", "sums_shape"], ["mask_rows"]),
             n("Add", ["sums", "mask_rows"], ["y"]), n("Shape", ["new"], ["ns"]), n("Gather", ["ns", "one"], ["s"], axis=0),
             n("Slice", ["table", "zero", "s", "one"], ["rows"]), n("Add", ["new", "rows"], ["w"])]
    inits = _ints(axis2=[2], one=[1], zero=[0]) + [
        numpy_helper.from_array(np.ones((1, 2, 4), np.float32), "slots"),
        numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(1, 4, 4), "table")]
    return _model("bounded_seq", nodes, inits, [("y", ["batch", "total"]), ("w", ["batch", "seq", 4])])


def _probed(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], **options) -> tuple[Shaping, dict]:
    """The run's shaping of ``model`` after its probe, and the symbols derived in the run's table."""
    config = OptimizeConfig.of(**options).updated(input_shapes=shapes)
    with dims.symbol_table():
        shaping = Shaping.of(model, config)
        shaping.probe(config)
        derived = derived_symbols(list(shaping.values))
        return shaping, {s: f(shaping.values) for s, f in derived.items()}


SUM_SHAPES = {"past": (1, 5, 4), "new": (1, 2, 4), "mask": (1, 7)}


def test_a_sum_the_original_runs_under_only_is_found_and_read_as_arithmetic():
    shaping, derived = _probed(_sum_model(sliced=False), SUM_SHAPES)
    assert shaping.ties.found == {"total": "past + seq"} and shaping.ties.likely == {}
    assert derived == {"total": 7}  # read as past + seq in the run
    assert derived_symbols(["batch", "past", "seq", "total"]) == {}  # and only there


def test_a_mask_read_at_the_keys_is_read_as_the_tie_at_its_head_and_only_said_at_its_tail():
    """Sliced to its first past + seq entries (transformers), the longer mask's tail changes nothing: read as the tie,
    at its head. Its last past + seq entries: changing the tail changes the output: only said, the sizes kept free.
    Sizes that vary apart are not tied."""
    shaping, derived = _probed(_sum_model(sliced=True), SUM_SHAPES)
    assert shaping.ties.head == {"total": "past + seq"} and shaping.ties.likely == {} == shaping.ties.found
    assert derived == {"total": 7} and "read total as past + seq" in shaping.ties_text()
    tail, derived = _probed(_sum_model(sliced=True, tail=True), SUM_SHAPES)
    assert tail.ties.head == {} == tail.ties.found and tail.ties.likely == {"total": "past + seq"}
    assert derived == {}
    assert "--assume-dim 'total=past + seq'" in tail.ties_text()
    free, _ = _probed(_sum_model(sliced=False, added=False), SUM_SHAPES)
    assert free.ties.found == {} and free.ties.likely == {}


def test_an_assumed_tie_is_read_and_sizes_that_contradict_it_are_refused():
    shaping, derived = _probed(_sum_model(sliced=True), SUM_SHAPES, assume_dims={"total": "past + seq"})
    assert shaping.assumed == {"total": "past + seq"} and derived == {"total": 7}
    with pytest.raises(InputError, match="give total = 8 where past \\+ seq = 7"):
        _probed(_sum_model(sliced=True), {**SUM_SHAPES, "mask": (1, 8)}, assume_dims={"total": "past + seq"})
    with pytest.raises(InputError, match="width is not a free dynamic dimension"):
        _probed(_sum_model(sliced=True), SUM_SHAPES, assume_dims={"total": "past + width"})


def test_a_decode_step_whose_mask_is_named_total_is_tuned_and_verified_with_it_following_the_past():
    """Named ``total``, the mask's axis is past + 1 (the original runs nowhere else): found, the run verifies at
    further past lengths (refused, so skipped, were total read free), and the written model keeps the name and
    computes what the original does at other batches and past lengths."""
    model = _named_total(decode_step())
    result = optimize(model, OptimizeConfig.of(budget=4, cost="analytic", measure=False).updated(
        input_shapes=SHAPES))
    report = result.report
    assert "read total as past + 1" in report.interface.note
    assert {"past=1", "past=37", "past=256", "batch=2"} <= set(report.interface.verified_at)
    assert interface(result.optimized) == interface(model)
    ref, got = session(model), session(result.optimized)
    rng = np.random.default_rng(3)
    for batch, past in [(1, 127), (2, 5), (3, 300), (1, 0)]:
        mask = np.ones((batch, past + 1), np.int64)
        mask[0, :past // 2] = 0
        _decode_equal(ref, got, rng, mask, past)


def test_the_cli_names_an_assumed_dimension_in_the_report_and_refuses_a_malformed_one(tmp_path, capsys):
    path, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(_sum_model(sliced=True), path)
    shapes = ["--input-shape", "past=1,5,4", "--input-shape", "new=1,2,4", "--input-shape", "mask=1,7"]
    assert main(["optimize-model", str(path), "-o", str(out), "--assume-dim", "total=past+", *shapes]) == 2
    assert "--assume-dim 'total=past+'" in capsys.readouterr().err and not out.exists()
    assert main(["optimize-model", str(path), "-o", str(out), "--report", str(report), "--no-measure",
                 "--cost", "analytic", "--assume-dim", "total=past+seq", *shapes]) == 0
    assumed = json.loads(report.read_text())["assumptions"]
    assert any(a.startswith("--assume-dim total=past + seq") for a in assumed)


@pytest.mark.parametrize("build, found, likely", [(_even_tail, {}, {"total": "past + seq"}),
                                                  (_bounded_seq, {"total": "past + 2"}, {})])
def test_runs_that_mislead_at_one_offset_do_not_tie_wrongly_and_the_written_model_matches(build, found, likely):
    """The mask's tail read in pairs runs at total + 2 alone: only likely. The position table bounds seq, so seq + 3
    with total + 3 is refused too: the tie is past + 2, not past + seq. Each written model equals the original
    wherever the original runs (onnxruntime), at sizes on and off the tie."""
    model = build()
    shaping, _ = _probed(model, SUM_SHAPES)
    assert (shaping.ties.found, shaping.ties.likely) == (found, likely)
    result = optimize(model, OptimizeConfig.of(budget=4, cost="analytic", measure=False).updated(
        input_shapes=SUM_SHAPES))
    ref, got = session(model), session(result.optimized)
    rng, ran = np.random.default_rng(4), 0
    for batch, past, seq, total in [(1, 5, 2, 7), (1, 5, 2, 9), (1, 5, 2, 11), (2, 3, 1, 6), (1, 10, 3, 17),
                                    (1, 0, 1, 3), (1, 5, 1, 7), (1, 0, 1, 2), (1, 3, 4, 5)]:
        feeds = {"past": rng.standard_normal((batch, past, 4)).astype(np.float32),
                 "new": rng.standard_normal((batch, seq, 4)).astype(np.float32),
                 "mask": rng.standard_normal((batch, total)).astype(np.float32)}
        try:
            want = ref.run(None, feeds)
        except Exception:  # noqa: BLE001 - sizes the original refuses
            continue
        ran += 1
        for w, h in zip(want, got.run(None, feeds)):
            np.testing.assert_allclose(h, w, rtol=1e-5, atol=1e-5)
    assert ran >= 4


def test_chained_or_inapplicable_assumptions_are_refused(tmp_path, capsys):
    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_sum_model(sliced=True), path)
    shapes = ["--input-shape", "past=1,5,4", "--input-shape", "new=1,2,4", "--input-shape", "mask=1,7"]
    chained = ["--assume-dim", "total=past+seq", "--assume-dim", "past=total-seq"]
    assert main(["optimize-model", str(path), "-o", str(out), *chained, *shapes]) == 2
    assert "past is assumed too" in capsys.readouterr().err and not out.exists()
    assert main(["optimize-model", "--model", "encoder", "-o", str(out), "--assume-dim", "total=past+seq"]) == 2
    assert "--assume-dim applies to ONNX models with dynamic dimensions" in capsys.readouterr().err
    with pytest.raises(InputError, match="assume_dims"):
        OptimizeConfig.of().updated(assume_dims={"total": 7}).validate()
    with pytest.raises(InputError, match="--assume-dim 'total=past/2'"):
        OptimizeConfig.of().updated(assume_dims={"total": "past/2"}).validate()


def test_a_decode_step_at_no_given_sizes_is_tuned_where_its_tie_holds_and_one_refused_there_is_told_of_the_flag(
        tmp_path, capsys):
    """No sizes given: the mask's ``total`` at its default beside the past's is refused, and so are its halves and
    doubles; at one more than the past it runs, and the tie is read there (no flag). The written model equals the
    original (onnxruntime) at other past lengths, as it does under ``--assume-dim total=past+1``. A model refused at
    every size tried (total = past + 2, seq at most 4) is told of ``--assume-dim``."""
    path, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    model = _named_total(decode_step())
    onnx.save(model, path)
    fast = ["--no-measure", "--cost", "analytic", "-q", "--budget", "4"]
    assert main(["optimize-model", str(path), "-o", str(out), "--report", str(report), *fast]) == 0
    interface_report = json.loads(report.read_text())["interface"]
    assert "read total as past + 1" in interface_report["note"]
    assert interface_report["symbols"]["total"] == interface_report["symbols"]["past"] + 1
    assumed = tmp_path / "a.onnx"
    assert main(["optimize-model", str(path), "-o", str(assumed), *fast, "--assume-dim", "total=past+1"]) == 0
    ref, rng = session(model), np.random.default_rng(5)
    for written in (out, assumed):
        got = session(str(written))
        for batch, past in [(1, 127), (2, 9)]:
            _decode_equal(ref, got, rng, np.ones((batch, past + 1), np.int64), past)
    onnx.save(_bounded_seq(), path)
    refused = tmp_path / "refused.onnx"
    assert main(["optimize-model", str(path), "-o", str(refused), *fast]) == 2
    assert "--assume-dim SYMBOL=EXPR" in capsys.readouterr().err and not refused.exists()


def _keys_mask(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (the decode step, its mask's axis named ``total``) reading its mask at the keys' positions only, as
    transformers does: the mask's first ``past + 1`` entries (the present's length)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    g.initializer.extend([numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("h0", 0), ("h1", 1))])
    reshape = next(node for node in g.node if node.op_type == "Reshape" and node.input[0] == "attention_mask")
    reshape.input[0] = "mask_keys"
    at = list(g.node).index(reshape)
    g.node.insert(at, helper.make_node("Slice", ["attention_mask", "h0", "k_len", "h1"], ["mask_keys"]))
    onnx.checker.check_model(out, full_check=True)
    return out


def test_a_decode_step_reading_its_mask_at_the_keys_is_written_for_the_tie_and_equals_the_original_on_longer_masks():
    """The mask read at the keys' positions (a longer one runs): no flag, the run reads total as past + 1 at its head,
    verifies with total longer, and the written model equals the original (onnxruntime) where the tie holds and with
    longer masks whose tails are random, at other batches and past lengths."""
    model = _keys_mask(_named_total(decode_step()))
    result = optimize(model, OptimizeConfig.of(budget=4, cost="analytic", measure=False).updated(
        input_shapes=SHAPES))
    report = result.report
    assert "read total as past + 1" in report.interface.note
    assert any("(off past + 1)" in label for label in report.interface.verified_at)
    assert interface(result.optimized) == interface(model)
    ref, got = session(model), session(result.optimized)
    rng, longer = np.random.default_rng(6), 0
    for batch, past, extra in [(1, 127, 0), (2, 5, 3), (3, 300, 0), (1, 0, 0), (1, 127, 9), (2, 40, 1)]:
        mask = rng.integers(0, 2, (batch, past + 1 + extra)).astype(np.int64)
        mask[:, past] = 1
        _decode_equal(ref, got, rng, mask, past)
        longer += extra > 0
    assert longer == 3


def _misleading(kind: str) -> tuple[onnx.ModelProto, dict[str, tuple[int, ...]]]:
    """Models that run with their mask longer, some reading more of it than its head (the review's): ``broadcast``
    adds mask[:, :past] to the cache's scores and mask[:, past:past + seq] to the new token's (at seq = 1 the slice
    of one broadcasts, so seq changed alone runs: its tie is past + seq, not past + 1); ``padded`` also adds
    whether any entry of the whole int mask is 0 (a random head always has one); ``flattened`` reads the mask
    flattened, its first batch x (past + seq) entries (the head at a batch of 1 only); ``long_tail`` reads the tail
    where it is longer than the keys; ``marked`` counts the whole float mask's entries at -10000."""
    n = helper.make_node
    head = [n("Concat", ["past", "new"], ["both"], axis=1), n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0),
            n("Shape", ["both"], ["shape"]), n("Gather", ["shape", "one"], ["length"], axis=0),
            n("Slice", ["mask", "zero", "length", "one"], ["cut"])]
    ints = {"axis2": [2], "one": [1], "zero": [0], "big": [2**62]}
    floats: dict[str, float] = {}
    mask, shapes = TensorProto.FLOAT, {"past": (1, 5, 4), "new": (1, 2, 4), "mask": (1, 7)}
    outputs = [("y", ["batch", None])]
    if kind == "broadcast":
        nodes = [n("Concat", ["past", "new"], ["keys"], axis=1), n("Transpose", ["keys"], ["kt"], perm=[0, 2, 1]),
                 n("MatMul", ["new", "kt"], ["scores"]), n("Shape", ["past"], ["ps"]),
                 n("Gather", ["ps", "one"], ["plen"], axis=0), n("Shape", ["new"], ["ns"]),
                 n("Gather", ["ns", "one"], ["slen"], axis=0), n("Add", ["plen", "slen"], ["klen"]),
                 n("Slice", ["scores", "zero", "plen", "two"], ["sp"]),
                 n("Slice", ["scores", "plen", "klen", "two"], ["sn"]),
                 n("Slice", ["mask", "zero", "plen", "one"], ["mp"]), n("Slice", ["mask", "plen", "klen", "one"], ["mn"]),
                 n("Unsqueeze", ["mp", "one"], ["mp3"]), n("Unsqueeze", ["mn", "one"], ["mn3"]),
                 n("Add", ["sp", "mp3"], ["ap"]), n("Add", ["sn", "mn3"], ["an"]), n("Concat", ["ap", "an"], ["a"], axis=2),
                 n("Softmax", ["a"], ["w"], axis=-1), n("MatMul", ["w", "keys"], ["y"])]
        ints["two"] = [2]
        shapes = {"past": (1, 5, 4), "new": (1, 1, 4), "mask": (1, 6)}
        outputs = [("y", ["batch", "seq", 4])]
    elif kind == "padded":
        mask = TensorProto.INT64
        nodes = head + [n("ReduceMin", ["mask"], ["least"], axes=[1], keepdims=1), n("Cast", ["least"], ["lf"], to=1),
                        n("Cast", ["cut"], ["cf"], to=1), n("Add", ["sums", "cf"], ["y0"]), n("Add", ["y0", "lf"], ["y"])]
    elif kind == "flattened":
        nodes = [n("Concat", ["past", "new"], ["both"], axis=1), n("ReduceSum", ["both", "axis2"], ["sums"], keepdims=0),
                 n("Shape", ["sums"], ["sshape"]), n("Reshape", ["mask", "minus1"], ["flat"]),
                 n("ReduceProd", ["sshape"], ["count"], keepdims=1), n("Slice", ["flat", "zero", "count", "zero"], ["fh"]),
                 n("Reshape", ["fh", "sshape"], ["cut"]), n("Add", ["sums", "cut"], ["y"])]
        ints["minus1"] = [-1]
    elif kind == "long_tail":
        nodes = head + [n("Shape", ["mask"], ["mshape"]), n("Gather", ["mshape", "one"], ["total"], axis=0),
                        n("Sub", ["total", "length"], ["over"]), n("Greater", ["over", "length"], ["g"]),
                        n("Cast", ["g"], ["gf"], to=1), n("Slice", ["mask", "length", "big", "one"], ["tail"]),
                        n("ReduceSum", ["tail", "one"], ["ts"], keepdims=1), n("Mul", ["ts", "gf"], ["gts"]),
                        n("Add", ["sums", "cut"], ["y0"]), n("Add", ["y0", "gts"], ["y"])]
        shapes = {"past": (1, 20, 4), "new": (1, 2, 4), "mask": (1, 22)}  # a tail of 3 or 8 is not read
    else:
        nodes = head + [n("Equal", ["mask", "marker"], ["eq"]), n("Cast", ["eq"], ["eqf"], to=1),
                        n("ReduceSum", ["eqf", "one"], ["c"], keepdims=1), n("Add", ["sums", "cut"], ["y0"]),
                        n("Add", ["y0", "c"], ["y"])]
        floats["marker"] = -10000.0
    inits = _ints(**ints) + [numpy_helper.from_array(np.array([v], np.float32), k) for k, v in floats.items()]
    return _model(kind, nodes, inits, outputs, mask), shapes


@pytest.mark.parametrize("kind", ["broadcast", "padded", "flattened", "long_tail", "marked"])
def test_a_mask_read_beyond_its_head_somewhere_is_not_read_as_the_tie(kind):
    """Each model runs with its mask longer and is read at the head by random feeds at the given sizes, but reads
    more of it elsewhere (another length, an all-ones head, a batch of 2, a tail longer than the keys, an additive
    mask's constant): no tie is read (a program sliced to the head would differ from it there)."""
    model, shapes = _misleading(kind)
    shaping, derived = _probed(model, shapes)
    assert shaping.ties.head == {} == shaping.ties.found and "total" not in derived


def _listed() -> onnx.ModelProto:
    """Attention over x [b, s, 4] plus a kind [b, s] (transposed twice first) with a mask [b, s] added to its scores
    (the mask and the kind reshaped to x's [b, s] first, so that neither broadcasts at 1), the axes named as TorchScript names axes listed without names (``dynamic_axes={"x": [0, 1], "mask": [0, 1],
    "kind": [0, 1]}``): ``x_dynamic_axes_1`` and so on, the sequence's length named apart on each input."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "zero", "two", "zero"], ["bs"]),
             n("Reshape", ["kind", "bs"], ["kind_rows"]), n("Reshape", ["mask_in", "bs"], ["mask"]),
             n("Unsqueeze", ["kind_rows", "two"], ["k1"]), n("Add", ["x", "k1"], ["xk"]),
             n("Transpose", ["xk"], ["x0"], perm=[0, 2, 1]), n("Transpose", ["x0"], ["x1"], perm=[0, 2, 1]),
             n("Transpose", ["x1"], ["xt"], perm=[0, 2, 1]), n("MatMul", ["x1", "xt"], ["s0"]),
             n("Unsqueeze", ["mask", "one"], ["m1"]), n("Add", ["s0", "m1"], ["s1"]), n("Softmax", ["s1"], ["p"], axis=-1),
             n("MatMul", ["p", "x1"], ["y"])]
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, ["x_dynamic_axes_1", "x_dynamic_axes_2", 4]),
              helper.make_tensor_value_info("mask_in", f, ["mask_dynamic_axes_1", "mask_dynamic_axes_2"]),
              helper.make_tensor_value_info("kind", f, ["kind_dynamic_axes_1", "kind_dynamic_axes_2"])]
    outputs = [helper.make_tensor_value_info("y", f, ["y_dynamic_axes_1", "y_dynamic_axes_2", 4])]
    model = helper.make_model(helper.make_graph(nodes, "listed", inputs, outputs, _ints(zero=[0], one=[1], two=[2])),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_axes_listed_without_names_are_a_batch_at_axis_0_and_a_length_named_apart_is_read_as_the_other():
    """TorchScript's names of listed axes say nothing: axis 0 is read as the batch (at 1, not 128), and the mask's
    length, which the original runs with only where it equals the tokens', is read as theirs. The written model
    equals the original (onnxruntime) at other batches and lengths."""
    model = _listed()
    shaping, derived = _probed(model, {})
    assert shaping.values["x_dynamic_axes_1"] == 1 and shaping.values["x_dynamic_axes_2"] == 128
    lengths = {s: e for s, e in shaping.ties.found.items() if s.endswith("_2")}
    assert lengths == {"mask_dynamic_axes_2": "x_dynamic_axes_2", "kind_dynamic_axes_2": "x_dynamic_axes_2"}, \
        shaping.ties
    assert derived["mask_dynamic_axes_2"] == derived["kind_dynamic_axes_2"] == 128
    result = optimize(model, OptimizeConfig.of(budget=4, cost="analytic", measure=False))
    assert "x_dynamic_axes_2=37" in result.report.interface.verified_at
    ref, got = session(model), session(result.optimized)
    rng = np.random.default_rng(7)
    for batch, seq in [(1, 128), (2, 37), (3, 1), (1, 300)]:
        feeds = {"x": rng.standard_normal((batch, seq, 4)).astype(np.float32),
                 "mask_in": rng.standard_normal((batch, seq)).astype(np.float32),
                 "kind": rng.standard_normal((batch, seq)).astype(np.float32)}
        np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


def _pair(kind: str) -> onnx.ModelProto:
    """Two inputs x [bx, la, 16] and y [by, lb, 16] of lengths named apart, each model running where they are equal
    and somewhere else too (the second review's): ``broadcast`` adds x[:, :lb] + y + x (y of length 1 broadcasts);
    ``divides`` reshapes x to [-1, lb, 16] (runs where lb divides la); ``first_at_one`` adds y to x (x of length 1
    broadcasts, the first of the class); ``batch`` adds x[:by] + y + x over batches (y's batch of 1 broadcasts)."""
    n = helper.make_node
    ints = {"zero": [0], "one": [1], "axis": [1]}
    if kind == "broadcast":
        nodes = [n("Shape", ["y"], ["ys"]), n("Gather", ["ys", "one"], ["lb"], axis=0),
                 n("Slice", ["x", "zero", "lb", "axis"], ["xh"]), n("Add", ["xh", "y"], ["s"]), n("Add", ["s", "x"], ["o"])]
    elif kind == "divides":
        nodes = [n("Shape", ["y"], ["ys"]), n("Gather", ["ys", "one"], ["lb"], axis=0),
                 n("Concat", ["minus1", "lb", "sixteen"], ["to"], axis=0), n("Reshape", ["x", "to"], ["xr"]),
                 n("ReduceSum", ["xr", "zero"], ["xs"], keepdims=1), n("Add", ["xs", "y"], ["o"])]
        ints.update(minus1=[-1], sixteen=[16])
    elif kind == "first_at_one":
        nodes = [n("Add", ["x", "y"], ["o"])]
    else:
        nodes = [n("Shape", ["y"], ["ys"]), n("Gather", ["ys", "zero"], ["by"], axis=0),
                 n("Slice", ["x", "zero", "by", "zero"], ["xh"]), n("Add", ["xh", "y"], ["s"]), n("Add", ["s", "x"], ["o"])]
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, ["batch_x", "la", 16]),
              helper.make_tensor_value_info("y", f, ["batch_y", "lb", 16])]
    model = helper.make_model(helper.make_graph(nodes, kind, inputs, [helper.make_tensor_value_info("o", f, [None, None, None])],
                                                _ints(**ints)), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("kind", ["broadcast", "divides", "first_at_one"])
def test_lengths_equal_where_given_but_run_apart_at_one_or_a_divisor_are_not_tied(kind):
    """Each runs at la = lb and where one is 1 or divides the other: no tie is read (a program written for la = lb
    would differ from the original there, or refuse it)."""
    shaping, derived = _probed(_pair(kind), {"x": (1, 128, 16), "y": (1, 128, 16)})
    assert "lb" not in shaping.ties.found and "lb" not in shaping.ties.head and "lb" not in derived


def test_a_batch_of_one_that_broadcasts_is_checked_and_axes_without_names_are_not_tied():
    """A batch given at 8, where the original also runs with y's batch at 1 (broadcast): the written model equals it
    there (the check at further sizes takes a batch of 1). A model whose axes have no names is not tied (no crash)."""
    model = _pair("batch")
    shapes = {"x": (8, 16, 16), "y": (8, 16, 16)}
    result = optimize(model, OptimizeConfig.of(budget=4, cost="analytic", measure=False).updated(input_shapes=shapes))
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((8, 16, 16)).astype(np.float32),
             "y": rng.standard_normal((1, 16, 16)).astype(np.float32)}
    np.testing.assert_allclose(session(result.optimized).run(None, feeds)[0], session(model).run(None, feeds)[0],
                               rtol=1e-6, atol=1e-6)
    unnamed = onnx.ModelProto()
    unnamed.CopyFrom(_pair("first_at_one"))
    for vi in unnamed.graph.input:
        for d in vi.type.tensor_type.shape.dim[:2]:
            d.ClearField("dim_param")
    shaping, _ = _probed(unnamed, {})
    assert shaping.ties.found == shaping.ties.head == {} and "x:1" in shaping.values
