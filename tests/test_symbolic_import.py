"""A dynamic-axes model imports with symbolic dimensions (eqsat.dims): each IR value's dimensions, as monomials
of the interface's symbols, are the sizes the same value has when the model is imported at other sizes (the
importer at those sizes is the oracle); a static import has none, and its e-graph is the static one."""

from __future__ import annotations

import pytest
import zoo

from eqsat.dims import Dim
from eqsat.egglog.egraph import EGraph
from eqsat.onnx import import_model
from eqsat.onnx.interface import shapes_at
from eqsat.onnx.symbolic import Mono


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_symbolic_dimensions_are_the_sizes_at_other_sizes(exporter, tmp_path):
    model = zoo.export_dynamic("bert", exporter, str(tmp_path / "m.onnx"))
    at = {"batch": 2, "seq": 16}
    graph = import_model(model, shapes_at(model, at), generic=True)
    nodes = graph.nodes()
    keys = [[d.mono.key() if isinstance(d, Dim) and d.mono else d for d in n.shape] for n in nodes]
    assert ["batch", "seq", 32] in keys  # the hidden states
    assert any(n.op in ("attention", "matmul") and [k for k in key[:1]] == ["batch"] for n, key in zip(nodes, keys))
    symbolic = [n for n in nodes if any(isinstance(d, Dim) for d in n.shape)]
    assert len(symbolic) >= len(nodes) // 3
    for other in ({"batch": 3, "seq": 16}, {"batch": 2, "seq": 7}):
        again = import_model(model, shapes_at(model, other), generic=True).nodes()
        assert [n.op for n in again] == [n.op for n in nodes]
        checked = 0
        for n, m in zip(nodes, again):
            monos = [d.mono if isinstance(d, Dim) else Mono.const(int(d)) for d in n.shape]
            if any(isinstance(d, Dim) for d in n.shape) and all(x is not None for x in monos):
                assert [int(x.value(other)) for x in monos if x is not None] == [int(d) for d in m.shape], n
                checked += 1
            elif not any(isinstance(d, Dim) for d in n.shape) and n.op != "opaque":
                assert tuple(map(int, n.shape)) == tuple(map(int, m.shape)), f"{n} is constant but changes"
        assert checked >= len(symbolic) // 2
    assert EGraph.from_graph(graph).symbolic
    static = import_model(model, shapes_at(model, at))
    assert not any(isinstance(d, Dim) for n in static.nodes() for d in n.shape)
    assert not EGraph.from_graph(static).symbolic
