"""The four CNNs that TASO exported (VGG-19, SqueezeNet 1.1, MobileNet-v2, Inception-v3), built to match
those exports operator for operator: unfused ReLUs where TASO has them, binary concat
trees in Inception, batch norm only in MobileNet-v2."""

from __future__ import annotations

from eqsat.ir import Graph

from .builder import ACT_RELU, SAME, VALID, Builder


def vgg19(seed: int = 0, image: int = 224, widths=(64, 128, 256, 512, 512), fc: int = 4096, classes: int = 1000) -> Graph:
    b = Builder(seed, "vgg19")
    x = b.input((1, 3, image, image))
    for width, layers in zip(widths, (2, 2, 4, 4, 4)):
        for _ in range(layers):
            x = b.relu(b.conv(x, width, 3))
        x = b.maxpool(x, 2, 2, VALID)
    x = b.reshape(x, (1, x.shape[1] * x.shape[2] * x.shape[3]))
    for i, n in enumerate((fc, fc, classes)):
        w = b.transpose(b.weight((n, x.shape[1])), (1, 0))
        x = b.matmul(x, w)
        if i < 2:
            x = b.reshape(b.dropout(b.relu(x)), (1, n))
    return b.graph([x])


def squeezenet(seed: int = 0, image: int = 224, classes: int = 1000, scale: int = 1) -> Graph:
    b = Builder(seed, "squeezenet")

    def fire(x, squeeze, expand):
        s = b.relu(b.conv(x, squeeze, 1))
        return b.concat(1, b.relu(b.conv(s, expand, 1)), b.relu(b.conv(s, expand, 3)))

    x = b.input((1, 3, image, image))
    x = b.maxpool(b.relu(b.conv(x, 64 // scale, 3, 2, VALID)), 3, 2, VALID)
    for i, (sq, ex) in enumerate(((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256))):
        x = fire(x, sq // scale, ex // scale)
        if i in (1, 3):
            x = b.maxpool(x, 3, 2, VALID)
    x = b.relu(b.conv(b.dropout(x), classes, 1))
    x = b.avgpool(x, x.shape[2], x.shape[2], VALID)
    return b.graph([b.reshape(x, (1, classes))])


def mobilenetv2(seed: int = 0, image: int = 224, classes: int = 1000, width: float = 1.0) -> Graph:
    b = Builder(seed, "mobilenetv2")
    c = lambda n: max(8, int(n * width))  # noqa: E731

    def cbr(x, cout, k, stride=1, groups=1, relu=True):
        y = b.batchnorm(b.conv(x, cout, k, stride, groups=groups))
        return b.relu(y) if relu else y

    x = b.input((1, 3, image, image))
    x = cbr(x, c(32), 3, 2)
    x = cbr(x, c(32), 1)
    x = cbr(x, c(32), 3, groups=c(32))
    x = cbr(x, c(16), 1, relu=False)
    # strides as in TASO's export (the spec text says the 64 group; the export strides the 96 group)
    for out, repeats, stride in ((24, 2, 2), (32, 3, 2), (64, 4, 1), (96, 3, 2), (160, 3, 2), (320, 1, 1)):
        for r in range(repeats):
            s = stride if r == 0 else 1
            hidden = x.shape[1] * 6
            y = cbr(x, hidden, 1)
            y = cbr(y, hidden, 3, s, groups=hidden)
            y = cbr(y, c(out), 1, relu=False)
            x = b.add(y, x) if s == 1 and x.shape[1] == c(out) else y
    x = cbr(x, c(1280), 1)
    x = b.avgpool(x, x.shape[2], 1, VALID)
    x = b.conv(x, classes, 1)
    return b.graph([b.reshape(x, (1, classes))])


def inceptionv3(seed: int = 0, image: int = 299, width: float = 1.0) -> Graph:
    b = Builder(seed, "inceptionv3")
    c = lambda n: max(4, int(n * width))  # noqa: E731

    def conv(x, n, k, stride=1, pad=SAME):
        return b.conv(x, c(n), k, stride, pad, ACT_RELU)

    def block_a(x, pool_features):
        b1 = conv(x, 64, 1)
        b5 = conv(conv(x, 48, 1), 64, 5)
        b3 = conv(conv(conv(x, 64, 1), 96, 3), 96, 3)
        bp = conv(b.avgpool(x, 3, 1), pool_features, 1)
        return b.concat(1, b.concat(1, b1, b5), b.concat(1, b3, bp))

    def block_b(x):
        b3 = conv(x, 384, 3, 2, VALID)
        bd = conv(conv(conv(x, 64, 1), 96, 3), 96, 3, 2, VALID)
        return b.concat(1, b.avgpool(x, 3, 2, VALID), b.concat(1, b3, bd))

    def block_c(x, c7):
        b1 = conv(x, 192, 1)
        b7 = conv(conv(conv(x, c7, 1), c7, (1, 7)), 192, (7, 1))
        bd = conv(x, c7, 1)
        for n, k in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
            bd = conv(bd, n, k)
        bp = conv(b.avgpool(x, 3, 1), 192, 1)
        return b.concat(1, b.concat(1, b1, b7), b.concat(1, bd, bp))

    def block_d(x):
        b3 = conv(conv(x, 192, 1), 320, 3, 2, VALID)
        b7 = conv(conv(conv(conv(x, 192, 1), 192, (1, 7)), 192, (7, 1)), 192, 3, 2, VALID)
        return b.concat(1, b3, b7, b.maxpool(x, 3, 2, VALID))

    def block_e(x):
        b1 = conv(x, 320, 1)
        t = conv(x, 384, 1)
        b3 = b.concat(1, conv(t, 384, (1, 3)), conv(t, 384, (3, 1)))
        t = conv(conv(x, 448, 1), 384, 3)
        bd = b.concat(1, conv(t, 384, (1, 3)), conv(t, 384, (3, 1)))
        bp = conv(b.maxpool(x, 3, 1), 192, 1)
        return b.concat(1, b1, b3, bd, bp)

    x = b.input((1, 3, image, image))
    x = conv(conv(x, 32, 3, 2, VALID), 32, 3, 1, VALID)
    x = b.maxpool(conv(x, 64, 3), 3, 2, VALID)
    x = b.maxpool(conv(conv(x, 80, 1, 1, VALID), 192, 3, 1, VALID), 3, 2, VALID)
    for pf in (32, 64, 64):
        x = block_a(x, pf)
    x = block_b(x)
    for c7 in (128, 160, 160, 192):
        x = block_c(x, c7)
    x = block_d(x)
    x = block_e(block_e(x))
    x = b.avgpool(x, x.shape[2], 1, VALID)
    return b.graph([x])
