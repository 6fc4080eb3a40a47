"""A model whose work lies inside If branches (an optimum-style merged decoder) is optimized branch by branch, and
the model returned computes what the user's does on either branch (onnxruntime on both is the oracle)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat import OptimizeConfig, optimize
from eqsat.app.branch_programs import (
    MIN_BRANCH_OPERATORS,
    Branch,
    branch_models,
    optimized_branches,
    splice,
    written_back,
)
from eqsat.measurement.decision import Measurement, Returned, vouched
from tests.onnx_builders import attention


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _merged(then: onnx.ModelProto, other: onnx.ModelProto) -> onnx.ModelProto:
    """``then`` and ``other`` (one input ``x``, one output ``y``) as the branches of an If on a bool input ``use``,
    their weights in the outer graph under names of their own, as optimum's merged decoders hold them."""
    inits = []

    def branch(m: onnx.ModelProto, prefix: str) -> onnx.GraphProto:
        names = {t.name: prefix + t.name for t in m.graph.initializer}
        for t in m.graph.initializer:
            moved = onnx.TensorProto()
            moved.CopyFrom(t)
            moved.name = names[t.name]
            inits.append(moved)
        nodes = []
        for n in m.graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.input[:] = [names.get(i, i) for i in n.input]
            copy.output[:] = ["y_" + prefix if o == "y" else o for o in n.output]
            nodes.append(copy)
        out = helper.make_tensor_value_info("y_" + prefix, TensorProto.FLOAT, [1, 8, 16])
        return helper.make_graph(nodes, prefix + "branch", [], [out])

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])
    use = helper.make_tensor_value_info("use", TensorProto.BOOL, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])
    nodes = [helper.make_node("Squeeze", ["use", "axis0"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch(then, "a_"), else_branch=branch(other, "b_"))]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    m = helper.make_model(helper.make_graph(nodes, "merged", [x, use], [y], initializer=inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _branch_ops(model: onnx.ModelProto) -> list[Counter[str]]:
    (node,) = [n for n in model.graph.node if n.op_type == "If"]
    return [Counter(n.op_type for n in a.g.node) for a in sorted(node.attribute, key=lambda a: a.name)]


def test_each_branch_is_searched_and_the_model_matches_the_original_on_both():
    original = _merged(attention(seed=0), attention(seed=1))
    assert all(sum(c.values()) >= MIN_BRANCH_OPERATORS for c in _branch_ops(original))
    config = OptimizeConfig(cost="analytic", measure=False).updated(time_limit=20, seed=0)
    result = optimize(original, config)
    out = result.optimized
    onnx.checker.check_model(out, full_check=True)
    assert [(v.name, v.type) for v in out.graph.input] == [(v.name, v.type) for v in original.graph.input]
    assert [(v.name, v.type) for v in out.graph.output] == [(v.name, v.type) for v in original.graph.output]
    assert result.report.returned.program == "optimized"
    assert _branch_ops(out) != _branch_ops(original)  # each branch was searched: its operators are others
    assert any("searched on its own" in line for line in result.report.rewritten)
    rng = np.random.default_rng(3)
    for use in (True, False):
        feeds = {"x": rng.standard_normal((1, 8, 16)).astype(np.float32), "use": np.array([use])}
        (want,), (got,) = _run(original, feeds), _run(out, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_each_branch_runs_on_its_share_of_the_time_limit_and_the_whole_measure_budget():
    """Two branches: each run (the real pipeline, recorded) gets half of ``--time-limit`` and the whole
    ``--measure-budget`` (half of it left a merged LLaMA's prompt branch unshipped in one run of two)."""
    original = _merged(attention(seed=0), attention(seed=1))
    config = OptimizeConfig(cost="analytic", measure=False, measure_budget=3.0).updated(time_limit=20, seed=0)
    seen: list[tuple[float, float]] = []

    def recorded(model, cfg, say):
        seen.append((cfg.search.time_limit, cfg.measure_budget))
        return optimize(model, cfg, say)

    _model, notes = optimized_branches(original, config, recorded, lambda _m: None)
    assert seen == [(10.0, 3.0), (10.0, 3.0)] and len(notes) == 2, (seen, notes)


def _vi(name: str, shape: tuple[int, ...] = (4,), elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _branch(nodes: list[onnx.NodeProto], name: str, out: str, shape: tuple[int, ...] = (4,)) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [_vi(out, shape)])


def _chain(length: int, first: str, out: str) -> list[onnx.NodeProto]:
    names = [first, *(f"t{k}" for k in range(1, length)), out]
    return [helper.make_node("Neg" if k % 2 else "Relu", [a], [b]) for k, (a, b) in enumerate(zip(names, names[1:]))]


def test_a_branch_that_reads_a_value_computed_outside_it_is_left_with_a_note():
    x, c, y = _vi("x"), _vi("c", (), TensorProto.BOOL), _vi("y")
    reads_h = _branch(_chain(MIN_BRANCH_OPERATORS, "h", "ya"), "a", "ya")
    reads_x = _branch(_chain(MIN_BRANCH_OPERATORS, "x", "yb"), "b", "yb")
    nodes = [helper.make_node("Abs", ["x"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=reads_h, else_branch=reads_x)]
    m = helper.make_model(helper.make_graph(nodes, "g", [x, c], [y]), opset_imports=[helper.make_opsetid("", 17)])
    branches, notes = branch_models(m)
    assert [b.attr for b in branches] == ["else_branch"]
    assert [v.name for v in branches[0].model.graph.input] == ["x"]
    assert len(notes) == 1 and "then_branch" in notes[0] and "'h'" in notes[0]


def test_a_spliced_program_whose_names_repeat_the_models_is_renamed_and_runs():
    """The program's own values named as the model's top-level ones (``h``, the condition ``c``): written back, they
    would shadow them; the splice renames them, and onnx's checker and onnxruntime agree with the original."""
    x, flag, y = _vi("x"), _vi("flag", ()), _vi("y")
    then = _branch(_chain(MIN_BRANCH_OPERATORS, "x", "ya"), "a", "ya")
    other = _branch([helper.make_node("Abs", ["h"], ["yb"])], "b", "yb")
    nodes = [helper.make_node("Greater", ["flag", "zero"], ["c"]), helper.make_node("Sin", ["x"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    m = helper.make_model(helper.make_graph(nodes, "g", [x, flag], [y], initializer=[zero]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (branch,) = [b for b in branch_models(m)[0]]
    # the branch's program: its chain's first four operators give what its sixteen give, spelled with the model's names
    program_nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["c"]),
                     helper.make_node("Relu", ["c"], ["flag"]), helper.make_node("Neg", ["flag"], ["ya"])]
    program = helper.make_model(helper.make_graph(program_nodes, "p", list(branch.model.graph.input),
                                                  list(branch.model.graph.output)),
                                opset_imports=[helper.make_opsetid("", 17)])
    spliced = onnx.ModelProto()
    spliced.CopyFrom(m)
    splice(spliced, Branch(branch.node, branch.attr, branch.model), program)
    onnx.checker.check_model(spliced, full_check=True)
    rng = np.random.default_rng(0)
    for f in (1.0, -1.0):
        feeds = {"x": rng.standard_normal(4).astype(np.float32), "flag": np.array(f, np.float32)}
        (want,), (got,) = _run(m, feeds), _run(spliced, feeds)
        np.testing.assert_array_equal(got, want)
    (node,) = [n for n in spliced.graph.node if n.op_type == "If"]
    inner = {o for n in node.attribute[0].g.node for o in n.output}
    assert not inner & {"h", "c", "flag"}


@pytest.mark.parametrize("opset", [17, 21])
def test_the_spliced_models_opsets_are_the_highest_of_both(opset):
    x, c, y = _vi("x"), _vi("c", (), TensorProto.BOOL), _vi("y")
    then = _branch(_chain(MIN_BRANCH_OPERATORS, "x", "ya"), "a", "ya")
    other = _branch([helper.make_node("Abs", ["x"], ["yb"])], "b", "yb")
    m = helper.make_model(helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then,
                                                              else_branch=other)], "g", [x, c], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    (branch,) = branch_models(m)[0]
    program = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["ya"])], "p",
                                                  list(branch.model.graph.input), list(branch.model.graph.output)),
                                opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    splice(m, branch, program)
    assert {o.domain: o.version for o in m.opset_import} == {"": opset, "com.microsoft": 1}


def test_a_program_of_a_newer_opset_takes_the_whole_model_and_the_other_branch_to_it():
    """A branch's program wrote a kernel of opset 23; the other branch, left as it was, holds a ReduceMean with its
    axes as an attribute (opset 17): the model written back is converted whole, and onnxruntime runs both branches
    to the original's values."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])

    def branch(name: str, first: str) -> onnx.GraphProto:
        nodes = [*_chain(MIN_BRANCH_OPERATORS, first, f"{name}_t"),
                 helper.make_node("ReduceMean", [f"{name}_t"], [f"{name}_y"], axes=[1], keepdims=1)]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT,
                                                                                 [2, 1])])
    m = helper.make_model(helper.make_graph([helper.make_node("Abs", ["x"], ["ax"]),
                                             helper.make_node("If", ["c"], ["y"], then_branch=branch("a", "x"),
                                                              else_branch=branch("b", "x"))], "g", [x, c], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    original = onnx.ModelProto()
    original.CopyFrom(m)
    branches, _ = branch_models(m)
    then = next(b for b in branches if b.attr == "then_branch")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes1")
    program = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["n"]),
         helper.make_node("Relu", ["n"], ["z"]), helper.make_node("Neg", ["z"], ["a_t"]),
         helper.make_node("ReduceMean", ["a_t", "axes1"], ["a_y"], keepdims=1)], "p",
        list(then.model.graph.input), list(then.model.graph.output), initializer=[axes]),
        opset_imports=[helper.make_opsetid("", 23)])
    program.ir_version = 10
    notes: list[str] = []
    out = written_back(m, [(then, program)], notes)
    assert notes == [] and [o.version for o in out.opset_import if o.domain == ""] == [23]
    onnx.checker.check_model(out, full_check=True)
    rng = np.random.default_rng(0)
    for flag in (True, False):
        feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32), "c": np.array(flag)}
        (want,), (got,) = _run(original, feeds), _run(out, feeds)
        np.testing.assert_array_equal(got, want)
    assert m.SerializeToString() == original.SerializeToString()  # the user's model untouched


def test_an_input_with_a_default_stays_the_users_to_give():
    """An input that also has an initializer (a default value the user may override) read by a branch: the branch's
    program reads it still, so a value given at run time is used (found by review: the program had folded the
    default in)."""
    s = numpy_helper.from_array(np.ones(4, np.float32), "s")
    names = ["m1"] + [f"u{i}" for i in range(MIN_BRANCH_OPERATORS)] + ["ya"]
    body = [helper.make_node("Mul", ["x", "s"], ["m0"]), helper.make_node("Sin", ["m0"], ["m1"]),
            *(helper.make_node(("Sin", "Tanh")[k % 2], [a], [b]) for k, (a, b) in enumerate(zip(names, names[1:])))]
    other = _branch([helper.make_node("Abs", ["x"], ["yb"])], "b", "yb")
    m = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=_branch(body, "a", "ya"), else_branch=other)], "g",
        [_vi("x"), _vi("c", (), TensorProto.BOOL), _vi("s")], [_vi("y")], initializer=[s]),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    out = optimize(m, OptimizeConfig(cost="analytic", measure=False).updated(time_limit=10, seed=0)).optimized
    x = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    for given in ({}, {"s": np.full(4, -5.0, np.float32)}):
        feeds = {"x": x, "c": np.array(True), **given}
        np.testing.assert_allclose(_run(out, feeds)[0], _run(m, feeds)[0], rtol=1e-5, atol=1e-6)


def test_each_program_goes_back_into_its_own_if_after_the_model_is_converted():
    """Two Ifs after a ReduceMean-17: converted to opset 23, the model gains a node before them (the ReduceMean's
    axes as a Constant), and the second If's program must still land in the second If (found by review: it landed in
    the first)."""
    def chain_of(name: str, op: str) -> onnx.GraphProto:
        names = ["x"] + [f"{name}{k}" for k in range(MIN_BRANCH_OPERATORS)] + [f"{name}_y"]
        return _branch([helper.make_node(op, [a], [b]) for a, b in zip(names, names[1:])], name, f"{name}_y", (2, 4))
    nodes = [helper.make_node("ReduceMean", ["x"], ["mx"], axes=[1], keepdims=1),
             helper.make_node("If", ["c"], ["y1"], then_branch=chain_of("a", "Sin"), else_branch=chain_of("b", "Sin")),
             helper.make_node("If", ["c"], ["y2"], then_branch=chain_of("p", "Cos"), else_branch=chain_of("q", "Cos")),
             helper.make_node("Add", ["y1", "mx"], ["z1"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [_vi("x", (2, 4)), _vi("c", (), TensorProto.BOOL)],
                                            [_vi("z1", (2, 4)), _vi("y2", (2, 4))]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    branches, _ = branch_models(m)
    second = next(b for b in branches if b.node == 2 and b.attr == "then_branch")
    program = onnx.ModelProto()
    program.CopyFrom(second.model)  # the branch itself, as a program of opset 23
    del program.opset_import[:]
    program.opset_import.extend([helper.make_opsetid("", 23)])
    program.ir_version = 10
    notes: list[str] = []
    out = written_back(m, [(second, program)], notes)
    assert notes == [] and [o.version for o in out.opset_import if o.domain == ""] == [23]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32), "c": np.array(True)}
    for want, got in zip(_run(m, feeds), _run(out, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _measured(low: float, high: float, at_sizes: list | None = None) -> Measurement:
    return Measurement(4.0, 3.8, 1.05, low, high, 0.995, 600, 1, 10.0, {}, "original", "not faster with confidence",
                       "imported", at_sizes=at_sizes or [])


def test_branch_programs_ship_unless_the_whole_model_is_slower_with_confidence():
    """Each branch's program was gated faster on its own; the whole model's unresolved measurement of one side keeps
    it, one slower with confidence (there or at a further size) returns the original."""
    kept = Returned("original", "not faster with confidence", "imported")
    shipped = vouched(kept, _measured(0.97, 1.12))
    assert shipped.program == "optimized" and shipped.candidate == "imported" and "on its own" in shipped.reason
    assert vouched(kept, _measured(0.90, 0.98)) is kept
    assert vouched(kept, _measured(0.97, 1.12, [{"ci_high": 0.99}])) is kept
    assert vouched(kept, None) is kept
    ship = Returned("optimized", "faster", "extracted")
    assert vouched(ship, _measured(0.97, 1.12)) is ship
