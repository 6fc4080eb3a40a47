"""Random valid draws of every computed operator of the table (eqsat.ops): a sampler per operator gives random
attributes and operand shapes the shape function accepts. Used by tests/core/test_ops.py (the table's checks) and
tests/core/test_symbolic_dims.py (the same draws, symbolized).

Adding an operator means adding a sampler to SAMPLERS.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eqsat.ops import SAME, Shape
from eqsat.ops.composite import float_bits

Sample = tuple[tuple, list[Shape]]
"""(attributes, operand shapes) of one draw"""


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


def _rotary_part(kernel: bool) -> Callable[[np.random.Generator], Sample]:
    """x [..., S, D] with D even (rank 4 for the kernel, 3 or 4 else), r even and at most D, cos and sin of one
    shape, each dimension 1 or x's (for the kernel, 1 at the heads' axis, 1 or 2), the last r."""
    def sample(rng: np.random.Generator) -> Sample:
        rank = 4 if kernel else int(rng.integers(3, 5))
        x = tuple(_dims(rng, rank - 1)) + (2 * int(rng.integers(1, 5)),)
        r = 2 * int(rng.integers(1, x[-1] // 2 + 1))
        heads = int(rng.integers(1, 3))
        table = tuple(1 if (kernel and k == heads) or rng.random() < 0.4 else d for k, d in enumerate(x[:-1])) + (r,)
        return (r, int(rng.integers(0, 2))), [x, table, table]
    return sample


def _grouped(sample: Callable[[np.random.Generator], Sample]) -> Callable[[np.random.Generator], Sample]:
    """The kernels' draws, half of those of rank 4 grouped: q with r times the heads of kt and v (r 2 or 3), the
    mask's heads 1 or q's."""
    def draw(rng: np.random.Generator) -> Sample:
        attrs, shapes = sample(rng)
        if len(shapes[0]) != 4 or rng.random() < 0.5:
            return attrs, shapes
        r = int(rng.integers(2, 4))
        q = (shapes[0][0], shapes[0][1] * r, *shapes[0][2:])
        mask = [(m[0], 1 if m[1] == 1 else q[1], *m[2:]) for m in shapes[3:]]
        return attrs, [q, shapes[1], shapes[2], *mask]
    return draw


def _repeat_heads(rng: np.random.Generator) -> Sample:
    """x [B, H, S, D], repeated 2 or 3 times."""
    return (int(rng.integers(2, 4)),), [tuple(_dims(rng, 4))]


SAMPLERS: dict[str, Callable[[np.random.Generator], Sample]] = {
    "ewadd": _broadcast, "ewmul": _broadcast, "relu": _elementwise, "tanh": _elementwise,
    "sigmoid": _elementwise, "dropout": _elementwise, "matmul": _matmul, "conv2d": _conv2d, "pool": _pool,
    "concat": _concat, "slice": _slice, "transpose": _transpose, "reshape": _reshape, "merge": _merge,
    "enlarge": _enlarge, "batchnorm": _batchnorm, "bn_scale": _params(2), "bn_shift": _params(4),
    "gelu": _gelu, "layernorm": _norm(2), "softmax": _softmax, "silu": _elementwise, "rmsnorm": _norm(1),
    "linear": _linear, "attention": _attention, "scale": _scale, "ewsum": _broadcast, "addnorm": _addnorm,
    "sdpa": _grouped(_attention), "rotary": _rotary(False), "rope": _rotary(True), "sdpa_causal": _grouped(_causal),
    "repeat_heads": _repeat_heads, "rotary_part": _rotary_part(False), "rope_part": _rotary_part(True),
    "attention_nz": _attention, "sdpa_nz": _grouped(_attention),
}
COMPUTED = sorted(SAMPLERS)
"""the operators with semantics, sorted: each has a sampler"""
