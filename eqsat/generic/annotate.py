"""The first and the last pass: the program's interface made the original's, its inputs' shapes read as symbols
(:func:`declare`), what the outputs could not keep noted (:func:`note_outputs`), and the inner values' symbolic
shapes written as ``value_info`` (:func:`annotate`)."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from eqsat.dims import Mono, SymShape
from eqsat.onnx.axes.interface import Port
from eqsat.onnx.axes.symbolic import constant_shape
from eqsat.onnx.subgraphs import subgraphs

from .state import Rewrite


def unshaped(graph: onnx.GraphProto) -> None:
    """``graph`` (a subgraph: an If's branch) without its inner shapes and its outputs' sizes, which onnx's shape
    inference wrote at the representative sizes (onnxruntime allocates a branch's output at a size so declared and
    fails at another), its nested subgraphs alike; the element types kept."""
    del graph.value_info[:]
    for out in graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    for node in graph.node:
        for sub in subgraphs(node):
            unshaped(sub)


def declare(w: Rewrite, ins: Sequence[Port]) -> None:
    """The program's inputs and outputs given the original's declared types (names, element types, ``dim_param``
    names; ``ins``: the original's inputs), its ``value_info`` dropped, and each input's shape read as symbols: a
    ``dim_param``, or ``INPUT:AXIS`` for an unnamed dynamic axis, each read at its first place
    (:attr:`~.sizes.SizeWriter.places`)."""
    g = w.model.graph
    declared_in = {vi.name: vi for vi in w.original.graph.input}
    declared_out = {vi.name: vi for vi in w.original.graph.output}
    for vi in g.input:
        if vi.name in declared_in and vi.name not in w.constants:
            vi.type.CopyFrom(declared_in[vi.name].type)
    for vi in g.output:
        if vi.name in declared_out:
            vi.type.CopyFrom(declared_out[vi.name].type)
    del g.value_info[:]
    for node in g.node:
        for sub in subgraphs(node):
            unshaped(sub)
    for port in ins:
        w.types[port.name] = port.elem_type
        if port.dims is None:
            w.shapes[port.name] = None
            continue
        shape: SymShape = []
        for k, d in enumerate(port.dims):
            sym = d if isinstance(d, int) or d else f"{port.name}:{k}"
            if isinstance(sym, int):
                shape.append(Mono.const(sym))
            else:
                shape.append(Mono.symbol(sym))
                w.places.setdefault(sym, (port.name, k))
        w.shapes[port.name] = shape
    for t in g.initializer:
        w.types[t.name] = t.data_type
        w.shapes[t.name] = constant_shape(t)
    w.ports = [p.name for p in ins if w.shapes.get(p.name) is not None]


def note_outputs(w: Rewrite, outs: Sequence[Port]) -> None:
    """A note for each output axis written constant where the original's (``outs``) is dynamic; where the original
    names it with a name no input carries, the note is also one of :attr:`~.state.Rewrite.unnamed_constant_outputs`."""
    for port in outs:
        got = w.shapes.get(port.name)
        if port.dims is None or got is None:
            continue
        for k, (want, have) in enumerate(zip(port.dims, got)):
            if isinstance(want, str) and have is not None and have.is_const:
                unnamed = bool(want) and want not in w.places and want not in w.sums
                note = (f"output {port.name!r} axis {k} is {have.key()} at every size; the original declares it "
                        f"{want!r}, a name no input carries, and so does the written model" if unnamed else
                        f"output {port.name!r} axis {k} is {have.key()} where the original's is {want or 'dynamic'}")
                w.notes.append(note)
                if unnamed:
                    w.unnamed_constant_outputs.append(note)


def annotate(w: Rewrite) -> None:
    """The symbolic shapes of the program's inner values as its ``value_info`` (a product of symbols as one
    ``dim_param``, ``batch*seq``), for a program eqsat reads again (the import's rewrite: its shapes are read
    from them).

    Not for a program written for the user (:attr:`.state.Rewrite.final`): inner shapes make onnxruntime run it
    slower. With them its fusions that compare shapes fire (SkipLayerNormalization, a MatMul and its bias as Gemm
    at rank 3), and, as the timings suggest, its memory planner gives each value with a known shape a buffer
    planned ahead, reused from a value freed long before (cold in the caches), where a value of unknown shape takes
    a block the arena freed last: a SegFormer-B0 program ran 8.5% faster without its 348 ``value_info``, its
    dense layers' Transposes of the same shapes 2-4x faster; over 39 programs (eqsat's and exporters' own) none slower with confidence
    without them, up to 9.9% faster (a dynamo RoFormer export), 1-3% typical (docs/benchmarks.md, ninth pass)."""
    g = w.model.graph
    ports = {vi.name for vi in [*g.input, *g.output]} | {t.name for t in g.initializer}
    for node in g.node:
        for out in node.output:
            shape, elem = w.shapes.get(out), w.types.get(out)
            if not out or out in ports or shape is None or not elem or any(
                    d is None or d.coef.denominator != 1 or d.coef <= 0 for d in shape):
                continue
            dims: list[int | str | None] = [int(d.coef) if d.is_const else d.key() for d in shape if d is not None]
            g.value_info.append(helper.make_tensor_value_info(out, elem, dims))


__all__ = ["annotate", "declare", "note_outputs"]
