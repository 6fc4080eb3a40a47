"""ResNet-50 (TENSAT's: no stem, pooling or classifier) and ResNeXt-50 (stem, 32-group 3x3 convs), with
ReLU fused into the convolutions and bottleneck blocks, as TENSAT's graphs have them."""

from __future__ import annotations

from eqsat.ir import Graph, Node

from .builder import ACT_NONE, ACT_RELU, Builder


def _bottleneck(b: Builder, x: Node, width: int, out: int, stride: int, groups: int) -> Node:
    y = b.conv(x, width, 1, act=ACT_RELU)
    y = b.conv(y, width, 3, stride, act=ACT_RELU, groups=groups)
    y = b.conv(y, out, 1, act=ACT_NONE)
    short = x
    if stride > 1 or x.shape[1] != out:
        short = b.conv(x, out, 1, stride, act=ACT_RELU)
    return b.relu(b.add(y, short))


def _stages(b: Builder, x: Node, blocks, widths, expansion: int, groups: int) -> Node:
    for stage, (n, width) in enumerate(zip(blocks, widths)):
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _bottleneck(b, x, width, width * expansion, stride, groups)
    return x


def resnet50(seed: int = 0, blocks=(3, 4, 6, 3), widths=(64, 128, 256, 512), spatial: int = 56) -> Graph:
    b = Builder(seed, "resnet50")
    x = b.input((1, 64, spatial, spatial))
    return b.graph([_stages(b, x, blocks, widths, 4, 1)])


def resnext50(seed: int = 0, blocks=(3, 4, 6, 3), widths=(128, 256, 512, 1024), image: int = 224,
              groups: int = 32) -> Graph:
    b = Builder(seed, "resnext50")
    x = b.input((1, 3, image, image))
    x = b.maxpool(b.conv(x, 64, 7, 2, act=ACT_RELU), 3, 2)
    return b.graph([_stages(b, x, blocks, widths, 2, groups)])
