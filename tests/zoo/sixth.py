"""The sixth round of families a new user tries (:data:`SIXTH`, session 30): decoders with scaled residuals and
logits (Granite) and with biases and a plain GELU MLP (StarCoder2), an encoder with two-stream relative attention
(XLNet), one that pools its sequence between blocks (Funnel), a translation encoder-decoder (Marian), a detection
transformer over a ResNet backbone (DETR), a dense-prediction one (DPT), SigLIP's vision tower, two video
transformers (VideoMAE: tubelets of two frames; TimeSformer: divided space-time attention, 8 frames) and an audio
encoder with a convolutional positional embedding (Data2VecAudio). Width 384, 4 layers, 6 heads (2 key/value
heads in the decoders), 1536 wide MLPs, a vocabulary of 1000, at 128 tokens, 224 pixels or one second of audio;
no test builds them (``scripts/bench_peers.py --models sixth --exporters torchscript --dynamic``).
Mixture-of-experts decoders (Mixtral, Qwen2-MoE) are not here: eqsat's shape probes of them at 128 tokens need more
memory than a 24 GiB machine has (docs/benchmarks.md, the twenty-fifth pass)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import zoo
from zoo import _AUDIO, _FULL_PIXELS, _LONG_IDS, _LONG_MASK, LONG_SEQ, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

SIXTH = ("granite_w384", "starcoder2_w384", "xlnet_w384", "funnel_w384", "marian_w384", "detr_w384", "dpt_w384",
         "siglip_w384", "videomae_w384", "timesformer_w384", "data2vec_audio_w384")

_WORDS = 1000
_FFN = 1536
_VIDEO = ("pixel_values", "float", (1, 8, 3, 224, 224))


def _sixth(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import transformers as t

        layers = {"num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS, "intermediate_size": _FFN}
        dec = {"hidden_size": WIDTH, "num_key_value_heads": 2, "vocab_size": _WORDS, "max_position_embeddings": 512,
               "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
               **layers}
        vit = {"hidden_size": WIDTH, "image_size": 224, "patch_size": 16, **layers}
        tokens, pixels, out, no_cache = ("input_ids", "attention_mask"), ("pixel_values",), "last_hidden_state", \
            {"use_cache": False}
        seq2seq = {"d_model": WIDTH, "encoder_layers": WIDE_LAYERS, "decoder_layers": WIDE_LAYERS,
                   "encoder_attention_heads": WIDE_HEADS, "decoder_attention_heads": WIDE_HEADS,
                   "encoder_ffn_dim": _FFN, "decoder_ffn_dim": _FFN}
        made: dict[str, Callable[[], tuple[Any, tuple[str, ...], dict[str, Any]]]] = {
            "granite_w384": lambda: (t.GraniteModel(t.GraniteConfig(**dec)), tokens, no_cache),
            "starcoder2_w384": lambda: (t.Starcoder2Model(t.Starcoder2Config(sliding_window=None, **dec)), tokens,
                                        no_cache),
            "xlnet_w384": lambda: (t.XLNetModel(t.XLNetConfig(vocab_size=_WORDS, d_model=WIDTH, n_layer=WIDE_LAYERS,
                                                              n_head=WIDE_HEADS, d_inner=_FFN, use_mems_eval=False)),
                                   tokens, {"use_mems": False}),
            "funnel_w384": lambda: (t.FunnelModel(t.FunnelConfig(vocab_size=_WORDS, block_sizes=[2, 2],
                                                                 block_repeats=[1, 1], num_decoder_layers=2,
                                                                 d_model=WIDTH, n_head=WIDE_HEADS, d_head=64,
                                                                 d_inner=_FFN)), tokens, {}),
            "marian_w384": lambda: (t.MarianModel(t.MarianConfig(vocab_size=_WORDS, max_position_embeddings=512,
                                                                 pad_token_id=_WORDS - 1,
                                                                 decoder_start_token_id=_WORDS - 1, **seq2seq)),
                                    ("input_ids", "attention_mask", "decoder_input_ids"), no_cache),
            "detr_w384": lambda: (t.DetrModel(t.DetrConfig(
                use_timm_backbone=False, use_pretrained_backbone=False, num_queries=100,
                backbone_config=t.ResNetConfig(embedding_size=32, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 1, 1],
                                               layer_type="basic", out_features=["stage4"]), **seq2seq)), pixels, {}),
            "dpt_w384": lambda: (t.DPTModel(t.DPTConfig(**vit)), pixels, {}),
            "siglip_w384": lambda: (t.SiglipVisionModel(t.SiglipVisionConfig(**vit)), pixels, {}),
            "videomae_w384": lambda: (t.VideoMAEModel(t.VideoMAEConfig(num_frames=8, tubelet_size=2, **vit)), pixels,
                                      {}),
            "timesformer_w384": lambda: (t.TimesformerModel(t.TimesformerConfig(num_frames=8, **vit)), pixels, {}),
            "data2vec_audio_w384": lambda: (t.Data2VecAudioModel(t.Data2VecAudioConfig(
                hidden_size=WIDTH, num_conv_pos_embedding_groups=16, **layers)), ("input_values",), {}),
        }
        model, names, fixed = made[name]()
        return zoo._Outputs(model, names, (out,), **fixed)
    return make


_DECODER_IDS = ("decoder_input_ids", "ids", (1, LONG_SEQ))
_TEXT = (_LONG_IDS, _LONG_MASK)
_DESCRIPTIONS: dict[str, tuple[tuple[tuple[str, str, tuple[int, ...]], ...], str, dict[str, Any]]] = {
    "granite_w384": (_TEXT, "Granite decoder at width 384: 6 heads / 2 KV heads, scaled embeddings, residuals and "
                            "attention", {}),
    "starcoder2_w384": (_TEXT, "StarCoder2 decoder at width 384: biases, LayerNorm, GELU MLP, rotary", {}),
    "xlnet_w384": (_TEXT, "XLNet encoder at width 384: two-stream relative attention, relative segment encodings",
                   {}),
    "funnel_w384": (_TEXT, "Funnel transformer at width 384: the sequence pooled between blocks (2 + 2 layers), "
                           "then upsampled by a 2-layer decoder", {}),
    "marian_w384": ((*_TEXT, _DECODER_IDS), "Marian translation encoder-decoder at width 384: sinusoidal positions, "
                                            "post-norm layers",
                    {"axes": ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}, {0: "batch", 1: "dec_seq"}),
                     "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}),
    "detr_w384": ((_FULL_PIXELS,), "DETR at width 384 over a small ResNet backbone: sine position embeddings, 100 "
                                   "object queries", {}),
    "dpt_w384": ((_FULL_PIXELS,), "DPT (dense prediction) ViT backbone at width 384", {}),
    "siglip_w384": ((_FULL_PIXELS,), "SigLIP vision tower at width 384: attention-pooling head", {}),
    "videomae_w384": ((_VIDEO,), "VideoMAE at width 384: 8 frames of 224 pixels, tubelets of 2 frames (3-D "
                                 "convolution), sinusoidal positions", {}),
    "timesformer_w384": ((_VIDEO,), "TimeSformer at width 384: 8 frames of 224 pixels, divided space-time "
                                    "attention", {}),
    "data2vec_audio_w384": ((_AUDIO,), "Data2VecAudio encoder at width 384: convolutional feature extractor, "
                                       "convolutional positional embedding of 5 layers", {}),
}
SPECS_SIXTH = {name: Spec(_sixth(name), _DESCRIPTIONS[name][0], ("last_hidden_state",), _DESCRIPTIONS[name][1],
                          **_DESCRIPTIONS[name][2])
               for name in SIXTH}

__all__ = ["SIXTH", "SPECS_SIXTH"]
