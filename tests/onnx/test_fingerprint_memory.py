"""The import of a dynamic-axes model infers an opaque node's shapes at the symbols' fingerprints (large sizes);
an integer input there (Longformer's chunk indices, a Gather's, 166M entries at the fingerprints) must not have its
values built: onnx's data propagation did, and a 10k-node Longformer export took 20 GB before the import ended.
The import runs in a child process whose address space is capped at 3 GiB, so a regression fails instead of
taking the machine; the oracle for the shapes is the Gather's rule (indices' shape, data rank 1)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from paths import REPO

CHILD = textwrap.dedent("""
    import resource
    from onnx import TensorProto as T, helper as h
    nodes = [h.make_node("Reshape", ["x", "minus1"], ["flat"]), h.make_node("Sigmoid", ["x"], ["s"]),
             h.make_node("Mul", ["s", "zero"], ["z"]), h.make_node("Cast", ["z"], ["zi"], to=T.INT64),
             h.make_node("Unsqueeze", ["zi", "axes"], ["zu"]), h.make_node("Expand", ["zu", "big"], ["idx"]),
             h.make_node("Gather", ["flat", "idx"], ["g"], axis=0),
             h.make_node("ReduceSum", ["g", "axes"], ["y"], keepdims=0)]
    inits = [h.make_tensor("minus1", T.INT64, [1], [-1]), h.make_tensor("zero", T.FLOAT, [], [0.0]),
             h.make_tensor("axes", T.INT64, [2], [2, 3]), h.make_tensor("big", T.INT64, [4], [1, 1, 64, 64])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq"])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq"])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))
    from eqsat.generic import import_generic
    g = import_generic(model, {"x": (2, 16)})
    print(sorted({tuple(int(d) for d in n.shape) for n in g.nodes() if n.op == "opaque"}))
""")


def test_an_opaque_gather_of_large_integer_indices_imports_within_bounded_memory():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    shapes = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert (2, 16, 64, 64) in shapes  # Gather(data of rank 1, indices [batch, seq, 64, 64]): the indices' shape
