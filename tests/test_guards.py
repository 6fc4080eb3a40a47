"""The else-branch of a table guard is checked beyond the table's bound (eqsat.verify.verify_guards): no shape a
verification runs within the tables takes it, so a program whose else-branch is wrong, or stops at the table's
size (the dynamo LLaMA's and Qwen2's failed past 4096 positions), would otherwise be written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx import session
from eqsat.onnx.branches import guard_bounds, table_guards, taken
from eqsat.verify import verify_guards

BOUND = 8
FREQ = np.array([1.0, 0.5, 0.25, 0.125], np.float32)


def _c(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _angles(prefix: str, freq: str) -> list[onnx.NodeProto]:
    """``positions[:, None] * freq`` at the length of ``ids``' axis 1, any length."""
    return [helper.make_node("Cast", ["len"], [f"{prefix}f"], to=TensorProto.FLOAT),
            helper.make_node("Squeeze", [f"{prefix}f"], [f"{prefix}n"]),
            helper.make_node("Range", ["zero", f"{prefix}n", "one"], [f"{prefix}p"]),
            helper.make_node("Unsqueeze", [f"{prefix}p", "axis1"], [f"{prefix}col"]),
            helper.make_node("Mul", [f"{prefix}col", freq], [f"{prefix}y"])]


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    shared = [_c("zero", np.float32(0)), _c("one", np.float32(1)), _c("axis1", np.array([1])), _c("freq", FREQ)]
    graph = helper.make_graph(
        [helper.make_node("Shape", ["ids"], ["len"], start=1, end=2), *nodes], "angles",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 4])], initializer=shared + inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _original() -> onnx.ModelProto:
    nodes = _angles("o_", "freq")
    nodes[-1].output[0] = "y"
    return _model(nodes, [])


def _guarded(else_nodes: list[onnx.NodeProto], else_out: str, extra: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """The original's angles as a Slice of a table of ``BOUND`` rows under an If on the length being within it."""
    table = np.arange(BOUND, dtype=np.float32)[:, None] * FREQ
    then = helper.make_graph([helper.make_node("Slice", ["table", "starts", "len", "axes"], ["t_y"])], "within", [],
                             [helper.make_tensor_value_info("t_y", TensorProto.FLOAT, None)])
    beyond = helper.make_graph(else_nodes, "beyond", [], [helper.make_tensor_value_info(else_out, TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Less", ["len", "limit"], ["within"]),
             helper.make_node("If", ["within"], ["y"], name="table_if", then_branch=then, else_branch=beyond)]
    inits = [_c("table", table), _c("starts", np.array([0])), _c("axes", np.array([0])),
             _c("limit", np.array([BOUND + 1])), *extra]
    return _model(nodes, inits)


def _run(model: onnx.ModelProto, seq: int) -> np.ndarray:
    return session(model).run(None, {"ids": np.zeros((2, seq), np.int64)})[0]


def test_a_right_else_branch_passes_beyond_the_bound_and_the_branches_run_apart():
    model = _guarded(_angles("e_", "freq"), "e_y")
    (guard,) = table_guards(model)
    assert guard_bounds(model, guard) == [BOUND + 1] and table_guards(_original()) == []
    for seq in (1, 5, BOUND, BOUND + 1, 3 * BOUND):  # the written program is the original's on both sides
        np.testing.assert_allclose(_run(model, seq), _run(_original(), seq), rtol=1e-6)
    within, beyond = taken(model, guard, "then_branch"), taken(model, guard, "else_branch")
    assert not any(n.op_type == "If" for m in (within, beyond) for n in m.graph.node)
    y, cond = session(beyond).run(None, {"ids": np.zeros((1, BOUND + 3), np.int64)})
    assert y.shape == (BOUND + 3, 4) and not cond.all()
    check = verify_guards(_original(), model, {"batch": 1, "seq": 4})
    assert check.passed, check.detail
    assert check.verified == [f"seq={BOUND + 1} (beyond the tables)"]


@pytest.mark.parametrize("broken, expected", [
    ("table", "not the shape"),  # the else-branch reads the table too: it stops at the bound
    ("twice", "differs from its table"),  # the else-branch computes other values
    ("fails", "fails beyond its table"),  # the else-branch adds nothing times the table: onnxruntime fails past it
])
def test_a_wrong_else_branch_is_refused(broken, expected):
    if broken == "table":
        nodes = [helper.make_node("Slice", ["table", "starts", "len", "axes"], ["e_y"])]
        model = _guarded(nodes, "e_y")
    elif broken == "fails":
        nodes = [*_angles("e_", "freq"), helper.make_node("Slice", ["table", "starts", "len", "axes"], ["e_t"]),
                 helper.make_node("Mul", ["e_t", "zero"], ["e_z"]), helper.make_node("Add", ["e_y", "e_z"], ["e_w"])]
        model = _guarded(nodes, "e_w")
    else:
        model = _guarded(_angles("e_", "freq2"), "e_y", [_c("freq2", 2 * FREQ)])
    np.testing.assert_allclose(_run(model, 5), _run(_original(), 5), rtol=1e-6)  # within the table: no difference
    check = verify_guards(_original(), model, {"batch": 1, "seq": 4})
    assert not check.passed and expected in check.detail and "table_if" in check.detail
