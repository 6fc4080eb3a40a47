"""A mixture of experts' routed rows, ``2*batch*seq`` (each token's row once per chosen expert), flattened and given
axes of 1 (an Unsqueeze to ``[S, 1, 1]``, a Reshape to ``[-1, 1]``): at a representative batch of 1 the numbers
``[256, 1, 1]`` could be read with the batch on an axis of 1, which fails at a batch of 2. The import reads such
sizes from the node's own semantics (an Unsqueeze's axes, a Reshape's ``-1``), the decoder keeps the import's
reading for a reshape of the same sizes, and the exporter writes them so that no number has to be read back.
Oracles: onnxruntime's shapes of the original's values at other sizes, and the written model's outputs against
the original's at batches and lengths the run was not tuned at."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_builders as ob
import pytest
import torch_modules as tm
from onnx import TensorProto, helper, numpy_helper
from ort_check import assert_symbolic_shapes, outputs_match

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.dims import Dim, Mono
from eqsat.generic import import_generic
from eqsat.onnx import experts

F = TensorProto.FLOAT


def _router() -> onnx.ModelProto:
    """x [batch, seq, 8]: its rows' top-2 experts of 4 (``ids``, ``weights``), the ids flattened and unsqueezed to
    [2*batch*seq, 1, 1] (``u``), the weights reshaped to [-1, 1] (``r``); each cast and added to the weights so that
    they reach the output."""
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    ints = {"k": [2], "flat": [-1], "axes": [1, 2], "col": [-1, 1], "rows": [-1, 8]}
    nodes = [helper.make_node("Reshape", ["x", "rows"], ["xr"]),
             helper.make_node("MatMul", ["xr", "w"], ["logits"]),
             helper.make_node("TopK", ["logits", "k"], ["weights", "ids"]),
             helper.make_node("Reshape", ["ids", "flat"], ["ids_flat"]),
             helper.make_node("Unsqueeze", ["ids_flat", "axes"], ["u"]),
             helper.make_node("Reshape", ["weights", "col"], ["r"]),
             helper.make_node("Cast", ["u"], ["uf"], to=F),
             helper.make_node("Reshape", ["uf", "col"], ["uc"]),
             helper.make_node("Add", ["uc", "r"], ["y"])]
    inits = [numpy_helper.from_array(w, "w")] + [numpy_helper.from_array(np.array(v, np.int64), k)
                                                 for k, v in ints.items()]
    graph = helper.make_graph(nodes, "router", [helper.make_tensor_value_info("x", F, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _monos(shape) -> list[Mono]:
    return [d.mono if isinstance(d, Dim) else Mono.const(int(d)) for d in shape]


def test_the_import_reads_the_routed_rows_at_every_batch():
    model = _router()
    graph = import_generic(model, {"x": (1, 16, 8)})
    reshapes = [n for n in graph.nodes() if n.op == "reshape"]
    (unsqueezed,) = [n for n in reshapes if n.shape == (32, 1, 1)]
    columns = [n for n in reshapes if n.shape == (32, 1)]  # the weights' column and the ids' (both [2*b*s, 1])
    runs = [({"batch": b, "seq": s}, {"x": np.random.default_rng(b).standard_normal((b, s, 8)).astype(np.float32)})
            for b, s in ((1, 16), (3, 5), (2, 9))]
    assert len(columns) == 2
    for column in columns:
        assert_symbolic_shapes(model, {"u": _monos(unsqueezed.shape), "r": _monos(column.shape)}, runs)


@pytest.mark.parametrize("transposed,switch", [(False, None), (True, None), (False, 64)],
                         ids=["weights [E, out, in]", "weights [E, in, out]", "dense from 64 rows"])
def test_a_stack_of_dense_experts_is_written_for_every_batch(tmp_path, transposed, switch):
    """Four layers (repeated blocks: the search's program replayed on each copy), their routed products already
    dense (as the run writes them where timed faster; ``switch``: from 64 rows, the user's form below, behind an
    If): the written program runs at batches and lengths the run was not tuned at (before, a Reshape of the routed
    rows was written for a batch of 1, and an If's branch kept its output's size at the tuned rows, and the input
    came back)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = tm.ExpertsStack(layers=4, transposed=transposed).eval()
    path = str(tmp_path / "moe.onnx")
    torch.onnx.export(module, (torch.randn(2, 16, 32),), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, opset_version=17,
                      dynamo=False)
    gathered = onnx.load(path)
    found = experts.sites(gathered, {"x": (1, 128, 32)})
    dense = experts.dense(gathered, found, {s.matmul: switch for s in found} if switch else None)
    assert sum(n.op_type == ("If" if switch else "GatherElements") for n in dense.graph.node) == 8
    for branch in (a.g for n in dense.graph.node if n.op_type == "If" for a in n.attribute):
        for out in branch.output:  # the sizes onnx's shape inference writes at the tuned rows
            out.type.tensor_type.shape.CopyFrom(helper.make_tensor_type_proto(F, [256, None, 1]).tensor_type.shape)
    result = optimize(dense, OptimizeConfig.of(budget=4, measure=False, input_shapes={"x": (1, 128, 32)}, seed=0))
    assert result.report.returned.program == "optimized", result.report.returned.reason
    for shape in ((2, 16, 32), (3, 7, 32), (1, 1, 32)):  # 64, 42 and 2 rows
        assert outputs_match(gathered, result.optimized, shapes={"x": shape}), shape
    if not switch:
        assert ob.ort_kernels(result.optimized)["GatherElements"] == 8  # the dense form, not the gathered one
