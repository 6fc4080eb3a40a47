"""The zoo's image and video models at 224 pixels (width 384, 4 layers, 6 heads where the family has them, the
configs' defaults otherwise). Transformers: ViT, DeiT (a distillation token), DINOv2 and BEiT (layer scale,
relative-position biases), Swin and Swin V2 (shifted windows; cosine attention), SegFormer and PVT (attention over
spatially reduced keys), MobileViT (transformers over unfolded patches), LeViT (attention biases), CvT (convolutional
projections), YOLOS and DETR (detection tokens; object queries over a ResNet backbone), Hiera (mask-unit attention),
DPT (dense prediction), SigLIP's vision tower, and two video transformers (VideoMAE: tubelets of two frames;
TimeSformer: divided space-time attention). Convolutional networks: ConvNeXt and ConvNeXt V2, EfficientNet-B0,
RegNet-Y, ResNet-50, BiT (weight-standardized convolutions), MobileNetV1 and V2, and two that mix without attention
(PoolFormer: pooling; FocalNet: focal modulation). Each is a ``transformers`` model built ``from_config`` (nothing
downloaded), the pixels in, its last hidden state or pooled output out."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from zoo import FULL_IMAGE, FULL_PIXELS, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec, eager

from .configs import ENCODER_DECODER, HIDDEN, LAYERS, MLP, SIZES, Built, Description, specs

_POOLER = ("pooler_output",)
_IMAGE = {"image_size": FULL_IMAGE}
_VIT = {"hidden_size": WIDTH, "image_size": 224, "patch_size": 16, **LAYERS}
"""a ViT at width 384 with a 1536-wide MLP (DPT, SigLIP, the video transformers)"""


def _image(model: Callable[[ModuleType], Any], fields: tuple[str, ...] = HIDDEN) -> Callable[[ModuleType], Built]:
    """An image model's builder: ``model(transformers)`` called with the pixels, ``fields`` of its output."""
    return lambda t: (model(t), ("pixel_values",), fields, {})


_BUILT: dict[str, Callable[[ModuleType], Built]] = {
    "vit_w384": _image(lambda t: t.ViTModel(eager(t.ViTConfig(
        image_size=FULL_IMAGE, patch_size=16, hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
        num_attention_heads=WIDE_HEADS, intermediate_size=4 * WIDTH)), add_pooling_layer=False)),
    "swin_w384": _image(lambda t: t.SwinModel(eager(t.SwinConfig(
        image_size=FULL_IMAGE, embed_dim=96, depths=[2, 2, 2, 2], num_heads=[3, 6, 12, 24], window_size=7)),
        add_pooling_layer=False)),
    "convnext_w384": _image(lambda t: t.ConvNextModel(t.ConvNextConfig(
        num_channels=3, hidden_sizes=[96, 192, 384, 768], depths=[2, 2, 4, 2], image_size=FULL_IMAGE)), _POOLER),
    "efficientnet_b0": _image(lambda t: t.EfficientNetModel(t.EfficientNetConfig(
        num_channels=3, image_size=FULL_IMAGE, width_coefficient=1.0, depth_coefficient=1.0,
        hidden_dim=1280)), _POOLER),  # B0 (the defaults are B7's)
    "deit_w384": _image(lambda t: t.DeiTModel(eager(t.DeiTConfig(**SIZES, **MLP, **_IMAGE)), add_pooling_layer=False)),
    "dinov2_w384": _image(lambda t: t.Dinov2Model(eager(t.Dinov2Config(**SIZES, **_IMAGE, patch_size=14)))),
    "beit_w384": _image(lambda t: t.BeitModel(eager(t.BeitConfig(**SIZES, **MLP, **_IMAGE,
                                                                 use_relative_position_bias=True)),
                                              add_pooling_layer=False)),
    "segformer_b0": _image(lambda t: t.SegformerModel(eager(t.SegformerConfig()))),
    "mobilevit_s": _image(lambda t: t.MobileViTModel(t.MobileViTConfig(**_IMAGE))),
    "regnet_y": _image(lambda t: t.RegNetModel(t.RegNetConfig()), _POOLER),
    "resnet50_full": _image(lambda t: t.ResNetModel(t.ResNetConfig(
        layer_type="bottleneck", depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], embedding_size=64)),
        _POOLER),
    "convnextv2_t": _image(lambda t: t.ConvNextV2Model(t.ConvNextV2Config())),
    "swinv2_t": _image(lambda t: t.Swinv2Model(eager(t.Swinv2Config(image_size=FULL_IMAGE)))),
    "poolformer_s12": _image(lambda t: t.PoolFormerModel(t.PoolFormerConfig())),
    "levit_128s": _image(lambda t: t.LevitModel(t.LevitConfig())),
    "mobilenetv2_full": _image(lambda t: t.MobileNetV2Model(t.MobileNetV2Config())),
    "bit_50": _image(lambda t: t.BitModel(t.BitConfig())),
    "cvt_13": _image(lambda t: t.CvtModel(t.CvtConfig(), add_pooling_layer=False)),
    "pvt_t": _image(lambda t: t.PvtModel(eager(t.PvtConfig()))),
    "focalnet_t": _image(lambda t: t.FocalNetModel(t.FocalNetConfig())),
    "yolos_w384": _image(lambda t: t.YolosModel(t.YolosConfig(
        hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS, num_attention_heads=WIDE_HEADS, intermediate_size=1024,
        image_size=[224, 224]), add_pooling_layer=False)),
    "mobilenetv1_full": _image(lambda t: t.MobileNetV1Model(t.MobileNetV1Config(), add_pooling_layer=False)),
    "hiera_base": _image(lambda t: t.HieraModel(t.HieraConfig())),
    "detr_w384": _image(lambda t: t.DetrModel(t.DetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, num_queries=100,
        backbone_config=t.ResNetConfig(embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1],
                                       layer_type="basic", out_features=["stage4"]), **ENCODER_DECODER))),
    "dpt_w384": _image(lambda t: t.DPTModel(t.DPTConfig(**_VIT))),
    "siglip_w384": _image(lambda t: t.SiglipVisionModel(t.SiglipVisionConfig(**_VIT))),
    "videomae_w384": _image(lambda t: t.VideoMAEModel(t.VideoMAEConfig(num_frames=8, tubelet_size=2, **_VIT))),
    "timesformer_w384": _image(lambda t: t.TimesformerModel(t.TimesformerConfig(num_frames=8, **_VIT))),
}

_PIXELS = (FULL_PIXELS,)
_VIDEO = (("pixel_values", "float", (1, 8, 3, 224, 224)),)
_DESCRIPTIONS: dict[str, Description] = {
    "vit_w384": (_PIXELS, HIDDEN, "ViT (DeiT-small's size) at 224 pixels: patch 16, 384 wide, 4 layers, 6 heads", {}),
    "swin_w384": (_PIXELS, HIDDEN, "Swin-tiny's stages at 224 pixels: shifted windows of 7 with a relative-position "
                                   "bias, patch merging, 96-768 wide", {}),
    "convnext_w384": (_PIXELS, _POOLER, "ConvNeXt-tiny's stages at 224 pixels: depthwise 7x7, channels-last "
                                        "LayerNorm, 96-768 wide", {}),
    "efficientnet_b0": (_PIXELS, _POOLER, "EfficientNet-B0 at 224 pixels: depthwise convolutions, "
                                          "squeeze-and-excitation, SiLU, batch norm folded by the runtime", {}),
    "deit_w384": (_PIXELS, HIDDEN, "DeiT-small's size at 224 pixels: a distillation token beside the class token, 4 "
                                   "layers", {}),
    "dinov2_w384": (_PIXELS, HIDDEN, "DINOv2 at 224 pixels: patch 14, layer scale, position embeddings interpolated "
                                     "at run time", {}),
    "beit_w384": (_PIXELS, HIDDEN, "BEiT at 224 pixels: a relative-position bias per layer, layer scale", {}),
    "segformer_b0": (_PIXELS, HIDDEN, "SegFormer-B0 encoder at 224 pixels: overlapping patch embeddings, attention "
                                      "over spatially reduced keys, Mix-FFN's depthwise convolution", {}),
    "mobilevit_s": (_PIXELS, HIDDEN, "MobileViT-S at 224 pixels: inverted residuals, transformers over unfolded "
                                     "patches", {}),
    "regnet_y": (_PIXELS, _POOLER, "RegNet-Y (the config's defaults) at 224 pixels: grouped convolutions, "
                                   "squeeze-and-excitation", {}),
    "resnet50_full": (_PIXELS, _POOLER, "ResNet-50 at 224 pixels: bottleneck blocks (3, 4, 6, 3), 256-2048 "
                                        "channels", {}),
    "convnextv2_t": (_PIXELS, HIDDEN, "ConvNeXt V2 (the config's defaults) at 224 pixels: global response norm", {}),
    "swinv2_t": (_PIXELS, HIDDEN, "Swin V2-T at 224 pixels: cosine attention, log-spaced continuous position "
                                  "biases", {}),
    "poolformer_s12": (_PIXELS, HIDDEN, "PoolFormer-S12 at 224 pixels: average pooling as token mixer, GroupNorm",
                       {}),
    "levit_128s": (_PIXELS, HIDDEN, "LeViT-128S at 224 pixels: attention biases gathered per layer, Hardswish", {}),
    "mobilenetv2_full": (_PIXELS, HIDDEN, "MobileNetV2 at 224 pixels: inverted residuals, ReLU6", {}),
    "bit_50": (_PIXELS, HIDDEN, "BiT-ResNet-50 at 224 pixels: weight-standardized convolutions, GroupNorm", {}),
    "cvt_13": (_PIXELS, HIDDEN, "CvT-13 at 224 pixels: convolutional token embeddings and projections", {}),
    "pvt_t": (_PIXELS, HIDDEN, "PVT-Tiny at 224 pixels: attention over spatially reduced keys", {}),
    "focalnet_t": (_PIXELS, HIDDEN, "FocalNet-T at 224 pixels: focal modulation (depthwise convolutions, gates)", {}),
    "yolos_w384": (_PIXELS, HIDDEN, "YOLOS at width 384 at 224 pixels: 100 detection tokens, its position table "
                                    "interpolated (bicubic) to the image", {}),
    "mobilenetv1_full": (_PIXELS, HIDDEN, "MobileNetV1 (the config's defaults) at 224 pixels: depthwise-separable "
                                          "convolutions, ReLU6", {}),
    "hiera_base": (_PIXELS, HIDDEN, "Hiera (the config's defaults, 51M parameters) at 224 pixels: mask-unit "
                                    "attention, pooled query stages", {}),
    "detr_w384": (_PIXELS, HIDDEN, "DETR at width 384 over a small ResNet backbone: sine position embeddings, 100 "
                                   "object queries", {}),
    "dpt_w384": (_PIXELS, HIDDEN, "DPT (dense prediction) ViT backbone at width 384", {}),
    "siglip_w384": (_PIXELS, HIDDEN, "SigLIP vision tower at width 384: attention-pooling head", {}),
    "videomae_w384": (_VIDEO, HIDDEN, "VideoMAE at width 384: 8 frames of 224 pixels, tubelets of 2 frames (3-D "
                                      "convolution), sinusoidal positions", {}),
    "timesformer_w384": (_VIDEO, HIDDEN, "TimeSformer at width 384: 8 frames of 224 pixels, divided space-time "
                                         "attention", {}),
}

SPECS_VISION: dict[str, Spec] = specs(_BUILT, _DESCRIPTIONS)
"""the image and video models' specs"""

__all__ = ["SPECS_VISION"]
