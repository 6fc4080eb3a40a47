"""A BERT-like encoder as exporters write it, for the README's first command: post-LN layers whose residual
Adds feed LayerNormalizations (the IR's ``addnorm``, as the importer finds them), softmax attention with its
scale, biases and a GELU feed-forward. Not one of the MCTS paper's architectures (``ModelSpec.in_paper``).

Its size (4 layers, sequence 128, hidden 384, 12 heads, feed-forward 1536) is MiniLM-L4's, where onnxruntime's
SkipLayerNormalization fusion of each residual Add + LayerNormalization is slower than the pair on this project's
CPUs (issue 26): the spelling rule ``addnorm_unfuse`` and the measured cost find the faster program.
"""

from __future__ import annotations

import math

from eqsat import ir
from eqsat.ir import Graph, Node
from eqsat.ops.composite import GELU_ERF, float_bits

from .builder import Builder

EPS = 1e-12


def _linear(b: Builder, x: Node, n: int) -> Node:
    std = x.shape[-1] ** -0.5
    return ir.make("linear", [x, b.weight((x.shape[-1], n), std=std), b.weight((n,), std=0.02)])


def _norm_params(b: Builder, d: int) -> list[Node]:
    return [b.weight((d,), std=0.05, mean=1.0), b.weight((d,), std=0.02)]


def _layer(b: Builder, x: Node, heads: int, ff: int) -> Node:
    seq, d = x.shape
    dk = d // heads

    def split(t: Node, perm: tuple[int, ...]) -> Node:
        return b.transpose(b.reshape(t, (seq, heads, dk)), perm)

    q, k, v = (split(_linear(b, x, d), perm) for perm in ((1, 0, 2), (1, 2, 0), (1, 0, 2)))
    scores = ir.make("scale", [b.matmul(q, k)], (float_bits(1 / math.sqrt(dk)),))
    probs = ir.make("softmax", [scores], (2,))
    ctx = b.reshape(b.transpose(b.matmul(probs, v), (1, 0, 2)), (seq, d))
    eps = (float_bits(EPS),)
    x = ir.make("addnorm", [x, _linear(b, ctx, d), *_norm_params(b, d)], eps)
    hidden = ir.make("gelu", [_linear(b, x, ff)], (GELU_ERF,))
    return ir.make("addnorm", [x, _linear(b, hidden, d), *_norm_params(b, d)], eps)


def bert_ln(seed: int = 0, layers: int = 4, seq: int = 128, hidden: int = 384, heads: int = 12,
            ff: int = 1536) -> Graph:
    b = Builder(seed, "bert-ln")
    x = b.input((seq, hidden))
    for _ in range(layers):
        x = _layer(b, x, heads, ff)
    return b.graph([x])


__all__ = ["bert_ln"]
