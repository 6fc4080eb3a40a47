"""A small helper that builds IR programs with seeded random weights."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np

from eqsat import ir
from eqsat.ir import Graph, Node
from eqsat.shapes import ACT_NONE, ACT_RELU, SAME

VALID = 0


class LazyWeights(Mapping):
    """Weight data generated on first access from (seed, index): listing a model costs no memory."""

    def __init__(self, seed: int):
        self.seed = seed
        self.specs: dict[str, tuple[int, tuple[int, ...], float, float, str]] = {}
        self._data: dict[str, np.ndarray] = {}

    def add(self, name: str, shape: tuple[int, ...], std: float, mean: float, kind: str = "normal") -> None:
        self.specs[name] = (len(self.specs), shape, std, mean, kind)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._data:
            index, shape, std, mean, kind = self.specs[name]
            rng = np.random.default_rng([self.seed, index])
            sample = rng.random(shape) if kind == "uniform" else rng.standard_normal(shape)
            self._data[name] = (mean + std * sample).astype(np.float32)
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def restricted(self, names: set[str]) -> LazyWeights:
        out = LazyWeights(self.seed)
        out.specs = {k: v for k, v in self.specs.items() if k in names}
        out._data = {k: v for k, v in self._data.items() if k in names}
        return out


class Builder:
    """Creates inputs, weights (seeded, fan-in scaled) and operators; ``graph()`` packages the result.

    >>> b = Builder(seed=0); x = b.input((1, 8)); y = b.matmul(x, b.weight((8, 4)))
    >>> b.graph([y]).outputs[0].shape
    (1, 4)
    """

    def __init__(self, seed: int = 0, name: str = "model"):
        self.weights = LazyWeights(seed)
        self.inputs: list[Node] = []
        self.name = name

    # leaves
    def input(self, shape, name: str | None = None) -> Node:
        node = ir.input_(name or f"input_{len(self.inputs)}", shape)
        self.inputs.append(node)
        return node

    def weight(self, shape, std: float | None = None, mean: float = 0.0, name: str | None = None) -> Node:
        """A seeded weight (normal, fan-in scaled unless ``std`` is given), named ``name`` or ``w{index}``."""
        shape = tuple(int(d) for d in shape)
        if std is None:
            fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
            std = math.sqrt(2.0 / max(fan_in, 1))
        return self._weight(shape, std, mean, "normal", name)

    def _weight(self, shape: tuple[int, ...], std: float, mean: float, kind: str, name: str | None = None) -> Node:
        name = name or f"w{len(self.weights)}"
        if name in self.weights.specs:
            raise ValueError(f"weight {name!r} made twice")
        self.weights.add(name, shape, std, mean, kind)
        return ir.weight(name, shape)

    # operators
    def conv(self, x: Node, cout: int, k: int | tuple[int, int], stride: int = 1, pad: int = SAME,
             act: int = ACT_NONE, groups: int = 1, std: float | None = None) -> Node:
        kh, kw = (k, k) if isinstance(k, int) else k
        w = self.weight((cout, x.shape[1] // groups, kh, kw), std=std)
        ph = pw = pad
        if pad == SAME and (kh % 2 == 0 or kw % 2 == 0):
            raise ValueError("SAME padding needs odd kernels")
        return ir.make("conv2d", [x, w], (stride, stride, ph, pw, act))

    def matmul(self, a: Node, b: Node, act: int = ACT_NONE) -> Node:
        return ir.make("matmul", [a, b], (act,))

    def linear(self, x: Node, n: int, act: int = ACT_NONE, std: float | None = None) -> Node:
        return self.matmul(x, self.weight((x.shape[-1], n), std=std), act)

    def relu(self, x: Node) -> Node:
        return ir.make("relu", [x])

    def tanh(self, x: Node) -> Node:
        return ir.make("tanh", [x])

    def sigmoid(self, x: Node) -> Node:
        return ir.make("sigmoid", [x])

    def dropout(self, x: Node) -> Node:
        return ir.make("dropout", [x])

    def add(self, a: Node, b: Node) -> Node:
        return ir.make("ewadd", [a, b])

    def mul(self, a: Node, b: Node) -> Node:
        return ir.make("ewmul", [a, b])

    def maxpool(self, x: Node, k: int, stride: int, pad: int = SAME) -> Node:
        return ir.make("pool", [x], (0, k, k, stride, stride, pad, pad, ACT_NONE))

    def avgpool(self, x: Node, k: int, stride: int, pad: int = SAME) -> Node:
        return ir.make("pool", [x], (1, k, k, stride, stride, pad, pad, ACT_NONE))

    def concat(self, axis: int, *xs: Node) -> Node:
        return ir.make("concat", list(xs), (axis,))

    def reshape(self, x: Node, shape) -> Node:
        return ir.make("reshape", [x], tuple(int(d) for d in shape))

    def transpose(self, x: Node, perm) -> Node:
        return ir.make("transpose", [x], tuple(perm))

    def batchnorm(self, x: Node) -> Node:
        c = x.shape[1]
        scale = self.weight((c,), std=0.1, mean=1.0)
        bias = self.weight((c,), std=0.1)
        mean = self.weight((c,), std=0.1)
        var = self._weight((c,), 0.2, 1.0, "uniform")
        return ir.make("batchnorm", [x, scale, bias, mean, var], (10_000_000,))

    def graph(self, outputs: list[Node]) -> Graph:
        names = tuple(f"output_{i}" for i in range(len(outputs)))
        used = {n.name for n in ir.topo_order(outputs) if n.op == "weight" and n.name is not None}
        return Graph(tuple(self.inputs), tuple(outputs), names, self.weights.restricted(used), name=self.name)


__all__ = ["ACT_NONE", "ACT_RELU", "Builder", "SAME", "VALID"]
