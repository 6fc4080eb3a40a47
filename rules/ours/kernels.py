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
* ``rotary_kernel``: rotary(x, cos, sin) -> rope(x, cos, sin) where cos and sin are [1 or B, 1, S, D] (one angle
  per position, shared by the heads): the rotary embedding LLaMA and Qwen exports decompose (which onnxruntime
  never fuses) as opset 23's ``RotaryEmbedding``.
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


def _rotary_instance(rng):
    """A ``rotary`` of rank 4 whose cos and sin are shared by the heads (dimension 1 of 1), or, as near misses,
    one of rank 3 or with cos and sin per head."""
    rank = 3 if rng.random() < 0.2 else 4
    x_shape = tuple(dim(rng, 1, 3) for _ in range(rank - 2)) + (dim(rng, 1, 5), 2 * dim(rng, 1, 4))
    table = tuple(1 if k == 1 and rank == 4 and rng.random() < 0.8 else d if rng.random() < 0.7 else 1
                  for k, d in enumerate(x_shape[:-1])) + (x_shape[-1],)
    x = ir.input_("x", x_shape)
    return [ir.make("rotary", [x, ir.input_("cos", table), ir.input_("sin", table)])]


rules = [
    Rule("attention_kernel", "single", "ours", "attention(q, kt, v[, mask]) -> sdpa(q, kt, v[, mask])",
         (("(= root (Attention c q kt v))", "(Pend root (Sdpa c q kt v))"),
          ("(= root (AttentionMasked c q kt v mk))", "(Pend root (SdpaMasked c q kt v mk))")),
         example=_attention_instance),
    Rule("rotary_kernel", "single", "ours", "rotary(x, cos, sin) -> rope(x, cos, sin), cos and sin [1 or B, 1, S, D]",
         (("(= root (Rotary x cos sin)) (= (S4 c0 1 s d) (shape cos))", "(Pend root (Rope x cos sin))"),),
         example=_rotary_instance),
]
