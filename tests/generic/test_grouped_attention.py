"""Grouped-query attention over a key/value cache in a shape-generic program (and the rotary kernel at the past's
offset beside it). The attention mask's length ``past +
1`` fingerprints as the Concat of the past and the new entries does (:meth:`eqsat.dims.SymbolTable.derive`), so the
masked attention of a decode step imports as ``attention``; the exports' ``repeat_kv`` chain imports as
``repeat_heads``; and ``attention_grouped`` lets opset 23's Attention read the cache unrepeated. Oracles: the
fingerprints' arithmetic, a loop that copies heads one at a time, numpy's softmax attention over the repeated heads,
and the original model run in onnxruntime at several batches and past lengths (left-padded and fully masked rows)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import zoo
from decode_helpers import KV_HEADS, decode_step
from onnx import TensorProto, helper, numpy_helper

from eqsat import ops
from eqsat.cost.ort import runtime_nodes
from eqsat.decode import build_program
from eqsat.dims import fp_of, symbol_table
from eqsat.egglog.egraph import EGraph
from eqsat.errors import ShapeError
from eqsat.generic import import_generic, make_generic
from eqsat.onnx import export_model, session
from eqsat.onnx.axes.interface import symbol_values
from eqsat.ops import heads
from eqsat.ops.composite import float_bits
from eqsat.rules import RuleEngine, by_name


class _Writer:
    """An emitter (:class:`eqsat.ops.Emitter`) into a list of ONNX nodes and initializers."""

    def __init__(self, opset: int = 23, upgrade: bool = True) -> None:
        self.opset, self.upgrade = opset, upgrade
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def emit(self, op_type: str, inputs: list[str], base: str, **attrs) -> str:
        out = f"{base}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def const(self, array: np.ndarray, base: str) -> str:
        name = f"{base}_c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def model(self, inputs: list[tuple[str, list]], out: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims)
                                                     for n, dims in inputs],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


def _repeated_by_loop(x: np.ndarray, r: int) -> np.ndarray:
    out = np.empty((x.shape[0], x.shape[1] * r, *x.shape[2:]), x.dtype)
    for h in range(x.shape[1]):
        for j in range(r):
            out[:, h * r + j] = x[:, h]
    return out


@pytest.mark.parametrize("keys_transposed", [False, True])
def test_repeat_heads_copies_each_head_in_turn_at_every_size(keys_transposed):
    """The ONNX form holds at batches and lengths other than the one it was written at (the symbol axis -1)."""
    from eqsat.dims import Dim

    seq = Dim(5, 7 * 64)  # a symbolic length (its fingerprint differs from its size)
    shape = (1, 2, 4, seq) if keys_transposed else (1, 2, seq, 4)
    w = _Writer(opset=13)
    out = heads.write(w, "x", shape, 3)
    dims = ["batch", 2, 4, "s"] if keys_transposed else ["batch", 2, "s", 4]
    sess = session(w.model([("x", dims)], out))
    rng = np.random.default_rng(0)
    for batch, n in ((1, 5), (3, 1), (2, 9)):
        x = rng.standard_normal((batch, 2, 4, n) if keys_transposed else (batch, 2, n, 4)).astype(np.float32)
        want = _repeated_by_loop(x, 3)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)
        np.testing.assert_array_equal(ops.evaluate("repeat_heads", (3,), [x]), want)
    assert ops.infer_shape("repeat_heads", (3,), [(1, 2, 5, 4)]) == (1, 6, 5, 4)
    with pytest.raises(ShapeError, match="every size"):  # symbolic heads: no Reshape target for every size
        heads.write(_Writer(), "x", (1, Dim(2, 3 * 64), 5, 4), 3)


def _attention_by_hand(q, k, v, mask, scale):
    """softmax(q @ k^T * scale + mask) @ v with k's and v's heads repeated for the query heads, in float64."""
    r = q.shape[1] // k.shape[1]
    k, v = _repeated_by_loop(k, r).astype(np.float64), _repeated_by_loop(v, r).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * scale + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("upgrade", [True, False])
def test_a_grouped_kernel_is_attention_over_the_repeated_heads(upgrade):
    """sdpa over kt [B, 2, D, S] and v [B, 2, S, D] with 6 query heads: the IR's numpy, opset 23's Attention
    (``upgrade``) and the decomposition over repeated heads written where the kernel may not be (opset 17) agree
    with attention by hand, a query row fully masked with float32's lowest (the decomposition averages v) included."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 6, 1, 8)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 5, 8)).astype(np.float32) for _ in range(2))
    mask = np.zeros((2, 1, 1, 5), np.float32)
    mask[0, ..., :2] = np.finfo(np.float32).min  # a left-padded row
    mask[1] = np.finfo(np.float32).min  # a fully masked row
    want = _attention_by_hand(q, k, v, mask, 0.125)
    kt = np.swapaxes(k, -1, -2)
    shapes = [q.shape, kt.shape, v.shape, mask.shape]
    assert ops.infer_shape("sdpa", (float_bits(0.125),), shapes) == (2, 6, 1, 8)
    np.testing.assert_allclose(ops.evaluate("sdpa", (float_bits(0.125),), [q, kt, v, mask]), want, atol=1e-6)
    w = _Writer(opset=23 if upgrade else 17, upgrade=upgrade)
    out = ops.OPS["sdpa"].onnx(w, (float_bits(0.125),), ["q", "kt", "v", "m"], shapes)
    model = w.model([("q", list(q.shape)), ("kt", list(kt.shape)), ("v", list(v.shape)), ("m", list(mask.shape))],
                    out)
    assert ("Attention" in runtime_nodes(model)) == upgrade
    got = session(model).run(None, {"q": q, "kt": kt, "v": v, "m": mask})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_mask_length_fingerprints_as_the_past_plus_one():
    """In a decode step the mask [batch, past + 1] adds to the scores over the Concat of the past and the new key:
    one fingerprint, the past's plus one, so the masked attention imports whole, over repeated heads."""
    model = decode_step()
    shapes = {"x": (1, 1, 16), "attention_mask": (1, 128), "past_k": (1, KV_HEADS, 127, 4),
              "past_v": (1, KV_HEADS, 127, 4)}
    with symbol_table():
        graph = import_generic(model, shapes)
        ins = {n.name: n for n in graph.inputs}
        present = graph.outputs[graph.output_names.index("present_k")]
        assert fp_of(ins["attention_mask"].shape[1]) == fp_of(present.shape[2]) == fp_of(ins["past_k"].shape[2]) + 1
        assert fp_of(ins["past_k"].shape[2]) != 127  # a symbol
    counts = graph.op_counts()
    assert counts["attention"] == 1 and counts["repeat_heads"] == 2, counts


def _grouped_program(model: onnx.ModelProto, shapes: dict) -> onnx.ModelProto:
    """``model`` imported shape-generic, its attentions written as kernels over the unrepeated cache (the rules'
    right-hand sides chosen), exported and written for every size."""
    with symbol_table():
        graph = import_generic(model, shapes)
        eg = EGraph.from_graph(graph)  # the masks proven finite by the encoder
        engine = RuleEngine(eg, [by_name()[r] for r in ("attention_kernel", "attention_grouped", "rotary_kernel")])
        assert engine.apply("attention_kernel").changed
        assert engine.apply("attention_grouped").changed
        assert engine.apply("rotary_kernel").changed  # the tables computed from the position: proven rotary
        snap = eg.snapshot().restrict()

        def grouped(n) -> bool:  # an sdpa whose keys are not repeated, or a rotary kernel
            return snap.nodes[n].op == "rope" or snap.nodes[n].op == "sdpa" and not any(
                snap.nodes[m].op == "repeat_heads" for m in snap.classes[snap.nodes[snap.classes[
                    snap.nodes[n].children[1]][0]].children[0]])
        choice = {c: ([n for n in nodes if grouped(n)] or nodes)[0] for c, nodes in enumerate(snap.classes)}
        program = export_model(build_program(snap, choice, graph))
        return make_generic(program, model, symbol_values(model, shapes)).model


def test_a_dynamo_decode_step_reads_its_cache_unrepeated_and_agrees_at_every_size(tmp_path):
    """transformers' LLaMA decode step (6 query heads over 2 key/value heads, a padding mask that dynamo writes as a
    Where of float32's lowest, rotary tables computed from the past's length) exported by dynamo: one Attention a
    layer reading the cache's Concat unrepeated, one RotaryEmbedding on q and one on k, the original's outputs at other batches and past lengths,
    with a left-padded row and a fully masked one (onnxruntime, the oracle)."""
    model = zoo.export_dynamic("llama_decode", "dynamo", str(tmp_path / "decode.onnx"))
    layers = sum(o.name.startswith("present") for o in model.graph.output) // 2
    kv = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
          if i.name.startswith("past_key_values")}
    heads_, dim = next(iter(kv.values()))[1], next(iter(kv.values()))[3]
    shapes = {"input_ids": (1, 1), "attention_mask": (1, 33),
              **{n: (1, heads_, 32, dim) for n in kv}}
    program = _grouped_program(model, shapes)
    ran = runtime_nodes(program)
    assert ran.count("Attention") == layers and ran.count("RotaryEmbedding") == 2 * layers and "Neg" not in ran, ran
    made = {o: n for n in program.graph.node for o in n.output}

    def source(name: str) -> str:  # through transpositions
        while made[name].op_type == "Transpose":
            name = made[name].input[0]
        return made[name].op_type
    attention = [n for n in program.graph.node if n.op_type == "Attention"]
    assert [(source(n.input[1]), source(n.input[2])) for n in attention] == [("Concat", "Concat")] * layers
    ref, got = session(model), session(program)
    rng = np.random.default_rng(3)
    for batch, past in ((1, 32), (2, 5), (3, 70), (1, 0)):
        feeds = {"input_ids": rng.integers(0, zoo.VOCAB, (batch, 1)).astype(np.int64),
                 "attention_mask": np.ones((batch, past + 1), np.int64)}
        feeds["attention_mask"][0, :past // 3] = 0  # left-padded
        if batch > 1:
            feeds["attention_mask"][1] = 0  # fully masked
        feeds.update({n: rng.standard_normal((batch, heads_, past, dim)).astype(np.float32) for n in kv})
        for want, have in zip(ref.run(None, feeds), got.run(None, feeds)):
            assert have.shape == want.shape, (batch, past)
            np.testing.assert_allclose(have, want, rtol=1e-3, atol=1e-4)
