"""A decode step against a key/value cache written shape-generic: torch's dynamo exporter names the cache's length
after the new token ``past + 1`` (the attention mask's axis, the present outputs' axis), a symbol that is arithmetic
of another. The interface's sizes follow it (``past + 1`` is ``past``'s size plus one; given only the mask, the past
is solved for), and the writer reads a Concat of the past and the new entries as that symbol, so the grouped-query
heads' Expand and Reshape after it are written from it. Oracles: the arithmetic itself, and the original model run
in onnxruntime at several sizes of each axis."""

from __future__ import annotations

import numpy as np
import pytest
import zoo
from decode_helpers import DIM, HIDDEN, KV_HEADS, decode_step

from eqsat import optimize
from eqsat.app.config import OptimizeConfig
from eqsat.dims import Mono
from eqsat.errors import InputError
from eqsat.generic import import_generic, make_generic
from eqsat.onnx import export_model, session
from eqsat.onnx.axes.fitting import fit_vectors
from eqsat.onnx.axes.interface import derived_symbols, interface, probe_shapes, runnable_values, symbol_values
from eqsat.onnx.axes.symbolic import concat_length
from eqsat.verification.feeds import random_inputs

SIZES = [(1, 127), (2, 127), (3, 5), (1, 0), (2, 1), (1, 300)]
"""(batch, past): the representative sizes and others of each axis, an empty past included"""


def _feeds(rng: np.random.Generator, batch: int, past: int) -> dict[str, np.ndarray]:
    mask = np.ones((batch, past + 1), np.int64)
    mask[0, :past // 2] = 0  # a padded row: its first half masked
    return {"x": rng.standard_normal((batch, 1, HIDDEN)).astype(np.float32), "attention_mask": mask,
            "past_k": rng.standard_normal((batch, KV_HEADS, past, DIM)).astype(np.float32),
            "past_v": rng.standard_normal((batch, KV_HEADS, past, DIM)).astype(np.float32)}


def test_a_symbol_written_as_arithmetic_of_others_takes_their_values():
    derived = derived_symbols(["batch", "past", "past + 1", "2*past - 3", "s0 + s1", "past + x", "past+1.5"])
    assert sorted(derived) == ["2*past - 3", "past + 1"]  # s0, s1, x are not symbols here; 1.5 is no size
    assert derived["2*past - 3"]({"past": 10}) == 17
    model = decode_step()
    assert symbol_values(model, {}) == {"batch": 1, "past + 1": 129, "past": 128}
    # given the cache, the mask follows; given only the mask, the past is solved for
    assert symbol_values(model, {"past_k": (2, KV_HEADS, 127, DIM)})["past + 1"] == 128
    assert symbol_values(model, {"attention_mask": (1, 64)})["past"] == 63
    with pytest.raises(InputError, match="past \\+ 1"):
        symbol_values(model, {"past_k": (1, KV_HEADS, 127, DIM), "attention_mask": (1, 127)})
    probes = dict(probe_shapes(model, {"batch": 1, "past": 127, "past + 1": 128}))
    assert "past + 1=1" not in probes  # it follows its symbol, never changed alone
    for label, shapes in probes.items():
        assert shapes["attention_mask"][1] == shapes["past_k"][2] + 1, label


def test_sizes_fitted_from_runs_may_be_a_sum_symbol_but_a_constant_stays_one():
    """Oracle: the runs' own arithmetic. ``past`` varies and ``past + 1`` follows it; an entry that is past + 1 in
    every run is that symbol, an entry that is 129 in every run (past + 1 at the representative size only) is 129."""
    values = {"batch": 1, "past": 128, "past + 1": 129}
    sums = derived_symbols(list(values))
    seen: list[dict[str, int]] = []

    def run(at):
        seen.append(dict(at))
        return [[at["batch"], at["past"] + 1, 64], [129]]

    fitted = fit_vectors(run, values, sums)
    assert fitted == [[Mono.symbol("batch"), Mono.symbol("past + 1"), Mono.const(64)], [Mono.const(129)]]
    assert all(at["past + 1"] == at["past"] + 1 for at in seen)  # never a size the model cannot take


def test_a_default_past_the_model_refuses_is_halved_with_its_mask():
    """runnable_values halves the free symbol and the derived one follows (it never loops on the derived one)."""
    model = decode_step()
    values, ran = runnable_values(model, {"batch": 1, "past": 128, "past + 1": 128}, ["past", "past + 1"])
    assert ran and values == {"batch": 1, "past": 64, "past + 1": 65}  # 128 beside 128 refused; 64 beside 65 runs


def test_random_inputs_give_the_mask_one_more_than_the_past():
    """The verification's and the timing's feeds where no shape is given (every free symbol 1) or only the cache's
    is: onnxruntime runs the original on them (the oracle), the mask one longer than the past."""
    model = decode_step()
    sess = session(model)
    for fixed, past in (({}, 1), ({"past_k": (2, KV_HEADS, 9, DIM)}, 9)):
        feeds = random_inputs(sess, np.random.default_rng(0), fixed)
        assert feeds["attention_mask"].shape[1] == feeds["past_v"].shape[2] + 1 == past + 1
        assert sess.run(None, feeds)[1].shape[2] == past + 1


def test_a_concat_of_the_past_and_the_new_entries_is_the_symbol_of_their_sum():
    past, batch = Mono.symbol("past"), Mono.symbol("batch")
    sums = derived_symbols(["past", "batch", "past + 1"])
    assert concat_length([[past], [Mono.const(1)]], 0, sums).key() == "past + 1"
    assert concat_length([[Mono.const(1)], [past]], 0, sums).key() == "past + 1"
    assert concat_length([[past], [Mono.const(2)]], 0, sums) is None  # past + 2 is no symbol of the interface
    assert concat_length([[past], [batch]], 0, sums) is None
    assert concat_length([[past], None], 0, sums) is None


def test_a_decode_step_is_written_for_every_past_length_and_batch():
    model = decode_step()
    values = symbol_values(model, {"past_k": (1, KV_HEADS, 127, DIM)})
    shapes = {"x": (1, 1, HIDDEN), "attention_mask": (1, 128), "past_k": (1, KV_HEADS, 127, DIM),
              "past_v": (1, KV_HEADS, 127, DIM)}
    written = make_generic(export_model(import_generic(model, shapes)), model, values)
    assert written.notes == []  # every Reshape and Expand written from the symbols
    dims = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in [*written.model.graph.input, *written.model.graph.output]}
    assert dims["present_k"] == ["batch", KV_HEADS, "past + 1", DIM]  # the interface kept
    ref, got = session(model), session(written.model)
    rng = np.random.default_rng(1)
    for batch, past in SIZES:
        feeds = _feeds(rng, batch, past)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape, (batch, past)
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_zoo_decode_step_keeps_its_interface_and_agrees_at_every_past_length(exporter, tmp_path):
    """transformers' LLaMA (grouped KV heads, rotary at the past's offset) as a decode step, exported with dynamic
    batch and past: optimized with default sizes (the mask's ``past + 1`` follows the past), it keeps the interface
    and computes what the original computes at other batches and past lengths (onnxruntime, the oracle)."""
    model = zoo.export_dynamic("llama_decode", exporter, str(tmp_path / "decode.onnx"))
    result = optimize(model, OptimizeConfig.of(budget=8, cost="analytic", measure=False))
    report = result.report
    assert report.interface.symbols["past + 1"] == report.interface.symbols["past"] + 1
    assert report.interface.kept and interface(result.optimized) == interface(model)
    assert {"batch=2", "past=1", "past=37", "past=256"} <= set(report.interface.verified_at)
    ref, got = session(model), session(result.optimized)
    rng = np.random.default_rng(2)
    layers = len(model.graph.output) // 2
    for batch, past in SIZES:
        feeds = {"input_ids": rng.integers(0, zoo.VOCAB, (batch, 1)).astype(np.int64),
                 "attention_mask": np.ones((batch, past + 1), np.int64)}
        feeds["attention_mask"][0, :past // 3] = 0  # a left-padded row
        for i in range(layers):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((batch, 2, past, 8)).astype(np.float32)
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape, (batch, past)
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
