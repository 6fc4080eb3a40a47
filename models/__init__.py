"""The built-in architectures, built in code with seeded random weights: the 13 benchmark architectures of the
MCTS paper (:data:`BENCHMARKS`) and ``encoder``, a BERT-style encoder spelled as torch's exporters write it (the
README's first run).

``build(name)`` gives the paper's size (``encoder``: its default size); ``build(name, small=True)`` a reduced
size for fast tests (fewer layers or channels, same structure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from eqsat.errors import InputError
from eqsat.ir import Graph

from .cnn_taso import inceptionv3, mobilenetv2, squeezenet, vgg19
from .encoder import encoder
from .nasnet import nasneta
from .nasrnn import nasrnn
from .resnet import resnet50, resnext50
from .transformer import bert, transformer_transducer, vit


@dataclass(frozen=True)
class ModelSpec:
    name: str
    fn: Callable[..., Graph]
    description: str
    paper: dict = field(default_factory=dict)
    small: dict = field(default_factory=dict)
    k_multi: int = 1
    """the number of the first iterations of TENSAT's schedule that apply the multi-pattern rules too (TENSAT's
    per-model setting; the later iterations apply only the single-pattern ones)"""
    rule_set: str = "default"
    """the rule-set variant the model's runs default to (eqsat.rules.RULE_SETS)"""
    benchmark: bool = True
    """one of the MCTS paper's 13 benchmark architectures (the paper's reproduction and sweeps run these)"""


MODELS: dict[str, ModelSpec] = {m.name: m for m in [
    ModelSpec("bert", bert, "BERT as in TENSAT: 8 attention layers, [64, 1024]", {},
              {"layers": 2, "seq": 16, "hidden": 64, "heads": 4}, 1),
    ModelSpec("inceptionv3", inceptionv3, "Inception-v3 (TASO export), 299x299", {}, {"image": 139, "width": 0.25}, 2),
    ModelSpec("mobilenetv2", mobilenetv2, "MobileNet-v2 (TASO export), 224x224", {}, {"image": 64, "width": 0.25}, 1),
    ModelSpec("nasneta", nasneta, "NASNet-A as in TENSAT, 224x224", {},
              {"normal_cells": 1, "oc": 16, "image": 64}, 1),
    ModelSpec("nasrnn", nasrnn, "NASRNN as in TENSAT: 5 steps, hidden 512", {}, {"steps": 2, "hidden": 64}, 3,
              rule_set="nasrnn"),
    ModelSpec("resnet50", resnet50, "ResNet-50 as in TENSAT (no stem/head), [1, 64, 56, 56]", {},
              {"blocks": (1, 1, 1, 1), "widths": (8, 16, 32, 64), "spatial": 16}, 4),
    ModelSpec("resnext50", resnext50, "ResNeXt-50 (32 groups), 224x224", {},
              {"blocks": (1, 1, 1, 1), "widths": (32, 64, 128, 256), "image": 64, "groups": 8}, 4),
    ModelSpec("squeezenet", squeezenet, "SqueezeNet 1.1 (TASO export), 224x224", {}, {"image": 96, "scale": 4}, 3),
    ModelSpec("vgg19", vgg19, "VGG-19 (TASO export), 224x224", {},
              {"image": 32, "widths": (8, 16, 16, 32, 32), "fc": 64, "classes": 10}, 1),
    ModelSpec("tt", transformer_transducer, "Transformer-Transducer: 18 audio + 2 label encoder layers, d=512", {},
              {"audio_layers": 2, "label_layers": 1, "hidden": 64, "heads": 4, "ff": 128, "frames": 16, "tokens": 8}, 2),
    ModelSpec("vit-base", vit, "ViT-B/16: 12 layers, d=768, MLP 3072, 12 heads, 197 tokens",
              {"name": "vit-base"}, {"name": "vit-base", "layers": 2, "hidden": 64, "mlp": 128, "heads": 4, "image": 64}, 2),
    ModelSpec("vit-large", vit, "ViT-L/16: 24 layers, d=1024, MLP 4096, 16 heads, 197 tokens",
              {"name": "vit-large", "layers": 24, "hidden": 1024, "mlp": 4096, "heads": 16},
              {"name": "vit-large", "layers": 3, "hidden": 64, "mlp": 128, "heads": 4, "image": 64}, 2),
    ModelSpec("vit-huge", vit, "ViT-H/14: 32 layers, d=1280, MLP 5120, 16 heads, 257 tokens",
              {"name": "vit-huge", "layers": 32, "hidden": 1280, "mlp": 5120, "heads": 16, "patch": 14},
              {"name": "vit-huge", "layers": 4, "hidden": 64, "mlp": 128, "heads": 4, "patch": 14, "image": 56}, 1),
    ModelSpec("encoder", encoder, "BERT-style encoder as torch exports it: 2 layers, [1, 128, 64], 4 heads, mask",
              {}, {"layers": 1, "seq": 16, "hidden": 32, "heads": 2}, benchmark=False),
]}

BENCHMARKS: tuple[str, ...] = tuple(name for name, spec in MODELS.items() if spec.benchmark)
"""the MCTS paper's 13 benchmark architectures, in :data:`MODELS`' order"""


def build(name: str, small: bool = False, seed: int = 0) -> Graph:
    """Build a built-in architecture by its CLI name (see :data:`MODELS`)."""
    try:
        spec = MODELS[name]
    except KeyError:
        raise InputError(f"unknown model {name!r}; choose one of: {' '.join(MODELS)}") from None
    return spec.fn(seed=seed, **(spec.small if small else spec.paper))


__all__ = ["BENCHMARKS", "MODELS", "ModelSpec", "build"]
