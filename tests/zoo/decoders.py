"""The zoo's decoder-only language models at width 384 (4 layers, 6 heads, 128 tokens with their mask in, the last
hidden state out, no cache): OPT (learned positions), BLOOM and MPT (ALiBi), GPT-NeoX, Phi, GPT-J, CodeGen,
StableLM, Persimmon and Nemotron (partial or interleaved rotary, parallel attention and MLP), Falcon and GPT-BigCode
(multi-query attention), Mistral, Gemma 2, Gemma 3, GPT-Neo and EXAONE 4 (sliding-window or local layers), OLMo,
OLMo 2, Cohere, Qwen3 (norms without parameters or on the queries and keys), Phi-3 (fused projections), Granite
(scaled residuals), StarCoder2, LFM2 (gated short convolutions), SmolLM3 (no rotary every second layer), Arcee
(squared-ReLU MLP); and two without attention: an LSTM language model (an ONNX ``LSTM``) and Mamba (its selective
scan traced step by step). Each is a ``transformers`` model built ``from_config`` (nothing downloaded) but the LSTM,
a torch module of its own."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from zoo import LONG_IDS, VOCAB, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec, eager

from .configs import (
    DECODER,
    HIDDEN,
    LAYERS,
    MLP,
    NO_CACHE,
    SIZES,
    SMALL_VOCAB,
    TEXT,
    TOKENS,
    WORDS,
    Built,
    Description,
    specs,
)

_GPT = {"n_embd": WIDTH, "n_layer": WIDE_LAYERS, "n_head": WIDE_HEADS, "n_positions": 512}
"""GPT-2's names for the sizes (GPT-J, CodeGen, GPT-BigCode)"""
_NARROW_MLP = {"hidden_size": WIDTH, "num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS,
               "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": WORDS, "max_position_embeddings": 512}
"""a decoder with two key/value heads and a 1024-wide MLP (Qwen3, Phi-3, Gemma 3)"""


def _decoder(model: Callable[[ModuleType], Any]) -> Callable[[ModuleType], Built]:
    """A decoder's builder: ``model(transformers)`` called with the ids and mask, its last hidden state, no cache."""
    return lambda t: (model(t), TOKENS, HIDDEN, NO_CACHE)


_WINDOWS = ["sliding_attention"] * (LAYERS["num_hidden_layers"] - 1) + ["full_attention"]
_MODELS: dict[str, Callable[[ModuleType], Any]] = {
    "opt_w384": lambda t: t.OPTModel(eager(t.OPTConfig(
        **SMALL_VOCAB, hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS, ffn_dim=4 * WIDTH,
        num_attention_heads=WIDE_HEADS, max_position_embeddings=512, word_embed_proj_dim=WIDTH))),
    "bloom_w384": lambda t: t.BloomModel(eager(t.BloomConfig(**SMALL_VOCAB, hidden_size=WIDTH, n_layer=WIDE_LAYERS,
                                                             n_head=WIDE_HEADS))),
    "neox_w384": lambda t: t.GPTNeoXModel(eager(t.GPTNeoXConfig(**SMALL_VOCAB, **SIZES, **MLP))),
    "phi_w384": lambda t: t.PhiModel(eager(t.PhiConfig(**SMALL_VOCAB, **SIZES, **MLP))),
    "gptj_w384": lambda t: t.GPTJModel(eager(t.GPTJConfig(**SMALL_VOCAB, **_GPT, rotary_dim=32))),
    "codegen_w384": lambda t: t.CodeGenModel(eager(t.CodeGenConfig(**SMALL_VOCAB, **_GPT, n_ctx=512, rotary_dim=32))),
    "falcon_w384": lambda t: t.FalconModel(eager(t.FalconConfig(**SMALL_VOCAB, **SIZES))),
    "stablelm_w384": lambda t: t.StableLmModel(eager(t.StableLmConfig(**SMALL_VOCAB, **SIZES, **MLP,
                                                                      num_key_value_heads=WIDE_HEADS))),
    "mistral_w384": lambda t: t.MistralModel(eager(t.MistralConfig(**SMALL_VOCAB, **SIZES, **MLP, num_key_value_heads=2,
                                                                   head_dim=WIDTH // WIDE_HEADS))),
    "bigcode_w384": lambda t: t.GPTBigCodeModel(eager(t.GPTBigCodeConfig(**SMALL_VOCAB, **_GPT))),
    "gemma2_w384": lambda t: t.Gemma2Model(eager(t.Gemma2Config(**SMALL_VOCAB, **SIZES, **MLP, num_key_value_heads=2,
                                                                head_dim=64, sliding_window=64))),
    "gptneo_w384": lambda t: t.GPTNeoModel(eager(t.GPTNeoConfig(
        **SMALL_VOCAB, hidden_size=WIDTH, num_layers=WIDE_LAYERS, num_heads=WIDE_HEADS, max_position_embeddings=512,
        attention_types=[[["global", "local"], 2]], window_size=64))),
    "mpt_w384": lambda t: t.MptModel(eager(t.MptConfig(**SMALL_VOCAB, d_model=WIDTH, n_heads=WIDE_HEADS,
                                                       n_layers=WIDE_LAYERS))),
    "olmo_w384": lambda t: t.OlmoModel(eager(t.OlmoConfig(**SMALL_VOCAB, **SIZES, **MLP, pad_token_id=1))),
    "cohere_w384": lambda t: t.CohereModel(eager(t.CohereConfig(**SMALL_VOCAB, **SIZES, **MLP,
                                                                num_key_value_heads=WIDE_HEADS, pad_token_id=1))),
    "qwen3_w384": lambda t: t.Qwen3Model(t.Qwen3Config(head_dim=WIDTH // WIDE_HEADS, **_NARROW_MLP)),
    "phi3_w384": lambda t: t.Phi3Model(t.Phi3Config(pad_token_id=0, bos_token_id=1, eos_token_id=2, **_NARROW_MLP)),
    "gemma3_w384": lambda t: t.Gemma3TextModel(t.Gemma3TextConfig(head_dim=WIDTH // WIDE_HEADS, sliding_window=64,
                                                                  **_NARROW_MLP)),
    "granite_w384": lambda t: t.GraniteModel(t.GraniteConfig(**DECODER)),
    "starcoder2_w384": lambda t: t.Starcoder2Model(t.Starcoder2Config(sliding_window=None, **DECODER)),
    "nemotron_w384": lambda t: t.NemotronModel(t.NemotronConfig(head_dim=64, partial_rotary_factor=0.5, **DECODER)),
    "persimmon_w384": lambda t: t.PersimmonModel(t.PersimmonConfig(
        qk_layernorm=True, partial_rotary_factor=0.5, **{k: v for k, v in DECODER.items()
                                                         if k != "num_key_value_heads"})),
    "exaone4_w384": lambda t: t.Exaone4Model(t.Exaone4Config(head_dim=64, sliding_window=32, layer_types=_WINDOWS,
                                                             **DECODER)),
    "lfm2_w384": lambda t: t.Lfm2Model(t.Lfm2Config(layer_types=["conv", "full_attention", "conv", "full_attention"],
                                                    **DECODER)),
    "smollm3_w384": lambda t: t.SmolLM3Model(t.SmolLM3Config(no_rope_layer_interval=2, **DECODER)),
    "olmo2_w384": lambda t: t.Olmo2Model(t.Olmo2Config(**DECODER)),
    "arcee_w384": lambda t: t.ArceeModel(t.ArceeConfig(head_dim=64, **DECODER)),
}
_BUILT: dict[str, Callable[[ModuleType], Built]] = {name: _decoder(model) for name, model in _MODELS.items()} | {
    "mamba_w384": lambda t: (t.MambaModel(t.MambaConfig(hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS,
                                                        vocab_size=WORDS, state_size=16)),
                             ("input_ids",), HIDDEN, {"use_cache": False}),
}

_TEXTS = {
    "opt_w384": "OPT decoder at width 384: 4 layers, 6 heads, sequence 128, learned positions, ReLU MLP",
    "bloom_w384": "BLOOM decoder at width 384: 4 layers, 6 heads, sequence 128, ALiBi, fused QKV, tanh GELU "
                  "factored as 0.79788456 * x * (1 + 0.044715 * x * x)",
    "neox_w384": "GPT-NeoX decoder at width 384: 4 layers, 6 heads, sequence 128, partial rotary, parallel "
                 "attention and MLP",
    "phi_w384": "Phi decoder at width 384: 4 layers, 6 heads, sequence 128, partial rotary, parallel attention "
                "and MLP, one LayerNorm per layer",
    "gptj_w384": "GPT-J decoder at width 384: 4 layers, 6 heads, interleaved partial rotary (32 of 64), parallel "
                 "attention and MLP",
    "codegen_w384": "CodeGen decoder at width 384: GPT-J's layer with a fused QKV projection",
    "falcon_w384": "Falcon decoder at width 384: 4 layers, 6 heads, one KV head (multi-query), rotary, parallel "
                   "attention and MLP",
    "stablelm_w384": "StableLM decoder at width 384: 4 layers, 6 heads, partial rotary (25%), LayerNorm, SiLU MLP",
    "mistral_w384": "Mistral decoder at width 384: 4 layers, 6 heads / 2 KV heads, sliding-window mask, RMSNorm",
    "bigcode_w384": "GPT-BigCode (StarCoder) decoder at width 384: 4 layers, multi-query attention, learned "
                    "positions",
    "gemma2_w384": "Gemma 2 decoder at width 384: 6 heads / 2 KV heads, soft-capped attention logits, "
                   "sliding-window and global layers in turn, sandwich RMSNorms",
    "gptneo_w384": "GPT-Neo decoder at width 384: global and local (64-token) attention in turn, no score scale",
    "mpt_w384": "MPT decoder at width 384: ALiBi position biases, no biases in its linears",
    "olmo_w384": "OLMo decoder at width 384: LayerNorm without parameters, SwiGLU",
    "cohere_w384": "Cohere decoder at width 384: parallel attention and MLP, LayerNorm without bias, "
                   "interleaved rotary",
    "qwen3_w384": "Qwen3 decoder at width 384: 6 heads / 2 KV heads, RMSNorm on the queries and keys, rotary",
    "phi3_w384": "Phi-3 decoder at width 384: fused QKV and gate-up projections, rotary",
    "gemma3_w384": "Gemma 3 text decoder at width 384: RMSNorm on the queries and keys, sliding-window layers (64) "
                   "beside global ones, scaled embeddings",
    "granite_w384": "Granite decoder at width 384: 6 heads / 2 KV heads, scaled embeddings, residuals and "
                    "attention",
    "starcoder2_w384": "StarCoder2 decoder at width 384: biases, LayerNorm, GELU MLP, rotary",
    "nemotron_w384": "Nemotron decoder at width 384: partial rotary, squared-ReLU MLP, LayerNorm1p",
    "persimmon_w384": "Persimmon decoder at width 384: q and k layer norms, partial rotary",
    "exaone4_w384": "EXAONE 4 decoder at width 384: three sliding-window layers (32) and a global one",
    "lfm2_w384": "LFM2 decoder at width 384: gated short convolutions in two layers, attention in two",
    "smollm3_w384": "SmolLM3 decoder at width 384: no rotary embedding every second layer",
    "olmo2_w384": "OLMo 2 decoder at width 384: q and k RMS norms over all heads, norms after each block",
    "arcee_w384": "Arcee decoder at width 384: a squared-ReLU MLP",
}
_DESCRIPTIONS: dict[str, Description] = {name: (TEXT, HIDDEN, text, {}) for name, text in _TEXTS.items()} | {
    "mamba_w384": ((LONG_IDS,), HIDDEN, "Mamba at width 384 (transformers' slow path): a causal 1-D convolution and "
                                        "the selective scan traced step by step", {"axes": ({0: "batch", 1: "seq"},)}),
}


class _Recurrent(torch.nn.Module):
    """An LSTM language model's body: embeddings, a 2-layer LSTM 384 wide, a linear projection."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.lstm = torch.nn.LSTM(WIDTH, WIDTH, 2, batch_first=True)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, *args):  # positional only, as export_dynamic's dynamic shapes name them
        return (self.proj(self.lstm(self.embed(args[0]))[0]),)


SPECS_DECODERS: dict[str, Spec] = specs(_BUILT, _DESCRIPTIONS) | {
    "lstm_w384": Spec(_Recurrent, (LONG_IDS,), HIDDEN,
                      "an LSTM language model: embeddings, 2 LSTM layers 384 wide (ONNX LSTM), a linear",
                      axes=({0: "batch", 1: "seq"},)),
}
"""the decoders' specs"""

__all__ = ["SPECS_DECODERS"]
