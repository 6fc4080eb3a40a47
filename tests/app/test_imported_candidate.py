"""The ``imported`` candidate: the input as eqsat writes it, no rule applied (eqsat.app.selection.with_imported,
eqsat.app.candidates.written_input). It is a candidate where more than one is measured and its ONNX operators differ
from the original's (what the import and the writer simplified, e.g. ``x + 0`` dropped); it comes second, is verified against
the original in onnxruntime and, unlike a program equal to the original, is timed; a later candidate equal to it
is dropped as a duplicate."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_builders as ob
from onnx import helper, numpy_helper

from eqsat.app.candidates import build_candidates, export_phase, written_input
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import encode_phase, extract_phase, optimize, search_phase, shaped_import_phase
from eqsat.app.selection import IMPORTED, candidates_phase, same_operators, with_imported
from eqsat.cost import make
from eqsat.models import build
from eqsat.onnx.export import export_model
from eqsat.onnx.io import session
from eqsat.verification.feeds import random_inputs

CONFIG = OptimizeConfig.of(budget=2, cost="analytic", ilp_time_limit=2.0, candidates=3, seed=1, measure_budget=0.3)


def _with_zero_added(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with ``x + 0`` on its input: the same function, an operator eqsat's import drops."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    name = m.graph.input[0].name
    for node in m.graph.node:
        node.input[:] = [f"{name}_id" if i == name else i for i in node.input]
    m.graph.node.insert(0, helper.make_node("Add", [name, "zero"], [f"{name}_id"]))
    m.graph.initializer.append(numpy_helper.from_array(np.zeros((1,), np.float32), "zero"))
    onnx.checker.check_model(m)
    return m


def _phases(model: onnx.ModelProto):
    original, graph, _ = shaped_import_phase(model, CONFIG)
    cost_model = make("analytic")
    egraph, search = encode_phase(graph, CONFIG)
    search_phase(egraph, CONFIG, search, cost_model, lambda _m: None)
    snap, ext = extract_phase(egraph, CONFIG, cost_model, 0.0)
    return original, graph, cost_model, snap, ext, candidates_phase(snap, ext, CONFIG, cost_model, 0.0)


def test_the_written_input_is_the_second_candidate_only_where_it_differs_from_the_original():
    plain = ob.mlp()
    original, graph, cost_model, _snap, _ext, extracted = _phases(plain)
    written = written_input(graph)
    assert same_operators(original, written[1])  # nothing to simplify: it is the original, not a candidate
    assert with_imported(extracted, written, original, CONFIG, cost_model) == extracted
    padded = _with_zero_added(plain)
    assert not same_operators(padded, written[1])
    both = with_imported(extracted, written, padded, CONFIG, cost_model)
    assert [e.name for e in both] == [extracted[0].name, IMPORTED, *[e.name for e in extracted[1:]]]
    assert both[1].written is written and both[1].extraction is None
    for config in (CONFIG.updated(candidates=1), CONFIG.updated(measure=False)):
        assert with_imported(extracted, written, padded, config, cost_model) == extracted


def _squeezenet() -> onnx.ModelProto:
    """The small SqueezeNet, whose search under the analytic cost changes the program, with ``x + 0`` added."""
    return _with_zero_added(export_model(build("squeezenet", small=True)))


def test_the_imported_candidate_is_verified_timed_and_computes_what_the_original_does():
    padded = _squeezenet()
    original, graph, cost_model, snap, ext, extracted = _phases(padded)
    candidates = with_imported(extracted, written_input(graph), original, CONFIG, cost_model)
    first = export_phase(snap, ext, graph, cost_model)
    built = build_candidates(snap, candidates, graph, original, CONFIG, cost_model, first)
    names = [b.entry.name for b in built]
    assert names.count(IMPORTED) == 1 and len(names) == len(set(names))
    imported = built[names.index(IMPORTED)]
    assert imported.entry.verified and not imported.same_as_original  # timed, unlike the original itself
    assert [n.op_type for n in imported.model.graph.node].count("Add") < [n.op_type for n in padded.graph.node].count("Add")
    s = session(original)
    feeds = random_inputs(s, np.random.default_rng(11))
    got = session(imported.model).run(None, feeds)
    for want, have in zip(s.run(None, feeds), got):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def test_a_run_reports_the_imported_candidate_measured():
    result = optimize(_squeezenet(), CONFIG)
    names = [c.name for c in result.report.candidates]
    assert names[:3] == ["original", "extracted", IMPORTED]
    imported = result.report.candidates[2]
    assert imported.verified and imported.speedup is not None and imported.ci_low <= imported.speedup
    assert imported.operators == result.report.candidates[0].operators  # the imported program itself
    assert result.report.candidates[1].operators != imported.operators  # the search changed the first
