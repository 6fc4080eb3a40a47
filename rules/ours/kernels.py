"""The runtime's kernels as operators: each rule relates an IR operator's decomposition (as the importer and the
other rules hold it) to the operator written as one kernel of the runtime, so that the measured cost of each,
timed as onnxruntime runs it, decides which the program keeps. Nothing here says which is faster; the kernels
are exported only where the model's opset has them or an opset upgrade takes it there (:mod:`eqsat.onnx.kernels`),
and these rules join a search only where onnxruntime runs the kernels and ``--portable`` is off
(:func:`eqsat.rules.registry.rule_set`).

* ``attention_kernel``: attention(q, kt, v[, mask]) -> sdpa(q, kt, v[, mask]): the decomposed attention core
  (MatMul, scale, mask Add, Softmax, MatMul, which onnxruntime runs as FusedMatMul + Softmax + MatMul) as opset
  23's ``Attention``. ``attention_split`` relates ``attention`` to its parts, so the kernel is reached from any
  spelling that rule recombines.
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ops.attention import RANKS
from eqsat.ops.composite import float_bits

from ..rule import Rule
from .attention import SCALES
from .sampling import broadcastable, dim, pick


def _attention_instance(rng):
    """An ``attention`` of rank 3 or 4 (masked half the time, the mask broadcast over some dimensions), beside
    its parts (a matmul, scale, softmax and matmul), on which the rule does not fire."""
    rank = pick(rng, RANKS)
    lead = tuple(dim(rng, 1, 3) for _ in range(rank - 2))
    rows, d, keys, dv = (dim(rng, 1, 5) for _ in range(4))
    q, kt, v = ir.input_("q", lead + (rows, d)), ir.input_("kt", lead + (d, keys)), ir.input_("v", lead + (keys, dv))
    scale = float_bits(pick(rng, SCALES))
    operands = [q, kt, v, ir.input_("mask", broadcastable(rng, lead + (rows, keys)))] if rng.random() < 0.5 \
        else [q, kt, v]
    scores = ir.make("scale", [ir.make("matmul", [q, kt], (0,))], (scale,))
    parts = ir.make("matmul", [ir.make("softmax", [scores], (rank - 1,)), v], (0,))
    return [ir.make("attention", operands, (scale,)), parts]


rules = [
    Rule("attention_kernel", "single", "ours", "attention(q, kt, v[, mask]) -> sdpa(q, kt, v[, mask])",
         (("(= root (Attention c q kt v))", "(Pend root (Sdpa c q kt v))"),
          ("(= root (AttentionMasked c q kt v mk))", "(Pend root (SdpaMasked c q kt v mk))")),
         example=_attention_instance),
]
