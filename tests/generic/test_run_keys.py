"""The runs that fit a program's sizes are kept under content keys of the values they ran
(:mod:`eqsat.generic.keys`), so that a candidate's rewrite reads what an earlier candidate's ran where the two
compute a value alike under other names. Oracles: the programs written without keeping any run (byte for byte), the
original in onnxruntime at other sizes, and the keys of hand-built programs whose computations are known."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import audio_attention

from eqsat.generic import Original, make_generic
from eqsat.generic.keys import Keys
from eqsat.onnx import session

VALUES = {"batch": 1, "length": 64}


def _ints(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _program(prefix: str, index: int = 1, axis: int = 0, body: bool = False) -> onnx.ModelProto:
    """x -> Shape -> Gather(index) -> Concat with [-1] -> Reshape x, each value named with ``prefix``."""
    p = prefix
    nodes = [helper.make_node("Shape", ["x"], [p + "shape"]),
             helper.make_node("Gather", [p + "shape", p + "index"], [p + "size"], axis=axis),
             helper.make_node("Concat", [p + "size", p + "rest"], [p + "target"], axis=0),
             helper.make_node("Reshape", ["x", p + "target"], [p + "y"])]
    if body:  # an If whose branch reads an outer value by name
        branch = helper.make_graph([helper.make_node("Identity", [p + "y"], ["inner"])], "b", [],
                                   [helper.make_tensor_value_info("inner", TensorProto.FLOAT, None)])
        nodes += [helper.make_node("If", ["flag"], [p + "chosen"], then_branch=branch, else_branch=branch),
                  helper.make_node("Relu", [p + "chosen"], [p + "after"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 4])],
                              [], [_ints(p + "index", index), _ints(p + "rest", -1)])
    return helper.make_model(graph)


def _keys(model: onnx.ModelProto, keys: Keys | None = None) -> dict:
    g = model.graph
    return (keys or Keys()).of_nodes(g.input, g.node, {t.name: t for t in g.initializer})


def test_values_computed_alike_under_other_names_have_one_key_and_others_do_not():
    keys = Keys()
    a, b = _keys(_program("a_"), keys), _keys(_program("b_"), keys)
    assert all(a["a_" + n] == b["b_" + n] is not None for n in ("shape", "size", "target", "y"))
    other_index = _keys(_program("a_", index=0))
    assert other_index["a_shape"] == a["a_shape"] and other_index["a_size"] != a["a_size"]  # a constant's content
    other_attribute = _keys(_program("a_", axis=-1))
    assert other_attribute["a_size"] != a["a_size"]
    assert len({a["a_shape"], a["a_size"], a["a_target"], a["a_y"]}) == 4


def test_an_input_declared_otherwise_is_another_value():
    wider = _program("a_")
    wider.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 8
    assert _keys(wider)["a_shape"] != _keys(_program("a_"))["a_shape"]


def test_a_node_with_a_subgraph_and_its_readers_have_no_key():
    keys = _keys(_program("a_", body=True))
    assert keys["a_y"] is not None and keys["a_chosen"] is None and keys["a_after"] is None


def test_a_second_candidate_reads_the_first_ones_runs_and_is_written_the_same():
    """The audio program written as two candidates (the second under other names, as a layer replayed from another
    one's program): with the runs kept, the second reads the first's and runs fewer prefixes; without, both run
    theirs. The programs are the same bytes either way, and compute the original's outputs at other sizes. (Its
    samples halved by a Slice of step 2 first: a size fitted from runs; the strided Conv's alone needs none.)"""
    original = audio_attention(static=False, halved=True)
    candidates = [audio_attention(static=True, halved=True), audio_attention(static=True, names="copy_", halved=True)]

    class Forget(dict):
        def __setitem__(self, key, value) -> None:  # keeps no run
            pass

    forgetting = Original(original, VALUES)
    forgetting._sized = Forget()
    keeping = Original(original, VALUES)
    plain = [make_generic(c, original, VALUES, forgetting).model for c in candidates]
    kept = [make_generic(c, original, VALUES, keeping).model for c in candidates]
    assert [m.SerializeToString() for m in kept] == [m.SerializeToString() for m in plain]
    assert forgetting.reread == 0 and keeping.reread > 0 and keeping.probed < forgetting.probed
    ref, rng = session(original), np.random.default_rng(4)
    for program in kept:
        got = session(program)
        for b, n in [(2, 64), (3, 50), (1, 101)]:
            feeds = {"samples": rng.standard_normal((b, n)).astype(np.float32)}
            np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_a_failed_run_is_kept_for_its_batch_and_a_value_failing_alone_fails_every_batch():
    """``a`` (the input's shape) runs at every size; ``b`` (the input plus a table of 8) only at 8 (onnxruntime
    refuses the broadcast elsewhere, the oracle). A batch of both refused at 16 is refused again without a run,
    ``a`` alone still runs there, ``b`` alone fails, and then every batch holding ``b`` fails without a run."""
    table = numpy_helper.from_array(np.arange(8, dtype=np.float32), "table")
    nodes = [helper.make_node("Shape", ["x"], ["a"]), helper.make_node("Add", ["x", "table"], ["b"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    keys = _keys(model)
    made = []

    def program() -> onnx.ModelProto:
        made.append(1)
        return model

    facts = Original(model, {"n": 8})
    both = facts.runs_of(program, ["a", "b"], keys, shapes=True)
    assert both({"n": 8}) == [[1], [8]] and both({"n": 16}) is None and facts.probed == 2
    assert facts.runs_of(program, ["b", "a"], keys, shapes=True)({"n": 16}) is None and facts.probed == 2
    assert facts.runs_of(program, ["a"], keys, shapes=True)({"n": 16}) == [[1]] and facts.probed == 3
    assert facts.runs_of(program, ["b"], keys, shapes=True)({"n": 16}) is None and facts.probed == 4
    assert facts.runs_of(program, ["a", "b"], keys, shapes=True)({"n": 16}) is None and facts.probed == 4
    assert facts.runs_of(program, ["a", "b"], keys, shapes=True)({"n": 8}) == [[1], [8]] and facts.probed == 4
    assert len(made) == 3  # the program made only for the asks that ran


def test_a_program_changed_in_place_is_keyed_as_a_new_one_would_be():
    """The keys are kept across asks (a node hashed once): a node whose attribute, input or operator changed in
    place between two asks is keyed as a fresh :class:`Keys` keys it (the oracle: no ask before), not as before."""
    model = _program("a_")
    keys = Keys()
    before = _keys(model, keys)
    gather, concat = model.graph.node[1], model.graph.node[2]
    gather.attribute[0].i = -1  # the axis, in place
    after = _keys(model, keys)
    assert after == _keys(model) and after["a_size"] != before["a_size"] and after["a_shape"] == before["a_shape"]
    concat.input[0], concat.input[1] = concat.input[1], concat.input[0]
    swapped = _keys(model, keys)
    assert swapped == _keys(model) and swapped["a_target"] != after["a_target"]
    concat.op_type = "Sum"
    assert _keys(model, keys) == _keys(model) and _keys(model, keys)["a_target"] != swapped["a_target"]
    gather.attribute[0].i = 0  # back: the first keys again
    concat.op_type, concat.input[0], concat.input[1] = "Concat", concat.input[1], concat.input[0]
    assert _keys(model, keys) == before


def test_nodes_alike_but_for_their_number_of_outputs_key_every_output():
    """Two Splits of one input into two and three parts (no ``split`` input: equal parts) compute different values:
    every output of each gets a key, the one a fresh :class:`Keys` gives, and the two Splits' first parts differ
    in what they compute only through the number of outputs."""
    nodes = [helper.make_node("Split", ["x"], ["a0", "a1"], axis=1),
             helper.make_node("Split", ["x"], ["b0", "b1", "b2"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    keys = Keys()
    kept = _keys(model, keys)
    assert all(kept[o] is not None for o in ("a0", "a1", "b0", "b1", "b2"))
    assert _keys(model, keys) == kept == _keys(model)
    assert len({kept["a0"], kept["a1"], kept["b0"], kept["b1"], kept["b2"]}) == 5
