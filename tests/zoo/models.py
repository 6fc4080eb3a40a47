"""The torch modules of the zoo's models and their :class:`~zoo.Spec`: the first models (:data:`zoo.NAMES`), the
:data:`zoo.EXTRA` and :data:`zoo.UNSEEN` families, the common families at width 384 (:data:`zoo.WIDE`) and the second
round a new user tries (:data:`zoo.FAMILIES`). Each is a ``transformers`` model class built ``from_config`` on a tiny
or width-384 config (nothing downloaded) and wrapped so that its forward takes the inputs positionally and returns a
tuple (:class:`zoo._Outputs`); every config passes through ``zoo._eager``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import zoo
from zoo import (
    _AUDIO,
    _FULL_PIXELS,
    _IDS,
    _LONG_IDS,
    _LONG_MASK,
    _MASK,
    _PIXELS,
    FULL_IMAGE,
    IMAGE,
    LONG_SEQ,
    MEL_BINS,
    VOCAB,
    WIDE_HEADS,
    WIDE_LAYERS,
    WIDTH,
    Spec,
    _Outputs,
)


def _eager(config):
    """``zoo._eager`` as the package holds it at the call (a caller may replace it: scripts/bench_default.py)."""
    return zoo._eager(config)



def _bert(hidden: int, positions: int) -> Callable[[], torch.nn.Module]:
    """A BERT encoder: 2 layers, ``hidden`` wide (feed-forward twice that), 4 heads, ``positions`` positions."""
    def make() -> torch.nn.Module:
        from transformers import BertConfig, BertModel

        cfg = _eager(BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=2 * hidden, max_position_embeddings=positions, type_vocab_size=2))
        return _Outputs(BertModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state", "pooler_output"))
    return make


def _grouped(family: str, hidden: int, positions: int) -> Callable[[], torch.nn.Module]:
    """A LLaMA or Qwen2 block: 1 layer, ``hidden`` wide (feed-forward twice that), 4 heads / 2 KV heads,
    ``positions`` positions; the ids in, an all-ones mask passed."""
    def make() -> torch.nn.Module:
        import transformers as t

        config, cls = {"llama": (t.LlamaConfig, t.LlamaModel), "qwen2": (t.Qwen2Config, t.Qwen2Model)}[family]
        cfg = _eager(config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions))
        return _Outputs(cls(cfg), ("input_ids",), ("last_hidden_state",), full_mask=True, use_cache=False)
    return make


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    cfg = _eager(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, n_inner=64,
                                bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1))
    return _Outputs(GPT2Model(cfg), ("input_ids", "attention_mask"), ("last_hidden_state",), use_cache=False)


def _vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTModel

    cfg = _eager(ViTConfig(image_size=IMAGE, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64))
    return _Outputs(ViTModel(cfg, add_pooling_layer=False), ("pixel_values",), ("last_hidden_state",))


def _resnet() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64], depths=[1, 1, 1],
                       layer_type="basic")
    return _Outputs(ResNetModel(cfg), ("pixel_values",), ("pooler_output",))


def _mobilenetv2() -> torch.nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model

    cfg = MobileNetV2Config(num_channels=3, image_size=IMAGE, depth_multiplier=0.35, depth_divisible_by=8,
                            min_depth=8, tf_padding=False, finegrained_output=False)
    return _Outputs(MobileNetV2Model(cfg), ("pixel_values",), ("pooler_output",))


def _efficientnet() -> torch.nn.Module:
    from transformers import EfficientNetConfig, EfficientNetModel

    cfg = EfficientNetConfig(num_channels=3, image_size=IMAGE, width_coefficient=0.25, depth_coefficient=0.25,
                             hidden_dim=320, depthwise_padding=[])  # hidden_dim: round_filters(1280) at width 0.25
    # last_hidden_state: the pooler is an AvgPool2d whose kernel is hidden_dim wide (transformers' own choice)
    return _Outputs(EfficientNetModel(cfg), ("pixel_values",), ("last_hidden_state",))


def _distilbert() -> torch.nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = _eager(DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                  max_position_embeddings=256))
    return _Outputs(DistilBertModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state",))


def _t5_encoder() -> torch.nn.Module:
    from transformers import T5Config, T5EncoderModel

    cfg = _eager(T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                          relative_attention_num_buckets=32, feed_forward_proj="relu"))
    return _Outputs(T5EncoderModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state",))


def _whisper_encoder() -> torch.nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = _eager(WhisperConfig(num_mel_bins=MEL_BINS, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                               encoder_ffn_dim=128, max_source_positions=LONG_SEQ))
    return _Outputs(WhisperEncoder(cfg), ("input_features",), ("last_hidden_state",))


def _convnext() -> torch.nn.Module:
    from transformers import ConvNextConfig, ConvNextModel

    cfg = ConvNextConfig(num_channels=3, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1],
                         image_size=FULL_IMAGE)
    return _Outputs(ConvNextModel(cfg), ("pixel_values",), ("pooler_output",))


def _resnet50() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[64, 128, 256, 512], depths=[1, 2, 2, 1],
                       layer_type="bottleneck")
    return _Outputs(ResNetModel(cfg), ("pixel_values",), ("pooler_output",))


def _bert_wide() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    cfg = _eager(BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
                            num_attention_heads=WIDE_HEADS, intermediate_size=4 * WIDTH, max_position_embeddings=512))
    return _Outputs(BertModel(cfg, add_pooling_layer=False), ("input_ids", "attention_mask"), ("last_hidden_state",))


def _decoder_wide(family: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import transformers as t

        common = {"vocab_size": VOCAB}
        cfg, cls = {
            "opt": (lambda: t.OPTConfig(**common, hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS, ffn_dim=4 * WIDTH,
                                        num_attention_heads=WIDE_HEADS, max_position_embeddings=512,
                                        word_embed_proj_dim=WIDTH), t.OPTModel),
            "bloom": (lambda: t.BloomConfig(**common, hidden_size=WIDTH, n_layer=WIDE_LAYERS, n_head=WIDE_HEADS),
                      t.BloomModel),
            "neox": (lambda: t.GPTNeoXConfig(**common, hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
                                             num_attention_heads=WIDE_HEADS, intermediate_size=4 * WIDTH),
                     t.GPTNeoXModel),
            "phi": (lambda: t.PhiConfig(**common, hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
                                        num_attention_heads=WIDE_HEADS, intermediate_size=4 * WIDTH), t.PhiModel),
        }[family]
        return _Outputs(cls(_eager(cfg())), ("input_ids", "attention_mask"), ("last_hidden_state",), use_cache=False)
    return make


def _vision_wide(family: str) -> Callable[[], torch.nn.Module]:
    """Vision and audio at realistic size: ViT/DeiT-small (384 wide, patch 16, 224 pixels, 4 layers), Swin-tiny's
    stages (96-768 wide, windows of 7, shifted), ConvNeXt-tiny's stages (96-768 wide, one block fewer per stage), a
    wav2vec2 encoder (384 wide, 4 layers, its convolutional feature extractor and positional convolution) on one second
    of 16 kHz audio, EfficientNet-B0 (transformers' defaults: depthwise convolutions, squeeze-and-excitation, SiLU)
    at 224 pixels."""
    def make() -> torch.nn.Module:
        import transformers as t

        if family == "vit":
            cfg = _eager(t.ViTConfig(image_size=FULL_IMAGE, patch_size=16, hidden_size=WIDTH,
                                     num_hidden_layers=WIDE_LAYERS, num_attention_heads=WIDE_HEADS,
                                     intermediate_size=4 * WIDTH))
            return _Outputs(t.ViTModel(cfg, add_pooling_layer=False), ("pixel_values",), ("last_hidden_state",))
        if family == "swin":
            cfg = _eager(t.SwinConfig(image_size=FULL_IMAGE, embed_dim=96, depths=[2, 2, 2, 2],
                                      num_heads=[3, 6, 12, 24], window_size=7))
            return _Outputs(t.SwinModel(cfg, add_pooling_layer=False), ("pixel_values",), ("last_hidden_state",))
        if family == "efficientnet":
            cfg = t.EfficientNetConfig(num_channels=3, image_size=FULL_IMAGE, width_coefficient=1.0,
                                       depth_coefficient=1.0, hidden_dim=1280)  # B0 (the defaults are B7's)
            return _Outputs(t.EfficientNetModel(cfg), ("pixel_values",), ("pooler_output",))
        if family == "convnext":
            cfg = t.ConvNextConfig(num_channels=3, hidden_sizes=[96, 192, 384, 768], depths=[2, 2, 4, 2],
                                   image_size=FULL_IMAGE)
            return _Outputs(t.ConvNextModel(cfg), ("pixel_values",), ("pooler_output",))
        cfg = _eager(t.Wav2Vec2Config(hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS, num_attention_heads=WIDE_HEADS,
                                      intermediate_size=4 * WIDTH, do_stable_layer_norm=False))
        return _Outputs(t.Wav2Vec2Model(cfg), ("input_values",), ("last_hidden_state",))
    return make


def _family(name: str) -> Callable[[], torch.nn.Module]:
    """:data:`FAMILIES`: the second round of families a new user tries (session 11), at width 384 where the family
    has a width (4 layers, 6 heads, sequence 128), at their configs' defaults otherwise (SegFormer-B0, MobileViT-S,
    RegNet-Y, ResNet-50 at 224 pixels); HuBERT on one second of 16 kHz audio."""
    def make() -> torch.nn.Module:
        import transformers as t

        text = {"vocab_size": VOCAB}
        wide = {"hidden_size": WIDTH, "num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS}
        mlp = {"intermediate_size": 4 * WIDTH}
        image = {"image_size": FULL_IMAGE}
        tokens, pixels = ("input_ids", "attention_mask"), ("pixel_values",)
        gpt = {"n_embd": WIDTH, "n_layer": WIDE_LAYERS, "n_head": WIDE_HEADS, "n_positions": 512}
        made: dict[str, Callable[[], tuple[Any, tuple[str, ...], str, dict[str, Any]]]] = {
            "gptj_w384": lambda: (t.GPTJModel(_eager(t.GPTJConfig(**text, **gpt, rotary_dim=32))), tokens,
                                  "last_hidden_state", {"use_cache": False}),
            "codegen_w384": lambda: (t.CodeGenModel(_eager(t.CodeGenConfig(**text, **gpt, n_ctx=512, rotary_dim=32))),
                                     tokens, "last_hidden_state", {"use_cache": False}),
            "falcon_w384": lambda: (t.FalconModel(_eager(t.FalconConfig(**text, **wide))), tokens, "last_hidden_state",
                                    {"use_cache": False}),
            "stablelm_w384": lambda: (t.StableLmModel(_eager(t.StableLmConfig(**text, **wide, **mlp,
                                                                              num_key_value_heads=WIDE_HEADS))), tokens,
                                      "last_hidden_state", {"use_cache": False}),
            "mistral_w384": lambda: (t.MistralModel(_eager(t.MistralConfig(**text, **wide, **mlp, num_key_value_heads=2,
                                                                            head_dim=WIDTH // WIDE_HEADS))), tokens,
                                     "last_hidden_state", {"use_cache": False}),
            "bigcode_w384": lambda: (t.GPTBigCodeModel(_eager(t.GPTBigCodeConfig(**text, **gpt))), tokens,
                                     "last_hidden_state", {"use_cache": False}),
            "deberta_w384": lambda: (t.DebertaV2Model(_eager(t.DebertaV2Config(**text, **wide, **mlp))), tokens,
                                     "last_hidden_state", {}),
            "xlmr_w384": lambda: (t.XLMRobertaModel(_eager(t.XLMRobertaConfig(**text, **wide, **mlp)),
                                                    add_pooling_layer=False), tokens, "last_hidden_state", {}),
            "deit_w384": lambda: (t.DeiTModel(_eager(t.DeiTConfig(**wide, **mlp, **image)), add_pooling_layer=False),
                                  pixels, "last_hidden_state", {}),
            "dinov2_w384": lambda: (t.Dinov2Model(_eager(t.Dinov2Config(**wide, **image, patch_size=14))), pixels,
                                    "last_hidden_state", {}),
            "beit_w384": lambda: (t.BeitModel(_eager(t.BeitConfig(**wide, **mlp, **image,
                                                                  use_relative_position_bias=True)),
                                              add_pooling_layer=False), pixels, "last_hidden_state", {}),
            "segformer_b0": lambda: (t.SegformerModel(_eager(t.SegformerConfig())), pixels, "last_hidden_state", {}),
            "mobilevit_s": lambda: (t.MobileViTModel(t.MobileViTConfig(**image)), pixels, "last_hidden_state", {}),
            "regnet_y": lambda: (t.RegNetModel(t.RegNetConfig()), pixels, "pooler_output", {}),
            "resnet50_full": lambda: (t.ResNetModel(t.ResNetConfig(layer_type="bottleneck", depths=[3, 4, 6, 3],
                                                                   hidden_sizes=[256, 512, 1024, 2048],
                                                                   embedding_size=64)), pixels, "pooler_output", {}),
            "hubert_w384": lambda: (t.HubertModel(_eager(t.HubertConfig(**wide, **mlp))), ("input_values",),
                                    "last_hidden_state", {}),
        }
        model, names, field, fixed = made[name]()
        return _Outputs(model, names, (field,), **fixed)
    return make



SPECS_MODELS: dict[str, Spec] = {
    "bert": Spec(_bert(32, 64), (_IDS, _MASK), ("last_hidden_state", "pooler_output"),
                 "BERT encoder: 2 layers, hidden 32, 4 heads, GELU (erf), LayerNorm, token types from a buffer"),
    "gpt2": Spec(_gpt2, (_IDS, _MASK), ("last_hidden_state",),
                 "GPT-2 decoder: 2 layers, hidden 32, 4 heads, causal mask, tanh GELU, Conv1D (addmm)"),
    "vit": Spec(_vit, (_PIXELS,), ("last_hidden_state",),
                "ViT: 32x32 image, 8x8 patches, 2 layers, hidden 32, pre-norm, GELU (erf)"),
    "resnet": Spec(_resnet, (_PIXELS,), ("pooler_output",),
                   "ResNet (basic blocks): 3 stages of 1 block, 16-64 channels, batch norm, ReLU"),
    "mobilenetv2": Spec(_mobilenetv2, (_PIXELS,), ("pooler_output",),
                        "MobileNet-v2: depth multiplier 0.35, inverted residuals, depthwise convs, ReLU6"),
    "efficientnet": Spec(_efficientnet, (_PIXELS,), ("last_hidden_state",),
                         "EfficientNet: width 0.25, depth 0.25, SiLU, squeeze-excite, depthwise convs"),
    "llama": Spec(_grouped("llama", 32, 64), (_IDS,), ("last_hidden_state",),
                  "LLaMA block: 1 layer, hidden 32, 4 heads / 2 KV heads, RMSNorm, gated SiLU MLP, rotary embedding"),
    "qwen2": Spec(_grouped("qwen2", 32, 256), (_IDS,), ("last_hidden_state",),
                  "Qwen2 block: 1 layer, hidden 32, 4 heads / 2 KV heads, Q/K/V biases, RMSNorm, rotary embedding"),
    "bert_s128": Spec(_bert(64, 256), (_LONG_IDS, _LONG_MASK),
                      ("last_hidden_state", "pooler_output"), "BERT encoder at sequence 128: 2 layers, hidden 64"),
    "llama_s128": Spec(_grouped("llama", 64, 256), (_LONG_IDS,), ("last_hidden_state",),
                       "LLaMA block at sequence 128: 1 layer, hidden 64, 4 heads / 2 KV heads (grouped), causal"),
    "distilbert": Spec(_distilbert, (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                       "DistilBERT at sequence 128: 2 layers, hidden 64, 4 heads, no token types, GELU (erf)"),
    "t5_encoder": Spec(_t5_encoder, (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                       "T5 encoder at sequence 128: 2 layers, d_model 64, 4 heads, relative position bias, "
                       "RMSNorm (T5LayerNorm, pre-norm), ReLU MLP, unscaled attention"),
    "whisper_encoder": Spec(_whisper_encoder, (("input_features", "float", (1, MEL_BINS, 2 * LONG_SEQ)),),
                            ("last_hidden_state",),
                            "Whisper encoder: 80 mel bins x 256 frames, two Conv1d (stride 2) -> sequence 128, "
                            "2 pre-norm layers, hidden 64, 4 heads, GELU (erf)"),
    "convnext": Spec(_convnext, (_FULL_PIXELS,), ("pooler_output",),
                     "ConvNeXt: 224x224 image, 4x4 patchify, 4 stages (1, 1, 2, 1 blocks) of 16-128 channels, "
                     "7x7 depthwise convs, channels-last LayerNorm, GELU, layer scale"),
    "resnet50": Spec(_resnet50, (_FULL_PIXELS,), ("pooler_output",),
                     "ResNet-50-like: 224x224 image, bottleneck blocks (1, 2, 2, 1), 64-512 channels, batch norm"),
    "bert_w384": Spec(_bert_wide, (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                      "BERT encoder at width 384: 4 layers, 6 heads, sequence 128, GELU (erf), post-LN"),
    "opt_w384": Spec(_decoder_wide("opt"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                     "OPT decoder at width 384: 4 layers, 6 heads, sequence 128, learned positions, ReLU MLP"),
    "bloom_w384": Spec(_decoder_wide("bloom"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                       "BLOOM decoder at width 384: 4 layers, 6 heads, sequence 128, ALiBi, fused QKV, tanh GELU "
                       "factored as 0.79788456 * x * (1 + 0.044715 * x * x)"),
    "neox_w384": Spec(_decoder_wide("neox"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                      "GPT-NeoX decoder at width 384: 4 layers, 6 heads, sequence 128, partial rotary, parallel "
                      "attention and MLP"),
    "phi_w384": Spec(_decoder_wide("phi"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                     "Phi decoder at width 384: 4 layers, 6 heads, sequence 128, partial rotary, parallel attention "
                     "and MLP, one LayerNorm per layer"),
    "vit_w384": Spec(_vision_wide("vit"), (_FULL_PIXELS,), ("last_hidden_state",),
                     "ViT (DeiT-small's size) at 224 pixels: patch 16, 384 wide, 4 layers, 6 heads"),
    "swin_w384": Spec(_vision_wide("swin"), (_FULL_PIXELS,), ("last_hidden_state",),
                      "Swin-tiny's stages at 224 pixels: shifted windows of 7 with a relative-position bias, patch "
                      "merging, 96-768 wide"),
    "convnext_w384": Spec(_vision_wide("convnext"), (_FULL_PIXELS,), ("pooler_output",),
                          "ConvNeXt-tiny's stages at 224 pixels: depthwise 7x7, channels-last LayerNorm, 96-768 wide"),
    "wav2vec2_w384": Spec(_vision_wide("wav2vec2"), (("input_values", "float", (1, 16000)),), ("last_hidden_state",),
                          "wav2vec2 encoder on one second of 16 kHz audio: its convolutional feature extractor, "
                          "a grouped positional convolution, 384 wide, 4 layers, 6 heads"),
    "efficientnet_b0": Spec(_vision_wide("efficientnet"), (_FULL_PIXELS,), ("pooler_output",),
                            "EfficientNet-B0 at 224 pixels: depthwise convolutions, squeeze-and-excitation, SiLU, "
                            "batch norm folded by the runtime"),
}
"""the specs of :data:`zoo.NAMES`, :data:`zoo.EXTRA`, :data:`zoo.UNSEEN` and :data:`zoo.WIDE`, in that order"""
SPECS_FAMILIES: dict[str, Spec] = {
    "gptj_w384": Spec(_family("gptj_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                      "GPT-J decoder at width 384: 4 layers, 6 heads, interleaved partial rotary (32 of 64), parallel "
                      "attention and MLP"),
    "codegen_w384": Spec(_family("codegen_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                         "CodeGen decoder at width 384: GPT-J's layer with a fused QKV projection"),
    "falcon_w384": Spec(_family("falcon_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                        "Falcon decoder at width 384: 4 layers, 6 heads, one KV head (multi-query), rotary, parallel "
                        "attention and MLP"),
    "stablelm_w384": Spec(_family("stablelm_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                          "StableLM decoder at width 384: 4 layers, 6 heads, partial rotary (25%), LayerNorm, SiLU MLP"),
    "mistral_w384": Spec(_family("mistral_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                         "Mistral decoder at width 384: 4 layers, 6 heads / 2 KV heads, sliding-window mask, RMSNorm"),
    "bigcode_w384": Spec(_family("bigcode_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                         "GPT-BigCode (StarCoder) decoder at width 384: 4 layers, multi-query attention, learned "
                         "positions"),
    "deberta_w384": Spec(_family("deberta_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                         "DeBERTa-v2 encoder at width 384: 4 layers, disentangled relative-position attention"),
    "xlmr_w384": Spec(_family("xlmr_w384"), (_LONG_IDS, _LONG_MASK), ("last_hidden_state",),
                      "XLM-RoBERTa encoder at width 384: 4 layers, 6 heads, positions from the padding mask"),
    "deit_w384": Spec(_family("deit_w384"), (_FULL_PIXELS,), ("last_hidden_state",),
                      "DeiT-small's size at 224 pixels: a distillation token beside the class token, 4 layers"),
    "dinov2_w384": Spec(_family("dinov2_w384"), (_FULL_PIXELS,), ("last_hidden_state",),
                        "DINOv2 at 224 pixels: patch 14, layer scale, position embeddings interpolated at run time"),
    "beit_w384": Spec(_family("beit_w384"), (_FULL_PIXELS,), ("last_hidden_state",),
                      "BEiT at 224 pixels: a relative-position bias per layer, layer scale"),
    "segformer_b0": Spec(_family("segformer_b0"), (_FULL_PIXELS,), ("last_hidden_state",),
                         "SegFormer-B0 encoder at 224 pixels: overlapping patch embeddings, attention over spatially "
                         "reduced keys, Mix-FFN's depthwise convolution"),
    "mobilevit_s": Spec(_family("mobilevit_s"), (_FULL_PIXELS,), ("last_hidden_state",),
                        "MobileViT-S at 224 pixels: inverted residuals, transformers over unfolded patches"),
    "regnet_y": Spec(_family("regnet_y"), (_FULL_PIXELS,), ("pooler_output",),
                     "RegNet-Y (the config's defaults) at 224 pixels: grouped convolutions, squeeze-and-excitation"),
    "resnet50_full": Spec(_family("resnet50_full"), (_FULL_PIXELS,), ("pooler_output",),
                          "ResNet-50 at 224 pixels: bottleneck blocks (3, 4, 6, 3), 256-2048 channels"),
    "hubert_w384": Spec(_family("hubert_w384"), (_AUDIO,), ("last_hidden_state",),
                        "HuBERT encoder at width 384 on one second of 16 kHz audio (dynamic: batch and samples)",
                        axes=({0: "batch", 1: "samples"},), out_axes={"last_hidden_state": {0: "batch", 1: "frames"}}),
}
"""the specs of :data:`zoo.FAMILIES`"""

__all__ = ["SPECS_FAMILIES", "SPECS_MODELS"]
