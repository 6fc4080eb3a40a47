"""The operator table (eqsat.ops): every entry is complete, its Python shape function and its egglog shape
rules agree on random shapes (valid ones and near misses), and its numpy semantics agree with onnxruntime
on the exported one-operator model, with torch on its timing function, and in the prime-field mode with
exact float64 arithmetic on small integers.

Adding an operator means adding a sampler to SAMPLERS (random valid attributes and operand shapes).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
import torch

from eqsat import ir, ops
from eqsat.egglog import codec
from eqsat.egglog.egraph import EGraph
from eqsat.errors import ShapeError
from eqsat.onnx.export import export_model
from eqsat.ops import SAME, NotEvaluable, Shape
from eqsat.ops.composite import float_bits

Sample = tuple[tuple, list[Shape]]
PRIME = 1_000_003


def _dims(rng: np.random.Generator, rank: int, hi: int = 5) -> list[int]:
    return [int(d) for d in rng.integers(1, hi + 1, size=rank)]


def _elementwise(rng: np.random.Generator) -> Sample:
    return (), [tuple(_dims(rng, int(rng.integers(1, 5))))]


def _broadcast(rng: np.random.Generator) -> Sample:
    a = _dims(rng, int(rng.integers(1, 5)))
    b = [1 if rng.random() < 0.3 else d for d in a]
    a = [1 if rng.random() < 0.2 else d for d in a]
    return (), [tuple(a), tuple(b)]


def _matmul(rng: np.random.Generator) -> Sample:
    """2-D, or batched 3-D or 4-D (equal leading dimensions)."""
    m, k, n = _dims(rng, 3)
    batch = tuple(_dims(rng, int(rng.integers(0, 3)), 3))
    return (int(rng.integers(0, 4)),), [batch + (m, k), batch + (k, n)]


def _pads(rng: np.random.Generator, kh: int, kw: int) -> tuple[int, int]:
    """Both SAME (odd kernels) or both explicit, at most k // 2 (what ONNX pooling accepts)."""
    if kh % 2 and kw % 2 and rng.random() < 0.5:
        return SAME, SAME
    return int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))


def _conv2d(rng: np.random.Generator) -> Sample:
    groups, cg, per = (int(v) for v in rng.integers(1, 4, size=3))
    kh, kw, sh, sw = (int(v) for v in rng.integers(1, 4, size=4))
    ph, pw = _pads(rng, kh, kw)
    h, w = kh + int(rng.integers(0, 5)), kw + int(rng.integers(0, 5))
    return (sh, sw, ph, pw, int(rng.integers(0, 4))), [(int(rng.integers(1, 3)), groups * cg, h, w),
                                                      (groups * per, cg, kh, kw)]


def _pool(rng: np.random.Generator) -> Sample:
    kh, kw, sh, sw = (int(v) for v in rng.integers(1, 4, size=4))
    ph, pw = _pads(rng, kh, kw)
    x = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), kh + int(rng.integers(0, 5)), kw + int(rng.integers(0, 5)))
    return (int(rng.integers(0, 2)), kh, kw, sh, sw, ph, pw, int(rng.integers(0, 4))), [x]


def _concat(rng: np.random.Generator) -> Sample:
    a = _dims(rng, int(rng.integers(1, 5)))
    axis = int(rng.integers(0, len(a)))
    b = list(a)
    b[axis] = int(rng.integers(1, 6))
    return (axis,), [tuple(a), tuple(b)]


def _slice(rng: np.random.Generator) -> Sample:
    x = _dims(rng, int(rng.integers(1, 5)), 6)
    axis = int(rng.integers(0, len(x)))
    start = int(rng.integers(0, x[axis]))
    return (axis, start, int(rng.integers(start + 1, x[axis] + 1))), [tuple(x)]


def _transpose(rng: np.random.Generator) -> Sample:
    x = _dims(rng, int(rng.integers(2, 5)))
    return tuple(int(p) for p in rng.permutation(len(x))), [tuple(x)]


def _reshape(rng: np.random.Generator) -> Sample:
    x = _dims(rng, int(rng.integers(1, 5)))
    rest, target = int(np.prod(x)), []
    for _ in range(int(rng.integers(0, 4))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        target.append(int(rng.choice(divisors)))
        rest //= target[-1]
    return tuple(target + [rest]), [tuple(x)]


def _merge(rng: np.random.Generator) -> Sample:
    count, per_count, per_group = (int(v) for v in rng.integers(1, 4, size=3))
    groups = count * per_count
    return (groups, count), [(groups * per_group, *_dims(rng, 3, 3))]


def _enlarge(rng: np.random.Generator) -> Sample:
    kh, kw = _dims(rng, 2, 3)
    grow = [2 * int(v) for v in rng.integers(0, 3, size=2)]
    return (), [(*_dims(rng, 2, 3), kh, kw), (*_dims(rng, 2, 3), kh + grow[0], kw + grow[1])]


def _params(count: int) -> Callable[[np.random.Generator], Sample]:
    def sample(rng: np.random.Generator) -> Sample:
        return (int(rng.integers(1, 10 ** 6)),), [(int(rng.integers(1, 6)),)] * count
    return sample


def _batchnorm(rng: np.random.Generator) -> Sample:
    x = tuple(_dims(rng, 4))
    return (int(rng.integers(1, 10 ** 6)),), [x] + [(x[1],)] * 4


def _gelu(rng: np.random.Generator) -> Sample:
    return (int(rng.integers(0, 2)),), _elementwise(rng)[1]


def _softmax(rng: np.random.Generator) -> Sample:
    x = _dims(rng, int(rng.integers(1, 5)))
    return (int(rng.integers(0, len(x))),), [tuple(x)]


def _norm(n_params: int) -> Callable[[np.random.Generator], Sample]:
    """layernorm (x, gamma, beta) / rmsnorm (x, gamma) over the last axis; eps as its float32 bits."""
    def sample(rng: np.random.Generator) -> Sample:
        x = tuple(_dims(rng, int(rng.integers(1, 5))))
        eps = float(rng.choice([1e-5, 1e-6, 1e-12, 0.25]))
        return (float_bits(eps),), [x] + [(x[-1],)] * n_params
    return sample


def _addnorm(rng: np.random.Generator) -> Sample:
    """a + b of one shape, or one broadcast along some axes (either side; the last one too), then layernorm's
    gamma and beta over the last axis."""
    attrs, (x, gamma, beta) = _norm(2)(rng)
    y = tuple(1 if rng.random() < 0.3 else d for d in x)
    return attrs, [x, y, gamma, beta] if rng.random() < 0.5 else [y, x, gamma, beta]


def _scale(rng: np.random.Generator) -> Sample:
    """x times a positive finite float32 (as its bits): powers of two, attention's 1/sqrt(d), tiny and huge."""
    c = float(rng.choice([0.125, 0.35355338, 1.0, 3.0, 1e-30, 1e30]))
    return (float_bits(c),), _elementwise(rng)[1]


def _linear(rng: np.random.Generator) -> Sample:
    x = tuple(_dims(rng, int(rng.integers(1, 5))))
    n = int(rng.integers(1, 6))
    return (), [x, (x[-1], n), (n,)]


def _attention(rng: np.random.Generator) -> Sample:
    """q [..., S, D], kt [..., D, Sk], v [..., Sk, Dv] of rank 3 or 4; half the draws with a broadcast mask."""
    lead = tuple(_dims(rng, int(rng.integers(1, 3)), 3))
    s, d, sk, dv = _dims(rng, 4)
    shapes = [lead + (s, d), lead + (d, sk), lead + (sk, dv)]
    if rng.random() < 0.5:
        shapes.append(tuple(1 if rng.random() < 0.4 else n for n in lead + (s, sk)))
    return (float_bits(float(rng.choice([0.125, 0.35355338, 1.0, 2.0]))),), shapes


def _causal(rng: np.random.Generator) -> Sample:
    """q [..., S, D], kt [..., D, S], v [..., S, Dv] of rank 3 or 4: as many keys as queries."""
    lead = tuple(_dims(rng, int(rng.integers(1, 3)), 3))
    s, d, dv = _dims(rng, 3)
    return (float_bits(float(rng.choice([0.125, 0.35355338, 1.0, 2.0]))),), [lead + (s, d), lead + (d, s), lead + (s, dv)]


def _rotary(kernel: bool) -> Callable[[np.random.Generator], Sample]:
    """x [..., S, D] with D even (rank 4 for the kernel, 3 or 4 else), cos and sin of one shape, each dimension
    1 or x's (the heads' 1 for the kernel), the last D."""
    def sample(rng: np.random.Generator) -> Sample:
        rank = 4 if kernel else int(rng.integers(3, 5))
        x = tuple(_dims(rng, rank - 1)) + (2 * int(rng.integers(1, 4)),)
        table = tuple(1 if (kernel and k == 1) or rng.random() < 0.4 else d for k, d in enumerate(x[:-1])) + (x[-1],)
        return (), [x, table, table]
    return sample


SAMPLERS: dict[str, Callable[[np.random.Generator], Sample]] = {
    "ewadd": _broadcast, "ewmul": _broadcast, "relu": _elementwise, "tanh": _elementwise,
    "sigmoid": _elementwise, "dropout": _elementwise, "matmul": _matmul, "conv2d": _conv2d, "pool": _pool,
    "concat": _concat, "slice": _slice, "transpose": _transpose, "reshape": _reshape, "merge": _merge,
    "enlarge": _enlarge, "batchnorm": _batchnorm, "bn_scale": _params(2), "bn_shift": _params(4),
    "gelu": _gelu, "layernorm": _norm(2), "softmax": _softmax, "silu": _elementwise, "rmsnorm": _norm(1),
    "linear": _linear, "attention": _attention, "scale": _scale, "ewsum": _broadcast, "addnorm": _addnorm,
    "sdpa": _attention, "rotary": _rotary(False), "rope": _rotary(True), "sdpa_causal": _causal,
}
WITHOUT_SEMANTICS = {"input", "weight", "noop", "opaque"}
"""leaves (values from outside), noop (never computed) and opaque (carried, never evaluated)"""
FIELD_OPS = {"ewadd", "ewsum", "ewmul", "dropout", "matmul", "conv2d", "concat", "slice", "transpose", "reshape", "merge",
             "enlarge", "linear"}
"""multi-linear (or layout) operators, defined over a prime field without a non-linear activation"""
COMPUTED = sorted(SAMPLERS)


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
