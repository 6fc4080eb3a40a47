"""BERT as TENSAT builds it, and Transformer-Transducer and ViT-Base/Large/Huge in the same style.

BERT (TENSAT's benchmark graph): input [64, 1024]; per layer Q, K, V = x W, reshaped to [64, 16, 64] and
transposed to [16, 64, 64]; logits = Q K (no transpose of K, as TENSAT); out = logits V, transposed back
and reshaped to [64, 1024] and made an output; the next layer's input is relu(x W_lin), so the attention
output is a dead end. No softmax, scaling, layer norm, residuals, feed-forward or biases.

Transformer-Transducer and ViT are in neither reference repository. They are built from the published
sizes in the same style, simplified the same way (no softmax, layer norm, biases; ReLU instead of GELU),
but as real encoder layers: K is transposed so that logits are [heads, S, S] (S differs from the head
size), the attention output is projected and added to the residual, followed by a two-matmul MLP with a
residual. ViT: a patch-embedding conv (kernel = stride = patch), a class token concatenated and a
position embedding added. Transformer-Transducer: an audio encoder over 128 frames of 512 features and
a label encoder over 32 tokens; the joint network is omitted and both encoder outputs are program
outputs.
"""

from __future__ import annotations

from eqsat.ir import Graph, Node

from .builder import ACT_RELU, VALID, Builder


def bert(seed: int = 0, layers: int = 8, seq: int = 64, hidden: int = 1024, heads: int = 16) -> Graph:
    b = Builder(seed, "bert")
    dk = hidden // heads
    x = b.input((seq, hidden))
    outputs = []
    for _ in range(layers):
        std = hidden ** -0.5
        q, k, v = (b.transpose(b.reshape(b.linear(x, hidden, std=std), (seq, heads, dk)), (1, 0, 2)) for _ in range(3))
        att = b.matmul(b.matmul(q, k), v)
        outputs.append(b.reshape(b.transpose(att, (1, 0, 2)), (seq, hidden)))
        x = b.linear(x, hidden, ACT_RELU)
    return b.graph(outputs)


def _encoder_layer(b: Builder, x: Node, heads: int, ff: int, branch: float) -> Node:
    """One encoder layer, its weights scaled so that deep stacks stay finite without layer norm.

    The MLP branch adds about ``branch`` (``(2 * layers) ** -0.5``) times the stream's scale. Without
    softmax the attention branch is cubic in ``x``, and the ReLU MLPs give the stream a component shared by
    all tokens that the sum over tokens amplifies; its output projection divides by the sequence length, as
    softmax's average would, so the branch adds 3-15% to a stream whose scale stays below 1.5 over the 32
    layers of ViT-Huge (simulated in float32 over every paper size).
    """
    seq, d = x.shape
    dk = d // heads
    unit = d ** -0.5

    def split(t: Node, perm) -> Node:
        return b.transpose(b.reshape(t, (seq, heads, dk)), perm)

    q = split(b.linear(x, d, std=unit), (1, 0, 2))
    k = split(b.linear(x, d, std=unit), (1, 2, 0))
    v = split(b.linear(x, d, std=unit), (1, 0, 2))
    logits = b.matmul(q, k)
    ctx = b.reshape(b.transpose(b.matmul(logits, v), (1, 0, 2)), (seq, d))
    x = b.add(x, b.linear(ctx, d, std=0.5 * unit / (seq * dk ** 0.5)))
    h = b.linear(x, ff, ACT_RELU, std=(2 / d) ** 0.5)
    return b.add(x, b.linear(h, d, std=branch * ff ** -0.5))


def vit(seed: int = 0, layers: int = 12, hidden: int = 768, mlp: int = 3072, heads: int = 12, patch: int = 16,
        image: int = 224, name: str = "vit") -> Graph:
    b = Builder(seed, name)
    img = b.input((1, 3, image, image))
    p = b.conv(img, hidden, patch, patch, VALID, std=(3 * patch * patch) ** -0.5)
    n = p.shape[2] * p.shape[3]
    tokens = b.transpose(b.reshape(p, (hidden, n)), (1, 0))
    x = b.concat(0, b.weight((1, hidden), std=0.02), tokens)
    x = b.add(x, b.weight((n + 1, hidden), std=0.02))
    for _ in range(layers):
        x = _encoder_layer(b, x, heads, mlp, (2 * layers) ** -0.5)
    return b.graph([x])


def transformer_transducer(seed: int = 0, audio_layers: int = 18, label_layers: int = 2, hidden: int = 512,
                           heads: int = 8, ff: int = 2048, frames: int = 128, tokens: int = 32) -> Graph:
    b = Builder(seed, "tt")
    outs = []
    for seq, layers, name in ((frames, audio_layers, "audio"), (tokens, label_layers, "labels")):
        x = b.input((seq, hidden), name)
        for _ in range(layers):
            x = _encoder_layer(b, x, heads, ff, (2 * layers) ** -0.5)
        outs.append(x)
    return b.graph(outs)
