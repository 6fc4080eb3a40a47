"""A real-model zoo for tests and benchmarks: small random-weight models of real architectures, exported to
ONNX with torch's two exporters at opsets 17 and 18 (both exporters a user may have used).

Every model is built from a tiny random config (``transformers``' own model classes, ``from_config``;
nothing downloaded), seeded with ``torch.manual_seed(seed)``, in eval mode, with static shapes (batch 1,
sequence 16, images 3x32x32). ``build(name, exporter, opset)`` returns the exported ``onnx.ModelProto``;
``feeds(name, seed)`` gives seeded inputs in range (token ids below the vocabulary size, attention masks of
0/1 with the first position kept).

An exporter/model combination that this torch cannot export is listed in :data:`UNSUPPORTED` with the
reason, and ``build`` raises :class:`Unsupported` for it (never a silent skip). With torch 2.13 and
onnxscript 0.7: the dynamo exporter writes opset 18 natively and down-converts; at opset 17 that gives an
invalid model for GPT-2 (Split with ``num_outputs``) and fails (the exporter keeps opset 18) for ResNet,
MobileNet-v2, EfficientNet and LLaMA. Every other combination exports.

    >>> NAMES
    ('bert', 'gpt2', 'vit', 'resnet', 'mobilenetv2', 'efficientnet', 'llama')

:data:`EXTRA` models (further families: a Qwen2-like decoder with grouped KV heads, sequence-128 variants)
are built only by the tests and benchmarks that name them; the tests that run over :data:`NAMES` leave them out.

    >>> EXTRA
    ('qwen2', 'bert_s128', 'llama_s128')

:data:`UNSEEN` models are further families beyond the zoo's (DistilBERT, a T5 encoder, a Whisper
encoder, ConvNeXt, a ResNet-50-like bottleneck network) at their natural input sizes (sequence 128, 224x224
images, 256 audio frames); only ``scripts/bench_peers.py`` and the tests that name one build them.

    >>> UNSEEN
    ('distilbert', 't5_encoder', 'whisper_encoder', 'convnext', 'resnet50')

:data:`WIDE` models are common families at a realistic width: 384 wide, 4 layers, 6 heads, sequence 128, ids and
an attention mask in (a BERT encoder; OPT, BLOOM, GPT-NeoX and Phi decoders, no cache), for the peers table at that
size (``scripts/bench_peers.py --models wide``); no test builds them (an export takes seconds, a run a minute).

    >>> WIDE
    ('bert_w384', 'opt_w384', 'bloom_w384', 'neox_w384', 'phi_w384', 'vit_w384', 'swin_w384', 'convnext_w384', \
'wav2vec2_w384', 'efficientnet_b0')

:data:`FAMILIES` are a second round of families a new user tries (decoders with interleaved or partial rotary,
multi-query attention, parallel attention and MLP; encoders with relative positions; vision models with layer scale,
relative-position biases, spatially reduced keys; a convolutional audio front-end), at width 384 where the family
has one; no test builds them.

    >>> FAMILIES[:4]
    ('gptj_w384', 'codegen_w384', 'falcon_w384', 'stablelm_w384')

:data:`THIRD` is a third round (:mod:`.third`: Gemma 2, GPT-Neo, MPT, Cohere, OLMo, MobileBERT, RoFormer, ESM,
SqueezeBERT, an LSTM, ConvNeXt V2, Swin V2, PoolFormer, LeViT, MobileNetV2, BiT, CvT, PVT, FocalNet, WavLM, AST);
no test builds them either.

    >>> THIRD[:3]
    ('mobilebert_l4', 'gemma2_w384', 'gptneo_w384')

:data:`SERVING` models are the serving forms: a decoder's step against a key/value cache (one new token, the
past per layer in, the present out; ``export_dynamic`` writes the past's length ``past`` and the mask's ``past + 1``),
small for tests and at width 384 for ``scripts/bench_serving.py``; and the prefill before it (the prompt in, the
cache out).

    >>> SERVING
    ('llama_decode', 'llama_decode_w384', 'llama_prefill_w384', 'qwen2_prefill_w384', 'qwen2_decode_w384')
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch

NAMES = ("bert", "gpt2", "vit", "resnet", "mobilenetv2", "efficientnet", "llama")
EXTRA = ("qwen2", "bert_s128", "llama_s128")
UNSEEN = ("distilbert", "t5_encoder", "whisper_encoder", "convnext", "resnet50")
WIDE = ("bert_w384", "opt_w384", "bloom_w384", "neox_w384", "phi_w384", "vit_w384", "swin_w384", "convnext_w384",
        "wav2vec2_w384", "efficientnet_b0")
SERVING = ("llama_decode", "llama_decode_w384", "llama_prefill_w384", "qwen2_prefill_w384", "qwen2_decode_w384")
FAMILIES = ("gptj_w384", "codegen_w384", "falcon_w384", "stablelm_w384", "mistral_w384", "bigcode_w384", "deberta_w384",
            "xlmr_w384", "deit_w384", "dinov2_w384", "beit_w384", "segformer_b0", "mobilevit_s", "regnet_y",
            "resnet50_full", "hubert_w384")
EXPORTERS = ("torchscript", "dynamo")
OPSETS = (17, 18)
SEQ = 16
LONG_SEQ = 128
VOCAB = 128
IMAGE = 32
FULL_IMAGE = 224
MEL_BINS = 80

UNSUPPORTED: dict[tuple[str, str, int], str] = {}
"""(name, exporter, opset) -> why this torch cannot export it; filled in as found (see the module docstring)."""


class Unsupported(RuntimeError):
    """This exporter cannot export this model in the installed torch; the message says why."""


@dataclass(frozen=True)
class Spec:
    make: Callable[[], torch.nn.Module]
    """the module (seeded, eval mode) whose forward takes the inputs positionally and returns a tuple"""
    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    """(name, 'ids' | 'mask' | 'float', shape) in order"""
    outputs: tuple[str, ...]
    description: str
    axes: tuple[dict[int, str], ...] | None = None
    """the dynamic axes :func:`export_dynamic` writes, per input (axis -> symbol; ``past + 1``: one more than
    ``past``), None for its default (a batch axis, and a sequence axis on token inputs)"""
    out_axes: dict[str, dict[int, str]] | None = None
    """the same for the outputs (None: the default)"""


class _Outputs(torch.nn.Module):
    """Calls a transformers model with keyword inputs and returns the named fields of its output as a tuple."""

    def __init__(self, model: torch.nn.Module, input_names: tuple[str, ...], fields: tuple[str, ...],
                 full_mask: bool = False, **fixed):
        super().__init__()
        self.model, self.input_names, self.fields, self.fixed = model, input_names, fields, fixed
        self.full_mask = full_mask
        """pass an all-ones attention mask: without one, transformers probes position ids for packed
        sequences with aten::diff, which the TorchScript exporter cannot export"""

    def forward(self, *args):
        kwargs = dict(zip(self.input_names, args))
        if self.full_mask:
            kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
        out = self.model(**kwargs, **self.fixed)
        return tuple(getattr(out, f) for f in self.fields)


def _eager(config):
    # the plain MatMul/Softmax attention (what the TorchScript exporter writes for any implementation);
    # the same for both exporters so that they export one computation
    config._attn_implementation = "eager"
    return config


def _bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    cfg = _eager(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64, type_vocab_size=2))
    return _Outputs(BertModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state", "pooler_output"))


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


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaModel

    cfg = _eager(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    return _Outputs(LlamaModel(cfg), ("input_ids",), ("last_hidden_state",), full_mask=True, use_cache=False)


def _qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2Model

    cfg = _eager(Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))
    return _Outputs(Qwen2Model(cfg), ("input_ids",), ("last_hidden_state",), full_mask=True, use_cache=False)


def _llama_long() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaModel

    cfg = _eager(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))
    return _Outputs(LlamaModel(cfg), ("input_ids",), ("last_hidden_state",), full_mask=True, use_cache=False)


def _bert_long() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    cfg = _eager(BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=256, type_vocab_size=2))
    return _Outputs(BertModel(cfg), ("input_ids", "attention_mask"), ("last_hidden_state", "pooler_output"))


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


WIDTH, WIDE_LAYERS, WIDE_HEADS = 384, 4, 6


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


class _DecodeStep(torch.nn.Module):
    """A decoder's step against a key/value cache, as serving code exports it: ``input_ids`` [batch, 1],
    ``attention_mask`` [batch, past + 1] and, per layer, the past key and value [batch, kv_heads, past, head_dim] in;
    ``last_hidden_state`` and, per layer, the present key and value (the past and the new token's) out."""

    def __init__(self, model: torch.nn.Module, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, *args):  # positional only, as export_dynamic's dynamic shapes name them
        from transformers import DynamicCache

        input_ids, attention_mask, *past = args  # no past: a prefill, which returns the cache it starts
        cache = DynamicCache(config=self.model.config)
        for i in range(self.layers if past else 0):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        present = out.past_key_values
        return (out.last_hidden_state,
                *[t for i in range(self.layers) for t in (present.layers[i].keys, present.layers[i].values)])


DECODE_PAST, DECODE_WIDE_PAST = 15, 127
"""the past lengths of the decode steps: the small one's, and the wide ones' (a 128-token context with the new one)"""


def _decode_step(family: str, wide: bool) -> Callable[[], torch.nn.Module]:
    """LLaMA or Qwen2 (grouped KV heads) as a decode step: hidden 32, 1 layer, 4 heads / 2 KV heads; or at width 384,
    4 layers, 6 heads / 2 KV heads, head dimension 64."""
    def make() -> torch.nn.Module:
        import transformers as t

        cls, config = {"llama": (t.LlamaModel, t.LlamaConfig), "qwen2": (t.Qwen2Model, t.Qwen2Config)}[family]
        layers = WIDE_LAYERS if wide else 1
        size = {"hidden_size": WIDTH, "intermediate_size": 1024, "num_attention_heads": WIDE_HEADS} if wide else \
            {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}
        cfg = _eager(config(vocab_size=VOCAB, num_hidden_layers=layers, num_key_value_heads=2,
                            max_position_embeddings=1024, **size))
        return _DecodeStep(cls(cfg), layers)
    return make


def _prefill_spec(family: str, description: str) -> Spec:
    """The wide decode step's model as the prefill before it: the prompt's ids and mask in (batch and sequence
    dynamic), the hidden states and the cache it starts out."""
    present = tuple(f"present.{i}.{kv}" for i in range(WIDE_LAYERS) for kv in ("key", "value"))
    return Spec(_decode_step(family, True), (_LONG_IDS, _LONG_MASK), ("last_hidden_state", *present), description,
                out_axes={"last_hidden_state": {0: "batch", 1: "seq"}} | {o: {0: "batch", 2: "seq"} for o in present})


def _decode_spec(family: str, wide: bool, description: str) -> Spec:
    layers, kv_shape = (WIDE_LAYERS, (1, 2, DECODE_WIDE_PAST, WIDTH // WIDE_HEADS)) if wide else \
        (1, (1, 2, DECODE_PAST, 8))
    past = tuple((f"past_key_values.{i}.{kv}", "float", kv_shape) for i in range(layers) for kv in ("key", "value"))
    present = tuple(f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value"))
    cache_axes = {0: "batch", 2: "past"}
    return Spec(_decode_step(family, wide),
                (("input_ids", "ids", (1, 1)), ("attention_mask", "ones", (1, kv_shape[2] + 1)), *past),
                ("last_hidden_state", *present), description,
                axes=({0: "batch"}, {0: "batch", 1: "past + 1"}, *[cache_axes] * len(past)),
                out_axes={"last_hidden_state": {0: "batch"}} | {o: {0: "batch", 2: "past + 1"} for o in present})


_IDS = ("input_ids", "ids", (1, SEQ))
_LONG_IDS = ("input_ids", "ids", (1, LONG_SEQ))
_MASK = ("attention_mask", "mask", (1, SEQ))
_PIXELS = ("pixel_values", "float", (1, 3, IMAGE, IMAGE))
_FULL_PIXELS = ("pixel_values", "float", (1, 3, FULL_IMAGE, FULL_IMAGE))
_LONG_MASK = ("attention_mask", "mask", (1, LONG_SEQ))
SPECS: dict[str, Spec] = {
    "bert": Spec(_bert, (_IDS, _MASK), ("last_hidden_state", "pooler_output"),
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
    "llama": Spec(_llama, (_IDS,), ("last_hidden_state",),
                  "LLaMA block: 1 layer, hidden 32, 4 heads / 2 KV heads, RMSNorm, gated SiLU MLP, rotary embedding"),
    "qwen2": Spec(_qwen2, (_IDS,), ("last_hidden_state",),
                  "Qwen2 block: 1 layer, hidden 32, 4 heads / 2 KV heads, Q/K/V biases, RMSNorm, rotary embedding"),
    "bert_s128": Spec(_bert_long, (_LONG_IDS, _LONG_MASK),
                      ("last_hidden_state", "pooler_output"), "BERT encoder at sequence 128: 2 layers, hidden 64"),
    "llama_s128": Spec(_llama_long, (_LONG_IDS,), ("last_hidden_state",),
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
    "llama_decode": _decode_spec("llama", False, "LLaMA decode step: 1 layer, hidden 32, 4 heads / 2 KV heads, a "
                                 f"past of {DECODE_PAST} in, the present out"),
    "llama_decode_w384": _decode_spec("llama", True, "LLaMA decode step at width 384: 4 layers, 6 heads / 2 KV heads, "
                                      f"a past of {DECODE_WIDE_PAST} in, the present out"),
    "llama_prefill_w384": _prefill_spec("llama", "LLaMA prefill at width 384: the 128-token prompt with its mask in, "
                                        "the hidden states and the cache out (4 layers, 6 heads / 2 KV heads)"),
    "qwen2_prefill_w384": _prefill_spec("qwen2", "Qwen2 prefill at width 384: the 128-token prompt with its mask in, "
                                        "the hidden states and the cache out (4 layers, 6 heads / 2 KV heads)"),
    "qwen2_decode_w384": _decode_spec("qwen2", True, "Qwen2 decode step at width 384 (Q/K/V biases): 4 layers, 6 "
                                      f"heads / 2 KV heads, a past of {DECODE_WIDE_PAST} in, the present out"),
}
_AUDIO = ("input_values", "float", (1, 16000))
SPECS.update({
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
})
from .third import SPECS_THIRD, THIRD  # noqa: E402 - the third round's module reads this one's names

SPECS.update(SPECS_THIRD)
assert tuple(SPECS) == NAMES + EXTRA + UNSEEN + WIDE + SERVING + FAMILIES + THIRD


WEIGHTS = ("init", "trained")


def module(name: str, seed: int = 0, weights: str = "init") -> torch.nn.Module:
    """The torch module of zoo model ``name``, with seeded random weights, in eval mode.

    ``weights="init"``: as the family initializes them (its biases zero, its norms' scales one, and in a model with
    zero biases the exporter may store one zero tensor for every layer's). ``"trained"``: every parameter its
    initializer leaves constant is spread about that value (a zero one drawn from N(0, 0.02), any other scaled by
    1 + N(0, 0.1)), as training leaves them, so that no gain comes from a neutral bias or scale a trained model does
    not have (:func:`spread_constants`)."""
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; one of {', '.join(WEIGHTS)}")
    if name not in SPECS:
        raise KeyError(f"unknown zoo model {name!r}; one of {', '.join(SPECS)}")
    torch.manual_seed(seed)
    m = SPECS[name].make().eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.Conv2d):  # torch's default init: transformers' N(0, 0.02) fades to ~1e-3
                mod.reset_parameters()
        for mod in m.modules():  # non-trivial batch-norm statistics, so that folding them is observable
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)  # transformers draws some from N(0, 0.02), which zeroes the signal
                mod.bias.uniform_(-0.2, 0.2)
        if weights == "trained":
            spread_constants(m, torch.Generator().manual_seed(seed + 1))
    return m


def spread_constants(m: torch.nn.Module, gen: torch.Generator) -> int:
    """Every floating parameter of ``m`` whose values are all equal, redrawn about that value (0: N(0, 0.02);
    c: c * (1 + N(0, 0.1))); returns how many were redrawn."""
    count = 0
    for p in m.parameters():
        if not p.is_floating_point() or p.numel() < 2 or not bool((p == p.flatten()[0]).all()):
            continue
        value = float(p.flatten()[0])
        noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        p.copy_(noise * 0.02 if value == 0.0 else value * (1.0 + 0.1 * noise))
        count += 1
    return count


def feeds(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs in range for zoo model ``name``: token ids in [0, VOCAB), masks of 0/1 with position 0
    kept (a row with every position masked is undefined), images from a standard normal."""
    return sized_feeds(name, np.random.default_rng(seed))


def sized_feeds(name: str, rng: np.random.Generator, batch: int | None = None,
                seq: int | None = None) -> dict[str, np.ndarray]:
    """:func:`feeds` drawn from ``rng``; every input of batch ``batch`` and the token inputs (ids, masks) of
    sequence ``seq`` where given (a model exported with dynamic axes), else of the zoo's shapes."""
    out = {}
    for input_name, kind, shape in SPECS[name].inputs:
        if batch is not None:
            shape = (batch, *shape[1:])
        if seq is not None and kind in ("ids", "mask"):
            shape = (shape[0], seq)
        if kind == "ids":
            out[input_name] = rng.integers(0, VOCAB, shape).astype(np.int64)
        elif kind == "ones":  # a decode step's mask: the whole past attended
            out[input_name] = np.ones(shape, np.int64)
        elif kind == "mask":
            mask = rng.integers(0, 2, shape).astype(np.int64)
            mask[..., 0] = 1
            out[input_name] = mask
        else:
            out[input_name] = rng.standard_normal(shape).astype(np.float32)
    return out


def example_args(name: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(v) for v in feeds(name, seed).values())


def export(name: str, exporter: str, opset: int, seed: int = 0, weights: str = "init") -> onnx.ModelProto:
    """Export zoo model ``name`` with ``exporter`` ('torchscript': ``dynamo=False``; 'dynamo': ``dynamo=True``)
    at ``opset``; raises :class:`Unsupported` (with torch's reason) when the export fails."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; one of {', '.join(EXPORTERS)}")
    if (name, exporter, opset) in UNSUPPORTED:
        raise Unsupported(UNSUPPORTED[name, exporter, opset])
    spec = SPECS[name]
    m = module(name, seed, weights)
    args = example_args(name, seed)
    input_names = [i[0] for i in spec.inputs]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        path = os.path.join(tmp, f"{name}.onnx")
        try:
            if exporter == "torchscript":
                torch.onnx.export(m, args, path, input_names=input_names, output_names=list(spec.outputs),
                                  opset_version=opset, dynamo=False, do_constant_folding=True)
            else:
                prog = torch.onnx.export(m, args, input_names=input_names, output_names=list(spec.outputs),
                                         opset_version=opset, dynamo=True, external_data=False, verbose=False)
                prog.save(path, external_data=False)
            model = onnx.load(path)
            onnx.checker.check_model(model, full_check=True)  # the down-converted opset-17 dynamo export can fail
            got = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
            if got != opset:
                raise RuntimeError(f"asked for opset {opset}, the exporter wrote opset {got} (its version "
                                   "conversion failed and it kept the opset it exports natively)")
        except Exception as e:  # noqa: BLE001 - the reason is recorded, not hidden
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            UNSUPPORTED[name, exporter, opset] = reason
            raise Unsupported(reason) from e
    return model


_CACHE: dict[tuple[str, str, int, int, str], bytes] = {}


def build(name: str, exporter: str = "torchscript", opset: int = 17, seed: int = 0,
          weights: str = "init") -> onnx.ModelProto:
    """The exported model (a fresh copy each call; exports are cached per process)."""
    key = (name, exporter, opset, seed, weights)
    if key not in _CACHE:
        _CACHE[key] = export(name, exporter, opset, seed, weights).SerializeToString()
    m = onnx.ModelProto()
    m.ParseFromString(_CACHE[key])
    return m


def export_dynamic(name: str, exporter: str, path: str, seed: int = 0, weights: str = "init") -> onnx.ModelProto:
    """Zoo model ``name`` exported with dynamic axes, the way serving code exports it: a batch axis
    ``batch`` on every input and output, and a sequence axis ``seq`` on token inputs and on the token models'
    ``last_hidden_state`` (a model's :attr:`Spec.axes` and :attr:`Spec.out_axes` where it gives them: a decode step's
    ``past`` and ``past + 1``). TorchScript at opset 17 (``dynamic_axes``), dynamo at opset 18 (``dynamic_shapes``:
    no upper bound, so that the sequence-128 models export; traced at batch 2, since a batch of 1 lets
    ``torch.export`` specialize, e.g. ConvNeXt's guard ``batch <= 2``); written to ``path``."""
    spec = SPECS[name]
    m, args = module(name, seed, weights), example_args(name, seed)
    names = [i[0] for i in spec.inputs]
    axes = list(spec.axes) if spec.axes is not None else \
        [{0: "batch", 1: "seq"} if kind != "float" else {0: "batch"} for _, kind, _ in spec.inputs]
    tokens = any(kind == "ids" for _, kind, _ in spec.inputs)
    out_axes = spec.out_axes if spec.out_axes is not None else \
        {o: {0: "batch", 1: "seq"} if tokens and o == "last_hidden_state" else {0: "batch"} for o in spec.outputs}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dims: dict[str, Any] = {s: torch.export.Dim(s) for a in axes for s in a.values() if s.isidentifier()}
            for a in axes:  # "past + 1": one more than past (a cache's length with the new token)
                for s in a.values():
                    if s not in dims:
                        base, plus = s.split("+")
                        dims[s] = dims[base.strip()] + int(plus)
            shapes = {"args": tuple({k: dims[v] for k, v in a.items()} for a in axes)}
            doubled = tuple(torch.cat([a, a]) for a in args)
            prog = torch.onnx.export(m, doubled, input_names=names, output_names=list(spec.outputs),
                                     opset_version=18, dynamo=True, dynamic_shapes=shapes, verbose=False)
            prog.save(path, external_data=False)
        else:
            dynamic = dict(zip(names, axes)) | out_axes
            torch.onnx.export(m, args, path, input_names=names, output_names=list(spec.outputs), opset_version=17,
                              dynamo=False, dynamic_axes=dynamic)
    return onnx.load(path)


__all__ = ["EXPORTERS", "EXTRA", "FAMILIES", "NAMES", "OPSETS", "SERVING", "SPECS", "THIRD", "UNSEEN", "UNSUPPORTED", "WIDE", "Unsupported",
           "build", "export", "export_dynamic", "feeds", "module"]
