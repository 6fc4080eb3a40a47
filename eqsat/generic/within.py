"""A program written for the user from a model with a size exact on a span of the interface's sizes only
(:mod:`.ranged`: a relative-position table's rows between two bounds) is kept to that span: the written program becomes the
then-branch of an ``If`` on each such symbol's size being within its span, and the original, copied whole at the
written program's opset, its else-branch (:func:`keep_within`). At every size the original runs, the program the
user gets computes what the original computes: the candidate within the span (where the verification checks it),
the original itself beyond. The If is named :data:`eqsat.onnx.axes.branches.WITHIN`, and the verification at
further sizes reads its bounds back (:func:`eqsat.onnx.axes.branches.within_spans`) to check it on both sides."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.onnx import pool
from eqsat.onnx.axes.branches import WITHIN
from eqsat.onnx.axes.interface import symbols
from eqsat.onnx.external import data_size
from eqsat.onnx.pool import array_of
from eqsat.onnx.subgraphs import implicit_inputs, rename_outer, subgraphs

from .guards import copy_values
from .ranged import meet
from .state import Rewrite, Span
from .typed_original import spans


def keep_within(w: Rewrite) -> bool:
    """``w``'s program (its nodes, all written) put in the then-branch of an If on the sizes being within the spans
    on which a size of the original is exact only (:func:`.typed_original.spans`), the original in its
    else-branch; True (nothing changed) where the original has no such size. Every candidate of such a model is kept
    so, whether or not it reads one: the import folds what it computes from the sizes, under names of its own, so a
    constant that stands for such a size (a table's rows less twice the frames, constant on the span) is not told
    apart. False (nothing changed) where a symbol is read by no input, the program guards a table (:mod:`.guards`),
    or the original cannot be copied at the written opset."""
    within: dict[str, Span] = {}
    for found in sorted(spans(w.facts), key=repr) if sliced_between(w.original) else []:
        within[found[0]] = meet(within[found[0]], found) if found[0] in within else found
    places = symbols(w.original)
    bounded = [s for s in within.values() if s[1] is not None or s[2] is not None]
    if not bounded:
        return True
    if any(sym not in places for sym, _, _ in bounded) or w.guards.guarded:
        return False  # (a table guard inside the If would not be checked: eqsat.verification.verify_guards)
    _computed_outputs(w)
    given = {i.name for i in w.model.graph.input} | {t.name for t in w.model.graph.initializer}
    outputs = [o.name for o in w.original.graph.output if o.name not in given]  # (one passed through stays so)
    if not outputs:
        return True
    copied = copy_values(w, outputs, shapes_read=False)
    if copied is None:
        return False
    else_nodes, else_names = copied
    then_nodes = list(w.nodes)
    inner = {o: w.fresh(f"{o}_within") for o in outputs}
    made = {o for n in then_nodes for o in n.output if o}
    for node in then_nodes:  # (the If's outputs are the graph's: inside, the values are named anew)
        node.output[:] = [inner.get(o, o) for o in node.output]
        node.input[:] = [inner.get(i, i) for i in node.input]
        for sub in subgraphs(node):
            rename_outer(sub, inner)
    then_outs = []
    for o in outputs:
        if o in made:
            then_outs.append(inner[o])
        else:  # an output the program passes through (an input): an Identity in the branch
            then_nodes.append(helper.make_node("Identity", [o], [inner[o]], name=inner[o]))
            then_outs.append(inner[o])
    else_outs = []
    for o, name in zip(outputs, else_names):
        if name == o:
            else_nodes.append(helper.make_node("Identity", [o], [fresh := w.fresh(f"{o}_beyond")], name=fresh))
            name = fresh
        else_outs.append(name)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in w.original.graph.output}

    def branch(nodes: list[onnx.NodeProto], outs: list[str], label: str) -> onnx.GraphProto:
        return helper.make_graph(nodes, w.fresh(label), [],
                                 [helper.make_tensor_value_info(i, types[o], None) for i, o in zip(outs, outputs)])

    cond, nodes = "", []
    for sym, low, high in bounded:
        source, axis = places[sym][0]
        size = w.fresh(f"{sym}_size")
        nodes.append(helper.make_node("Shape", [source], [size], name=size, start=axis, end=axis + 1))
        for bound, op in ((low, "Less"), (high, "Greater")):
            if bound is None:
                continue
            limit = w.const(np.array([bound], np.int64), f"{sym}_span")
            out = w.fresh(f"{sym}_{'below' if op == 'Less' else 'above'}")
            nodes.append(helper.make_node(op, [size, limit], [out], name=out))
            cond = _either(w, nodes, cond, out)
    inside = w.fresh("inside_span")
    nodes.append(helper.make_node("Not", [cond], [inside], name=inside))
    then_graph = branch(then_nodes, then_outs, "within_span")
    _own_weights(w, then_graph, [*else_nodes, *nodes])
    theirs = _reads(else_nodes)
    beside = sum(data_size(t, pool.current()) for t in w.model.graph.initializer if t.name in theirs)
    shown = ", ".join(f"{sym} from {low or 1} to {high if high is not None else 'any'}" for sym, low, high in bounded)
    w.notes.append(f"written for {shown}, where the rows the original slices off a table by these sizes lie within "
                   f"it; beyond, the model runs the original, whose weights it holds beside its own "
                   f"({beside / 2**20:.1f} MB more)")
    nodes.append(helper.make_node("If", [inside], outputs, name=w.fresh(WITHIN), then_branch=then_graph,
                                  else_branch=branch(else_nodes, else_outs, "beyond_span")))
    w.nodes = nodes
    return True


def sliced_between(model: onnx.ModelProto) -> bool:
    """Whether ``model`` slices a constant (an initializer or a Constant's value) by a start and an end it computes,
    as a table sliced between bounds of a size (:func:`.ranged.between`)."""
    g = model.graph
    constant = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"}
    return any(n.op_type == "Slice" and len(n.input) > 2 and n.input[0] in constant and n.input[1] not in constant
               and n.input[2] not in constant for n in g.node)


def _computed_outputs(w: Rewrite) -> None:
    """Each output of ``w``'s program that is one of its initializers (a value the original computes, folded) made
    an Identity of it under a name of its own, so that the If computes it (the original beyond the span need not
    give that constant)."""
    inits = {t.name: t for t in w.model.graph.initializer}
    for out in w.model.graph.output:
        if out.name in inits and out.name in w.facts.computed:
            t = inits[out.name]
            t.name = w.fresh(out.name)
            w.nodes.append(helper.make_node("Identity", [t.name], [out.name], name=w.fresh(out.name)))


def _reads(nodes: list[onnx.NodeProto]) -> set[str]:
    return {i for n in nodes for i in [*n.input, *implicit_inputs(n)] if i}


def _own_weights(w: Rewrite, then: onnx.GraphProto, others: list[onnx.NodeProto]) -> None:
    """The initializers the then-branch reads made its own (moved where nothing else reads them, else copied under
    a name of its own): onnxruntime neither folds nor prepacks a subgraph's reads of the outer scope's
    initializers (measured on a Wav2Vec2-Conformer: the program in an If that read them outside ran 12% slower
    than alone; with them inside, as fast)."""
    mine, theirs = _reads(list(then.node)), _reads(others)
    # an initializer the graph also lists as an input (the user's to feed) or as an output stays in the main graph
    fed = {i.name for i in [*w.model.graph.input, *w.model.graph.output]}
    kept, renamed = [], {}
    for t in w.model.graph.initializer:
        if t.name not in mine or t.name in fed:
            kept.append(t)
            continue
        if t.name in theirs:
            kept.append(t)
            renamed[t.name] = w.fresh(t.name)
        own = t if t.data_location != onnx.TensorProto.EXTERNAL else numpy_helper.from_array(array_of(t), t.name)
        then.initializer.append(own)  # (a reference into the run's weight pool as its data: the pool reads the
        then.initializer[-1].name = renamed.get(t.name, t.name)  # main graph's only)
    del w.model.graph.initializer[:]
    w.model.graph.initializer.extend(kept)
    rename_outer(then, renamed)


def _either(w: Rewrite, nodes: list[onnx.NodeProto], a: str, b: str) -> str:
    """``a or b`` (``b`` alone where ``a`` is none)."""
    if not a:
        return b
    out = w.fresh("outside_span")
    nodes.append(helper.make_node("Or", [a, b], [out], name=out))
    return out


__all__ = ["keep_within"]
