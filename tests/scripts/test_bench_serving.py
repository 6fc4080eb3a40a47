"""scripts/bench_serving.py: a decode step's generation carries the cache from step to step as torch's own model
does (the oracle: transformers' LLaMA with its DynamicCache, token by token); a program that matches the original on
one step but not over a generation is reported and never timed; the others are timed beside the A/A control."""

from __future__ import annotations

import json

import numpy as np
import onnx
import torch
import zoo
from onnx import helper
from script_loader import load_script

from eqsat.onnx import session


def _script():
    return load_script("bench_serving")


def _drifting(model: onnx.ModelProto) -> onnx.ModelProto:
    """The decode step with its first present output scaled by 1.5 on the new token only: the hidden state of
    this step is the original's, the next step's is not."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    present = out.graph.output[1].name
    for n in out.graph.node:  # computed and read inside as before; only the output written is changed
        n.output[:] = [f"{present}_pre" if o == present else o for o in n.output]
        n.input[:] = [f"{present}_pre" if i == present else i for i in n.input]
    past = out.graph.input[2].name
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array(1.5, np.float32), "drift_scale"))
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array([2], np.int64), "drift_axis"))
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), "drift_last"))
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array([2 ** 31], np.int64), "drift_end"))
    out.graph.initializer.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "drift_zero"))
    out.graph.node.extend([
        helper.make_node("Shape", [past], ["drift_shape"], start=2, end=3),
        helper.make_node("Slice", [f"{present}_pre", "drift_last", "drift_end", "drift_axis"], ["drift_new"]),
        helper.make_node("Slice", [f"{present}_pre", "drift_zero", "drift_shape", "drift_axis"], ["drift_old"]),
        helper.make_node("Mul", ["drift_new", "drift_scale"], ["drift_scaled"]),
        helper.make_node("Concat", ["drift_old", "drift_scaled"], [present], axis=2)])
    return out


def test_a_generation_carries_the_cache_as_the_torch_model_does(tmp_path):
    mod = _script()
    model = zoo.export_dynamic("llama_decode", "torchscript", str(tmp_path / "decode.onnx"))
    step = mod.decode_step(model, past=5)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, zoo.VOCAB, 4).astype(np.int64)
    cache = [rng.standard_normal(step.cache_shape).astype(np.float32) for _ in step.cache]
    got = mod.generation(session(model), step, tokens, cache)()
    torch_model = zoo.module("llama_decode")
    past = [torch.from_numpy(c) for c in cache]
    with torch.no_grad():
        for t, token in enumerate(tokens):
            mask = torch.ones((1, 5 + t + 1), dtype=torch.int64)
            want = torch_model(torch.tensor([[token]]), mask, *past)
            past = list(want[1:])
    assert got[2].shape == (1, 2, 5 + len(tokens), 8)  # the cache grew by one a token
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5)


def test_a_program_that_drifts_over_a_generation_is_not_timed(tmp_path):
    mod = _script()
    wd = load_script("peers_workdir")
    model = zoo.export_dynamic("llama_decode", "torchscript", str(tmp_path / "decode.onnx"))
    work = tmp_path / "work"
    drifting = _drifting(model)
    step = mod.decode_step(model, past=5)
    rng = np.random.default_rng(0)
    one = {step.ids: np.array([[3]]), step.mask: np.ones((1, 6), np.int64),
           **{c: rng.standard_normal(step.cache_shape).astype(np.float32) for c in step.cache}}
    a, b = session(model).run(None, one), session(drifting).run(None, one)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)  # one step's hidden state agrees: only the cache drifts
    manifest = {"version": wd.VERSION, "models": {"decode": {
        "original": wd.store_model(str(work), "decode/original.onnx", model), "nodes": len(model.graph.node),
        "tools": {"same": {"status": "verified", "program": wd.store_model(str(work), "decode/same.onnx", model)},
                  "drift": {"status": "verified",
                            "program": wd.store_model(str(work), "decode/drift.onnx", drifting)},
                  "broken": {"status": "wrong"}}}}}
    wd.save_manifest(str(work), manifest)
    out = tmp_path / "serving.json"
    rc = mod.main(["--workdir", str(work), "--tokens", "3", "--check-tokens", "3", "--past", "5",
                   "--time-budget", "0.5", "--json", str(out)])
    assert rc == 0
    (row,) = json.loads(out.read_text())["rows"]
    tools = row["tools"]
    assert tools["same"]["generation_matches"] and tools["same"]["generation_max_abs_error"] == 0.0
    assert not tools["drift"]["generation_matches"] and tools["drift"]["status"] == "wrong over a generation"
    assert "timed" not in tools["drift"] and "timed" not in tools["broken"]
    for name in ("same", "original-copy"):
        t = tools[name]["timed"]["1"]
        assert t["ci_low"] <= t["speedup"] <= t["ci_high"] and t["program_ms_per_token"] > 0


def _unmasked(model: onnx.ModelProto, mask: str) -> onnx.ModelProto:
    """The encoder with its attention mask read as all ones: the original's on a full row, not on a padded one."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for n in out.graph.node:
        n.input[:] = ["mask_ones" if i == mask else i for i in n.input]
    out.graph.node.insert(0, helper.make_node("Shape", [mask], ["mask_shape"]))
    out.graph.node.insert(1, helper.make_node("ConstantOfShape", ["mask_shape"], ["mask_ones"],
                                              value=onnx.numpy_helper.from_array(np.array([1], np.int64))))
    return out


def test_a_padded_batch_is_what_the_torch_encoder_computes_and_a_program_ignoring_the_mask_is_not_timed(tmp_path):
    mod = _script()
    wd = load_script("peers_workdir")
    model = zoo.export_dynamic("bert", "torchscript", str(tmp_path / "bert.onnx"))
    feeds = mod.padded_batch(model, 4, 12, np.random.default_rng(0))
    mask = feeds["attention_mask"]
    lengths = mask.sum(axis=1)
    assert lengths[0] == 12 and all(3 <= n <= 12 for n in lengths)  # the first row full, the others at least 12/4
    for row, n in zip(mask, lengths):  # padded on the right, ids 0 there
        assert row[:n].all() and not row[n:].any()
    assert not feeds["input_ids"][mask == 0].any()
    with torch.no_grad():
        want = zoo.module("bert")(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(mask))
    np.testing.assert_allclose(session(model).run(None, feeds)[0], want[0].numpy(), rtol=1e-4, atol=1e-5)
    unmasked = _unmasked(model, "attention_mask")
    full = {k: v[:1] for k, v in feeds.items()}
    np.testing.assert_allclose(session(unmasked).run(None, full)[0], session(model).run(None, full)[0], rtol=1e-6)
    work = tmp_path / "work"
    wd.save_manifest(str(work), {"version": wd.VERSION, "models": {"bert": {
        "original": wd.store_model(str(work), "bert/original.onnx", model), "nodes": len(model.graph.node),
        "tools": {"same": {"status": "verified", "program": wd.store_model(str(work), "bert/same.onnx", model)},
                  "unmasked": {"status": "verified",
                               "program": wd.store_model(str(work), "bert/unmasked.onnx", unmasked)}}}}})
    out = tmp_path / "padded.json"
    assert mod.main(["--workdir", str(work), "--padded-batch", "4", "--seq", "12", "--time-budget", "0.5",
                     "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["batch"] == 4 and row["lengths"] == lengths.tolist()
    tools = row["tools"]
    assert tools["same"]["batch_matches"] and tools["same"]["batch_max_abs_error"] == 0.0
    assert not tools["unmasked"]["batch_matches"] and tools["unmasked"]["status"] == "wrong on a padded batch"
    assert "timed" not in tools["unmasked"]
    t = tools["same"]["timed"]["1"]
    assert t["ci_low"] <= t["speedup"] <= t["ci_high"] and t["program_ms_per_row"] > 0
