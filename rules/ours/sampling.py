"""Random draws for the instance generators of our rules (the verifier's instances).

Every generator is ``fn(rng) -> list of IR roots``: one random, well-shaped instance, on which the rule
may or may not fire (near misses are drawn on purpose: a missing condition shows up as a firing on one).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eqsat import ir
from eqsat.errors import ShapeError


def dim(rng: np.random.Generator, lo: int = 1, hi: int = 7) -> int:
    """A dimension in [lo, hi] (sizes above 4 included)."""
    return int(rng.integers(lo, hi + 1))


def pick(rng: np.random.Generator, options):
    return options[int(rng.integers(len(options)))]


def factorize(rng: np.random.Generator, total: int, rank: int) -> tuple[int, ...]:
    """A random shape of ``rank`` dimensions whose product is ``total``."""
    dims = [1] * rank
    rest = total
    for i in range(rank - 1):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        dims[i] = pick(rng, divisors)
        rest //= dims[i]
    dims[-1] = rest
    order = rng.permutation(rank)
    return tuple(int(dims[k]) for k in order)


def broadcastable(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with some dimensions set to 1 (a bias that broadcasts up to ``shape``)."""
    return tuple(1 if rng.random() < 0.4 else d for d in shape)


def conv_attrs(rng: np.random.Generator, act_choices=(0, 0, 1, 2, 3)) -> tuple[int, int, int, int, int]:
    """(sh, sw, ph, pw, act): strides 1-3, SAME (-1) or explicit padding 0-2."""
    pad = -1 if rng.random() < 0.4 else dim(rng, 0, 2)
    return (dim(rng, 1, 3), dim(rng, 1, 3), pad, pad if rng.random() < 0.8 else dim(rng, 0, 2), pick(rng, act_choices))


def conv_weight_shape(rng: np.random.Generator, channels: int, attrs: tuple, groups: int | None = None,
                      kernel: tuple[int, ...] | None = None) -> tuple[int, int, int, int]:
    """A weight for ``channels`` input channels: ungrouped, grouped or depthwise (``groups`` None: drawn),
    kernels 1-5 (odd under SAME padding)."""
    if groups is None or channels % groups:
        divisors = [g for g in range(2, channels + 1) if channels % g == 0]
        groups = pick(rng, divisors) if divisors and rng.random() < 0.4 else 1
    odd = (1, 3, 5)
    if kernel is None:
        kernel = (pick(rng, odd) if attrs[2] == -1 else dim(rng, 1, 4), pick(rng, odd) if attrs[3] == -1 else dim(rng, 1, 4))
    return (groups * dim(rng, 1, 3), channels // groups, int(kernel[0]), int(kernel[1]))


def retry(rng: np.random.Generator, build: Callable[[np.random.Generator], list[ir.Node]], tries: int = 100) -> list[ir.Node]:
    """``build(rng)`` until it draws a well-shaped instance (a ShapeError means: draw again)."""
    for _ in range(tries):
        try:
            return build(rng)
        except ShapeError:
            continue
    raise RuntimeError(f"{getattr(build, '__name__', build)} drew no well-shaped instance in {tries} tries; "
                       "widen its ranges")
