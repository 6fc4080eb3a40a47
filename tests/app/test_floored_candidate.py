"""The floored candidates (eqsat.app.floored.floored_phase): where a candidate's Softmax scores are masked (a causal
mask: deep whatever the input's padding), the run also measures the candidates with those scores floored
(eqsat.onnx.softmax_floor), each checked against the original; where nothing is masked, or the measurement cannot decide,
the candidates are as before. Oracles: onnxruntime's outputs of the original model, on inputs drawn here."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_builders as ob
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.app.candidates import build_candidates, export_phase, verifier_of
from eqsat.app.config import OptimizeConfig
from eqsat.app.floored import FLOORED, floored_phase
from eqsat.app.pipeline import encode_phase, extract_phase, optimize, search_phase, shaped_import_phase
from eqsat.app.selection import candidates_phase
from eqsat.cost import make
from eqsat.measurement import floor_probe
from eqsat.onnx import session

CONFIG = OptimizeConfig.of(budget=2, cost="analytic", ilp_time_limit=2.0, candidates=3, seed=1, measure_budget=0.3,
                           runtime="ort-cpu")
S, D = 24, 16


@pytest.fixture(autouse=True)
def _floor_pays(monkeypatch):
    """The floor taken as paying on this CPU (whether it does is the host's: floor_probe measures it); the tests
    of a CPU where it does not set it so themselves."""
    monkeypatch.setattr(floor_probe, "floor_pays", lambda: (True, 0.5))
LOWEST = np.finfo(np.float32).min


def _decoder_attention(causal: bool, log: bool = False) -> onnx.ModelProto:
    """One head of attention over x [1, S, D], its scores masked causally with the lowest float (as transformers'
    decoders write it) or not masked, an output projection after."""
    rng = np.random.default_rng(5)
    w = {n: numpy_helper.from_array((rng.standard_normal((D, D)) * 0.3).astype(np.float32), n)
         for n in ("wq", "wk", "wv", "wo")}
    mask = np.where(np.tril(np.ones((S, S), bool)), 0.0, LOWEST) if causal else np.zeros((S, S))
    inits = [*w.values(), numpy_helper.from_array(mask.astype(np.float32), "mask"),
             numpy_helper.from_array(np.array(D ** -0.5, np.float32), "scale")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["c"]), helper.make_node("MatMul", ["c", "wo"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, D])]
    if log:  # the log-weights as a second output: -inf where masked, which a floor would make -60
        nodes.append(helper.make_node("Log", ["p"], ["logp"]))
        outputs.append(helper.make_tensor_value_info("logp", TensorProto.FLOAT, [1, S, S]))
    return ob.model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, D])], outputs, inits)


def _built(model: onnx.ModelProto, config: OptimizeConfig = CONFIG):
    original, graph, _ = shaped_import_phase(model, config)
    cost_model = make("analytic")
    egraph, search = encode_phase(graph, config)
    search_phase(egraph, config, search, cost_model, lambda _m: None)
    snap, ext = extract_phase(egraph, config, cost_model, 0.0)
    extracted = candidates_phase(snap, ext, config, cost_model, 0.0)
    first = export_phase(snap, ext, graph, cost_model)
    verifier = verifier_of(original, config)
    verifier.check(first[1])
    built = build_candidates(snap, extracted, graph, original, config, cost_model, first, verifier=verifier)
    return original, built, verifier


def test_a_causally_masked_program_gets_floored_candidates_that_compute_the_original():
    original, built, verifier = _built(_decoder_attention(causal=True))
    feeds = verifier.first_inputs()
    out = floored_phase(built, True, original, feeds, CONFIG, verifier)
    names = [b.entry.name for b in out]
    assert names[0] == built[0].entry.name and names[1] == built[0].entry.name + FLOORED
    assert len(out) == len(built) + 1
    for b in out[2:]:  # each further candidate floored in its place, unless it runs no Softmax (a kernel's)
        assert b.entry.name.endswith(FLOORED) or "Softmax" not in [n.op_type for n in b.model.graph.node]
    want_session = session(original)
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal((1, S, D)).astype(np.float32) * scale for scale in (1.0, 30.0)]
    edge = xs[0].copy()
    edge[0, 3, 2] = np.nan  # a NaN in one position's features: the masks add it to every row, all NaN
    for b in [b for b in out if b.entry.name.endswith(FLOORED)]:
        assert b.entry.verified and b.check is not None and b.check.verified
        ops = [n.op_type for n in b.model.graph.node]
        assert "Softmax" in ops and ops.count("Max") == ops.count("Softmax")
        plain = next(p for p in built if p.entry.name + FLOORED == b.entry.name)  # the report counts the floor's nodes
        for op in ("ReduceMax", "Sub", "Max"):
            added = ops.count(op) - [n.op_type for n in plain.model.graph.node].count(op)
            assert added == ops.count("Softmax") and \
                b.entry.operators.get(op, 0) == plain.entry.operators.get(op, 0) + added, op
        got_session = session(b.model)
        for x in [*xs, edge]:
            want, got = want_session.run(None, {"x": x})[0], got_session.run(None, {"x": x})[0]
            assert np.array_equal(np.isnan(got), np.isnan(want))
            scale = float(np.abs(want[np.isfinite(want)]).max()) if np.isfinite(want).any() else 1.0
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


def test_a_first_candidate_without_softmax_leaves_the_others_floored():
    """Where the first runs attention as a kernel (no Softmax to floor), the further candidates that hold one are
    still floored, and the first stays first."""
    original, built, verifier = _built(_decoder_attention(causal=True))
    softmax = ["Softmax" in [n.op_type for n in b.model.graph.node] for b in built]
    assert not all(softmax) and any(softmax)  # the kernels candidate runs opset 23's Attention
    built[0].entry.verified = True  # checked by _built (the pipeline marks the first's entry after this phase)
    reordered = [built[softmax.index(False)]] + [b for b, s in zip(built, softmax) if s]
    out = floored_phase(reordered, True, original, verifier.first_inputs(), CONFIG, verifier)
    assert [b.entry.name for b in out] == [reordered[0].entry.name] + [b.entry.name + FLOORED for b in reordered[1:]]
    assert all(b.entry.verified for b in out[1:])


def test_where_the_e_graph_holds_the_attention_kernel_a_candidate_computes_the_softmax_and_is_floored(monkeypatch):
    """The candidate that avoids the runtime's attention kernel (named ``softmax``): onnxruntime's Attention computes
    the masked scores inside, where no floor reaches them; its decomposition can be floored. Oracles: the written
    models' operators, and onnxruntime's outputs of the original."""
    from eqsat.app.selection import SOFTMAX
    from eqsat.cost.favoured import ATTENTION_KERNELS

    graph_original, graph, _ = shaped_import_phase(_decoder_attention(causal=True), CONFIG)
    egraph, search = encode_phase(graph, CONFIG)
    cost_model = make("analytic")
    search_phase(egraph, CONFIG, search, cost_model, lambda _m: None)
    snap, ext = extract_phase(egraph, CONFIG, cost_model, 0.0)
    assert any(e.op in ATTENTION_KERNELS for e in snap.nodes)  # the rules wrote the kernel into the e-graph
    extracted = candidates_phase(snap, ext, CONFIG, cost_model, 0.0)
    (softmax,) = [e for e in extracted if e.name == SOFTMAX]
    chosen = {snap.nodes[n].op for n in softmax.extraction.choice.values()}
    assert not chosen & ATTENTION_KERNELS and chosen & {"attention", "softmax"}
    for runtime in ("torch-cpu", "ort-cuda"):  # only where the floor applies: onnxruntime's CPU
        other = CONFIG.updated(runtime=runtime)
        assert SOFTMAX not in [e.name for e in candidates_phase(snap, ext, other, cost_model, 0.0)]
    with monkeypatch.context() as m:  # nor where the floor does not pay on the CPU: no floor would be made
        m.setattr(floor_probe, "floor_pays", lambda: (False, 1.3))
        assert SOFTMAX not in [e.name for e in candidates_phase(snap, ext, CONFIG, cost_model, 0.0)]
    config = CONFIG.updated(candidates=len(extracted) + 1)
    first = export_phase(snap, ext, graph, cost_model)
    verifier = verifier_of(graph_original, config)
    verifier.check(first[1])
    built = build_candidates(snap, [softmax, *extracted], graph, graph_original, config, cost_model, first,
                             verifier=verifier)
    out = floored_phase(built, True, graph_original, verifier.first_inputs(), config, verifier)
    (floored,) = [b for b in out if b.entry.name == SOFTMAX + FLOORED]
    ops = [n.op_type for n in floored.model.graph.node]
    assert "Attention" not in ops and "Softmax" in ops and "Max" in ops and floored.entry.verified
    x = np.random.default_rng(3).standard_normal((1, S, D)).astype(np.float32)
    want, got = session(graph_original).run(None, {"x": x})[0], session(floored.model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_on_a_cpu_where_the_floor_does_not_pay_the_candidates_are_left_as_they_were(monkeypatch):
    original, built, verifier = _built(_decoder_attention(causal=True))
    feeds = verifier.first_inputs()
    assert len(floored_phase(built, True, original, feeds, CONFIG, verifier)) > len(built)  # where it pays: floored
    monkeypatch.setattr(floor_probe, "floor_pays", lambda: (False, 1.3))
    assert floored_phase(built, True, original, feeds, CONFIG, verifier) is built


def test_an_unmasked_program_and_a_single_candidate_run_are_left_as_they_were():
    original, built, verifier = _built(_decoder_attention(causal=False))
    assert floored_phase(built, True, original, verifier.first_inputs(), CONFIG, verifier) is built
    original, built, verifier = _built(_decoder_attention(causal=True))
    feeds = verifier.first_inputs()
    for config in (CONFIG.updated(candidates=1), CONFIG.updated(measure=False)):
        assert floored_phase(built, True, original, feeds, config, verifier) is built
    assert floored_phase(built, False, original, feeds, CONFIG, verifier) is built  # the first failed its check


def test_a_run_measures_the_floored_candidates():
    result = optimize(_decoder_attention(causal=True), CONFIG)
    floored = [c for c in result.report.candidates if c.name.endswith(FLOORED)]
    assert floored and all(c.verified and c.speedup is not None for c in floored)
    assert all(c.ci_low <= c.speedup <= c.ci_high for c in floored)


def _encoder_attention(batch: int) -> onnx.ModelProto:
    """One head of attention over x [batch, S, D] under a padding mask input [batch, S] of 1 (kept) and 0, made
    additive with the lowest float as transformers' encoders write it."""
    rng = np.random.default_rng(6)
    w = {n: numpy_helper.from_array((rng.standard_normal((D, D)) * 0.3).astype(np.float32), n)
         for n in ("wq", "wk", "wv")}
    inits = [*w.values(), numpy_helper.from_array(np.array(D ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(LOWEST, np.float32), "lowest"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "mf"], ["inv"]), helper.make_node("Mul", ["inv", "lowest"], ["add"]),
             helper.make_node("Unsqueeze", ["add", "axis1"], ["addu"]),
             helper.make_node("Add", ["ss", "addu"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    return ob.model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, S, D]),
                            helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, S])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, S, D])], inits)


def test_a_padding_mask_is_floored_where_the_batch_has_several_rows_only():
    """A batch of one row is never padded: its masks fed as kept, nothing is deep. A batch of several rows is
    padded by a server: the measurement's own masks (drawn with masked places) make the scores deep, and the floored
    candidates compute the original on right-padded rows and a row masked throughout."""
    original, built, verifier = _built(_encoder_attention(1))
    assert floored_phase(built, True, original, verifier.first_inputs(), CONFIG, verifier) is built
    original, built, verifier = _built(_encoder_attention(2))
    out = floored_phase(built, True, original, verifier.first_inputs(), CONFIG, verifier)
    floored = [b for b in out if b.entry.name.endswith(FLOORED)]
    assert floored and all(b.entry.verified for b in floored)
    x = np.random.default_rng(4).standard_normal((2, S, D)).astype(np.float32)
    padded = np.ones((2, S), np.int64)
    padded[0, S // 2:] = 0
    for mask in (padded, np.stack([padded[0], np.zeros(S, np.int64)])):  # the second row masked throughout
        want = session(original).run(None, {"x": x, "mask": mask})[0]
        for b in floored:
            got = session(b.model).run(None, {"x": x, "mask": mask})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


def test_a_floor_the_check_refuses_leaves_the_candidates_as_they_were():
    """Where a consumer tells a masked weight of 0 from e^-60 (its log: -inf against -60), each floored copy fails
    its check against the original: the first's is listed unverified beside it, each further candidate is kept as it
    was, verified and measured."""
    original, built, verifier = _built(_decoder_attention(causal=True, log=True))
    built[0].entry.verified = True  # checked by _built (the pipeline marks the first's entry after this phase)
    out = floored_phase(built, True, original, verifier.first_inputs(), CONFIG, verifier)
    assert [b.entry.name for b in out] == [built[0].entry.name, built[0].entry.name + FLOORED,
                                          *[b.entry.name for b in built[1:]]]
    assert not out[1].entry.verified and "infinit" in out[1].entry.note
    assert out[2:] == built[1:] and all(b.entry.verified for b in out[2:])
