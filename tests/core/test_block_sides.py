"""Repeated blocks that the plain chain of layers does not show: a layer with outputs of its own (a prefill's
present key and value, one pair a layer, are program outputs computed inside it) and a layer that computes its own
copy of a value from a shared input (MPT's ALiBi bias, sliced again in every layer). Both are found as copies, and
the first copy's program replayed on every copy is the original computation (checked in onnxruntime against the
original; the oracle is shown to fail on a wrong replay)."""

from __future__ import annotations

import numpy as np

from eqsat import ir
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.blocks import find_blocks
from eqsat.onnx import export_model
from eqsat.verification import verify

LAYERS = 4
N = 8


def _weights(rng: np.random.Generator, weights: dict, name: str) -> ir.Node:
    weights[name] = (rng.standard_normal((N, N)) / np.sqrt(N)).astype("float32")
    return ir.weight(name, (N, N))


def _with_presents() -> ir.Graph:
    """``a = h @ Wa; present_k = a; h = relu(a) @ Wb + h``, four times: each layer's ``a`` is a program output,
    read inside the layer (the residual passes over it, so it is no cut)."""
    rng = np.random.default_rng(0)
    weights: dict = {}
    x = ir.input_("x", (4, N))
    h, outs, names = x, [], []
    for k in range(LAYERS):
        a = ir.make("matmul", [h, _weights(rng, weights, f"wa{k}")], (0,))
        outs.append(a)
        names.append(f"present_{k}")
        h = ir.make("ewadd", [ir.make("matmul", [ir.make("relu", [a]), _weights(rng, weights, f"wb{k}")], (0,)), h])
    return ir.Graph((x,), (h, *outs), ("y", *names), weights)


def _with_own_bias() -> ir.Graph:
    """``h = relu(h @ W + m * c)``, four times, where each layer computes ``m * c`` itself from the input ``m``."""
    rng = np.random.default_rng(1)
    weights: dict = {"c": np.full((1, N), 0.5, "float32")}
    x, m = ir.input_("x", (4, N)), ir.input_("m", (4, N))
    c = ir.weight("c", (1, N))
    h = x
    for k in range(LAYERS):
        bias = ir.make("ewmul", [m, c])
        h = ir.make("relu", [ir.make("ewadd", [ir.make("matmul", [h, _weights(rng, weights, f"w{k}")], (0,)), bias])])
    return ir.Graph((x, m), (h,), ("y",), weights)


def test_a_layer_with_outputs_of_its_own_is_a_copy_and_replays_to_the_original():
    graph = _with_presents()
    blocks = find_blocks(graph, 3, 0.5, 1)
    assert blocks is not None and blocks.copies == LAYERS - 1  # cut to cut: the first layer reads the input
    assert all(len(b.sides) == 1 for b in blocks.blocks) and blocks.describe()["side_outputs"] == 1
    rep = blocks.representative
    assert rep.output_names == ("block_out", "block_side_0")
    original = export_model(graph)
    check = verify(original, export_model(blocks.replay(rep)), seed=0)
    assert check.passed, check.detail
    # the rest computes the model's other outputs, not the copies' presents
    assert not set(blocks.rest.program.output_names) & {"present_1", "present_2"}
    # the oracle can fail: a program whose side output is another value gives other presents
    wrong = ir.Graph(rep.inputs, (rep.outputs[0], ir.make("relu", [rep.outputs[1]])), rep.output_names, rep.weights)
    assert not verify(original, export_model(blocks.replay(wrong)), seed=0).passed


def test_a_layer_that_computes_its_own_copy_of_a_shared_value_is_a_copy():
    graph = _with_own_bias()
    blocks = find_blocks(graph, 3, 0.5, 1)
    assert blocks is not None and blocks.copies >= LAYERS - 1
    # each copy holds its own m * c; the input m is what they share
    muls = [[n for n in graph.nodes() if id(n) in b.body and n.op == "ewmul"] for b in blocks.blocks]
    assert all(len(found) == 1 for found in muls) and len({id(found[0]) for found in muls}) == len(muls)
    assert all(any(e.op == "input" and ir.leaf_name(e) == "m" for e in b.externals) for b in blocks.blocks)
    check = verify(export_model(graph), export_model(blocks.replay(blocks.representative)), seed=1)
    assert check.passed, check.detail


def test_a_model_with_presents_is_optimized_block_by_block_and_verifies():
    graph = _with_presents()
    original = export_model(graph)
    result = optimize(original, OptimizeConfig.of(cost="analytic", measure=False, budget=2, depth=1,
                                                  final_extractor="greedy-dag"))
    found = result.report.blocks["found"]
    assert found is not None and found["side_outputs"] == 1 and found["copies"] == LAYERS - 1
    assert [o.name for o in result.optimized.graph.output] == [o.name for o in original.graph.output]
    check = verify(original, result.optimized, seed=5)  # an independent check of what was returned
    assert check.passed, check.detail
