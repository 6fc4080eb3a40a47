"""Spellings of one program that the runtime runs at different speeds: each rule relates a form that onnxruntime
fuses into one of its own kernels to a form it runs as written, so that the measured cost of each (timed in
the runtime, fused where it fuses) decides which the program keeps. Nothing here says which is faster: on one
CPU the fused kernel wins, on another the pair does.

* ``addnorm_unfuse``: addnorm(a, b, gamma, beta) -> layernorm(ewsum(a, b), gamma, beta). ``addnorm`` is the
  residual Add before a LayerNormalization as the importer finds it, which onnxruntime runs as its
  SkipLayerNormalization kernel; ``ewsum`` writes the add as ONNX Sum, which it leaves unfused
  (:data:`eqsat.onnx.fusions.SKIP_LAYER_NORM`: its constraints, and the spellings that defeat it).
* ``addnorm_fuse``: layernorm(ewadd(a, b), gamma, beta) -> addnorm(a, b, gamma, beta) for a and b of one shape: the
  recognition of the importer's matcher as a rule, so that a residual Add that other rewrites bring before a
  LayerNormalization (or an exporter's variant the matcher misses, or an Add with another reader, which the
  matcher leaves apart) meets the fused spelling too.
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ops.composite import float_bits

from ..rule import Rule
from .sampling import dim, pick


def _addnorm_instance(rng):
    """An addnorm over a tensor of rank 1-4 (both operands fed, or one a weight; b of a's shape, or broadcast along
    the leading axes: a position table added to a batch), with layernorm's epsilons."""
    shape = tuple(dim(rng, 1, 5) for _ in range(int(rng.integers(1, 5))))
    a = ir.input_("a", shape)
    b_shape = shape if rng.random() < 0.7 else tuple(1 if k < len(shape) - 1 and rng.random() < 0.5 else d
                                                     for k, d in enumerate(shape))
    b = ir.input_("b", b_shape) if rng.random() < 0.8 else ir.weight("b", b_shape)
    params = [ir.weight(n, (shape[-1],)) for n in ("g", "beta")]
    eps = float_bits(pick(rng, (1e-5, 1e-12, 1e-6)))
    return [ir.make("addnorm", [a, b, *params], (eps,))]


def _layernorm_of_sum(rng):
    """layernorm(a + b) with a and b of one shape (rank 1-4), or, as a near miss, b broadcast (a bias)."""
    shape = tuple(dim(rng, 1, 5) for _ in range(int(rng.integers(1, 5))))
    a = ir.input_("a", shape)
    b_shape = shape if rng.random() < 0.7 else (1,) * (len(shape) - 1) + shape[-1:]
    b = ir.input_("b", b_shape) if rng.random() < 0.8 else ir.weight("b", b_shape)
    params = [ir.weight(n, (shape[-1],)) for n in ("g", "beta")]
    eps = float_bits(pick(rng, (1e-5, 1e-12, 1e-6)))
    return [ir.make("layernorm", [ir.make("ewadd", [a, b]), *params], (eps,))]


rules = [
    Rule("addnorm_unfuse", "single", "ours", "addnorm(a, b, g, beta) -> layernorm(ewsum(a, b), g, beta)",
         (("(= r (AddNorm eps a b g bb))", "(Pend r (LayerNorm eps (Ewsum a b) g bb))"),),
         example=_addnorm_instance),
    Rule("addnorm_fuse", "single", "ours", "layernorm(ewadd(a, b), g, beta) -> addnorm(a, b, g, beta), a and b of one shape",
         (("(= r (LayerNorm eps (Ewadd a b) g bb)) (= (shape a) (shape b))", "(Pend r (AddNorm eps a b g bb))"),),
         example=_layernorm_of_sum),
]
