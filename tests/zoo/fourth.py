"""The fourth round of families a new user tries (:data:`FOURTH`, session 28): encoder-decoders (BART, T5: the
decoder's ids a second input of its own length, cross-attention), a speech encoder-decoder (Whisper: 80 mel bins of
3000 frames through two 1-D convolutions), a detection transformer (YOLOS: 100 detection tokens beside the patches,
its position table interpolated to the image), a depthwise-separable CNN (MobileNetV1) and a state-space model
(Mamba, transformers' slow path: the selective scan traced step by step). Width 384, 6 heads, 1024 wide MLPs, a
vocabulary of 1000, the configs' own attention implementation, at 128 tokens or 224 pixels; no test builds them
(``scripts/bench_peers.py --models fourth --exporters torchscript --dynamic``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import zoo
from zoo import _FULL_PIXELS, _LONG_IDS, _LONG_MASK, LONG_SEQ, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

FOURTH = ("bart_w384", "t5_w384", "whisper_w384", "yolos_w384", "mobilenetv1_full", "mamba_w384")

_WORDS = 1000


def _fourth(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import transformers as t

        halves = {"encoder_layers": WIDE_LAYERS // 2, "decoder_layers": WIDE_LAYERS // 2,
                  "encoder_attention_heads": WIDE_HEADS, "decoder_attention_heads": WIDE_HEADS,
                  "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024, "d_model": WIDTH, "vocab_size": _WORDS}
        seq2seq = ("input_ids", "attention_mask", "decoder_input_ids")
        out = "last_hidden_state"
        made: dict[str, Callable[[], tuple[Any, tuple[str, ...], dict[str, Any]]]] = {
            "bart_w384": lambda: (t.BartModel(t.BartConfig(**halves, max_position_embeddings=512)), seq2seq,
                                  {"use_cache": False}),
            "t5_w384": lambda: (t.T5Model(t.T5Config(d_model=WIDTH, d_kv=WIDTH // WIDE_HEADS, d_ff=1024,
                                                     num_layers=WIDE_LAYERS // 2, num_decoder_layers=WIDE_LAYERS // 2,
                                                     num_heads=WIDE_HEADS, vocab_size=_WORDS)),
                                seq2seq, {"use_cache": False}),
            "whisper_w384": lambda: (t.WhisperModel(t.WhisperConfig(**halves, num_mel_bins=80, max_source_positions=1500,
                                                                    pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                                    decoder_start_token_id=1)),
                                     ("input_features", "decoder_input_ids"), {}),
            "yolos_w384": lambda: (t.YolosModel(t.YolosConfig(hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
                                                              num_attention_heads=WIDE_HEADS, intermediate_size=1024,
                                                              image_size=[224, 224]), add_pooling_layer=False),
                                   ("pixel_values",), {}),
            "mobilenetv1_full": lambda: (t.MobileNetV1Model(t.MobileNetV1Config(), add_pooling_layer=False),
                                         ("pixel_values",), {}),
            "mamba_w384": lambda: (t.MambaModel(t.MambaConfig(hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
                                                              vocab_size=_WORDS, state_size=16)),
                                   ("input_ids",), {"use_cache": False}),
        }
        model, names, fixed = made[name]()
        return zoo._Outputs(model, names, (out,), **fixed)
    return make


_DECODER_IDS = ("decoder_input_ids", "ids", (1, LONG_SEQ))
_SEQ2SEQ_AXES: dict[str, Any] = {"axes": ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}, {0: "batch", 1: "dec_seq"}),
                                 "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}
_DESCRIPTIONS: dict[str, tuple[tuple[tuple[str, str, tuple[int, ...]], ...], str, dict[str, Any]]] = {
    "bart_w384": ((_LONG_IDS, _LONG_MASK, _DECODER_IDS),
                  "BART encoder-decoder at width 384 (2 + 2 layers): learned positions, cross-attention",
                  _SEQ2SEQ_AXES),
    "t5_w384": ((_LONG_IDS, _LONG_MASK, _DECODER_IDS),
                "T5 encoder-decoder at width 384 (2 + 2 layers): relative position buckets, RMSNorm, no score scale",
                _SEQ2SEQ_AXES),
    "whisper_w384": ((("input_features", "float", (1, 80, 3000)), _DECODER_IDS),
                     "Whisper encoder-decoder at width 384 (2 + 2 layers): 80 mel bins of 3000 frames, two 1-D "
                     "convolutions, sinusoidal positions",
                     {"axes": ({0: "batch"}, {0: "batch", 1: "dec_seq"}),
                      "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}),
    "yolos_w384": ((_FULL_PIXELS,), "YOLOS at width 384 at 224 pixels: 100 detection tokens, its position table "
                                    "interpolated (bicubic) to the image", {}),
    "mobilenetv1_full": ((_FULL_PIXELS,), "MobileNetV1 (the config's defaults) at 224 pixels: depthwise-separable "
                                          "convolutions, ReLU6", {}),
    "mamba_w384": ((_LONG_IDS,), "Mamba at width 384 (transformers' slow path): a causal 1-D convolution and the "
                                 "selective scan traced step by step", {"axes": ({0: "batch", 1: "seq"},)}),
}
SPECS_FOURTH = {name: Spec(_fourth(name), _DESCRIPTIONS[name][0], ("last_hidden_state",), _DESCRIPTIONS[name][1],
                           **_DESCRIPTIONS[name][2])
                for name in FOURTH}

__all__ = ["FOURTH", "SPECS_FOURTH"]
