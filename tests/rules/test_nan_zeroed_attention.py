"""Attention whose NaN softmax rows are zeros (``attention_nz``, torch's export of ``scaled_dot_product_attention``:
``Softmax -> IsNaN -> Where(., 0, .) -> MatMul``) and its runtime kernel (``sdpa_nz``: opset 23's ``Attention``, NaN
rows zeroed where any is NaN; rule ``attention_nz_kernel``, on masks marked ``AboveLowest``). Oracles: onnxruntime
running the original (decomposed, opset 17) model, on the inputs where the kernel and the decomposition part: rows
masked with -inf throughout, NaN and infinite queries, keys and values; and brute force over the values a mask can
hold for the mark."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rule_cases import choose

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost.analytic import AnalyticCost
from eqsat.cost.base import OpKey
from eqsat.cost.ort import op_model, runtime_nodes
from eqsat.egglog.egraph import EGraph
from eqsat.onnx import session
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.ops.bounds import MASK_FLOOR
from eqsat.ops.composite import float_bits
from eqsat.rules import RuleEngine, by_name

B, HQ, S, D = 2, 4, 6, 8
LOWEST = float(np.finfo(np.float32).min)


def _model(kv_heads: int = HQ, zero: float = 0.0, isnan_out: bool = False, dynamic: bool = False,
           masked: float | None = -np.inf) -> onnx.ModelProto:
    """q [B, HQ, S, D], k and v [B, kv_heads, S, D] (repeated to HQ heads as transformers' ``repeat_kv`` exports
    it where fewer), the mask ``Where(keep, 0, masked)`` of a boolean input keep [B, 1, S, S] as torch's SDPA export
    writes it (``masked`` None: the mask a float input of that name); the scale on q and kt each.
    ``dynamic``: the batch and the sequence named axes (k and v not repeated)."""
    n = helper.make_node
    b, s = ("batch", "seq") if dynamic else (B, S)
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, HQ, s, D]),
              *(helper.make_tensor_value_info(x, TensorProto.FLOAT, [b, kv_heads, s, D]) for x in "kv"),
              helper.make_tensor_value_info("mask" if masked is None else "keep",
                                            TensorProto.FLOAT if masked is None else TensorProto.BOOL, [b, 1, s, s])]
    r = HQ // kv_heads
    inits = [numpy_helper.from_array(np.array(D ** -0.25, np.float32), "r"),
             numpy_helper.from_array(np.array(zero, np.float32), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "axis"),
             numpy_helper.from_array(np.array([B, kv_heads, r, S, D], np.int64), "grown"),
             numpy_helper.from_array(np.array([B, HQ, S, D], np.int64), "heads")]
    nodes, k, v = [], "k", "v"
    if masked is not None:
        inits.append(numpy_helper.from_array(np.array(masked, np.float32), "masked"))
        nodes.append(n("Where", ["keep", "zero_mask", "masked"], ["mask"]))
        inits.append(numpy_helper.from_array(np.array(0, np.float32), "zero_mask"))
    if r > 1:
        for x in "kv":
            nodes += [n("Unsqueeze", [x, "axis"], [x + "1"]), n("Expand", [x + "1", "grown"], [x + "2"]),
                      n("Reshape", [x + "2", "heads"], [x + "3"])]
        k, v = "k3", "v3"
    nodes += [n("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]), n("Mul", ["q", "r"], ["qs"]), n("Mul", ["kt", "r"], ["ks"]),
              n("MatMul", ["qs", "ks"], ["s"]), n("Add", ["s", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
              n("IsNaN", ["p"], ["nan"]), n("Where", ["nan", "zero", "p"], ["pz"]), n("MatMul", ["pz", v], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, HQ, s, D])]
    if isnan_out:
        outputs.append(helper.make_tensor_value_info("nan", TensorProto.BOOL, [B, HQ, S, S]))
    model = helper.make_model(helper.make_graph(nodes, "attention", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto, edge: str, seed: int = 0, sizes: tuple[int, int] = (B, S)) -> dict[str, np.ndarray]:
    """Normal values at ``sizes`` (batch, sequence), a causal mask (keep, or a float mask of 0 and ``-inf``), and
    the edge: whole query rows masked (left padding), a NaN or an infinity in one operand."""
    rng = np.random.default_rng(seed)
    named = {"batch": sizes[0], "seq": sizes[1]}
    feeds = {i.name: rng.standard_normal([d.dim_value or named[d.dim_param] for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    keep = ~np.triu(np.ones((sizes[1], sizes[1]), dtype=bool), 1)[None, None].repeat(sizes[0], 0)
    if edge == "-inf rows":  # left padding under a causal mask: rows 0-1 of the last batch see nothing
        keep[-1, :, :, :2] = False
    elif edge != "normal":
        name, value = {"NaN q": ("q", np.nan), "inf k": ("k", np.inf), "NaN v": ("v", np.nan),
                       "-inf v": ("v", -np.inf)}[edge]
        feeds[name][-1, 0, 3, 1] = value
    if "keep" in feeds:
        feeds["keep"] = keep
    else:
        feeds["mask"] = np.where(keep, 0, -np.inf).astype(np.float32)
    return feeds


EDGES = ("normal", "-inf rows", "NaN q", "inf k", "NaN v", "-inf v")


def _same(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal up to rounding, NaN and infinities where the oracle has them."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_the_export_imports_as_one_attention_nz():
    assert import_model(_model()).op_counts()["attention_nz"] == 1
    # near misses: another value than 0 where a row is NaN, the NaN test also read elsewhere
    for near in (_model(zero=1.0), _model(isnan_out=True)):
        counts = import_model(near).op_counts()
        assert "attention_nz" not in counts and "attention" not in counts, counts


def test_the_decomposition_gives_nan_rows_as_zeros():
    """The oracle itself on the edges: rows masked with -inf throughout and rows of NaN scores are 0 @ v, where a
    model without the Where gives NaN (what the kernel must reproduce)."""
    original = _model()
    got = session(original).run(None, _feeds(original, "-inf rows"))[0]
    assert np.array_equal(got[1, :, :2], np.zeros_like(got[1, :, :2]))
    got = session(original).run(None, _feeds(original, "NaN q"))[0]
    assert np.array_equal(got[1, 0, 3], np.zeros(D)) and not np.isnan(got).any()


def _kernel_program(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = import_model(model)
    eg = EGraph.from_graph(graph)  # no Finite mark: the rule needs none
    assert RuleEngine(eg, [by_name()["attention_nz_kernel"]]).apply("attention_nz_kernel").changed
    return export_model(choose(eg, graph, "sdpa_nz"))


@pytest.mark.parametrize("edge", EDGES)
def test_the_kernel_computes_what_the_decomposition_does(edge):
    original = _model()
    program = _kernel_program(original)
    ran = runtime_nodes(program)
    assert "Attention" in ran and "Softmax" not in ran, ran
    feeds = _feeds(original, edge)
    _same(session(program).run(None, feeds)[0], session(original).run(None, feeds)[0])


def test_a_mask_that_may_hold_float32s_lowest_keeps_the_decomposition():
    """A float input mask (a user may feed float32's lowest, where the kernel writes zeros and the decomposition
    averages v) or one of float32's lowest: no ``AboveLowest`` mark, the rule does not fire."""
    for near in (_model(masked=None), _model(masked=LOWEST)):
        graph = import_model(near)
        assert graph.op_counts()["attention_nz"] == 1
        assert not RuleEngine(EGraph.from_graph(graph), [by_name()["attention_nz_kernel"]]).apply(
            "attention_nz_kernel").changed


@pytest.fixture
def kernel_priced_low(monkeypatch):
    """The analytic cost with the NaN-zeroing kernel at a tenth of its price: a search that may write it does."""
    priced = AnalyticCost.op_cost
    monkeypatch.setattr(AnalyticCost, "op_cost",
                        lambda self, key: priced(self, key) * (0.1 if key.op == "sdpa_nz" else 1))


@pytest.mark.parametrize("kv_heads", [HQ, 2])
def test_a_run_ships_the_kernel_verified_on_every_edge(kv_heads, kernel_priced_low):
    """Through the pipeline (grouped heads too): the kernel ships, verified; it agrees with the original on each
    edge."""
    original = _model(kv_heads)
    result = optimize(original, OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False))
    report = result.report.to_json()
    assert report["verified"] and report["kernels"] == {"Attention (opset 23)": 1}, report["kernels"]
    out = result.optimized
    assert [i.name for i in out.graph.input] == [i.name for i in original.graph.input]
    for edge in EDGES:
        feeds = _feeds(original, edge, seed=1)
        _same(session(out).run(None, feeds)[0], session(original).run(None, feeds)[0])


def test_a_program_for_every_size_keeps_the_kernel_exact(kernel_priced_low):
    """Dynamic batch and sequence: the kernel written once, the original's values (and NaN) at other sizes."""
    original = _model(dynamic=True)
    result = optimize(original, OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False))
    assert result.report.to_json()["kernels"] == {"Attention (opset 23)": 1}
    out = result.optimized
    assert [d.dim_param for d in out.graph.input[0].type.tensor_type.shape.dim] == ["batch", "", "seq", ""]
    for sizes in ((1, 5), (3, 11)):
        for edge in EDGES:
            feeds = _feeds(original, edge, seed=2, sizes=sizes)
            _same(session(out).run(None, feeds)[0], session(original).run(None, feeds)[0])


def test_the_ort_cost_times_the_kernel_as_the_runtime_runs_it():
    shapes = ((1, 6, 32, 16), (1, 2, 16, 32), (1, 2, 32, 16), (1, 1, 32, 32))
    bits = (float_bits(0.25),)
    kernel = op_model(OpKey("sdpa_nz", bits, shapes, (1, 6, 32, 16)))
    core = op_model(OpKey("attention_nz", bits, ((1, 6, 32, 16), (1, 6, 16, 32), (1, 6, 32, 16), (1, 1, 32, 32)),
                          (1, 6, 32, 16)))
    assert kernel is not None and core is not None
    ran = runtime_nodes(kernel[0])
    assert "Attention" in ran and "If" in ran and "Softmax" not in ran, ran
    assert "Attention" not in runtime_nodes(core[0])


def _mask_cases() -> dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto]]]:
    """Masks computed from two boolean inputs a and b [1, 1, 2, 2]: the nodes (output ``mask``) and constants."""
    n = helper.make_node
    consts = [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in
              (("zero", 0.0), ("ninf", -np.inf), ("lowest", LOWEST), ("minus", -1e4), ("pinf", np.inf))]
    return {
        "0 or -inf": ([n("Where", ["a", "zero", "ninf"], ["mask"])], consts),
        "0 or lowest": ([n("Where", ["a", "zero", "lowest"], ["mask"])], consts),
        "sum of two": ([n("Where", ["a", "zero", "ninf"], ["m1"]), n("Where", ["b", "zero", "minus"], ["m2"]),
                        n("Add", ["m1", "m2"], ["mask"])], consts),
        "max reaching lowest": ([n("Where", ["a", "zero", "ninf"], ["m1"]), n("Where", ["b", "lowest", "ninf"], ["m2"]),
                                 n("Max", ["m1", "m2"], ["mask"])], consts),
        "-inf times -1e4 and inf": ([n("Where", ["a", "ninf", "pinf"], ["m1"]), n("Where", ["b", "minus", "zero"], ["m2"]),
                                     n("Mul", ["m1", "m2"], ["mask"])], consts),
    }


def _bool_inputs() -> list[onnx.ValueInfoProto]:
    return [helper.make_tensor_value_info(x, TensorProto.BOOL, [1, 1, 2, 2]) for x in "ab"]


@pytest.mark.parametrize("case", list(_mask_cases()))
def test_the_mark_holds_where_no_input_gives_a_finite_entry_near_float32s_lowest(case):
    """``AboveLowest`` against brute force: the mask computed by onnxruntime on every one of the 256 pairs of
    boolean inputs; marked exactly where no finite entry ever lies below :data:`eqsat.ops.bounds.MASK_FLOOR`."""
    nodes, consts = _mask_cases()[case]
    alone = helper.make_model(helper.make_graph(nodes, "mask", _bool_inputs(), [
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 2, 2])], consts),
        opset_imports=[helper.make_opsetid("", 17)])
    run = session(alone)
    least = np.inf
    for k in range(256):
        bits = np.array([(k >> j) & 1 for j in range(8)], dtype=bool)
        with np.errstate(invalid="ignore"):
            out = run.run(None, {"a": bits[:4].reshape(1, 1, 2, 2), "b": bits[4:].reshape(1, 1, 2, 2)})[0]
        finite = out[np.isfinite(out)]
        least = min(least, float(finite.min())) if finite.size else least
    q = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1, 2, 2]) for x in "qv"]
    attention = [helper.make_node("MatMul", ["q", "q"], ["s"]), helper.make_node("Add", ["s", "mask"], ["sm"]),
                 helper.make_node("Softmax", ["sm"], ["p"], axis=-1), helper.make_node("IsNaN", ["p"], ["nan"]),
                 helper.make_node("Where", ["nan", "zero", "p"], ["pz"]), helper.make_node("MatMul", ["pz", "v"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes + attention, "a", [*q, *_bool_inputs()], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])], consts),
        opset_imports=[helper.make_opsetid("", 17)])
    graph = import_model(model)
    assert graph.op_counts()["attention_nz"] == 1
    marked = bool(EGraph.from_graph(graph).encoding.marks["AboveLowest"])
    assert marked == (least >= MASK_FLOOR), (case, least)
    assert marked == (case in ("0 or -inf", "sum of two", "-inf times -1e4 and inf"))
