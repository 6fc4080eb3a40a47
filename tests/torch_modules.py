"""Small torch modules exported inside the tests (seeded; nothing downloaded)."""

from __future__ import annotations

import torch
from torch import nn


class Mixed(nn.Module):
    """conv, batch norm, linear, layer norm, attention."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.proj = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.att = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))            # [B, 8, H, W]
        t = y.flatten(2).transpose(1, 2)                   # [B, HW, 8]
        t = self.ln(self.proj(t))
        a, _ = self.att(t, t, t)
        return a + t


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """ResNet-18's structure (stem, 4 stages of 2 basic blocks, pool, fc), at a reduced width."""

    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            cout = width * mult
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class EncoderLayer(nn.Module):
    """A BERT-like encoder layer: Q/K/V with biases, softmax attention, layer norms, GELU feed-forward."""

    def __init__(self, d=32, heads=4, ff=64):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.h, self.dk).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) / self.dk ** 0.5, dim=-1) @ v
        x = self.ln1(x + self.o(att.transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


class BertLike(nn.Module):
    def __init__(self, layers=2, d=32, heads=4, ff=64):
        super().__init__()
        self.layers = nn.Sequential(*(EncoderLayer(d, heads, ff) for _ in range(layers)))

    def forward(self, x):
        return self.layers(x)


def seeded(cls, *args, seed=0, **kwargs):
    torch.manual_seed(seed)
    m = cls(*args, **kwargs).eval()
    # non-trivial batch-norm statistics so that folding them is observable
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
    return m


class Experts(nn.Module):
    """A mixture of experts as transformers' traceable ``batched_mm`` writes it: a softmax router's top-k
    (``normalize``: divided by their sum; ``logits_first``: a softmax of the top k logits), each token's row repeated
    k times, each copy multiplied by its expert's gathered matrix (``bmm``; ``transposed``: the weights stored
    [E, in, out]), a gated activation (``gate``: SiLU; ``gpt_oss``: GPT-OSS's biases and clamped SwiGLU over
    interleaved rows), the copies weighed and summed, and a residual."""

    def __init__(self, hidden=32, inter=48, experts=4, top_k=2, transposed=False, normalize=False,
                 logits_first=False, gate=nn.functional.silu, gpt_oss=False):
        super().__init__()
        self.top_k, self.transposed, self.normalize, self.logits_first, self.gate, self.gpt_oss = \
            top_k, transposed, normalize, logits_first, gate, gpt_oss
        self.norm = nn.LayerNorm(hidden)
        self.router = nn.Linear(hidden, experts, bias=False)
        up = (experts, hidden, 2 * inter) if transposed else (experts, 2 * inter, hidden)
        down = (experts, inter, hidden) if transposed else (experts, hidden, inter)
        self.gate_up = nn.Parameter(torch.randn(up) * 0.1)
        self.down = nn.Parameter(torch.randn(down) * 0.1)
        if gpt_oss:  # biases, and a clamped SwiGLU over interleaved gate and up rows
            self.gate_up_bias = nn.Parameter(torch.randn(experts, 2 * inter) * 0.1)
            self.down_bias = nn.Parameter(torch.randn(experts, hidden) * 0.1)

    def _linear(self, x, w):
        if self.transposed:
            return torch.bmm(x.unsqueeze(1), w).squeeze(1)
        return torch.bmm(w, x.unsqueeze(-1)).squeeze(-1)

    def forward(self, x):
        b, t, h = x.shape
        rows = self.norm(x).reshape(-1, h)
        if self.logits_first:  # the top k of the logits, a softmax of those (GraniteMoE, GPT-OSS)
            weights, ids = torch.topk(self.router(rows), self.top_k, dim=-1)
            weights = torch.softmax(weights, dim=-1)
        else:
            weights, ids = torch.topk(torch.softmax(self.router(rows), dim=-1), self.top_k, dim=-1)
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        copies, ids = rows.repeat_interleave(ids.size(-1), dim=0), ids.reshape(-1)  # k read off a shape, as transformers
        if self.gpt_oss:
            both = self._linear(copies, self.gate_up[ids]) + self.gate_up_bias[ids]
            gate, up = both[..., ::2].clamp(max=7.0), both[..., 1::2].clamp(min=-7.0, max=7.0)
            out = self._linear((up + 1) * (gate * torch.sigmoid(gate * 1.702)), self.down[ids]) + self.down_bias[ids]
        else:
            gate, up = self._linear(copies, self.gate_up[ids]).chunk(2, dim=-1)
            out = self._linear(self.gate(gate) * up, self.down[ids])
        out = (out * weights.reshape(-1, 1)).view(-1, self.top_k, rows.shape[-1]).sum(dim=1)  # as transformers
        return x + out.reshape(b, t, h)


class ExpertsStack(nn.Module):
    """``layers`` :class:`Experts` layers in a row (repeated blocks)."""

    def __init__(self, layers=4, **kwargs):
        super().__init__()
        self.layers = nn.ModuleList([Experts(**kwargs) for _ in range(layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
