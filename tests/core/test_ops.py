"""The operator table (eqsat.ops): every entry is complete, its Python shape function and its egglog shape
rules agree on random shapes (valid ones and near misses), and its numpy semantics agree with onnxruntime
on the exported one-operator model, with torch on its timing function, and in the prime-field mode with
exact float64 arithmetic on small integers.

Adding an operator means adding a sampler to SAMPLERS (random valid attributes and operand shapes) in
tests/op_samplers.py.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from op_samplers import COMPUTED, SAMPLERS

from eqsat import ir, ops
from eqsat.egglog import codec
from eqsat.egglog.egraph import EGraph
from eqsat.errors import ShapeError
from eqsat.onnx.export import export_model
from eqsat.ops import NotEvaluable, Shape
from eqsat.ops.composite import float_bits

PRIME = 1_000_003

WITHOUT_SEMANTICS = {"input", "weight", "noop", "opaque"}
"""leaves (values from outside), noop (never computed) and opaque (carried, never evaluated)"""
FIELD_OPS = {"ewadd", "ewsum", "ewmul", "dropout", "matmul", "conv2d", "concat", "slice", "transpose", "reshape", "merge",
             "enlarge", "linear", "repeat_heads"}
"""multi-linear (or layout) operators, defined over a prime field without a non-linear activation"""


def _python_shape(op: str, attrs: tuple, shapes: list[Shape]) -> Shape | None:
    try:
        return ops.infer_shape(op, attrs, shapes)
    except ShapeError:
        return None


def _near_miss(rng: np.random.Generator, shapes: list[Shape]) -> list[Shape]:
    """One dimension of one operand redrawn (often ill-shaped, sometimes still valid)."""
    k = int(rng.integers(len(shapes)))
    dims = list(shapes[k])
    dims[int(rng.integers(len(dims)))] = int(rng.integers(1, 7))
    return [tuple(dims) if i == k else s for i, s in enumerate(shapes)]


def test_every_operator_is_in_the_table_and_has_a_sampler():
    assert set(ops.OPS) == set(SAMPLERS) | WITHOUT_SEMANTICS


@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_entry_is_complete(op):
    entry = ops.OPS[op]
    assert entry.op == op and entry.doc and entry.attrs and callable(entry.shape)
    if op in WITHOUT_SEMANTICS:
        assert entry.numpy is None and entry.onnx is None and entry.shape_rules() == []
        return
    assert entry.ctors and entry.shape_rules(), "an operator in the e-graph needs egglog shape rules"
    assert entry.numpy is not None
    assert (entry.onnx is None) == entry.fold_only, "an ONNX emitter, or marked fold-only (exported folded)"
    attrs, shapes = SAMPLERS[op](np.random.default_rng(0))
    out = ops.infer_shape(op, attrs, shapes)
    flops, moved = entry.flops(attrs, shapes, out), entry.bytes(shapes, out, 4)
    assert np.isfinite(flops) and flops >= 1 and moved >= 4 * (sum(map(ops.volume, shapes)) + ops.volume(out))
    if not (entry.free or entry.fold_only or op in ("bn_scale", "bn_shift")):
        assert entry.torch is not None, "a timed operator needs a torch function (bn folding runs on weights)"


def test_constructors_are_unique_and_cover_the_schema():
    names = [c.name for d in ops.OPS.values() for c in d.ctors]
    assert len(names) == len(set(names)) == len(ops.CONSTRUCTORS)
    assert all(ops.OPS[op].ctors for op, _kinds in ops.CONSTRUCTORS.values())


@pytest.mark.parametrize("op", COMPUTED)
def test_python_and_egglog_shape_inference_agree(op):
    """Each draw is encoded as its own term over fresh leaves (their shapes set, the operator's not), the
    analysis ruleset saturated, and the shape egglog derived read back."""
    rng = np.random.default_rng(sum(map(ord, op)))
    draws = []
    for k in range(24):
        attrs, shapes = SAMPLERS[op](rng)
        assert _python_shape(op, attrs, shapes) is not None, f"sampler drew an invalid {op}{attrs} on {shapes}"
        draws.append((attrs, shapes if k % 2 == 0 else _near_miss(rng, shapes)))
    eg = EGraph()
    for k, (attrs, shapes) in enumerate(draws):
        leaves = []
        for i, s in enumerate(shapes):
            h = f"l{k}_{i}"
            eg.run_program(f'(set (node "{h}") (Input "i:{h}")) (set (shape (node "{h}")) {ops.shape_term(s)})')
            leaves.append(f'(node "{h}")')
        eg.run_program(f'(set (node "o{k}") {codec.term(op, attrs, leaves)})')
        eg.output_handles.append(f"o{k}")
    eg.saturate_analysis()
    snap = eg.snapshot()
    valid = 0
    for k, (attrs, shapes) in enumerate(draws):
        expected = _python_shape(op, attrs, shapes)
        got = snap.shapes[snap.roots[k]]
        assert got == expected, f"{op}{attrs} on {shapes}: egglog {got}, python {expected}"
        valid += expected is not None
        # the codec reads back what it wrote: the drawn operator, attributes and operands (leaf names)
        [root] = [snap.nodes[i] for i in snap.classes[snap.roots[k]]]
        operands = [snap.nodes[i].attrs for c in root.children for i in snap.classes[c]]
        assert (root.op, root.attrs, operands) == (op, tuple(map(int, attrs)),
                                                  [(f"i:l{k}_{i}",) for i in range(len(shapes))])
    assert valid >= 12


def _run_onnx(op: str, attrs: tuple, values: list[np.ndarray]) -> np.ndarray:
    inputs = [ir.input_(f"x{i}", v.shape) for i, v in enumerate(values)]
    graph = ir.Graph(tuple(inputs), (ir.make(op, inputs, attrs),), ("y",))
    sess = ort.InferenceSession(export_model(graph).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {f"x{i}": v.astype(np.float32) for i, v in enumerate(values)})[0]


def _operands(rng: np.random.Generator, op: str, shapes: list[Shape]) -> list[np.ndarray]:
    if op in ("batchnorm", "bn_scale", "bn_shift"):  # a variance under a square root
        return [rng.uniform(0.5, 2.0, s) for s in shapes]
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("op", [op for op in COMPUTED if ops.OPS[op].onnx is not None])
def test_numpy_semantics_agree_with_onnxruntime(op):
    rng = np.random.default_rng(1 + sum(map(ord, op)))
    for _ in range(4):
        attrs, shapes = SAMPLERS[op](rng)
        values = _operands(rng, op, shapes)
        expected = ops.evaluate(op, attrs, values)
        got = _run_onnx(op, attrs, values)
        assert got.shape == expected.shape == ops.infer_shape(op, attrs, shapes)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=f"{op}{attrs} on {shapes}")


@pytest.mark.parametrize("op", [op for op in COMPUTED if ops.OPS[op].torch is not None and op != "batchnorm"])
def test_numpy_semantics_agree_with_the_torch_function(op):
    """(batchnorm's torch function times a positive variance it makes itself, so it is left out.)"""
    rng = np.random.default_rng(2 + sum(map(ord, op)))
    for _ in range(4):
        attrs, shapes = SAMPLERS[op](rng)
        values = _operands(rng, op, shapes)
        fn = ops.OPS[op].torch(torch, attrs, shapes)
        got = fn(*[torch.from_numpy(v) for v in values]).numpy()
        np.testing.assert_allclose(got, ops.evaluate(op, attrs, values), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("op", COMPUTED)
def test_prime_field_mode_matches_exact_integer_arithmetic(op):
    """On small non-negative integers float64 is exact, so the value modulo a prime must equal the float
    value reduced modulo it; the operators outside FIELD_OPS (and fused activations) refuse the mode."""
    rng = np.random.default_rng(3 + sum(map(ord, op)))
    checked = 0
    for k in range(6):
        attrs, shapes = SAMPLERS[op](rng)
        if op in ("matmul", "conv2d") and k % 2 == 0:  # the fused activation off: multi-linear
            attrs = attrs[:-1] + (0,)
        values = [rng.integers(0, 10, s, dtype=np.int64) for s in shapes]
        act = attrs[-1] if op in ("matmul", "conv2d") else 0
        if op not in FIELD_OPS or act:
            with pytest.raises(NotEvaluable):
                ops.evaluate(op, attrs, values, PRIME)
            continue
        exact = ops.evaluate(op, attrs, [v.astype(np.float64) for v in values])
        field = ops.evaluate(op, attrs, values, PRIME)
        assert field.dtype.kind == "i"
        np.testing.assert_array_equal(field, np.mod(exact.astype(np.int64), PRIME))
        checked += 1
    assert checked >= 3 or op not in FIELD_OPS


def test_unknown_operator_is_refused_everywhere():
    with pytest.raises(ShapeError):
        ops.infer_shape("frobnicate", (), [(2, 2)])
    with pytest.raises(NotEvaluable):
        ops.evaluate("frobnicate", (), [np.zeros(2)])
    with pytest.raises(KeyError, match="known"):
        ops.get("frobnicate")


def test_addnorm_with_an_operand_broadcast_along_the_last_axis_agrees_in_numpy_torch_and_onnxruntime():
    """a [2, 3, 1] + b [2, 3, 4]: the norm is over the sum's last axis (gamma's size), not the first operand's."""
    rng = np.random.default_rng(5)
    attrs, shapes = (float_bits(1e-5),), [(2, 3, 1), (2, 3, 4), (4,), (4,)]
    assert ops.infer_shape("addnorm", attrs, shapes) == (2, 3, 4)
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = ops.evaluate("addnorm", attrs, values)
    got = ops.OPS["addnorm"].torch(torch, attrs, shapes)(*[torch.from_numpy(v) for v in values]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run_onnx("addnorm", attrs, values), expected, rtol=1e-4, atol=1e-5)
