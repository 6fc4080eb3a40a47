"""A size the exporter computes from the input's shape by arithmetic that no monomial of the interface's symbols
fits (a Conv of stride 2 and padding 1: ``(h - 1) // 2 + 1``, ``ceil(h/2)``; its tokens, the product of two such
sides) read as the typed opaque symbols of the Conv's output (eqsat.generic.products): SwiftFormer's dynamo export,
whose every candidate failed at a batch of 2 (a Reshape target left at the sizes tuned at) and came back as the
input. The oracle: onnxruntime's runs of the original at every side from 1 to 40."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat import optimize
from eqsat.app.config import OptimizeConfig
from eqsat.onnx.io import session


def strided_tokens() -> onnx.ModelProto:
    """SwiftFormer's dynamo export in small: a Conv of stride 2 and padding 1 (sides ceil(h/2)), its tokens
    counted by the exporter's arithmetic on the input's Shape ((h - 1) // 2 + 1), flattened, projected, normalized
    by an L2 norm expanded to the tokens' shape, and reshaped back to the sides."""
    rng = np.random.default_rng(0)
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "k"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "proj"),
             i64("zero", 0), i64("two", 2), i64("three", 3), i64("one", 1), i64("axes0", [0]), i64("eight", [8]),
             i64("last", [-1])]
    n = helper.make_node
    nodes = [n("Conv", ["x", "k"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             n("Shape", ["x"], ["xs"]),
             n("Gather", ["xs", "zero"], ["b"], axis=0),
             n("Gather", ["xs", "two"], ["h"], axis=0), n("Gather", ["xs", "three"], ["w"], axis=0),
             n("Sub", ["h", "one"], ["h1"]), n("Div", ["h1", "two"], ["h2"]), n("Add", ["h2", "one"], ["hh"]),
             n("Sub", ["w", "one"], ["w1"]), n("Div", ["w1", "two"], ["w2"]), n("Add", ["w2", "one"], ["ww"]),
             n("Mul", ["hh", "ww"], ["p"]),
             n("Unsqueeze", ["b", "axes0"], ["bu"]), n("Unsqueeze", ["p", "axes0"], ["pu"]),
             n("Unsqueeze", ["hh", "axes0"], ["hu"]), n("Unsqueeze", ["ww", "axes0"], ["wu"]),
             n("Concat", ["bu", "pu", "eight"], ["rows"], axis=0),
             n("Concat", ["bu", "hu", "wu", "eight"], ["sides"], axis=0),
             n("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             n("Reshape", ["t", "rows"], ["r"]),
             n("MatMul", ["r", "proj"], ["m"]),
             n("ReduceL2", ["m", "last"], ["l2"], keepdims=1),
             n("Expand", ["l2", "rows"], ["e"]),
             n("Div", ["m", "e"], ["d"]),
             n("Reshape", ["d", "sides"], ["y"])]
    graph = helper.make_graph(nodes, "strided_tokens",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             ["batch", "((height - 1)//2) + 1", "((width - 1)//2) + 1", 8])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_tokens_of_a_strided_conv_counted_by_the_exporter_are_written_for_every_size():
    model = strided_tokens()
    result = optimize(model, OptimizeConfig.of(budget=4, cost="analytic", measure=False))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    assert {"batch=2", "height=37", "width=37"} <= set(result.report.interface.verified_at)
    want, got = session(model), session(result.optimized)
    rng = np.random.default_rng(1)
    sides = [(h, 23) for h in range(1, 41)] + [(17, w) for w in range(1, 41)] + [(225, 190)]
    for k, (h, w) in enumerate(sides):
        x = rng.standard_normal((1 + k % 3, 3, h, w)).astype(np.float32)
        a, b = want.run(None, {"x": x})[0], got.run(None, {"x": x})[0]
        assert a.shape == b.shape, (h, w)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=f"at h={h}, w={w}")


def _rewrite():
    from eqsat.generic.state import Forms, Rewrite

    model = strided_tokens()
    w = Rewrite(model, model, {"batch": 1, "height": 224, "width": 224}, Forms.EXPORT)
    w.fits.formulas = {"c@2": lambda at: (at["height"] - 1) // 2 + 1, "c@3": lambda at: (at["width"] - 1) // 2 + 1}
    w.fits.opaque = {"c@2": 112, "c@3": 112}
    return w


def test_a_product_is_read_only_where_one_of_the_fewest_factors_and_a_whole_constant_is_every_run():
    """The reading itself, over runs at sizes a fit makes (the sides alone halved and doubled): the tokens, 8 times
    them, a batch's rows of them; none where a fraction of a side fits (a second Conv of stride 2 halves a side it
    rounds: every run here at an even side, where it divides), nor where the sides change together in every run
    (which of the two a size is, the runs cannot tell), nor where two readings of as many factors are every run's."""
    from eqsat.generic.products import product_fit

    w = _rewrite()
    sides = [{"batch": 1, "height": h, "width": v} for h, v in ((224, 224), (112, 224), (448, 224), (37, 224),
                                                                 (224, 112), (224, 448), (224, 37))]
    sides.append({"batch": 2, "height": 224, "width": 224})
    side = lambda at, s: (at[s] - 1) // 2 + 1  # noqa: E731 - the Conv's arithmetic, the oracle
    tokens = [(at, side(at, "height") * side(at, "width")) for at in sides]
    assert product_fit(w, tokens).key() == "c@2*c@3"
    assert product_fit(w, [(at, 8 * n) for at, n in tokens]).key() == "8*c@2*c@3"
    assert product_fit(w, [(at, at["batch"] * n) for at, n in tokens]).key() == "batch*c@2*c@3"
    assert product_fit(w, [(at, side(at, "height") // 2) for at in sides[:3]]) is None  # 1/2*c@2 at even sides only
    even = [at for at in sides if at["height"] % 2 == 0]  # 8*c@2*c@3, and 4*height*c@3 where the height is even
    assert product_fit(w, [(at, 8 * side(at, "height") * side(at, "width")) for at in even]) is None
    square = [{"batch": 1, "height": s, "width": s} for s in (224, 112, 448, 64)]
    assert product_fit(w, [(at, side(at, "height")) for at in square]) is None  # c@2 or c@3


def test_a_factor_of_one_size_in_every_run_is_no_reading():
    """Rows of 112 per batch where every run is at a side of 224 (its Conv's output side, 112, in each): ``112 * batch``
    or ``c@2 * batch``, the runs cannot tell; no reading (the side of one size in every run says nothing of it)."""
    from eqsat.generic.products import product_fit

    w = _rewrite()
    runs = [({"batch": b, "height": 224, "width": v}, 112 * b) for b, v in ((1, 224), (2, 100), (3, 37), (4, 224))]
    assert product_fit(w, runs) is None
    varied = [({"batch": b, "height": h, "width": 224}, ((h - 1) // 2 + 1) * b) for b, h in ((1, 224), (2, 224),
                                                                                           (1, 37), (3, 100))]
    assert product_fit(w, varied).key() == "batch*c@2"
