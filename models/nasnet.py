"""NASNet-A as TENSAT's benchmark builds it: ResNeXt's stem, three stages of normal cells and a
reduction cell, separable convs as a grouped conv followed by a 1x1 conv, five-input channel concats."""

from __future__ import annotations

from eqsat.ir import Graph, Node

from .builder import ACT_RELU, Builder


def nasneta(seed: int = 0, normal_cells: int = 5, oc: int = 128, image: int = 224, stages: int = 3) -> Graph:
    b = Builder(seed, "nasneta")

    def squeeze(x: Node, n: int) -> Node:
        return b.conv(x, n, 1, act=ACT_RELU)

    def fit(prev: Node, cur: Node, n: int) -> Node:
        if prev.shape[2] == cur.shape[2]:
            return squeeze(prev, n)
        return b.conv(prev, n, 3, 2, act=ACT_RELU)

    def sep(x: Node, n: int, k: int, stride: int = 1) -> Node:
        y = b.conv(x, n, k, stride, groups=n)  # weight [n, C/n, k, k]
        return b.conv(y, n, 1)

    def normal(prev: Node, cur: Node, n: int) -> Node:
        cur = squeeze(cur, n)
        prev = fit(prev, cur, n)
        outs = [b.add(sep(cur, n, 3), cur),
                b.add(sep(prev, n, 3), sep(cur, n, 3)),
                b.add(b.avgpool(cur, 3, 1), prev),
                b.add(b.avgpool(prev, 3, 1), b.avgpool(prev, 3, 1)),
                b.add(sep(prev, n, 3), sep(prev, n, 3))]
        return b.concat(1, *outs)

    def reduction(prev: Node, cur: Node, n: int) -> Node:
        cur = squeeze(cur, n)
        prev = fit(prev, cur, n)
        o0 = b.add(sep(prev, n, 7, 2), sep(cur, n, 5, 2))
        o1 = b.add(b.maxpool(cur, 3, 2), sep(prev, n, 7, 2))
        o2 = b.add(b.avgpool(cur, 3, 2), sep(prev, n, 5, 2))
        o3 = b.add(b.maxpool(cur, 3, 2), sep(o0, n, 3))
        o4 = b.add(b.avgpool(o0, 3, 1), o1)
        return b.concat(1, o0, o1, o2, o3, o4)

    x = b.input((1, 3, image, image))
    x = b.maxpool(b.conv(x, 64, 7, 2, act=ACT_RELU), 3, 2)
    prev = cur = x
    for _ in range(stages):
        for _ in range(normal_cells):
            prev, cur = cur, normal(prev, cur, oc)
        oc *= 2
        prev, cur = cur, reduction(prev, cur, oc)
    return b.graph([cur])
