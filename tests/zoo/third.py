"""The third round of families a new user tries (:data:`THIRD`, session 12): decoders with soft-capped logits and
alternating sliding windows (Gemma 2), local attention without a scale (GPT-Neo), ALiBi (MPT), QK-norm and parallel
blocks (Cohere), non-parametric LayerNorm (OLMo); encoders without LayerNorm (MobileBERT's NoNorm), with rotary
positions (RoFormer, ESM) or grouped 1-D convolutions (SqueezeBERT); a recurrent language model (an ONNX ``LSTM``);
vision models with global response normalization (ConvNeXt V2), cosine attention and log-spaced position biases
(Swin V2), pooling as mixing (PoolFormer), attention biases (LeViT), inverted residuals at full size (MobileNetV2),
weight-standardized convolutions (BiT), convolutional projections (CvT), spatially reduced keys (PVT), focal
modulation (FocalNet); audio with gated relative positions (WavLM) and spectrogram patches (AST). Width 384, 4
layers, 6 heads, sequence 128 where the family has them, the configs' defaults otherwise, at 224 pixels; no test
builds them (``scripts/bench_peers.py --models third --dynamic``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import zoo
from zoo import _AUDIO, _FULL_PIXELS, _LONG_IDS, _LONG_MASK, FULL_IMAGE, VOCAB, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

THIRD = ("mobilebert_l4", "gemma2_w384", "gptneo_w384", "mpt_w384", "roformer_w384", "esm_w384", "squeezebert_w384",
         "olmo_w384", "cohere_w384", "lstm_w384", "convnextv2_t", "swinv2_t", "poolformer_s12", "levit_128s",
         "mobilenetv2_full", "bit_50", "cvt_13", "pvt_t", "focalnet_t", "wavlm_w384", "ast_w384")


class _Recurrent(torch.nn.Module):
    """An LSTM language model's body: embeddings, a 2-layer LSTM 384 wide, a linear projection."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.lstm = torch.nn.LSTM(WIDTH, WIDTH, 2, batch_first=True)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, *args):  # positional only, as export_dynamic's dynamic shapes name them
        return (self.proj(self.lstm(self.embed(args[0]))[0]),)


def _third(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import transformers as t

        text = {"vocab_size": VOCAB}
        wide = {"hidden_size": WIDTH, "num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS}
        mlp = {"intermediate_size": 4 * WIDTH}
        tokens, pixels, out = ("input_ids", "attention_mask"), ("pixel_values",), "last_hidden_state"
        nocache = {"use_cache": False}
        made: dict[str, Callable[[], tuple[Any, tuple[str, ...], str, dict[str, Any]]]] = {
            "mobilebert_l4": lambda: (t.MobileBertModel(zoo._eager(t.MobileBertConfig(**text, num_hidden_layers=4)),
                                                        add_pooling_layer=False), tokens, out, {}),
            "gemma2_w384": lambda: (t.Gemma2Model(zoo._eager(t.Gemma2Config(**text, **wide, **mlp, num_key_value_heads=2,
                                                                         head_dim=64, sliding_window=64))),
                                    tokens, out, nocache),
            "gptneo_w384": lambda: (t.GPTNeoModel(zoo._eager(t.GPTNeoConfig(
                **text, hidden_size=WIDTH, num_layers=WIDE_LAYERS, num_heads=WIDE_HEADS, max_position_embeddings=512,
                attention_types=[[["global", "local"], 2]], window_size=64))), tokens, out, nocache),
            "mpt_w384": lambda: (t.MptModel(zoo._eager(t.MptConfig(**text, d_model=WIDTH, n_heads=WIDE_HEADS,
                                                                n_layers=WIDE_LAYERS))), tokens, out, nocache),
            "roformer_w384": lambda: (t.RoFormerModel(zoo._eager(t.RoFormerConfig(**text, **wide, **mlp))), tokens, out,
                                      {}),
            "esm_w384": lambda: (t.EsmModel(zoo._eager(t.EsmConfig(**text, **wide, **mlp, position_embedding_type="rotary",
                                                               pad_token_id=1, mask_token_id=2)),
                                            add_pooling_layer=False), tokens, out, {}),
            "squeezebert_w384": lambda: (t.SqueezeBertModel(t.SqueezeBertConfig(**text, **wide, **mlp,
                                                                                embedding_size=WIDTH)), tokens, out, {}),
            "olmo_w384": lambda: (t.OlmoModel(zoo._eager(t.OlmoConfig(**text, **wide, **mlp, pad_token_id=1))), tokens,
                                  out, nocache),
            "cohere_w384": lambda: (t.CohereModel(zoo._eager(t.CohereConfig(**text, **wide, **mlp,
                                                                        num_key_value_heads=WIDE_HEADS,
                                                                        pad_token_id=1))), tokens, out, nocache),
            "convnextv2_t": lambda: (t.ConvNextV2Model(t.ConvNextV2Config()), pixels, out, {}),
            "swinv2_t": lambda: (t.Swinv2Model(zoo._eager(t.Swinv2Config(image_size=FULL_IMAGE))), pixels, out, {}),
            "poolformer_s12": lambda: (t.PoolFormerModel(t.PoolFormerConfig()), pixels, out, {}),
            "levit_128s": lambda: (t.LevitModel(t.LevitConfig()), pixels, out, {}),
            "mobilenetv2_full": lambda: (t.MobileNetV2Model(t.MobileNetV2Config()), pixels, out, {}),
            "bit_50": lambda: (t.BitModel(t.BitConfig()), pixels, out, {}),
            "cvt_13": lambda: (t.CvtModel(t.CvtConfig(), add_pooling_layer=False), pixels, out, {}),
            "pvt_t": lambda: (t.PvtModel(zoo._eager(t.PvtConfig())), pixels, out, {}),
            "focalnet_t": lambda: (t.FocalNetModel(t.FocalNetConfig()), pixels, out, {}),
            "wavlm_w384": lambda: (t.WavLMModel(zoo._eager(t.WavLMConfig(**wide, **mlp))), ("input_values",), out, {}),
            "ast_w384": lambda: (t.ASTModel(zoo._eager(t.ASTConfig(**wide, **mlp))), ("input_values",), out, {}),
        }
        if name == "lstm_w384":
            return _Recurrent()
        model, names, field, fixed = made[name]()
        return zoo._Outputs(model, names, (field,), **fixed)
    return make


_TEXT = (_LONG_IDS, _LONG_MASK)
_DESCRIPTIONS = {
    "mobilebert_l4": ((_TEXT, "MobileBERT (4 layers, the config's widths): bottlenecks, NoNorm in place of LayerNorm")),
    "gemma2_w384": (_TEXT, "Gemma 2 decoder at width 384: 6 heads / 2 KV heads, soft-capped attention logits, "
                           "sliding-window and global layers in turn, sandwich RMSNorms"),
    "gptneo_w384": (_TEXT, "GPT-Neo decoder at width 384: global and local (64-token) attention in turn, no score scale"),
    "mpt_w384": (_TEXT, "MPT decoder at width 384: ALiBi position biases, no biases in its linears"),
    "roformer_w384": (_TEXT, "RoFormer encoder at width 384: rotary positions in every layer"),
    "esm_w384": (_TEXT, "ESM protein encoder at width 384: rotary positions, pre-LayerNorm"),
    "squeezebert_w384": (_TEXT, "SqueezeBERT encoder at width 384: grouped 1-D convolutions for the projections"),
    "olmo_w384": (_TEXT, "OLMo decoder at width 384: LayerNorm without parameters, SwiGLU"),
    "cohere_w384": (_TEXT, "Cohere decoder at width 384: parallel attention and MLP, LayerNorm without bias, "
                           "interleaved rotary"),
    "lstm_w384": (((_LONG_IDS,)), "an LSTM language model: embeddings, 2 LSTM layers 384 wide (ONNX LSTM), a linear"),
    "convnextv2_t": ((_FULL_PIXELS,), "ConvNeXt V2 (the config's defaults) at 224 pixels: global response norm"),
    "swinv2_t": ((_FULL_PIXELS,), "Swin V2-T at 224 pixels: cosine attention, log-spaced continuous position biases"),
    "poolformer_s12": ((_FULL_PIXELS,), "PoolFormer-S12 at 224 pixels: average pooling as token mixer, GroupNorm"),
    "levit_128s": ((_FULL_PIXELS,), "LeViT-128S at 224 pixels: attention biases gathered per layer, Hardswish"),
    "mobilenetv2_full": ((_FULL_PIXELS,), "MobileNetV2 at 224 pixels: inverted residuals, ReLU6"),
    "bit_50": ((_FULL_PIXELS,), "BiT-ResNet-50 at 224 pixels: weight-standardized convolutions, GroupNorm"),
    "cvt_13": ((_FULL_PIXELS,), "CvT-13 at 224 pixels: convolutional token embeddings and projections"),
    "pvt_t": ((_FULL_PIXELS,), "PVT-Tiny at 224 pixels: attention over spatially reduced keys"),
    "focalnet_t": ((_FULL_PIXELS,), "FocalNet-T at 224 pixels: focal modulation (depthwise convolutions, gates)"),
    "wavlm_w384": ((_AUDIO,), "WavLM encoder at width 384 on one second of 16 kHz audio: gated relative positions"),
    "ast_w384": (((("input_values", "float", (1, 1024, 128)),)),
                 "Audio Spectrogram Transformer at width 384: 1024 frames x 128 mel bins as 1212 patches"),
}
_AXES: dict[str, dict[str, Any]] = {
    "lstm_w384": {"axes": ({0: "batch", 1: "seq"},)},
    "wavlm_w384": {"axes": ({0: "batch", 1: "samples"},),
                   "out_axes": {"last_hidden_state": {0: "batch", 1: "frames"}}},
    "ast_w384": {"axes": ({0: "batch"},)},
}
SPECS_THIRD = {name: Spec(_third(name), _DESCRIPTIONS[name][0], ("last_hidden_state",), _DESCRIPTIONS[name][1],
                          **_AXES.get(name, {}))
               for name in THIRD}

__all__ = ["SPECS_THIRD", "THIRD"]
