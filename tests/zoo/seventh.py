"""The seventh round of families a new user tries (:data:`SEVENTH`, session 33): decoders with partial rotary and a
squared-ReLU MLP (Nemotron), with layer norms on q and k (Persimmon), with sliding-window layers beside a global one
(EXAONE 4), CLIP's text encoder (its pooled output gathered at each sequence's end token: ``Range(batch) * seq +
argmax``, a value of two sizes), ConvBERT (span-based dynamic convolution beside attention) and M2M100 (a
translation encoder-decoder, 2 + 2 layers). Width 384, 4 layers, 6 heads (2 key/value heads in the decoders),
1536 wide MLPs, a vocabulary of 1000, at 128 tokens; no test builds them (``scripts/bench_peers.py --models seventh
--exporters torchscript --dynamic``). The round's vision and audio models (HGNetV2, UperNet over ConvNeXt, ViTMAE,
Wav2Vec2-Conformer, SEW-D) and its mixture of experts (OLMoE) were exported with fixed sides, lengths or noise that
the zoo's builder does not write: docs/benchmarks.md, the twenty-eighth pass."""

from __future__ import annotations

from types import ModuleType

from zoo import _LONG_IDS, _LONG_MASK, LONG_SEQ, WIDE_HEADS, WIDTH

from .rounds import DECODER, FFN, HIDDEN, LAYERS, NO_CACHE, TOKENS, WORDS, Built, Description, specs

SEVENTH = ("nemotron_w384", "persimmon_w384", "exaone4_w384", "cliptext_w384", "convbert_w384", "m2m100_w384")


def _built(name: str, t: ModuleType) -> Built:
    windows = ["sliding_attention"] * (LAYERS["num_hidden_layers"] - 1) + ["full_attention"]
    if name == "nemotron_w384":
        return t.NemotronModel(t.NemotronConfig(head_dim=64, partial_rotary_factor=0.5, **DECODER)), TOKENS, HIDDEN, \
            NO_CACHE
    if name == "persimmon_w384":
        return t.PersimmonModel(t.PersimmonConfig(
            qk_layernorm=True, partial_rotary_factor=0.5, **{k: v for k, v in DECODER.items()
                                                             if k != "num_key_value_heads"})), TOKENS, HIDDEN, NO_CACHE
    if name == "exaone4_w384":
        return t.Exaone4Model(t.Exaone4Config(head_dim=64, sliding_window=32, layer_types=windows, **DECODER)), \
            TOKENS, HIDDEN, NO_CACHE
    if name == "cliptext_w384":
        return t.CLIPTextModel(t.CLIPTextConfig(vocab_size=WORDS, hidden_size=WIDTH, max_position_embeddings=256,
                                                bos_token_id=1, eos_token_id=WORDS - 1, **LAYERS)), \
            TOKENS, ("last_hidden_state", "pooler_output"), {}
    if name == "convbert_w384":
        return t.ConvBertModel(t.ConvBertConfig(vocab_size=WORDS, hidden_size=WIDTH, embedding_size=WIDTH,
                                                head_ratio=2, conv_kernel_size=9, num_groups=1, **LAYERS)), \
            TOKENS, HIDDEN, {}
    assert name == "m2m100_w384", name
    return t.M2M100Model(t.M2M100Config(
        vocab_size=WORDS, d_model=WIDTH, encoder_layers=2, decoder_layers=2, encoder_attention_heads=WIDE_HEADS,
        decoder_attention_heads=WIDE_HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=512,
        pad_token_id=1, decoder_start_token_id=2, encoder_layerdrop=0.0, decoder_layerdrop=0.0)), \
        ("input_ids", "attention_mask", "decoder_input_ids"), HIDDEN, NO_CACHE


_DECODER_IDS = ("decoder_input_ids", "ids", (1, LONG_SEQ))
_TEXT = (_LONG_IDS, _LONG_MASK)
_DESCRIPTIONS: dict[str, Description] = {
    "nemotron_w384": (_TEXT, ("last_hidden_state",), "Nemotron decoder at width 384: partial rotary, squared-ReLU "
                                                    "MLP, LayerNorm1p", {}),
    "persimmon_w384": (_TEXT, ("last_hidden_state",), "Persimmon decoder at width 384: q and k layer norms, partial "
                                                     "rotary", {}),
    "exaone4_w384": (_TEXT, ("last_hidden_state",), "EXAONE 4 decoder at width 384: three sliding-window layers "
                                                   "(32) and a global one", {}),
    "cliptext_w384": (_TEXT, ("last_hidden_state", "pooler_output"), "CLIP text encoder at width 384: causal mask, "
                      "the pooled row of each sequence's end token", {}),
    "convbert_w384": (_TEXT, ("last_hidden_state",), "ConvBERT encoder at width 384: span-based dynamic convolution "
                                                    "heads beside attention", {}),
    "m2m100_w384": ((*_TEXT, _DECODER_IDS), ("last_hidden_state",), "M2M100 translation encoder-decoder at width "
                                                                    "384 (2 + 2 layers): sinusoidal positions",
                    {"axes": ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}, {0: "batch", 1: "dec_seq"}),
                     "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}),
}
SPECS_SEVENTH = specs(SEVENTH, _built, _DESCRIPTIONS)

__all__ = ["SEVENTH", "SPECS_SEVENTH"]
