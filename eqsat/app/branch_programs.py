"""The If branches of a model optimized as programs of their own.

An optimum-style merged decoder is one ``If`` on ``use_cache_branch`` over two whole decoders (with and without the
key/value cache): its top level is two operators, and the search, which treats an If as an opaque operator, finds
nothing there. Each branch whose outer-scope reads are all the model's inputs and initializers is a model in its
own right: its inputs are those inputs (their names, types and dynamic axes), its weights the initializers it reads,
its outputs the branch's. :func:`optimized_branches` runs the whole pipeline on each such branch (import, search,
verification against the branch, end-to-end measurement; the branch's program kept only where it was measured
faster, as any run's; each branch with its share of ``--time-limit``) and writes each program back into its If.
The model with its branches replaced is then the source of the run on the whole model, which verifies and measures
it against the user's model like any other candidate.

A branch is tuned at the ``--input-shape`` sizes of the inputs it reads; one that refuses them (the cache-less
decoder at a decoding step's sizes) at its own representative sizes instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import onnx
from onnx import AttributeProto, helper, numpy_helper

from eqsat.errors import InputError, ModelRefused, first_line
from eqsat.onnx.axes.interface import symbols
from eqsat.onnx.axes.tied import expression_names
from eqsat.onnx.io import check
from eqsat.onnx.kernels import UpgradeError, converted, opset_of
from eqsat.onnx.subgraphs import defined_names, free_names, rename_outer, subgraphs

from .config import OptimizeConfig
from .result import Result

MIN_BRANCH_OPERATORS = 16
"""a branch with fewer operators is left as it is (a guard's, a shape's: nothing a search pays for)"""

Optimize = Callable[[onnx.ModelProto, OptimizeConfig, Callable[[str], None]], Result]


@dataclass
class Branch:
    """One If branch as a model of its own: the If's index among the top-level nodes, the attribute holding it."""

    node: int
    attr: str
    model: onnx.ModelProto
    outputs: tuple[str, ...] = ()
    """the If's output names: the node found again in a converted copy of the model (whose converter may insert
    nodes before it)"""

    @property
    def label(self) -> str:
        return f"If #{self.node} {self.attr}"

    def index(self, model: onnx.ModelProto) -> int:
        """The If's index among ``model``'s top-level nodes (by its outputs, where known)."""
        if not self.outputs:
            return self.node
        return next(k for k, n in enumerate(model.graph.node) if tuple(n.output) == self.outputs)


def _types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = model.graph
    return {v.name: v for v in (*g.value_info, *g.input, *g.output)}


def _typed(out: onnx.ValueInfoProto, outer: onnx.ValueInfoProto | None) -> onnx.ValueInfoProto | None:
    if out.type.tensor_type.elem_type:
        return out
    if outer is None or not outer.type.tensor_type.elem_type:
        return None
    typed = onnx.ValueInfoProto()
    typed.CopyFrom(outer)
    typed.name = out.name
    return typed


def branch_models(model: onnx.ModelProto) -> tuple[list[Branch], list[str]]:
    """The top-level If branches that can be optimized as models of their own, and why the others cannot (a branch
    of at least :data:`MIN_BRANCH_OPERATORS` operators that reads a value computed at the top level)."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    inputs = {v.name: v for v in g.input}  # an input with an initializer (a default the user may override) included
    types = _types(model)
    found, notes = list[Branch](), list[str]()
    for k, node in enumerate(g.node):
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.type != AttributeProto.GRAPH or len(attr.g.node) < MIN_BRANCH_OPERATORS:
                continue
            branch, label = attr.g, f"If #{k} {attr.name}"
            free = free_names(branch)
            computed = [n for n in free if n not in inits and n not in inputs]
            if computed:
                notes.append(f"{label} left as it is: it reads {computed[:3]}, computed outside it")
                continue
            outs = [_typed(o, types.get(name)) for o, name in zip(branch.output, node.output)]
            if any(o is None for o in outs) or len(outs) != len(node.output):
                notes.append(f"{label} left as it is: an output of it has no type")
                continue
            sub = helper.make_graph(list(branch.node), branch.name or attr.name,
                                    [inputs[n] for n in free if n in inputs], [o for o in outs if o is not None],
                                    initializer=[*(inits[n] for n in free if n in inits), *branch.initializer],
                                    value_info=list(branch.value_info))
            standalone = helper.make_model(sub, opset_imports=list(model.opset_import), functions=list(model.functions))
            standalone.ir_version = model.ir_version
            found.append(Branch(k, attr.name, standalone, tuple(node.output)))
    return found, notes


def _names_outside(model: onnx.ModelProto, node: int, attr: str) -> set[str]:
    """Every value name of ``model`` but those defined inside the branch ``attr`` of its ``node``-th node."""
    g = model.graph
    names = {v.name for v in g.input} | {t.name for t in g.initializer}
    for k, n in enumerate(g.node):
        names.update(o for o in n.output if o)
        names |= defined_names(n, attr if k == node else "")
    return names


def _same_tensor(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    x, y = numpy_helper.to_array(a), numpy_helper.to_array(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _renamed(graph: onnx.GraphProto, taken: set[str], outer: set[str]) -> None:
    """The names ``graph`` defines that are in ``taken`` given fresh ones, in place (its reads of outer-scope names
    in ``outer`` kept)."""
    defined = [t.name for t in graph.initializer] + [o for n in graph.node for o in n.output if o]
    used, mapping = set(taken) | set(defined), dict[str, str]()
    for name in defined:
        if name in taken and name not in mapping:
            k, new = 1, f"{name}__branch"
            while new in used:
                k, new = k + 1, f"{name}__branch{k}"
            used.add(new)
            mapping[name] = new
    if not mapping:
        return
    for t in graph.initializer:
        t.name = mapping.get(t.name, t.name)
    for n in graph.node:
        n.input[:] = [mapping.get(x, x) if x not in outer or x in mapping else x for x in n.input]
        n.output[:] = [mapping.get(x, x) for x in n.output]
        for sub in subgraphs(n):
            rename_outer(sub, mapping)
    for v in (*graph.output, *graph.value_info):
        v.name = mapping.get(v.name, v.name)


def splice(model: onnx.ModelProto, branch: Branch, program: onnx.ModelProto) -> None:
    """``program`` (the branch's optimized model, its interface the branch's) written, in place, as the branch of
    ``model``: its inputs read from the outer scope again, its weights the outer initializers where they are the same
    tensors, its other names renamed where they would shadow or repeat a name of the model."""
    g = model.graph
    outer_inits = {t.name: t for t in g.initializer}
    inputs = {v.name for v in program.graph.input}
    dropped = {t.name for t in program.graph.initializer  # read from the outer graph: the same tensor there
               if t.name in inputs or (t.name in outer_inits and _same_tensor(t, outer_inits[t.name]))}
    kept = [t for t in program.graph.initializer if t.name not in dropped]
    outer = inputs | dropped  # the outer-scope values the branch reads
    new = helper.make_graph(list(program.graph.node), "", [], list(program.graph.output), initializer=kept,
                            value_info=list(program.graph.value_info))
    at = branch.index(model)
    _renamed(new, _names_outside(model, at, branch.attr) - outer, outer)
    node = g.node[at]
    attr = next(a for a in node.attribute if a.name == branch.attr)
    new.name = attr.g.name
    attr.g.CopyFrom(new)
    versions = {o.domain: o.version for o in model.opset_import}
    for o in program.opset_import:
        versions[o.domain] = max(o.version, versions.get(o.domain, 0))
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in versions.items())
    model.ir_version = max(model.ir_version, program.ir_version)
    have = {(f.domain, f.name) for f in model.functions}
    model.functions.extend(f for f in program.functions if (f.domain, f.name) not in have)


def _restricted(shapes: dict[str, tuple[int, ...]], model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    names = {v.name for v in model.graph.input}
    return {k: v for k, v in shapes.items() if k in names}


def _assumed(assumed: dict[str, str], model: onnx.ModelProto) -> dict[str, str]:
    """The ``--assume-dim`` ties whose symbols are all the branch model's."""
    syms = set(symbols(model))
    return {s: e for s, e in assumed.items() if s in syms and expression_names(e) <= syms}


def _runs(branch: Branch, config: OptimizeConfig, share: float) -> Iterator[OptimizeConfig]:
    """The configurations a branch is tried under: at the given sizes of its inputs, then at its own; each with its
    ``share`` of ``--time-limit``."""
    given = replace(config.updated(time_limit=share * config.search.time_limit),
                    input_shapes=_restricted(config.input_shapes, branch.model),
                    static_shapes=_restricted(config.static_shapes, branch.model), also_at=(),
                    assume_dims=_assumed(config.assume_dims, branch.model))
    yield given
    if given.input_shapes or given.static_shapes:
        yield replace(given, input_shapes={}, static_shapes={})


def optimized_branches(model: onnx.ModelProto, config: OptimizeConfig, optimize: Optimize,
                       say: Callable[[str], None]) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with each of its top-level If branches (:func:`branch_models`) replaced by the program a run of
    ``optimize`` on it returned, where that is not the branch itself, and a line per branch saying what it got;
    ``model`` itself where no branch changed."""
    branches, notes = branch_models(model)
    shipped: list[tuple[Branch, onnx.ModelProto]] = []
    for branch in branches:
        ops, result = len(branch.model.graph.node), None
        for run in _runs(branch, config, 1 / len(branches)):
            try:
                result = optimize(branch.model, run, functools.partial(_prefixed, say, branch.label))
                break
            except (InputError, ModelRefused) as exc:
                notes.append(f"{branch.label} not optimized at "
                             f"{'the given sizes' if run.input_shapes or run.static_shapes else 'its own sizes'}: "
                             f"{first_line(exc)}")
        if result is None:
            continue
        returned = result.report.returned
        if returned.program != "optimized":
            notes.append(f"{branch.label} ({ops} operators) searched on its own: returned as it was")
            continue
        shipped.append((branch, result.optimized))
        speed = result.report.measured
        gain = f"{speed.speedup:.3f}x measured" if speed is not None else "not measured"
        notes.append(f"{branch.label} ({ops} operators) searched on its own: {len(result.optimized.graph.node)} "
                     f"operators, {gain}")
    return written_back(model, shipped, notes), notes


def written_back(model: onnx.ModelProto, shipped: list[tuple[Branch, onnx.ModelProto]],
             notes: list[str]) -> onnx.ModelProto:
    """``model`` with the ``shipped`` programs written into their branches, all at one opset: where a program took a
    newer one (a runtime kernel of opset 23), the model and the other programs are converted to it (ONNX's version
    converter, subgraphs included), and where that fails, or the result does not check, the programs of a newer
    opset are left out (a line each in ``notes``)."""
    if not shipped:
        return model
    target = max(opset_of(p) for _b, p in shipped)
    if target > opset_of(model):
        try:
            done = converted(model, target, weights=True)
            shipped = [(b, converted(p, target, weights=True)) for b, p in shipped]
        except UpgradeError as e:
            notes += [f"{b.label}: its program left out: {first_line(e)}" for b, p in shipped
                      if opset_of(p) > opset_of(model)]
            shipped = [(b, p) for b, p in shipped if opset_of(p) <= opset_of(model)]
            done = _copy(model)
    else:
        done = _copy(model)
    for branch, program in shipped:
        splice(done, branch, program)
    try:
        check(done, full=False)
    except onnx.checker.ValidationError as e:
        notes.append(f"the branches' programs left out: the model they make does not check ({first_line(e)})")
        return model
    return done if shipped else model


def _prefixed(say: Callable[[str], None], label: str, msg: str) -> None:
    say(f"{label}: {msg}")


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


__all__ = ["MIN_BRANCH_OPERATORS", "Branch", "branch_models", "optimized_branches", "splice", "written_back"]
