"""What the writer learns of the user's model is worked out once per model (eqsat.generic.original.Original) and
carried from one candidate's rewrite to the next: the programs written are the same bytes as with each candidate
learning it anew, the original is run at further sizes fewer times, and what is written computes what the
original computes at other sizes (onnxruntime on both, the oracle)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from onnx import helper

from eqsat.generic import Original, make_generic
from eqsat.generic import original as original_module
from eqsat.onnx import export_model, import_model, session
from eqsat.onnx.interface import symbol_values

SHAPES = {"input_ids": (1, 64), "attention_mask": (1, 64)}


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> onnx.ModelProto:
    """BERT exported by TorchScript with dynamic batch and sequence: its embeddings' position ids are a constant the
    original computes from the sequence's size (the import folds it; the writer reads it off runs of the original)."""
    return zoo.export_dynamic("bert", "torchscript", str(tmp_path_factory.mktemp("facts") / "bert.onnx"))


def _candidates(model: onnx.ModelProto) -> list[onnx.ModelProto]:
    """Two programs of the model at its representative sizes: the generic import's, and the same with its first
    output passed through an Identity (another program asking the same of the original)."""
    first = export_model(import_model(model, SHAPES, generic=True))
    second = onnx.ModelProto()
    second.CopyFrom(first)
    out = second.graph.output[0].name
    for node in second.graph.node:
        node.output[:] = [o + "_inner" if o == out else o for o in node.output]
        node.input[:] = [i + "_inner" if i == out else i for i in node.input]
    second.graph.node.append(helper.make_node("Identity", [out + "_inner"], [out]))
    return [first, second]


def _counted(monkeypatch, original: onnx.ModelProto) -> list[int]:
    """The runs of ``original`` the writer sets up (one per batch of names), counted."""
    runs = [0]
    real = original_module.run_values

    def counting(model, names, shapes):
        runs[0] += model is original
        return real(model, names, shapes)
    monkeypatch.setattr(original_module, "run_values", counting)
    return runs


def test_carried_facts_write_the_same_programs_with_fewer_runs_of_the_original(bert, monkeypatch):
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
    assert anew == 2 and runs[0] == 1  # each candidate ran the original anew; carried, the second reads the first's
    assert facts.runs == 1


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
    other = onnx.ModelProto()
    other.CopyFrom(bert)
    with pytest.raises(ValueError, match="another original"):
        make_generic(program, bert, values, Original(other, values))
    with pytest.raises(ValueError, match="other sizes"):
        make_generic(program, bert, values, Original(bert, {**values, "seq": values["seq"] + 1}))
