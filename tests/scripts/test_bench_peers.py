"""scripts/bench_peers.py: every tool's program is verified against the original in onnxruntime before it is
timed; a tool that breaks the model, crashes or is missing is reported, never timed; the A/A control is there; the
optimize phase and the timing phase run apart through a workdir. The peers are optional: a test that runs one skips,
with the reason, only where its package is not installed."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from script_loader import load_script


def _script():
    return load_script("bench_peers")


def _mlp(path) -> str:
    """x @ w + b -> Relu, with an Identity chain onnxsim removes."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    nodes = [helper.make_node("Identity", ["x"], ["x1"]), helper.make_node("MatMul", ["x1", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"]), helper.make_node("Relu", ["hb"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _negate(model, _name, _args):
    """A 'tool' that writes a wrong program: the output negated."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    y = out.graph.output[0].name
    for n in out.graph.node:
        n.output[:] = ["y_pre" if o == y else o for o in n.output]
    out.graph.node.append(helper.make_node("Neg", ["y_pre"], [y]))
    return out


def _misshapen(model, _name, _args):
    """A 'tool' whose output has another shape: the verification's error is infinite."""
    out = _negate(model, _name, _args)
    out.graph.node[-1].CopyFrom(helper.make_node("Flatten", ["y_pre"], [out.graph.output[0].name], axis=0))
    del out.graph.output[0].type.tensor_type.shape.dim[:]
    return out


def _crash(_model, _name, _args):
    raise ValueError("this peer cannot handle the model")


def _need_peers(*modules):
    for module in modules:
        pytest.importorskip(module, reason=f"the peer package {module} is not installed (pip install -e '.[peers]')")


def test_peers_are_verified_then_timed_beside_an_aa_control(tmp_path, monkeypatch):
    _need_peers("onnxsim", "onnxscript")
    mod = _script()
    monkeypatch.setitem(mod.TOOLS, "wrong", (_negate, "onnx"))
    monkeypatch.setitem(mod.TOOLS, "crashing", (_crash, "onnx"))
    monkeypatch.setitem(mod.TOOLS, "missing", (_crash, "no_such_module_for_peers"))
    out = tmp_path / "run.json"
    rc = mod.main(["--models", "", "--onnx", _mlp(tmp_path / "mlp.onnx"), "--tools",
                   "onnxsim,onnxscript,wrong,crashing,missing", "--threads", "1,2", "--time-budget", "0.2",
                   "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())  # strict JSON
    (row,) = doc["rows"]
    tools = row["tools"]
    assert tools["onnxsim"]["status"] == "verified" and tools["onnxscript"]["status"] == "verified"
    assert tools["onnxsim"]["operators"] < row["nodes"]  # it removed the Identity: a real program, not the input
    assert tools["wrong"]["status"] == "wrong" and tools["wrong"]["max_abs_error"] > 0.1
    assert tools["crashing"]["status"] == "failed" and "cannot handle" in tools["crashing"]["reason"]
    assert tools["missing"]["status"] == "unavailable"
    for name in ("wrong", "crashing", "missing"):
        assert "timed" not in tools[name]  # never timed
    for name in ("original-copy", "onnxsim", "onnxscript"):
        for threads in ("1", "2"):
            t = tools[name]["timed"][threads]
            assert t["ci_low"] <= t["speedup"] <= t["ci_high"] and t["program_ms"] > 0
    assert tools["original-copy"]["status"] == "control"


def test_unknown_tool_is_a_usage_error():
    with pytest.raises(SystemExit) as exc:
        _script().main(["--models", "", "--tools", "onnxsimm"])
    assert exc.value.code == 2


def _mlp_oracle(x):
    """The MLP of :func:`_mlp` in numpy: relu(x @ w + b), the weights drawn as _mlp draws them."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    return np.maximum(x @ w + b, 0)


def _runs_like_the_oracle(path):
    import onnxruntime as ort

    x = np.random.default_rng(7).standard_normal((4, 16)).astype(np.float32)
    (y,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return np.allclose(y, _mlp_oracle(x), rtol=1e-4, atol=1e-4)


def test_optimize_only_then_time_only_through_a_workdir(tmp_path, monkeypatch):
    _need_peers("onnxsim")
    mod = _script()
    monkeypatch.setitem(mod.TOOLS, "wrong", (_negate, "onnx"))
    monkeypatch.setitem(mod.TOOLS, "misshapen", (_misshapen, "onnx"))
    work, onnx_file = tmp_path / "work", _mlp(tmp_path / "mlp.onnx")
    rc = mod.main(["--optimize-only", "--workdir", str(work), "--models", "", "--onnx", onnx_file,
                   "--tools", "eqsat,onnxsim,wrong,misshapen"])
    assert rc == 0
    assert not (work / "peers.json").exists()  # nothing timed in the optimize phase
    manifest = json.loads((work / "manifest.json").read_text())
    entry = manifest["models"]["mlp"]
    assert set(entry["tools"]) == {"eqsat", "onnxsim", "wrong", "misshapen"}
    assert entry["tools"]["misshapen"]["status"] == "wrong"
    assert entry["tools"]["misshapen"]["max_abs_error"] == "inf"  # strict JSON: the infinite error by its name
    assert _runs_like_the_oracle(work / entry["original"])
    for name in ("eqsat", "onnxsim"):
        tool = entry["tools"][name]
        assert tool["status"] == "verified" and tool["seconds"] > 0 and tool["max_abs_error"] < 1e-4
        assert _runs_like_the_oracle(work / tool["program"])  # the stored program computes the MLP
    changed = entry["tools"]["onnxsim"]["onnx_operators"]  # what it wrote differently: the Identity is gone
    assert changed["removed"].get("Identity") == 1 and "Identity" not in changed["added"]
    program = onnx.load(work / entry["tools"]["onnxsim"]["program"])
    assert sum(changed["removed"].values()) - sum(changed["added"].values()) == 4 - len(program.graph.node)
    eqsat = entry["tools"]["eqsat"]
    assert eqsat["returned"] in ("optimized", "original") and "kernels" in eqsat
    report = json.loads((work / eqsat["report"]).read_text())  # eqsat's whole report beside its program
    assert report["verified"] is True and report["returned"] == eqsat["returned"]
    assert entry["tools"]["wrong"]["status"] == "wrong" and (work / entry["tools"]["wrong"]["program"]).exists()

    out = tmp_path / "timed.json"
    rc = mod.main(["--time-only", "--workdir", str(work), "--threads", "1,2", "--time-budget", "0.5",
                   "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    timed = {n for n, t in row["tools"].items() if "timed" in t}
    assert timed == {"original-copy", "eqsat", "onnxsim"}  # the verified programs of the workdir, and the control
    for name in timed:
        for threads in ("1", "2"):
            t = row["tools"][name]["timed"][threads]
            assert t["ci_low"] <= t["speedup"] <= t["ci_high"] and t["rounds"] >= 10 and t["program_ms"] > 0
    assert row["tools"]["eqsat"]["report"] == eqsat["report"]  # the optimize phase's entry travels with the timing
    summary = doc["summary"]
    (model,) = summary["models"]
    assert model["model"] == "mlp" and model["verified"] and set(model["at"]) == {"1", "2"}
    at1 = model["at"]["1"]
    assert at1["best_peer"] == "onnxsim" and at1["eqsat"] == row["tools"]["eqsat"]["timed"]["1"]["speedup"]
    assert at1["met"] == (at1["eqsat"] >= max(0.99, at1["best_peer_speedup"] - 0.01))
    assert summary["at"]["1"]["transformer_models"] == 0  # a file of no zoo family counts in no median
    assert doc["budget"]["resolution"] == 0.01 and doc["optimized"]["seed"] == 0
    assert (work / "peers.png").stat().st_size > 1000  # the figure, both thread counts
    rc = mod.main(["--time-only", "--workdir", str(work), "--threads", "1", "--time-budget", "0.3", "--tools",
                   "onnxsim", "--json", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert rc == 0 and {n for n, t in row["tools"].items() if "timed" in t} == {"original-copy", "onnxsim"}

    # the lead's refresh: eqsat alone re-optimized into the workdir, the peers' programs kept as they were
    before = {p: p.read_bytes() for p in work.rglob("onnxsim.onnx")}
    stamp = manifest["updated"]
    rc = mod.main(["--optimize-only", "--workdir", str(work), "--models", "", "--onnx", onnx_file, "--tools", "eqsat"])
    assert rc == 0
    again = json.loads((work / "manifest.json").read_text())
    assert again["updated"] >= stamp and again["models"]["mlp"]["tools"]["onnxsim"] == entry["tools"]["onnxsim"]
    assert {p: p.read_bytes() for p in work.rglob("onnxsim.onnx")} == before
    assert again["models"]["mlp"]["tools"]["eqsat"]["status"] == "verified"


def test_time_only_needs_an_optimized_workdir(tmp_path):
    with pytest.raises(SystemExit) as exc:
        _script().main(["--time-only", "--workdir", str(tmp_path)])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        _script().main(["--optimize-only"])


def test_all_names_its_zoo_families_under_both_exporters_static_unless_dynamic():
    mod = _script()
    args = type("Args", (), {"models": ["all"], "exporters": ["torchscript", "dynamo"], "opset": 18, "seed": 0,
                             "onnx": [], "dynamic": False, "weights": "init"})()
    labels = [label for label, _ in mod.models_from(args)]
    families = {label.split("/")[0] for label in labels}
    for wanted in ("bert", "distilbert", "gpt2", "llama", "qwen2", "t5_encoder", "vit", "whisper_encoder",
                   "convnext", "resnet50"):
        assert {f"{wanted}/torchscript", f"{wanted}/dynamo"} <= set(labels)
    assert any(f.endswith("_s128") for f in families)  # the sequence 128 too
    import zoo

    assert families <= set(zoo.SPECS)  # every one a zoo model the tests build
    loaders = dict(mod.models_from(args))
    assert loaders["bert/dynamo"].func is zoo.build  # static exports by default
    args.dynamic = True  # --dynamic: every model exported with dynamic axes, as serving code does
    assert all(load.func is mod.load_dynamic for _, load in mod.models_from(args))


def test_families_names_each_model_of_its_set_under_each_exporter():
    """``--models families``: every model of ``zoo.FAMILIES`` under each exporter asked for, each a zoo spec (its
    inputs, outputs and, for HuBERT, the dynamic samples axis the export writes)."""
    mod = _script()
    import zoo

    args = type("Args", (), {"models": ["families"], "exporters": ["torchscript", "dynamo"], "opset": 18, "seed": 0,
                             "onnx": [], "dynamic": True, "weights": "init"})()
    labels = [label for label, _ in mod.models_from(args)]
    assert labels == [f"{n}/{e}" for n in zoo.FAMILIES for e in ("torchscript", "dynamo")]
    assert set(zoo.FAMILIES) <= set(zoo.SPECS) and not set(zoo.FAMILIES) & set(zoo.WIDE + zoo.UNSEEN)
    assert zoo.SPECS["hubert_w384"].axes == ({0: "batch", 1: "samples"},)


@pytest.mark.parametrize("group", ["fourth", "fifth", "sixth", "seventh", "eighth"])
def test_a_benchmark_set_names_zoo_models_of_no_other_set_each_with_its_own_axes(group):
    """``--models fourth`` (BART, T5, Whisper, YOLOS, MobileNetV1, Mamba), ``fifth`` (Qwen3, Phi-3, Gemma 3,
    ModernBERT, Pegasus, Hiera), ``sixth`` (Granite, StarCoder2, XLNet, Funnel, Marian, DETR, DPT, SigLIP,
    VideoMAE, TimeSformer, Data2VecAudio), ``seventh`` (Nemotron, Persimmon, EXAONE 4, CLIP text, ConvBERT,
    M2M100) and ``eighth`` (LFM2, SmolLM3, OLMo 2, Arcee, MPNet, BigBird) under each exporter asked for, each a zoo
    spec of no other set; an encoder-decoder's decoder ids and output have their own length (``dec_seq``), not the
    encoder's."""
    mod = _script()
    import zoo

    sets = {"fourth": zoo.FOURTH, "fifth": zoo.FIFTH, "sixth": zoo.SIXTH, "seventh": zoo.SEVENTH,
            "eighth": zoo.EIGHTH}
    names = sets[group]
    args = type("Args", (), {"models": [group], "exporters": ["torchscript"], "opset": 18, "seed": 0,
                             "onnx": [], "dynamic": True, "weights": "init"})()
    labels = [label for label, _ in mod.models_from(args)]
    assert labels == [f"{n}/torchscript" for n in names] and len(labels) == {"sixth": 11}.get(group, 6)
    others = zoo.THIRD + zoo.FAMILIES + zoo.WIDE + tuple(n for g, r in sets.items() if g != group for n in r)
    assert set(names) <= set(zoo.SPECS) and not set(names) & set(others)
    for name in {"fourth": ("bart_w384", "t5_w384", "whisper_w384"), "fifth": ("pegasus_w384",),
                 "sixth": ("marian_w384",), "seventh": ("m2m100_w384",), "eighth": ()}[group]:
        spec = zoo.SPECS[name]
        assert spec.axes is not None and spec.axes[-1] == {0: "batch", 1: "dec_seq"}
        assert spec.out_axes == {"last_hidden_state": {0: "batch", 1: "dec_seq"}}
        assert [i[0] for i in spec.inputs][-1] == "decoder_input_ids"


def test_two_onnx_files_of_one_name_each_keep_their_own_entry(tmp_path):
    """Exports saved as ``<family>/model.onnx`` share a file name: each is labelled by its folder too, so the second
    does not overwrite the first's original and programs in the workdir; one file given twice is refused."""
    mod = _script()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = _mlp(tmp_path / "a" / "model.onnx"), _mlp(tmp_path / "b" / "model.onnx")
    work = tmp_path / "work"
    rc = mod.main(["--optimize-only", "--workdir", str(work), "--models", "", "--onnx", first, "--onnx", second,
                   "--tools", "eqsat"])
    assert rc == 0
    manifest = json.loads((work / "manifest.json").read_text())
    assert set(manifest["models"]) == {"a/model", "b/model"}
    originals = {manifest["models"][k]["original"] for k in manifest["models"]}
    assert len(originals) == 2 and all((work / o).exists() for o in originals)
    assert mod.onnx_labels([first, str(tmp_path / "c.onnx")]) == {"model": first, "c": str(tmp_path / "c.onnx")}
    with pytest.raises(SystemExit, match="file name of its own"):
        mod.onnx_labels([first, first])


def test_the_no_value_info_baseline_deletes_the_inner_shapes_only(tmp_path):
    """The one-line baseline row (``no-value-info``): the input's nodes and weights as they were, its
    ``value_info`` gone, verified like every tool's program."""
    mod = _script()
    path = tmp_path / "mlp.onnx"
    model = onnx.load(_mlp(path))
    model.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, [4, 16]))
    onnx.save(model, path)
    work = tmp_path / "work"
    assert mod.main(["--optimize-only", "--workdir", str(work), "--models", "", "--onnx", str(path),
                     "--tools", "no-value-info"]) == 0
    entry = json.loads((work / "manifest.json").read_text())["models"]["mlp"]
    tool = entry["tools"]["no-value-info"]
    assert tool["status"] == "verified" and tool["onnx_operators"] == {"added": {}, "removed": {}}
    program = onnx.load(work / tool["program"])
    assert not program.graph.value_info and len(onnx.load(path).graph.value_info) == 1
    assert [n.op_type for n in program.graph.node] == [n.op_type for n in model.graph.node]
    assert _runs_like_the_oracle(work / tool["program"])


def test_a_waveform_model_is_verified_and_timed_where_it_runs(tmp_path):
    """A front-end 300 samples wide refuses the default size 128 of its dynamic samples: each tool's program is
    verified and timed at the size eqsat tunes at (512, where the model runs), not refused as invalid there."""
    import onnx_builders as ob

    mod = _script()
    path = tmp_path / "wave.onnx"
    model = ob.waveform_model(300)
    model.graph.value_info.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, ["batch", 4, None]))
    onnx.save(model, path)
    assert mod.tuned_shapes(model) == {"samples": (1, 512)}
    work = tmp_path / "work"
    assert mod.main(["--optimize-only", "--workdir", str(work), "--models", "", "--onnx", str(path),
                     "--tools", "no-value-info"]) == 0
    entry = json.loads((work / "manifest.json").read_text())["models"]["wave"]
    assert entry["tools"]["no-value-info"]["status"] == "verified", entry["tools"]["no-value-info"]
    assert mod.main(["--time-only", "--workdir", str(work), "--threads", "1", "--time-budget", "0.5"]) == 0
    row = json.loads((work / "peers.json").read_text())["rows"][0]
    assert row["shapes"] == {"samples": [1, 512]} and "no-value-info" in row["tools"]
