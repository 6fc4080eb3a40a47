"""GELU however it is written: the recognizer reads the activation's argument as a polynomial in x
(eqsat.ops.composite.polynomial), so BLOOM's factored ``0.79788456 * x * (1 + 0.044715 * x * x)``, a cube written as
``x * x * x`` and GPT-2's ``Pow(x, 3)`` are one tanh-GELU, and the erf argument may be a Div by sqrt 2 or a Mul by
its inverse on either side. Oracles: onnxruntime on the original graph (the imported program, written back, computes
the same), and numpy for the polynomial (its coefficients evaluated at random points against onnxruntime's values of
the argument's graph). Near misses (a wrong coefficient, a square for a cube, another x in the tail) are not
matched and still import node by node."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from eqsat.onnx.export import export_model
from eqsat.onnx.importer import import_model
from eqsat.onnx.patterns import find_composites
from eqsat.ops.composite import polynomial
from eqsat.ops.matching import View
from eqsat.verification import verify

N = helper.make_node
S = math.sqrt(2 / math.pi)
BLOOM_S = 0.79788456  # how BLOOM writes sqrt(2/pi)


def _model(nodes, consts, outputs=("y",)):
    inits = [numpy_helper.from_array(np.array(v, dtype=np.float32), k) for k, v in consts.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (2, 8))],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, (2, 8)) for o in outputs],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _tail(t):  # 0.5 * x * (1 + act), as BLOOM writes it: (x * 0.5) * (1 + act)
    return [N("Add", [t, "one"], ["t1"]), N("Mul", ["x", "half"], ["h"]), N("Mul", ["h", "t1"], ["y"])]


C = {"one": 1.0, "half": 0.5}
SPELLINGS = {  # name: (nodes, constants, approx or None for no match)
    "tanh_bloom_factored": ([N("Mul", ["x", "s"], ["a"]), N("Mul", ["x", "k"], ["b"]), N("Mul", ["b", "x"], ["c"]),
                             N("Add", ["one", "c"], ["d"]), N("Mul", ["a", "d"], ["e"]), N("Tanh", ["e"], ["t"]),
                             *_tail("t")], {**C, "s": BLOOM_S, "k": 0.044715}, 1),
    "tanh_cube_as_products": ([N("Mul", ["x", "x"], ["x2"]), N("Mul", ["x2", "x"], ["x3"]), N("Mul", ["k", "x3"], ["c"]),
                               N("Add", ["c", "x"], ["d"]), N("Mul", ["s", "d"], ["e"]), N("Tanh", ["e"], ["t"]),
                               *_tail("t")], {**C, "s": S, "k": 0.044715}, 1),
    "tanh_scale_distributed": ([N("Mul", ["x", "s"], ["a"]), N("Pow", ["x", "three"], ["x3"]),
                                N("Mul", ["x3", "sk"], ["c"]), N("Add", ["a", "c"], ["e"]), N("Tanh", ["e"], ["t"]),
                                *_tail("t")], {**C, "s": S, "sk": S * 0.044715, "three": 3.0}, 1),
    "erf_div_by_sqrt2": ([N("Div", ["x", "r2"], ["d"]), N("Erf", ["d"], ["e"]), *_tail("e")],
                         {**C, "r2": math.sqrt(2.0)}, 0),
    "erf_inverse_first": ([N("Mul", ["ir2", "x"], ["d"]), N("Erf", ["d"], ["e"]), *_tail("e")],
                          {**C, "ir2": math.sqrt(0.5)}, 0),
    "tanh_wrong_cubic_coefficient": ([N("Mul", ["x", "s"], ["a"]), N("Mul", ["x", "k"], ["b"]),
                                      N("Mul", ["b", "x"], ["c"]), N("Add", ["one", "c"], ["d"]),
                                      N("Mul", ["a", "d"], ["e"]), N("Tanh", ["e"], ["t"]), *_tail("t")],
                                     {**C, "s": BLOOM_S, "k": 0.04}, None),
    "tanh_square_for_cube": ([N("Mul", ["x", "s"], ["a"]), N("Mul", ["k", "s"], ["ks"]), N("Mul", ["x", "ks"], ["b"]),
                              N("Add", ["a", "b"], ["e"]), N("Tanh", ["e"], ["t"]), *_tail("t")],
                             {**C, "s": S, "k": 0.044715}, None),
    "erf_of_another_value": ([N("Relu", ["x"], ["r"]), N("Div", ["r", "r2"], ["d"]), N("Erf", ["d"], ["e"]),
                              *_tail("e")], {**C, "r2": math.sqrt(2.0)}, None),
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_gelu_spelling_is_recognized_or_left_and_computes_what_onnxruntime_computes(name):
    nodes, consts, approx = SPELLINGS[name]
    model = _model(nodes, consts)
    found = find_composites(model.graph, {k: np.array(v, dtype=np.float32) for k, v in consts.items()})
    graph = import_model(model)
    if approx is None:
        assert [m for m in found if m.op == "gelu"] == []
        assert "gelu" not in graph.op_counts()
    else:
        (match,) = found
        assert (match.op, match.attrs, match.output, len(match.nodes)) == ("gelu", (approx,), "y", len(nodes))
        (y,) = graph.outputs
        assert y.op == "gelu" and y.inputs[0].op == "input"
    check = verify(model, export_model(dataclasses.replace(graph, origins=())), seed=5)
    assert check.passed, check.detail


def _random_expression(rng, size):
    """A random graph of Mul/Add/Sub/Div-by-constant/Pow/Neg over x and scalar constants, of ``size`` nodes: its
    nodes, constants and output name."""
    values, nodes, consts = ["x"], [], {}
    for k in range(size):
        op = rng.choice(["Mul", "Add", "Sub", "Div", "Pow", "Neg"])
        a = values[rng.integers(len(values))]
        out = f"v{k}"
        if op == "Neg":
            nodes.append(N("Neg", [a], [out]))
        elif op in ("Div", "Pow"):
            c = f"c{k}"
            consts[c] = float(rng.integers(1, 3)) if op == "Pow" else float(rng.uniform(0.5, 2.0))
            nodes.append(N(op, [a, c], [out]))
        else:
            if rng.random() < 0.4:
                b = f"c{k}"
                consts[b] = float(rng.uniform(-2, 2))
            else:
                b = values[rng.integers(len(values))]
            nodes.append(N(op, [a, b] if rng.random() < 0.5 else [b, a], [out]))
        values.append(out)
    return nodes, consts, values[-1]


@pytest.mark.parametrize("seed", range(12))
def test_polynomial_of_a_random_expression_matches_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    nodes, consts, out = _random_expression(rng, int(rng.integers(2, 7)))
    model = _model(nodes + [N("Identity", [out], ["y"])], consts)
    view = View(model.graph, {k: np.array(v, dtype=np.float32) for k, v in consts.items()}, 17, lambda n: [])
    covered: list = []
    poly = polynomial(view, out, "x", covered)
    xs = rng.uniform(-1.5, 1.5, (2, 8)).astype(np.float32)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xs})[0]
    if poly is None:  # only past the degree cap: a Pow or products that go past x^5
        assert any(n.op_type in ("Mul", "Pow") for n in nodes)
        return
    want = sum(c * xs.astype(np.float64) ** p for p, c in poly.items())
    np.testing.assert_allclose(got, np.broadcast_to(want, got.shape), rtol=1e-4, atol=1e-4)
    assert len({id(n) for n in covered}) == len(covered)
    assert {n.output[0] for n in covered} <= {n.output[0] for n in nodes}
