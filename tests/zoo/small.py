"""The zoo's small models, at tiny configs (1 or 2 layers, 32 or 64 wide, a vocabulary of 128), that the tests build:
a BERT encoder, GPT-2, ViT, ResNet with basic blocks, MobileNet-v2 and EfficientNet at reduced width, a LLaMA and a
Qwen2 block with grouped KV heads (at sequence 16 on 32-pixel images; BERT and LLaMA at sequence 128 too), and
DistilBERT, a T5 encoder, a Whisper encoder, ConvNeXt and a ResNet-50-like bottleneck network at their natural input
sizes (sequence 128, 224 pixels, 256 audio frames). Each is a ``transformers`` model class built ``from_config``
(nothing downloaded) and wrapped so that its forward takes the inputs positionally and returns a tuple
(:class:`zoo.Outputs`); every attention config passes through :func:`zoo.eager`."""

from __future__ import annotations

from collections.abc import Callable

import torch

from zoo import (
    FULL_IMAGE,
    FULL_PIXELS,
    IDS,
    IMAGE,
    LONG_IDS,
    LONG_MASK,
    LONG_SEQ,
    MASK,
    MEL_BINS,
    PIXELS,
    VOCAB,
    Outputs,
    Spec,
    eager,
)


def _bert(hidden: int, positions: int) -> Callable[[], torch.nn.Module]:
    """A BERT encoder: 2 layers, ``hidden`` wide (feed-forward twice that), 4 heads, ``positions`` positions."""
    def make() -> torch.nn.Module:
        from transformers import BertConfig, BertModel

        cfg = eager(BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=2 * hidden, max_position_embeddings=positions, type_vocab_size=2))
        return Outputs(BertModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state", "pooler_output"))
    return make


def _grouped(family: str, hidden: int, positions: int) -> Callable[[], torch.nn.Module]:
    """A LLaMA or Qwen2 block: 1 layer, ``hidden`` wide (feed-forward twice that), 4 heads / 2 KV heads,
    ``positions`` positions; the ids in, an all-ones mask passed."""
    def make() -> torch.nn.Module:
        import transformers as t

        config, cls = {"llama": (t.LlamaConfig, t.LlamaModel), "qwen2": (t.Qwen2Config, t.Qwen2Model)}[family]
        cfg = eager(config(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions))
        return Outputs(cls(cfg), ("input_ids",), ("last_hidden_state",), full_mask=True, use_cache=False)
    return make


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    cfg = eager(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, n_inner=64,
                           bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1))
    return Outputs(GPT2Model(cfg), ("input_ids", "attention_mask"), ("last_hidden_state",), use_cache=False)


def _vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTModel

    cfg = eager(ViTConfig(image_size=IMAGE, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64))
    return Outputs(ViTModel(cfg, add_pooling_layer=False), ("pixel_values",), ("last_hidden_state",))


def _resnet() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64], depths=[1, 1, 1],
                       layer_type="basic")
    return Outputs(ResNetModel(cfg), ("pixel_values",), ("pooler_output",))


def _mobilenetv2() -> torch.nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model

    cfg = MobileNetV2Config(num_channels=3, image_size=IMAGE, depth_multiplier=0.35, depth_divisible_by=8,
                            min_depth=8, tf_padding=False, finegrained_output=False)
    return Outputs(MobileNetV2Model(cfg), ("pixel_values",), ("pooler_output",))


def _efficientnet() -> torch.nn.Module:
    from transformers import EfficientNetConfig, EfficientNetModel

    cfg = EfficientNetConfig(num_channels=3, image_size=IMAGE, width_coefficient=0.25, depth_coefficient=0.25,
                             hidden_dim=320, depthwise_padding=[])  # hidden_dim: round_filters(1280) at width 0.25
    # last_hidden_state: the pooler is an AvgPool2d whose kernel is hidden_dim wide (transformers' own choice)
    return Outputs(EfficientNetModel(cfg), ("pixel_values",), ("last_hidden_state",))


def _distilbert() -> torch.nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = eager(DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                 max_position_embeddings=256))
    return Outputs(DistilBertModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state",))


def _t5_encoder() -> torch.nn.Module:
    from transformers import T5Config, T5EncoderModel

    cfg = eager(T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                         relative_attention_num_buckets=32, feed_forward_proj="relu"))
    return Outputs(T5EncoderModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state",))


def _whisper_encoder() -> torch.nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = eager(WhisperConfig(num_mel_bins=MEL_BINS, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                              encoder_ffn_dim=128, max_source_positions=LONG_SEQ))
    return Outputs(WhisperEncoder(cfg), ("input_features",), ("last_hidden_state",))


def _convnext() -> torch.nn.Module:
    from transformers import ConvNextConfig, ConvNextModel

    cfg = ConvNextConfig(num_channels=3, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1],
                         image_size=FULL_IMAGE)
    return Outputs(ConvNextModel(cfg), ("pixel_values",), ("pooler_output",))


def _resnet50() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[64, 128, 256, 512], depths=[1, 2, 2, 1],
                       layer_type="bottleneck")
    return Outputs(ResNetModel(cfg), ("pixel_values",), ("pooler_output",))


SPECS_SMALL: dict[str, Spec] = {
    "bert": Spec(_bert(32, 64), (IDS, MASK), ("last_hidden_state", "pooler_output"),
                 "BERT encoder: 2 layers, hidden 32, 4 heads, GELU (erf), LayerNorm, token types from a buffer"),
    "gpt2": Spec(_gpt2, (IDS, MASK), ("last_hidden_state",),
                 "GPT-2 decoder: 2 layers, hidden 32, 4 heads, causal mask, tanh GELU, Conv1D (addmm)"),
    "vit": Spec(_vit, (PIXELS,), ("last_hidden_state",),
                "ViT: 32x32 image, 8x8 patches, 2 layers, hidden 32, pre-norm, GELU (erf)"),
    "resnet": Spec(_resnet, (PIXELS,), ("pooler_output",),
                   "ResNet (basic blocks): 3 stages of 1 block, 16-64 channels, batch norm, ReLU"),
    "mobilenetv2": Spec(_mobilenetv2, (PIXELS,), ("pooler_output",),
                        "MobileNet-v2: depth multiplier 0.35, inverted residuals, depthwise convs, ReLU6"),
    "efficientnet": Spec(_efficientnet, (PIXELS,), ("last_hidden_state",),
                         "EfficientNet: width 0.25, depth 0.25, SiLU, squeeze-excite, depthwise convs"),
    "llama": Spec(_grouped("llama", 32, 64), (IDS,), ("last_hidden_state",),
                  "LLaMA block: 1 layer, hidden 32, 4 heads / 2 KV heads, RMSNorm, gated SiLU MLP, rotary embedding"),
    "qwen2": Spec(_grouped("qwen2", 32, 256), (IDS,), ("last_hidden_state",),
                  "Qwen2 block: 1 layer, hidden 32, 4 heads / 2 KV heads, Q/K/V biases, RMSNorm, rotary embedding"),
    "bert_s128": Spec(_bert(64, 256), (LONG_IDS, LONG_MASK),
                      ("last_hidden_state", "pooler_output"), "BERT encoder at sequence 128: 2 layers, hidden 64"),
    "llama_s128": Spec(_grouped("llama", 64, 256), (LONG_IDS,), ("last_hidden_state",),
                       "LLaMA block at sequence 128: 1 layer, hidden 64, 4 heads / 2 KV heads (grouped), causal"),
    "distilbert": Spec(_distilbert, (LONG_IDS, LONG_MASK), ("last_hidden_state",),
                       "DistilBERT at sequence 128: 2 layers, hidden 64, 4 heads, no token types, GELU (erf)"),
    "t5_encoder": Spec(_t5_encoder, (LONG_IDS, LONG_MASK), ("last_hidden_state",),
                       "T5 encoder at sequence 128: 2 layers, d_model 64, 4 heads, relative position bias, "
                       "RMSNorm (T5LayerNorm, pre-norm), ReLU MLP, unscaled attention"),
    "whisper_encoder": Spec(_whisper_encoder, (("input_features", "float", (1, MEL_BINS, 2 * LONG_SEQ)),),
                            ("last_hidden_state",),
                            "Whisper encoder: 80 mel bins x 256 frames, two Conv1d (stride 2) -> sequence 128, "
                            "2 pre-norm layers, hidden 64, 4 heads, GELU (erf)"),
    "convnext": Spec(_convnext, (FULL_PIXELS,), ("pooler_output",),
                     "ConvNeXt: 224x224 image, 4x4 patchify, 4 stages (1, 1, 2, 1 blocks) of 16-128 channels, "
                     "7x7 depthwise convs, channels-last LayerNorm, GELU, layer scale"),
    "resnet50": Spec(_resnet50, (FULL_PIXELS,), ("pooler_output",),
                     "ResNet-50-like: 224x224 image, bottleneck blocks (1, 2, 2, 1), 64-512 channels, batch norm"),
}
"""the small models' specs: :data:`zoo.NAMES`, :data:`zoo.EXTRA` and :data:`zoo.UNSEEN`, in that order"""

__all__ = ["SPECS_SMALL"]
