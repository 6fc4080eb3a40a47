"""The fifth round of families a new user tries (:data:`FIFTH`, session 29): decoders with norms on the queries and
keys (Qwen3, Gemma 3: sliding-window layers beside global ones), one with fused QKV and gate-up projections (Phi-3),
an encoder with alternating local and global attention, rotary positions and a GeGLU MLP (ModernBERT), an
encoder-decoder with sinusoidal positions and pre-norm layers (Pegasus), and a hierarchical vision transformer with
mask-unit attention (Hiera, its config's defaults: 51M parameters). Width 384, 6 heads (2 key/value heads in the
decoders), 1024 wide MLPs, a vocabulary of 1000, the configs' own attention implementation, at 128 tokens or 224
pixels; no test builds them (``scripts/bench_peers.py --models fifth --exporters torchscript --dynamic``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import zoo
from zoo import _FULL_PIXELS, _LONG_IDS, _LONG_MASK, LONG_SEQ, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

FIFTH = ("qwen3_w384", "phi3_w384", "gemma3_w384", "modernbert_w384", "pegasus_w384", "hiera_base")

_WORDS = 1000


def _fifth(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import transformers as t

        dec = {"hidden_size": WIDTH, "num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS,
               "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": _WORDS, "max_position_embeddings": 512}
        tokens, out, no_cache = ("input_ids", "attention_mask"), "last_hidden_state", {"use_cache": False}
        made: dict[str, Callable[[], tuple[Any, tuple[str, ...], dict[str, Any]]]] = {
            "qwen3_w384": lambda: (t.Qwen3Model(t.Qwen3Config(head_dim=WIDTH // WIDE_HEADS, **dec)), tokens, no_cache),
            "phi3_w384": lambda: (t.Phi3Model(t.Phi3Config(pad_token_id=0, bos_token_id=1, eos_token_id=2, **dec)), tokens, no_cache),
            "gemma3_w384": lambda: (t.Gemma3TextModel(t.Gemma3TextConfig(head_dim=WIDTH // WIDE_HEADS, sliding_window=64,
                                                                          **dec)), tokens, no_cache),
            "modernbert_w384": lambda: (t.ModernBertModel(t.ModernBertConfig(
                hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS, num_attention_heads=WIDE_HEADS, intermediate_size=1024,
                vocab_size=_WORDS, max_position_embeddings=512, local_attention=64, global_attn_every_n_layers=2,
                pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)), tokens, {}),
            "pegasus_w384": lambda: (t.PegasusModel(t.PegasusConfig(
                d_model=WIDTH, encoder_layers=WIDE_LAYERS // 2, decoder_layers=WIDE_LAYERS // 2,
                encoder_attention_heads=WIDE_HEADS, decoder_attention_heads=WIDE_HEADS, encoder_ffn_dim=1024,
                decoder_ffn_dim=1024, vocab_size=_WORDS, max_position_embeddings=512)),
                ("input_ids", "attention_mask", "decoder_input_ids"), no_cache),
            "hiera_base": lambda: (t.HieraModel(t.HieraConfig()), ("pixel_values",), {}),
        }
        model, names, fixed = made[name]()
        return zoo._Outputs(model, names, (out,), **fixed)
    return make


_DECODER_IDS = ("decoder_input_ids", "ids", (1, LONG_SEQ))
_DESCRIPTIONS: dict[str, tuple[tuple[tuple[str, str, tuple[int, ...]], ...], str, dict[str, Any]]] = {
    "qwen3_w384": ((_LONG_IDS, _LONG_MASK), "Qwen3 decoder at width 384: 6 heads / 2 KV heads, RMSNorm on the queries "
                                            "and keys, rotary", {}),
    "phi3_w384": ((_LONG_IDS, _LONG_MASK), "Phi-3 decoder at width 384: fused QKV and gate-up projections, rotary", {}),
    "gemma3_w384": ((_LONG_IDS, _LONG_MASK), "Gemma 3 text decoder at width 384: RMSNorm on the queries and keys, "
                                             "sliding-window layers (64) beside global ones, scaled embeddings", {}),
    "modernbert_w384": ((_LONG_IDS, _LONG_MASK), "ModernBERT encoder at width 384: local (64) and global attention "
                                                 "alternating, rotary, GeGLU MLP, no biases", {}),
    "pegasus_w384": ((_LONG_IDS, _LONG_MASK, _DECODER_IDS),
                     "Pegasus encoder-decoder at width 384 (2 + 2 layers): sinusoidal positions, pre-norm layers",
                     {"axes": ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}, {0: "batch", 1: "dec_seq"}),
                      "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}),
    "hiera_base": ((_FULL_PIXELS,), "Hiera (the config's defaults, 51M parameters) at 224 pixels: mask-unit "
                                    "attention, pooled query stages", {}),
}
SPECS_FIFTH = {name: Spec(_fifth(name), _DESCRIPTIONS[name][0], ("last_hidden_state",), _DESCRIPTIONS[name][1],
                          **_DESCRIPTIONS[name][2])
               for name in FIFTH}

__all__ = ["FIFTH", "SPECS_FIFTH"]
