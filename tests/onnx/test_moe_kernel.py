"""A mixture of experts' whole block as onnxruntime's ``MoE`` kernel (:mod:`eqsat.onnx.moe`,
:mod:`eqsat.measurement.moe`). Oracle: onnxruntime running the user's block as torch exported it, on seeded rows and
on the rows users feed at the edges (a zero row: every logit tied; NaN and infinite rows; values near float32's
range), at sizes the run was not tuned at."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch_modules as tm

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.measurement import moe as timed
from eqsat.onnx import moe
from eqsat.onnx.experts import as_gathers
from eqsat.verification import compare_outputs

WIDTH = 32


def _export(tmp_path, layers=1, dynamo=False, **kwargs) -> onnx.ModelProto:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = tm.ExpertsStack(layers=layers, **kwargs).eval()
    path = str(tmp_path / "moe.onnx")
    if dynamo:  # torch's default exporter: the stacks gathered by GatherND
        axes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
        torch.onnx.export(module, (torch.randn(2, 16, WIDTH),), path, input_names=["x"], output_names=["y"],
                          dynamic_shapes={"x": axes}, dynamo=True, verbose=False)
        return onnx.load(path)
    torch.onnx.export(module, (torch.randn(2, 16, WIDTH),), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, opset_version=17,
                      dynamo=False)
    return onnx.load(path)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]


def _edges(rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs [batch, seq, WIDTH]: seeded; a zero token among them (layer norm makes it zero: every logit tied);
    a NaN; +inf; values near float32's largest; and a batch of those rows alone."""
    x = rng.standard_normal((2, 9, WIDTH)).astype(np.float32)
    zero = x.copy()
    zero[0, 3] = 0.0
    nan, inf, huge = x.copy(), x.copy(), x.copy()
    nan[1, 2, 5] = np.nan
    inf[0, 0, 0] = np.inf
    huge[1, 4] = np.float32(3e38) * np.sign(rng.standard_normal(WIDTH)).astype(np.float32)
    return [x, zero, nan, inf, huge, np.zeros((1, 3, WIDTH), np.float32), rng.standard_normal((1, 1, WIDTH)).astype(
        np.float32)]


def _kernel(model: onnx.ModelProto) -> onnx.ModelProto:
    found = moe.blocks(model)
    forms = [timed.form_of(model, b) for b in found]
    assert found and None not in forms
    return moe.write(model, [(b, f) for b, f in zip(found, forms)])


VARIANTS = {"Mixtral's (softmax, top k)": {}, "weights [E, in, out]": {"transposed": True},
            "Qwen3-MoE's (normalized)": {"normalize": True},
            "GraniteMoE's (top k of the logits, their softmax)": {"logits_first": True},
            "16 experts, top 4": {"experts": 16, "top_k": 4, "normalize": True},
            "GPT-OSS's (biases, a clamped SwiGLU, interleaved)": {"gpt_oss": True, "logits_first": True,
                                                                 "transposed": True}}


@pytest.mark.parametrize("kwargs", list(VARIANTS.values()), ids=list(VARIANTS))
def test_the_kernel_gives_the_blocks_outputs(tmp_path, kwargs):
    """Every variant found, its form read, and the kernel's program giving the user's outputs on seeded rows and on
    the edges, NaN and infinities where the user's are (a NaN made finite would be a wrong model)."""
    model = _export(tmp_path, **kwargs)
    written = _kernel(model)
    assert sum(n.op_type == "MoE" for n in _nodes(written)) == 1
    for x in _edges(np.random.default_rng(0)):
        passed, err, _ = compare_outputs(_run(model, x), _run(written, x))
        assert passed, (x.shape, err)


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    out = list(model.graph.node)
    for n in model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out.extend(a.g.node)
    return out


def _tied(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its router's columns 1 to 3 made equal: every token's logits tie at the k-th."""
    (block,) = moe.blocks(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    router = next(t for t in model.graph.initializer if t.name == producer[block.logits].input[1])
    w = onnx.numpy_helper.to_array(router).copy()
    w[:, 1:] = w[:, 1:2]
    router.CopyFrom(onnx.numpy_helper.from_array(w, router.name))
    return model


def test_a_tie_chooses_the_users_experts(tmp_path):
    """Logits tied at the k-th: TopK takes the lowest experts, the kernel alone the highest; written in reverse
    order, the kernel takes the user's (without the reversal the outputs differ by a whole expert)."""
    model = _tied(_export(tmp_path))
    written = _kernel(model)
    x = np.random.default_rng(1).standard_normal((2, 5, WIDTH)).astype(np.float32)
    assert compare_outputs(_run(model, x), _run(written, x))[0]
    unreversed = onnx.ModelProto()
    unreversed.CopyFrom(written)
    for t in unreversed.graph.initializer:  # the stacks in the experts' own order, the logits as they are
        if t.name.endswith(("/fc1", "/fc2")):
            t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t)[::-1].copy(), t.name))
    switch = next(n for n in unreversed.graph.node if n.op_type == "If")
    kernel = next(a.g for a in switch.attribute if a.name == "then_branch")
    (moe_node,) = [n for n in kernel.node if n.op_type == "MoE"]
    moe_node.input[1] = next(n for n in kernel.node if n.op_type == "Slice").input[0]
    assert not compare_outputs(_run(model, x), _run(unreversed, x))[0]


def test_near_tied_logits_take_the_users_block(tmp_path):
    """Router columns a float step apart: logits a few ulps apart, which the kernel's softmax and the user's rank
    differently on some tokens (an independent review: 12 of 1200 tokens routed elsewhere); the guard sends such a
    batch to the user's block."""
    model = _export(tmp_path, logits_first=True)
    (block,) = moe.blocks(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    router = next(t for t in model.graph.initializer if t.name == producer[block.logits].input[1])
    w = onnx.numpy_helper.to_array(router).copy()
    w[:, 2] = w[:, 1]
    w[0, 2] = np.nextafter(w[0, 1], np.float32(np.inf))
    router.CopyFrom(onnx.numpy_helper.from_array(w, router.name))
    written = _kernel(model)
    x = np.random.default_rng(3).standard_normal((4, 300, WIDTH)).astype(np.float32)
    assert compare_outputs(_run(model, x), _run(written, x))[0]


def test_a_block_of_another_activation_is_left(tmp_path):
    """GELU-gated experts: no form of the kernel gives their outputs; the block is left as exported."""
    torch = pytest.importorskip("torch")
    model = _export(tmp_path, gate=torch.nn.functional.gelu)
    (block,) = moe.blocks(model)
    assert timed.form_of(model, block) is None


def test_the_weights_are_held_once(tmp_path):
    """The user's stacks are computed back from the kernel's in the If's other branch, not kept beside them."""
    model = _export(tmp_path, layers=2)
    written = _kernel(model)
    size = sum(onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    assert sum(onnx.numpy_helper.to_array(t).nbytes for t in written.graph.initializer) < 1.02 * size


def test_a_run_writes_the_kernel_for_every_size(tmp_path):
    """Through the pipeline (the kernel chosen where timed faster, or not): the program gives the user's outputs at
    sizes it was not tuned at and on the edges, keeps the interface, and says what it timed; ``--portable`` writes
    no MoE."""
    model = _export(tmp_path, layers=2, normalize=True)
    config = OptimizeConfig.of(budget=4, seed=0, input_shapes={"x": (1, 64, WIDTH)})
    result = optimize(model, config)
    assert any("MoE block" in line for line in result.report.rewritten), result.report.rewritten
    for x in _edges(np.random.default_rng(2)):
        assert compare_outputs(_run(model, x), _run(result.optimized, x))[0], x.shape
    assert [i.name for i in result.optimized.graph.input] == ["x"]
    kernel = optimize(_kernel(model), config)  # the kernel's If and its branches imported, searched and written
    assert sum(n.op_type == "MoE" for n in _nodes(kernel.optimized)) == 2
    for x in _edges(np.random.default_rng(3)):
        assert compare_outputs(_run(model, x), _run(kernel.optimized, x))[0], x.shape
    portable = optimize(model, OptimizeConfig.of(budget=4, seed=0, input_shapes={"x": (1, 64, WIDTH)},
                                                 portable=True))
    assert not any(n.op_type == "MoE" for n in _nodes(portable.optimized))


def test_dynamos_export_is_found_through_its_gathernd(tmp_path):
    """torch's dynamo exporter gathers the stacks with GatherND: no block as exported; read as the Gathers they are
    (:func:`eqsat.onnx.experts.as_gathers`), the block is found, and the kernel's program (alone, and as a run
    writes it) gives the user's outputs on the edges with the same interface."""
    model = _export(tmp_path, layers=2, dynamo=True, normalize=True)
    assert moe.blocks(model) == []
    written = _kernel(as_gathers(model))
    for x in _edges(np.random.default_rng(4)):
        assert compare_outputs(_run(model, x), _run(written, x))[0], x.shape
    result = optimize(model, OptimizeConfig.of(budget=4, seed=0, input_shapes={"x": (1, 64, WIDTH)}))
    assert any("2 MoE block(s)" in line for line in result.report.rewritten), result.report.rewritten
    for x in _edges(np.random.default_rng(5)):
        assert compare_outputs(_run(model, x), _run(result.optimized, x))[0], x.shape
    assert [(i.name, str(i.type)) for i in result.optimized.graph.input] == \
        [(i.name, str(i.type)) for i in model.graph.input]


@pytest.mark.parametrize("table,written", [
    ({128: (20.5, 9.6), 32: (5.7, 4.0), 4: (1.8, 2.3), 1: (1.2, 0.9)}, True),  # OLMoE's: slower at 4 tokens only
    ({128: (20.5, 9.6), 32: (5.7, 4.0), 4: (1.8, 2.5), 1: (1.2, 0.9)}, False),  # more than a third slower there
    ({128: (20.5, 19.0), 1: (1.2, 0.9)}, False),  # not faster enough where it was tuned
    ({128: (20.5, 9.6), 32: (5.7, 7.5), 8: (2.0, 2.6), 1: (1.2, 1.55)}, False),  # slower over the sizes
])
def test_the_kernel_is_written_where_its_timings_say(table, written):
    assert timed.kernel_wins(table, 128) is written

