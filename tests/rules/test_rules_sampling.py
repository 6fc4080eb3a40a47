"""The random draws of our rules' instance generators (rules/ours/sampling.py; no rules of its own): dimensions in
their range, shapes of a given volume, biases that broadcast, convolution weights that a convolution takes (checked
by numpy's broadcasting and by onnxruntime running the drawn convolution), and the retry of ill-shaped draws."""

from __future__ import annotations

import numpy as np
import pytest
from rule_cases import graph_of, ort_run

from eqsat import ir, ops
from eqsat.errors import ShapeError
from eqsat.rules.ours.sampling import broadcastable, conv_attrs, conv_weight_shape, dim, factorize, retry


def test_dim_draws_its_whole_closed_range():
    rng = np.random.default_rng(0)
    assert {dim(rng, 2, 5) for _ in range(200)} == {2, 3, 4, 5}


def test_factorize_keeps_the_volume():
    rng = np.random.default_rng(1)
    for _ in range(100):
        total, rank = int(rng.integers(1, 97)), int(rng.integers(1, 6))
        shape = factorize(rng, total, rank)
        assert len(shape) == rank and int(np.prod(shape)) == total and min(shape) >= 1


def test_broadcastable_broadcasts_up_to_the_shape():
    rng = np.random.default_rng(2)
    for _ in range(100):
        shape = tuple(dim(rng) for _ in range(dim(rng, 1, 4)))
        bias = broadcastable(rng, shape)
        assert np.broadcast_shapes(shape, bias) == shape and len(bias) == len(shape)


def test_conv_weights_fit_a_conv_that_onnxruntime_runs():
    """Drawn attributes and weights: eqsat's shape of the conv is the one onnxruntime computes."""
    rng = np.random.default_rng(3)
    seen_groups, ran = set(), 0
    for k in range(25):
        attrs = conv_attrs(rng)
        channels = dim(rng, 1, 6)
        w = conv_weight_shape(rng, channels, attrs)
        seen_groups.add(channels // w[1] > 1)
        x = ir.input_("x", (1, channels, dim(rng, w[2], 9), dim(rng, w[3], 9)))
        try:
            conv = ir.make("conv2d", [x, ir.weight("w", w)], attrs)
        except ShapeError:
            continue  # strides and padding that leave no output: the generators draw again
        y = ort_run(graph_of(conv, seed=k), {"x": np.ones(x.shape, np.float32)})
        assert y.shape == conv.shape == ops.infer_shape("conv2d", attrs, [x.shape, w])
        ran += 1
    assert seen_groups == {False, True} and ran >= 15, ran


def test_retry_draws_again_after_a_shape_error_and_gives_up_naming_the_builder():
    calls = []

    def flaky(rng):
        calls.append(1)
        if len(calls) < 3:
            raise ShapeError("ill-shaped")
        return [ir.input_("x", (2,))]

    assert [n.shape for n in retry(np.random.default_rng(0), flaky)] == [(2,)] and len(calls) == 3

    def never(rng):
        raise ShapeError("ill-shaped")

    with pytest.raises(RuntimeError, match="never drew no well-shaped instance in 5 tries"):
        retry(np.random.default_rng(0), never, tries=5)
