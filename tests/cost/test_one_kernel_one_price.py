"""One kernel, one price (eqsat.cost.ort.OrtCost.op_cost): a dense layer and its parts (linear_split's form: the rows
flattened, a 2-D matmul, the bias added at the product's rank) are written to the same onnxruntime kernels, so the
measured cost model prices them alike, however far apart two timings of the kernel would read; and a matmul of an
N-D operand by a weight costs what its 2-D form costs (one GEMM of the flattened rows either way). Oracle for
"the same kernels": the exported ONNX of both forms, and the operators onnxruntime runs for each."""

from __future__ import annotations

import collections
import math

import pytest
from ort_graphs import ort_graph

from eqsat import ir
from eqsat.cost.base import OpKey, graph_cost, graph_ops
from eqsat.cost.cache import CostCache
from eqsat.cost.ort import OrtCost, linear_parts
from eqsat.onnx import export_model


@pytest.fixture
def quiet(monkeypatch):
    """Timings count as uncontended whatever the load."""
    import eqsat.cost.measure as measure

    monkeypatch.setattr(measure, "CONTENDED", math.inf)


def _graphs(lead=(1, 16), k=32, n=48):
    x = ir.input_("x", (*lead, k))
    w, b = ir.weight("w", (k, n)), ir.weight("b", (n,))
    dense = ir.Graph((x,), (ir.make("linear", [x, w, b]),), ("y",))
    rows = math.prod(lead)
    product = ir.make("reshape", [ir.make("matmul", [ir.make("reshape", [x], (rows, k)), w], (0,))], (*lead, n))
    parts = ir.make("ewadd", [product, ir.make("reshape", [b], (*(1,) * len(lead), n))])
    return dense, ir.Graph((x,), (parts,), ("y",))


def _kernels(graph: ir.Graph) -> collections.Counter:
    """What onnxruntime runs for the exported graph, its shape-only nodes left out."""
    import numpy as np

    weights = {"w": np.ones((32, 48), np.float32), "b": np.ones((48,), np.float32)}
    model = export_model(ir.Graph(graph.inputs, graph.outputs, graph.output_names, weights))
    return collections.Counter(op for op in ort_graph(model)["ops"] if op not in ("Reshape", "Constant"))


def test_a_dense_layer_and_its_parts_run_the_same_kernels_and_cost_the_same(tmp_path, quiet):
    dense, parts = _graphs()
    assert _kernels(dense) == _kernels(parts)
    cost = OrtCost(CostCache(str(tmp_path / "c.sqlite")), repeats=3)
    reshapes = sum(cost.op_cost(key) for node, key in graph_ops(parts, cost)
                   if node.op == "reshape" and key is not None)
    assert graph_cost(parts, cost) == pytest.approx(graph_cost(dense, cost) + reshapes, rel=1e-12)
    (key,) = [k for _, k in graph_ops(dense, cost) if k is not None and k.op == "linear"]
    assert {p.op for p in linear_parts(key)} == {"matmul", "ewadd"}


def test_an_nd_matmul_by_a_weight_costs_its_2d_form(tmp_path, quiet):
    cost = OrtCost(CostCache(str(tmp_path / "c.sqlite")), repeats=3)
    nd = OpKey("matmul", (0,), ((2, 8, 32), (32, 48)), (2, 8, 48))
    flat = OpKey("matmul", (0,), ((16, 32), (32, 48)), (16, 48))
    assert cost.op_cost(nd) == cost.op_cost(flat)
    assert cost.measured == 1  # timed once, for both
    batched = OpKey("matmul", (0,), ((2, 8, 32), (2, 32, 48)), (2, 8, 48))  # two activations: a batched product
    assert cost.op_cost(batched) > 0 and cost.measured == 2


@pytest.mark.parametrize("shape", [(16,), (3, 5, 7, 16)])
def test_only_dense_layers_of_rank_2_or_more_are_priced_as_parts(shape):
    key = OpKey("linear", (), (shape, (16, 8), (8,)), (*shape[:-1], 8))
    parts = linear_parts(key)
    if len(shape) < 2:
        assert parts == ()
    else:
        matmul, add = parts
        assert matmul.in_shapes == ((105, 16), (16, 8)) and add.in_shapes == ((3, 5, 7, 8), (1, 1, 1, 8))
    assert linear_parts(OpKey("matmul", (0,), ((4, 16), (16, 8)), (4, 8))) == ()
