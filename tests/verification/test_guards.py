"""The else-branch of a table guard is checked beyond the table's bound (eqsat.verification.verify_guards): no shape a
verification runs within the tables takes it, so a program whose else-branch is wrong, or stops at the table's
size (the dynamo LLaMA's and Qwen2's failed past 4096 positions), would otherwise be written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.onnx import session
from eqsat.onnx.axes.branches import SHAPE_FED, guard_bounds, shapes_fed, table_guards, taken
from eqsat.verification import verify_guards

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
    ("table", "the shape it has at seq=8: a value the guard stands for must grow"),  # it reads the table too: it stops at the bound
    ("twice", "differs from that computation"),  # the else-branch computes other values
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


def _stopping(extra: list[onnx.NodeProto], inits: list[onnx.TensorProto], inputs=()) -> onnx.ModelProto:
    """The original's angles plus zero times a value ``extra`` computes (``z``): the same values wherever it runs,
    and onnxruntime refuses it wherever ``extra`` fails."""
    nodes = _angles("o_", "freq") + extra + [helper.make_node("Mul", ["z", "zero"], ["z0"]),
                                             helper.make_node("Add", ["o_y", "z0"], ["y"])]
    model = _model(nodes, inits)
    model.graph.input.extend(inputs)
    return model


def _stops_at_table() -> onnx.ModelProto:
    """A guard whose else-branch reads the table too: beyond it, it gives the value at the table's last size."""
    return _guarded([helper.make_node("Slice", ["table", "starts", "len", "axes"], ["e_y"])], "e_y")


def _sum_of(name: str) -> list[onnx.NodeProto]:
    return [helper.make_node("ReduceSum", [name], [f"{name}_s"], keepdims=0),
            helper.make_node("Cast", [f"{name}_s"], ["z"], to=TensorProto.FLOAT)]


def test_an_else_branch_that_stops_at_the_table_passes_where_the_original_stops_below_it():
    """ConvBERT's unfold indices: a table the import wrote, whose else-branch stops at the table as the table does;
    the original adds a buffer of fewer rows than the table (its position embeddings), so onnxruntime refuses it
    at every longer input and none reaches the else-branch."""
    buffer = [helper.make_node("Slice", ["buffer", "b_starts", "len", "b_axes"], ["b"]),
              helper.make_node("Add", ["o_y", "b"], ["zb"]), *_sum_of("zb")]
    original = _stopping(buffer, [_c("buffer", np.zeros((BOUND - 2, 4), np.float32)), _c("b_starts", np.array([0])),
                                  _c("b_axes", np.array([0]))])
    model = _stops_at_table()
    for seq in (1, 5, BOUND - 2):
        np.testing.assert_allclose(_run(model, seq), _run(original, seq), rtol=1e-6)
    with pytest.raises(Exception, match="[Bb]roadcast"):  # the oracle: onnxruntime refuses the original past it
        _run(original, BOUND - 1)
    check = verify_guards(original, model, {"batch": 1, "seq": 4})
    assert check.passed, check.detail
    assert check.skipped == [f"seq={BOUND + 1} (beyond the tables)"] and check.verified == []


class _Counted:
    """A session whose runs' lengths (``ids``' axis 1) are logged in ``runs``."""

    def __init__(self, sess, runs: list[int]):
        self.sess, self.runs = sess, runs

    def run(self, names, feeds, *rest):
        self.runs.append(feeds["ids"].shape[1])
        return self.sess.run(names, feeds, *rest)

    def get_inputs(self):
        return self.sess.get_inputs()


@pytest.mark.parametrize("bound", ["seconds", "memory"])
def test_an_else_branch_that_stops_at_the_table_is_not_excused_where_the_original_is_not_run_beyond_it(
        monkeypatch, bound):
    """Whether the original stops below the table is asked by runs of it beyond the table; one estimated to take
    too long (a CLIP text model's table of the batch's indices, 4096 long: a run at a batch of 4096 took over ten
    minutes) or more memory than the run has is not made, and the guard is not excused: it fails, where the same
    original passes when those runs are made (the test above)."""
    from eqsat.onnx import footprint
    from eqsat.verification import guards

    buffer = [helper.make_node("Slice", ["buffer", "b_starts", "len", "b_axes"], ["b"]),
              helper.make_node("Add", ["o_y", "b"], ["zb"]), *_sum_of("zb")]
    original = _stopping(buffer, [_c("buffer", np.zeros((BOUND - 2, 4), np.float32)), _c("b_starts", np.array([0])),
                                  _c("b_axes", np.array([0]))])
    runs: list[int] = []
    real = guards.session

    def counted(model, **kw):
        return _Counted(real(model, **kw), runs) if model is original else real(model, **kw)
    monkeypatch.setattr(guards, "session", counted)
    if bound == "seconds":
        monkeypatch.setattr(guards, "BEYOND_SECONDS", 0.0)
        check = verify_guards(original, _stops_at_table(), {"batch": 1, "seq": 4})
    else:
        with footprint.limited(original, budget=1, tuned={"ids": (1, 4)}):
            check = verify_guards(original, _stops_at_table(), {"batch": 1, "seq": 4})
    assert not check.passed and "must grow beyond its table" in check.detail
    assert runs == [5]  # the control only: no run beyond the table


def test_an_else_branch_that_stops_at_the_table_is_refused_where_the_original_runs_at_some_longer_size():
    """The original refuses most sizes beyond the table but not all: a length it needs a multiple of 4 of (a
    window), or a second input whose length must agree with the ids' (its own symbol): the written program would
    differ at a size the original runs at (seq 12; seq = mseq = 20), so the guard fails."""
    window = [helper.make_node("Reshape", ["ids", "four"], ["w"]), *_sum_of("w")]
    multiple = _stopping(window, [_c("four", np.array([-1, 4]))])
    mask = [helper.make_node("Add", ["ids", "mask"], ["both"]), *_sum_of("both")]
    agreeing = _stopping(mask, [], [helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "mseq"])])
    runs = {"multiple": (multiple, {"ids": np.zeros((1, 12), np.int64)}, {"batch": 1, "seq": 4}),
            "agreeing": (agreeing, {"ids": np.zeros((1, 20), np.int64), "mask": np.zeros((1, 20), np.int64)},
                         {"batch": 1, "seq": 4, "mseq": 4})}
    for original, feeds, values in runs.values():
        session(original).run(None, feeds)  # the oracle: the original runs beyond the table
        check = verify_guards(original, _stops_at_table(), values)
        assert not check.passed and "must grow beyond its table" in check.detail


def _grid(prefix: str) -> list[onnx.NodeProto]:
    """``10 * rows[:, None] + cols`` for ``ids``' and ``m``'s lengths, any lengths."""
    nodes = []
    for axis, size in (("r", "len"), ("c", "len_m")):
        nodes += [helper.make_node("Cast", [size], [f"{prefix}{axis}f"], to=TensorProto.FLOAT),
                  helper.make_node("Squeeze", [f"{prefix}{axis}f"], [f"{prefix}{axis}n"]),
                  helper.make_node("Range", ["zero", f"{prefix}{axis}n", "one"], [f"{prefix}{axis}"])]
    return [*nodes, helper.make_node("Unsqueeze", [f"{prefix}r", "axis1"], [f"{prefix}col"]),
            helper.make_node("Mul", [f"{prefix}col", "ten"], [f"{prefix}tens"]),
            helper.make_node("Add", [f"{prefix}tens", f"{prefix}c"], [f"{prefix}y"])]


def _two_sizes(guarded: bool, name: str = "table_if_g1") -> onnx.ModelProto:
    """A ``[seq, total]`` value: the Slice of a ``[8, 16]`` table under the guard over both sizes that
    eqsat.generic writes (Less, Cast, ReduceMin, Cast), or the computation itself; a third input, ``past``, the
    value does not read."""
    rows, cols = 8, 16
    shared = [_c("zero", np.float32(0)), _c("one", np.float32(1)), _c("axis1", np.array([1])), _c("ten", np.float32(10))]
    head = [helper.make_node("Shape", ["ids"], ["len"], start=1, end=2),
            helper.make_node("Shape", ["m"], ["len_m"], start=1, end=2)]
    if guarded:
        table = 10 * np.arange(rows, dtype=np.float32)[:, None] + np.arange(cols, dtype=np.float32)
        then = helper.make_graph([helper.make_node("Slice", ["table", "starts", "ends", "axes"], ["t_y"])], "within", [],
                                 [helper.make_tensor_value_info("t_y", TensorProto.FLOAT, None)])
        beyond = helper.make_graph(_grid("e_"), "beyond", [], [helper.make_tensor_value_info("e_y", TensorProto.FLOAT, None)])
        body = [helper.make_node("Concat", ["len", "len_m"], ["ends"], axis=0),
                helper.make_node("Less", ["ends", "limit"], ["each"]),
                helper.make_node("Cast", ["each"], ["each_i"], to=TensorProto.INT64),
                helper.make_node("ReduceMin", ["each_i"], ["all_i"], keepdims=0),
                helper.make_node("Cast", ["all_i"], ["within"], to=TensorProto.BOOL),
                helper.make_node("If", ["within"], ["y"], name=name, then_branch=then, else_branch=beyond)]
        shared += [_c("table", table), _c("starts", np.array([0, 0])), _c("axes", np.array([0, 1])),
                   _c("limit", np.array([rows + 1, cols + 1]))]
    else:
        body = _grid("o_")
        body[-1].output[0] = "y"
    graph = helper.make_graph(
        head + body, "grid",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("m", TensorProto.INT64, ["batch", "total"]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", 8, "past", 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", "total"])], initializer=shared)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_guard_over_two_sizes_is_checked_beyond_each_bound_and_reads_only_its_inputs():
    model, original = _two_sizes(True), _two_sizes(False)
    feeds = {"past": np.zeros((1, 8, 1, 128), np.float32)}
    for s, t in ((3, 5), (8, 16), (9, 5), (3, 17), (20, 30)):  # the program is the original's within and beyond
        f = {**feeds, "ids": np.zeros((1, s), np.int64), "m": np.zeros((1, t), np.int64)}
        np.testing.assert_allclose(session(model).run(None, f)[0], session(original).run(None, f)[0])
    (guard,) = table_guards(model)
    assert [i.name for i in taken(model, guard, "else_branch").graph.input] == ["ids", "m"]  # `past` is not fed
    check = verify_guards(original, model, {"batch": 1, "seq": 4, "total": 4, "past": 4})
    assert check.passed, check.detail
    assert sorted(check.verified) == ["seq=9 (beyond the tables)", "total=17 (beyond the tables)"]


def test_an_if_of_the_users_own_is_not_taken_for_a_table_guard():
    """An If the user's model holds (on a Less of a size, its branches computing different things) is the user's
    program: only the guards eqsat writes (named ``table_if...``) are checked."""
    model = _two_sizes(True, name="long_context_switch")
    assert table_guards(model) == []
    check = verify_guards(model, model, {"batch": 1, "seq": 4, "total": 4, "past": 4})
    assert check.passed and check.verified == []


def test_a_branch_output_without_a_type_takes_the_other_branchs():
    """The writer may not know a value's element type (0): the branch model types it from the other branch."""
    model = _guarded(_angles("e_", "freq"), "e_y")
    (guard,) = table_guards(model)
    then = next(a.g for a in guard.attribute if a.name == "then_branch")
    then.output[0].type.tensor_type.elem_type = 0
    assert taken(model, guard, "then_branch").graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    check = verify_guards(_original(), model, {"batch": 1, "seq": 4})
    assert check.passed, check.detail


def _reads_m(prefix: str, value: str) -> tuple[list[onnx.NodeProto], str]:
    """``value + 0 * sum(m)``: nodes that read the input ``m`` and change nothing."""
    return [helper.make_node("Cast", ["m"], [f"{prefix}mf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", [f"{prefix}mf"], [f"{prefix}ms"], keepdims=0),
            helper.make_node("Mul", [f"{prefix}ms", "zero"], [f"{prefix}mz"]),
            helper.make_node("Add", [value, f"{prefix}mz"], [f"{prefix}w"])], f"{prefix}w"


@pytest.mark.parametrize("reader", ["else", "then"])
def test_a_guard_whose_branches_read_different_inputs_is_checked(reader):
    """The dynamo Mistral's mask guard: the else-branch reads ``attention_mask``, the table's Slice only the ids'
    length (and the other way round); each branch's model takes its own inputs (feeding one an input it does not
    have is an onnxruntime error, which refused every candidate of that model)."""
    extra, out = _reads_m("e_", "e_y")
    model = _guarded([*_angles("e_", "freq"), *extra], out) if reader == "else" else _guarded(_angles("e_", "freq"),
                                                                                              "e_y")
    if reader == "then":  # the table's Slice plus nothing times m
        guard = next(n for n in model.graph.node if n.op_type == "If")
        then = next(a.g for a in guard.attribute if a.name == "then_branch")
        extra, out = _reads_m("t_", "t_y")
        then.node.extend(extra)
        del then.output[:]
        then.output.extend([helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])
    original = _original()
    for m in (model, original):
        m.graph.input.append(helper.make_tensor_value_info("m", TensorProto.INT64, ["batch", "seq"]))
    (guard,) = table_guards(model)
    within, beyond = taken(model, guard, "then_branch"), taken(model, guard, "else_branch")
    reads = {"then": [i.name for i in within.graph.input], "else": [i.name for i in beyond.graph.input]}
    assert reads[reader] == ["ids", "m"] and reads["else" if reader == "then" else "then"] == ["ids"]
    for seq in (3, BOUND + 4):  # the program is the original's on both sides of the bound (onnxruntime the oracle)
        f = {"ids": np.zeros((2, seq), np.int64), "m": np.ones((2, seq), np.int64)}
        np.testing.assert_allclose(session(model).run(None, f)[0], session(original).run(None, f)[0], rtol=1e-6)
    check = verify_guards(original, model, {"batch": 1, "seq": 4})
    assert check.passed, check.detail
    assert check.verified == [f"seq={BOUND + 1} (beyond the tables)"]


def _shape_reader(also_relu: bool) -> onnx.ModelProto:
    """``x`` read by two Shapes (its batch; all of it) and, where ``also_relu``, a Relu; ``y`` added to itself."""
    nodes = [helper.make_node("Shape", ["x"], ["b"], start=0, end=1), helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Add", ["y", "y"], ["yy"])]
    outs = ["b", "s", "yy"]
    if also_relu:
        nodes.append(helper.make_node("Relu", ["x"], ["r"]))
        outs.append("r")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n", 8]),
                                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT if o in ("yy", "r")
                                                             else TensorProto.INT64, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_input_read_only_for_its_shape_is_fed_its_shape_and_gives_the_same_values():
    """A guard's branch that reads an image only for its batch is checked at a batch of 4097 without an image of
    that batch (a SigLIP's check drew 2.3 GiB of pixels for each branch at each size); onnxruntime is the oracle."""
    model = _shape_reader(also_relu=False)
    fed, by = shapes_fed(model)
    assert by == {"x": "x" + SHAPE_FED}
    a, b = session(model), session(fed)
    for shape in ((1, 3, 8), (4097, 2, 8)):
        x, y = np.zeros(shape, np.float32), np.arange(shape[0], dtype=np.float32)
        want, got = a.run(None, {"x": x, "y": y}), b.run(None, {by["x"]: np.array(shape, np.int64), "y": y})
        for w, g in zip(want, got):
            np.testing.assert_array_equal(w, g)
    assert shapes_fed(_shape_reader(also_relu=True))[1] == {}  # (its values read too: fed as it is)
