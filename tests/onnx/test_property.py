"""Property test: random small ONNX graphs of the supported operators round-trip, verify and keep their interface.

Graphs are drawn by hypothesis (derandomized, so every run draws the same ones): a chain of 1-5 operators
(MatMul, Add, Mul, Relu, Conv, Transpose, Reshape, Concat) on one input of random rank and shape, in
float32 and, for the operators onnxruntime's CPU provider runs in them, float64 and float16, at opsets
13-18. Each goes through ``optimize`` with no search and with a short TENSAT search; the result is run
in onnxruntime beside the original (our own comparison, on seeded inputs) and its interface is compared
with the original's. Not drawn here (another suite's subject): outputs that are graph inputs, graphs
without nodes, initializers listed as inputs, subgraphs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_builders as ob
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.onnx.io import session

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
# operators whose onnxruntime CPU kernels exist for each dtype
OPS = {"float32": ["MatMul", "Add", "Mul", "Relu", "Conv", "Transpose", "Reshape", "Concat"],
       "float64": ["MatMul", "Add", "Mul", "Relu", "Transpose", "Reshape", "Concat"],
       "float16": ["Add", "Mul", "Transpose", "Reshape", "Concat"]}
TOLERANCE = {"float32": (1e-4, 1e-5), "float64": (1e-10, 1e-12), "float16": (2e-2, 2e-2)}

NO_SEARCH = OptimizeConfig(scheduler="none", cost="analytic", measure=False)
SHORT_SEARCH = OptimizeConfig.of(scheduler="tensat", cost="analytic", measure=False, node_limit=300, k_multi=1,
                                 time_limit=1.5, ilp_time_limit=2.0)


@st.composite
def graphs(draw) -> onnx.ModelProto:
    dtype = draw(st.sampled_from(["float32", "float32", "float64", "float16"]))
    np_dtype = DTYPES[dtype]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))
    opset = draw(st.integers(13, 18))
    rank = draw(st.sampled_from([2, 3, 4, 4]))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    nodes, inits = [], []
    values = [("x", shape)]  # (name, shape) of every value so far

    def weight(shape_: tuple[int, ...]) -> str:
        name = f"w{len(inits)}"
        inits.append(numpy_helper.from_array((rng.standard_normal(shape_) * 0.5).astype(np_dtype), name))
        return name

    for k in range(draw(st.integers(1, 5))):
        src, s = values[-1] if draw(st.booleans()) else draw(st.sampled_from(values))
        out = f"v{k}"
        op = draw(st.sampled_from(OPS[dtype] + (["Conv"] if dtype == "float32" and len(s) == 4 else [])))
        if op == "Conv" and len(s) != 4:
            op = "Relu"
        if op == "Relu":
            nodes.append(helper.make_node("Relu", [src], [out]))
            new = s
        elif op in ("Add", "Mul"):
            same = [name for name, vs in values if vs == s and name != src]
            if same and draw(st.booleans()):
                other = draw(st.sampled_from(same))
            else:
                other = weight(s[draw(st.integers(0, len(s) - 1)):])  # a trailing-dims (broadcast) operand
            a, b = (src, other) if draw(st.booleans()) else (other, src)
            nodes.append(helper.make_node(op, [a, b], [out]))
            new = s
        elif op == "MatMul":
            n = draw(st.integers(1, 6))
            nodes.append(helper.make_node("MatMul", [src, weight((s[-1], n))], [out]))
            new = s[:-1] + (n,)
        elif op == "Conv":
            kernel = draw(st.sampled_from([1, 3]))
            cout = draw(st.integers(1, 4))
            bias = [weight((cout,))] if draw(st.booleans()) else []
            nodes.append(helper.make_node("Conv", [src, weight((cout, s[1], kernel, kernel))] + bias, [out],
                                          kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4))
            new = (s[0], cout, s[2], s[3])
        elif op == "Transpose":
            perm = draw(st.permutations(range(len(s))))
            nodes.append(helper.make_node("Transpose", [src], [out], perm=list(perm)))
            new = tuple(s[p] for p in perm)
        elif op == "Reshape":
            cut = draw(st.integers(1, len(s) - 1))
            new = (int(np.prod(s[:cut])), int(np.prod(s[cut:])))
            target = numpy_helper.from_array(np.array([new[0], -1], dtype=np.int64), f"shape{k}")
            inits.append(target)
            nodes.append(helper.make_node("Reshape", [src, target.name], [out]))
        else:  # Concat
            axis = draw(st.integers(0, len(s) - 1))
            same = [name for name, vs in values if vs == s]
            other = draw(st.sampled_from(same)) if draw(st.booleans()) else weight(s)
            nodes.append(helper.make_node("Concat", [src, other], [out], axis=axis - len(s) * draw(st.integers(0, 1))))
            new = tuple(d * 2 if i == axis else d for i, d in enumerate(s))
        values.append((out, new))
    produced = values[1:]
    outputs = [produced[-1]]
    if len(produced) > 1 and draw(st.booleans()):  # a second output: an intermediate value
        outputs.insert(draw(st.integers(0, 1)), draw(st.sampled_from(produced[:-1])))
    return ob.model(nodes, [helper.make_tensor_value_info("x", elem, shape)],
                    [helper.make_tensor_value_info(n, elem, s) for n, s in outputs], inits, opset=opset)


def _interface(model: onnx.ModelProto) -> tuple:
    def spec(vi):
        tt = vi.type.tensor_type
        return vi.name, tt.elem_type, tuple(d.dim_value or d.dim_param for d in tt.shape.dim)
    inits = {t.name for t in model.graph.initializer}
    return ([spec(vi) for vi in model.graph.input if vi.name not in inits], [spec(vi) for vi in model.graph.output])


def _check(model: onnx.ModelProto, config: OptimizeConfig) -> None:
    result = optimize(model, config)
    optimized = result.optimized
    onnx.checker.check_model(optimized, full_check=True)
    assert _interface(optimized) == _interface(model)
    (x,) = model.graph.input
    dtype = helper.tensor_dtype_to_np_dtype(x.type.tensor_type.elem_type)
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    rtol, atol = TOLERANCE[np.dtype(dtype).name]
    ref_sess, got_sess = session(model), session(optimized)
    for seed in (1, 2):
        feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(dtype)}
        ref, got = ref_sess.run(None, feeds), got_sess.run(None, feeds)
        for vo, a, b in zip(model.graph.output, ref, got):
            assert a.dtype == b.dtype and a.shape == b.shape, vo.name
            scale = max(float(np.max(np.abs(a.astype(np.float64)))), 1.0)
            np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64), rtol=rtol, atol=atol * scale,
                                       err_msg=f"output {vo.name}")


SETTINGS = dict(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=30, **SETTINGS)
@given(graphs())
def test_random_graphs_round_trip_without_search(model):
    _check(model, NO_SEARCH)


@settings(max_examples=8, **SETTINGS)
@given(graphs())
def test_random_graphs_survive_a_short_search(model):
    _check(model, SHORT_SEARCH)
