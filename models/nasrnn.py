"""NASRNN as TENSAT's benchmark builds it: 5 steps of the NAS-discovered recurrent cell, hidden
size 512, eight input/state projection pairs per step (new weights each), the initial state a weight."""

from __future__ import annotations

from eqsat.ir import Graph

from .builder import Builder


def nasrnn(seed: int = 0, steps: int = 5, hidden: int = 512) -> Graph:
    b = Builder(seed, "nasrnn")
    std = hidden ** -0.5
    xs = [b.input((1, hidden), f"x_{t}") for t in range(steps)]
    h = b.weight((1, hidden), std=1.0)
    for x in xs:
        t = [b.add(b.linear(x, hidden, std=std), b.linear(h, hidden, std=std)) for _ in range(8)]
        m0 = b.add(b.relu(t[0]), b.sigmoid(t[3]))
        m1 = b.add(b.sigmoid(t[1]), b.tanh(t[2]))
        m2 = b.mul(b.sigmoid(t[4]), b.tanh(t[5]))
        m3 = b.mul(b.sigmoid(t[6]), b.relu(t[7]))
        m4 = b.add(b.sigmoid(m1), b.tanh(m2))
        m5 = b.mul(b.tanh(m0), b.tanh(m3))
        m6 = b.mul(b.tanh(m4), b.tanh(m5))
        h = b.tanh(m6)
    return b.graph([h])
