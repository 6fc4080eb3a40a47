"""Rotary embeddings over the first ``rotary_dim`` entries of each head, of neighbouring pairs (GPT-J, CodeGen:
``rotate_every_two``) or of halves (GPT-NeoX, Phi: ``rotate_half``), eqsat/ops/rotary_part.py, and the rule
``rotary_part_kernel`` (opset 23's RotaryEmbedding with ``rotary_embedding_dim`` and ``interleaved``). Oracles: the original torch export run in onnxruntime at several sizes, and onnxruntime's own
optimized graph (which kernels it runs)."""

from __future__ import annotations

import collections
import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from rule_cases import as_kernels
from torch import nn

from eqsat import ir
from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost.ort import runtime_nodes
from eqsat.egglog.egraph import EGraph
from eqsat.generic import import_generic, make_generic
from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.rules import RuleEngine, by_name

RULE = "rotary_part_kernel"
KERNEL = {"rotary_part": "rope_part"}
"""the operator the rule rewrites to"""
HEADS, HEAD = 2, 16


class PartRotary(nn.Module):
    """q and k of an attention with a rotary embedding over the first ``rotary_dim`` entries of each head, sin and cos
    gathered from a sinusoidal table at the positions: ``interleaved``, GPT-J's (rotate_every_two on q and k
    [B, S, H, D], the tables repeated pairwise; transformers' GPT-J code, written out), else GPT-NeoX's and Phi's
    (rotate_half on [B, H, S, D], the tables' halves repeated); ``repeated=False``: the tables read as they are
    (no repeats: no rotary embedding)."""

    def __init__(self, rotary_dim: int, interleaved: bool = True, repeated: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k = nn.Linear(HEADS * HEAD, HEADS * HEAD), nn.Linear(HEADS * HEAD, HEADS * HEAD)
        self.rotary_dim, self.interleaved, self.repeated = rotary_dim, interleaved, repeated
        inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
        angles = torch.arange(64).float()[:, None] * inv[None, :]
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
        self.register_buffer("table", table if repeated else torch.cat([table, table.flip(-1)], dim=1))

    def _turn(self, x):
        if self.interleaved:
            return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def _rotate(self, t, sin, cos):
        rot, rest = t[..., : self.rotary_dim], t[..., self.rotary_dim:]
        if self.interleaved:  # the heads at axis 2: [B, S, H, D]
            sin, cos = (torch.repeat_interleave(a[:, :, None, :], 2, 3) if self.repeated else a[:, :, None, :]
                        for a in (sin, cos))
        else:  # at axis 1: [B, H, S, D]
            sin, cos = (torch.cat([a, a], -1)[:, None] if self.repeated else a[:, None] for a in (sin, cos))
        rot = rot * cos + self._turn(rot) * sin
        return torch.cat([rot, rest], dim=-1) if rest.shape[-1] else rot

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        positions = torch.arange(s, device=x.device)[None, :].expand(b, s)
        sincos = self.table[positions]
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        q, k = (p(x).view(b, s, HEADS, HEAD) for p in (self.q, self.k))
        if not self.interleaved:
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        q, k = self._rotate(q, sin, cos), self._rotate(k, sin, cos)
        return (q.transpose(1, 2), k.transpose(1, 2)) if self.interleaved else (q, k)


def _export(rotary_dim: int, interleaved: bool = True, repeated: bool = True) -> onnx.ModelProto:
    buf = io.BytesIO()
    torch.onnx.export(PartRotary(rotary_dim, interleaved, repeated).eval(), (torch.randn(1, 8, HEADS * HEAD),), buf,
                      input_names=["x"], output_names=["q", "k"], opset_version=17, dynamo=False,
                      dynamic_axes={"x": {0: "batch", 1: "seq"}})
    return onnx.load_from_string(buf.getvalue())


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})


def _same(program: onnx.ModelProto, original: onnx.ModelProto, sizes) -> None:
    rng = np.random.default_rng(0)
    for b, s in sizes:
        x = rng.standard_normal((b, s, HEADS * HEAD)).astype(np.float32)
        for got, want in zip(_run(program, x), _run(original, x)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


CASES = [(8, True), (HEAD, True), (8, False)]
"""(rotary_dim, interleaved): GPT-J's partial and whole pairs, GPT-NeoX's partial halves"""


@pytest.mark.parametrize("rotary_dim,interleaved", CASES)
def test_a_torch_export_of_a_partial_or_pairwise_rotary_imports_as_rotary_part_at_one_size_and_at_every_size(
        rotary_dim, interleaved):
    original = _export(rotary_dim, interleaved)
    for generic in (False, True):
        graph = import_generic(original, {"x": (1, 8, HEADS * HEAD)}, generic=generic)
        ops = collections.Counter(n.op for n in ir.topo_order(list(graph.outputs)))
        pairs = [n for n in ir.topo_order(list(graph.outputs)) if n.op == "rotary_part"]
        assert len(pairs) == 2 and all(n.attrs == (rotary_dim, int(interleaved)) for n in pairs), ops
        assert not any(n.op == "opaque" and n.attrs[0] in ("Neg", "Tile") for n in ir.topo_order(list(graph.outputs)))


@pytest.mark.parametrize("rotary_dim,interleaved", CASES)
def test_the_decomposition_round_trips_at_every_size(rotary_dim, interleaved):
    original = _export(rotary_dim, interleaved)
    out = optimize(original, OptimizeConfig.of(scheduler="none", cost="analytic", measure=False,
                                               input_shapes={"x": (1, 8, HEADS * HEAD)})).optimized
    _same(out, original, [(1, 8), (2, 5), (3, 13), (1, 1)])


@pytest.mark.parametrize("rotary_dim,interleaved", CASES)
def test_the_kernel_is_what_onnxruntime_runs_and_computes_the_same_at_every_size(rotary_dim, interleaved):
    original = _export(rotary_dim, interleaved)
    graph = import_model(original, {"x": (1, 8, HEADS * HEAD)})
    eg = EGraph.from_graph(graph)
    assert RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed
    static = export_model(as_kernels(graph, KERNEL))
    ran = runtime_nodes(static)
    assert ran.count("RotaryEmbedding") == 2 and "Neg" not in ran, ran
    _same(static, original, [(1, 8)])
    generic = make_generic(export_model(as_kernels(import_generic(original, {"x": (1, 8, HEADS * HEAD)}), KERNEL)),
                           original, {"batch": 1, "seq": 8}).model
    assert collections.Counter(n.op_type for n in generic.graph.node)["RotaryEmbedding"] == 2
    _same(generic, original, [(1, 8), (2, 5), (3, 13), (1, 1)])


@pytest.mark.parametrize("interleaved", [True, False])
def test_tables_whose_pairs_or_halves_differ_are_no_rotary_embedding(interleaved):
    original = _export(8, interleaved, repeated=False)
    for generic in (False, True):
        ops = import_generic(original, {"x": (1, 8, HEADS * HEAD)}, generic=generic).op_counts()
        assert ops["rotary_part"] == ops["rotary"] == 0, ops
    out = optimize(original, OptimizeConfig.of(scheduler="none", cost="analytic", measure=False,
                                               input_shapes={"x": (1, 8, HEADS * HEAD)})).optimized
    _same(out, original, [(1, 8), (2, 5)])


def test_a_rotation_of_whole_halves_stays_the_rotary_operator():
    ops = import_model(_export(HEAD, interleaved=False), {"x": (1, 8, HEADS * HEAD)}).op_counts()
    assert ops["rotary"] == 2 and ops["rotary_part"] == 0, ops


def test_the_rule_fires_on_tables_shared_by_the_heads_only():
    x = ir.input_("x", (2, 5, 3, 8))
    for table, fires in (((1, 5, 1, 8), True), ((2, 1, 1, 4), True), ((1, 5, 3, 8), False)):
        node = ir.make("rotary_part", [x, ir.input_("cos", table), ir.input_("sin", table)], (table[-1], 1))
        eg = EGraph.from_graph(ir.Graph((x,), (node,), ("y",), {}))
        assert RuleEngine(eg, [by_name()[RULE]]).apply(RULE).changed == fires, table
