"""A BERT-style encoder spelled the way torch's exporters write it, for a first run that shows a measured win.

Not one of the MCTS paper's benchmarks (TENSAT's ``bert`` is 2-D, [64, 1024], without softmax, layer norm or
residuals): this one holds what an exported BERT holds, as the importer reads such an export. The input is
the embeddings' output ``hidden_states`` [1, S, D] and an additive ``attention_mask`` [1, 1, 1, S] (0 where
kept, a large negative value where masked: what BERT's ``get_extended_attention_mask`` computes); per layer
(post-LayerNorm, as BERT):

* Q, K, V: three ``linear`` (MatMul + Add of a bias), each reshaped to [1, S, H, D / H] and transposed to
  heads, K to [1, H, D / H, S] (the transposed keys the exporters hold);
* ``attention``: softmax(Q K^T / sqrt(D / H) + mask) V, the decomposition exporters write;
* the context transposed back and reshaped to [1, S, D], an output ``linear``, and the residual Add before a
  LayerNormalization (``addnorm``, eps 1e-12);
* the feed-forward block: ``linear`` to 4 D, GELU (erf), ``linear`` back to D, residual Add + LayerNormalization.

The weights are named for their place (``layer{i}.{part}.{weight,bias}``: ``layer0.query.weight``, ...), so that a
second evaluator can compute the same forward from them (tests/models/test_models_encoder.py).
"""

from __future__ import annotations

from eqsat import ir
from eqsat.ir import Graph, Node
from eqsat.ops.composite import float_bits

from .builder import Builder

EPS = 1e-12
"""BERT's LayerNormalization epsilon"""

def _linear(b: Builder, x: Node, n: int, name: str) -> Node:
    """x @ W + bias, W [k, n] (the transposed torch Linear weight the exporters fold into an initializer)."""
    k = x.shape[-1]
    w = b.weight((k, n), std=k ** -0.5, name=f"{name}.weight")
    bias = b.weight((n,), std=0.02, name=f"{name}.bias")
    return ir.make("linear", [x, w, bias])


def _add_norm(b: Builder, x: Node, residual: Node, name: str) -> Node:
    """LayerNormalization(x + residual): the residual Add before a LayerNormalization, as one ``addnorm``."""
    d = x.shape[-1]
    gamma = b.weight((d,), std=0.1, mean=1.0, name=f"{name}.weight")
    beta = b.weight((d,), std=0.02, name=f"{name}.bias")
    return ir.make("addnorm", [x, residual, gamma, beta], (float_bits(EPS),))


def encoder(seed: int = 0, layers: int = 2, seq: int = 128, hidden: int = 64, heads: int = 4) -> Graph:
    """The encoder: ``layers`` post-LayerNorm layers of width ``hidden`` over ``seq`` tokens, MLP 4 x ``hidden``."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    b = Builder(seed, "encoder")
    dk = hidden // heads
    x = b.input((1, seq, hidden), "hidden_states")
    mask = b.input((1, 1, 1, seq), "attention_mask")
    scale = float_bits(dk ** -0.5)

    def split(t: Node, perm: tuple[int, ...]) -> Node:
        return b.transpose(b.reshape(t, (1, seq, heads, dk)), perm)

    for i in range(layers):
        q = split(_linear(b, x, hidden, f"layer{i}.query"), (0, 2, 1, 3))
        kt = split(_linear(b, x, hidden, f"layer{i}.key"), (0, 2, 3, 1))
        v = split(_linear(b, x, hidden, f"layer{i}.value"), (0, 2, 1, 3))
        ctx = ir.make("attention", [q, kt, v, mask], (scale,))
        ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (1, seq, hidden))
        x = _add_norm(b, _linear(b, ctx, hidden, f"layer{i}.attention.output"), x, f"layer{i}.attention.norm")
        h = ir.make("gelu", [_linear(b, x, 4 * hidden, f"layer{i}.intermediate")], (0,))
        x = _add_norm(b, _linear(b, h, hidden, f"layer{i}.output"), x, f"layer{i}.output.norm")
    return b.graph([x])


__all__ = ["EPS", "encoder"]
