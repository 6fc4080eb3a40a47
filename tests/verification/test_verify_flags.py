"""A verification's random draws take both sides of a flag (a bool input of one element, such as a merged decoder's
``use_cache_branch``): a candidate wrong on one side only is found whatever the seed (drawn at random, two draws
took one side at two seeds of six)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from eqsat.verification import Verifier


def _flagged(other_op: str) -> onnx.ModelProto:
    def branch(op: str, out: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [out])], out, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])])
    node = helper.make_node("If", ["flag"], ["y"], then_branch=branch("Relu", "a"), else_branch=branch(other_op, "b"))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                            helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("seed", range(6))
def test_a_candidate_wrong_on_one_side_of_a_flag_fails_at_every_seed(seed):
    original, wrong = _flagged("Neg"), _flagged("Abs")  # the same where the flag is True, not where it is False
    assert Verifier(original, seed=seed, draws=2).check(original).passed
    check = Verifier(original, seed=seed, draws=2).check(wrong)
    assert not check.passed and "differs" in check.detail
