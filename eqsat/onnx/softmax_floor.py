"""Softmax scores floored below their row's maximum: a form of a written program that onnxruntime's CPU runs faster
where the scores are masked.

onnxruntime's CPU ``Softmax`` computes ``exp(x - max)`` along the axis; an entry more than about 87 below its row's
maximum (a mask's large negative fill, ``-inf``) makes a subnormal float there, which the processor computes through
microcode assists: on this project's machines a ``[1, 6, 128, 128]`` Softmax under a causal mask takes 350-390 us
against 60-70 us unmasked (``docs/benchmarks.md``, "seventeenth pass"), and 150 us floored. Floored at ``FLOOR``
below the row's maximum, it never makes one:

    Softmax(Max(x - ReduceMax(x, axis, keepdims), -FLOOR))

is that Softmax on the differences it computes itself (``x - max``, the same float32 subtraction), each floored at
``-FLOOR``. (Flooring the scores at ``max - FLOOR`` instead would be wrong: near float32's range, or where a row's
maximum is the lowest float, ``max - FLOOR`` rounds to ``max``, and a ``-inf`` beside a row of lowest floats, as two
added masks make, would weigh as much as they.) It differs from ``Softmax(x)`` only where an entry lies more than
``FLOOR`` below its row's maximum: its weight becomes ``e^-FLOOR / sum`` instead of less than that, so each output
moves by less than ``n * e^-FLOOR`` of the row's scale (``n`` the row's length; 1e-20 at a million keys: far below
float32's resolution). That bound is absolute: a masked weight that was 0 becomes 8.8e-27, which a consumer that
tells zero apart (a ``Log`` after the Softmax: ``-inf`` becomes -60) shows; the check against the original refuses
such a program. Non-finite scores keep their results: ``Max`` propagates NaN (onnxruntime 1.19 on; a NaN score, or a
NaN maximum, makes the row NaN, as without the floor), a row of ``-inf`` throughout (``-inf - -inf``) and a row with
``+inf`` stay NaN, and a row masked throughout with one finite fill stays uniform.

Whether it pays depends on the scores' values, which no operator timing on random operands sees, so it is not a
rule of the search: :func:`deep_softmaxes` finds, by running the written program once, the Softmax nodes whose
scores reach that range whatever the input's padding (masks fed as all kept), :func:`floored` writes them floored,
and the end-to-end measurement decides between the program with and without (``eqsat.app.pipeline``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .io import session
from .kernels import opset_of

FLOOR = 60.0
"""how far below its row's maximum a score is floored: ``e^-60`` is 8.8e-27, a normal float32 (the smallest is
1.2e-38) even divided by the sum of a row of 10^11 keys"""
DEEP = 87.0
"""a score this far below its row's maximum makes a subnormal ``exp`` in float32 (``ln`` of the smallest normal
float32 is -87.3): a Softmax whose scores reach it is floored"""


def _axes(model: onnx.ModelProto, axis: int, base: str, inits: list[onnx.TensorProto]) -> tuple[list[str], dict]:
    """The ``ReduceMax`` inputs and attributes reducing ``axis`` at the model's opset (an input from 18 on)."""
    if opset_of(model) >= 18:
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), f"{base}_axes"))
        return [f"{base}_axes"], {}
    return [], {"axes": [axis]}


def _candidates(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The top-level Softmax nodes of the default domain that the floor can be written before (opset 13 on:
    one axis; an earlier Softmax flattens at its axis)."""
    if opset_of(model) < 13:
        return []
    return [n for n in model.graph.node if n.op_type == "Softmax" and n.domain in ("", "ai.onnx")]


def _prefix(model: onnx.ModelProto, stem: str) -> str:
    """``stem`` or ``stem`` numbered, so that no name of ``model``'s graph starts with it (a model floored before,
    eqsat's own output, holds ``eqsat_floor`` names already)."""
    g = model.graph
    names = {v.name for v in [*g.input, *g.output, *g.initializer]} | {n.name for n in g.node}
    names |= {o for n in g.node for o in n.output}
    k, prefix = 0, stem
    while any(n.startswith(prefix) for n in names):
        k, prefix = k + 1, f"{stem}{k + 1}"
    return prefix


def _axis(node: onnx.NodeProto) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "axis"), -1)


def deep_softmaxes(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[str]:
    """The outputs of ``model``'s Softmax nodes (:func:`_candidates`) whose float32 scores, on ``feeds``, hold an
    entry at least :data:`DEEP` below its row's finite maximum: each row's shortfall reduced to one number inside
    the program (``ReduceMin(x - ReduceMax(x))``), so that no score tensor is returned whole. ``model`` is run
    with those outputs added and given back as it was."""
    nodes = _candidates(model)
    if not nodes:
        return []
    g = model.graph
    added_nodes: list[onnx.NodeProto] = []
    added_inits: list[onnx.TensorProto] = []
    probes: list[tuple[str, str]] = []  # (Softmax output, probe output)
    stem = _prefix(model, "eqsat_deep")
    for k, node in enumerate(nodes):
        base = f"{stem}_{k}"
        axes_in, attrs = _axes(model, _axis(node), base, added_inits)
        x = node.input[0]
        added_nodes += [helper.make_node("ReduceMax", [x, *axes_in], [f"{base}_max"], keepdims=1, **attrs),
                        helper.make_node("Sub", [x, f"{base}_max"], [f"{base}_gap"]),
                        helper.make_node("ReduceMin", [f"{base}_gap"], [f"{base}_min"], keepdims=0)]
        probes.append((node.output[0], f"{base}_min"))
    n_nodes, n_inits, n_outputs = len(g.node), len(g.initializer), len(g.output)
    try:
        g.node.extend(added_nodes)
        g.initializer.extend(added_inits)
        g.output.extend(helper.make_empty_tensor_value_info(p) for _, p in probes)
        s = session(model)
        wanted = [p for _, p in probes]
        floats = {o.name for o in s.get_outputs() if o.type == "tensor(float)"}
        inputs = {i.name for i in s.get_inputs()}
        values = dict(zip(wanted, s.run(wanted, {k: v for k, v in feeds.items() if k in inputs})))
        del s
    finally:
        del g.node[n_nodes:]
        del g.initializer[n_inits:]
        del g.output[n_outputs:]
    return [out for out, p in probes if p in floats and float(values[p]) <= -DEEP]


def floored(model: onnx.ModelProto, outputs: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` with each Softmax that writes one of ``outputs`` reading its scores floored at
    :data:`FLOOR` below their row's maximum (the module's form); the interface and every other node as they were."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    wanted = {n.output[0] for n in _candidates(out)} & set(outputs)
    stem = _prefix(out, "eqsat_floor")
    inits: list[onnx.TensorProto] = [numpy_helper.from_array(np.array(-FLOOR, np.float32), stem)]
    nodes: list[onnx.NodeProto] = []
    for k, node in enumerate(out.graph.node):
        if node.op_type == "Softmax" and node.output[0] in wanted:
            base = f"{stem}_{k}"
            axes_in, attrs = _axes(out, _axis(node), base, inits)
            x = node.input[0]
            nodes += [helper.make_node("ReduceMax", [x, *axes_in], [f"{base}_max"], name=f"{base}_max", keepdims=1,
                                       **attrs),
                      helper.make_node("Sub", [x, f"{base}_max"], [f"{base}_gap"], name=f"{base}_gap"),
                      helper.make_node("Max", [f"{base}_gap", stem], [f"{base}_x"], name=f"{base}_x")]
            node.input[0] = f"{base}_x"
        nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(inits)
    return out


def counted(operators: Mapping[str, int], model: onnx.ModelProto, floored_model: onnx.ModelProto) -> dict[str, int]:
    """A program's operator counts (``operators``, a report's: IR operators and the ONNX ones it holds opaque) with
    the nodes :func:`floored` added to ``model`` in ``floored_model`` counted by their ONNX type."""
    out = dict(operators)
    before = Counter(n.op_type for n in model.graph.node)
    for op, n in (Counter(n.op_type for n in floored_model.graph.node) - before).items():
        out[op] = out.get(op, 0) + n
    return out
