"""The zoo's text encoders at width 384 (4 layers, 6 heads, 128 tokens with their mask in): BERT (post-LN), DeBERTa-v2
(disentangled relative positions), XLM-RoBERTa (positions from the padding mask), MobileBERT (NoNorm in place of
LayerNorm), RoFormer and ESM (rotary positions), SqueezeBERT (grouped 1-D convolutions), ModernBERT (local and
global attention alternating, GeGLU), XLNet (two-stream relative attention), Funnel (the sequence pooled between
blocks), CLIP's text encoder (its pooled row gathered at each sequence's end token), ConvBERT (span-based dynamic
convolution), MPNet (a relative position bias) and BigBird (full attention). Each is a ``transformers`` model built
``from_config`` (nothing downloaded)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from zoo import WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec, eager

from .configs import FFN, HIDDEN, LAYERS, MLP, SIZES, SMALL_VOCAB, TEXT, TOKENS, WORDS, Built, Description, specs

_POOLED = ("last_hidden_state", "pooler_output")
_FULL = {"vocab_size": WORDS, "hidden_size": WIDTH, **LAYERS}
"""an encoder configured in full: a vocabulary of 1000, 384 wide, 4 layers, 6 heads, a 1536-wide MLP"""

_BUILT: dict[str, Callable[[ModuleType], Built]] = {
    "bert_w384": lambda t: (t.BertModel(eager(t.BertConfig(**SMALL_VOCAB, **SIZES, **MLP,
                                                           max_position_embeddings=512)), add_pooling_layer=False),
                            TOKENS, HIDDEN, {}),
    "deberta_w384": lambda t: (t.DebertaV2Model(eager(t.DebertaV2Config(**SMALL_VOCAB, **SIZES, **MLP))), TOKENS,
                               HIDDEN, {}),
    "xlmr_w384": lambda t: (t.XLMRobertaModel(eager(t.XLMRobertaConfig(**SMALL_VOCAB, **SIZES, **MLP)),
                                              add_pooling_layer=False), TOKENS, HIDDEN, {}),
    "mobilebert_l4": lambda t: (t.MobileBertModel(eager(t.MobileBertConfig(**SMALL_VOCAB, num_hidden_layers=4)),
                                                  add_pooling_layer=False), TOKENS, HIDDEN, {}),
    "roformer_w384": lambda t: (t.RoFormerModel(eager(t.RoFormerConfig(**SMALL_VOCAB, **SIZES, **MLP))), TOKENS,
                                HIDDEN, {}),
    "esm_w384": lambda t: (t.EsmModel(eager(t.EsmConfig(**SMALL_VOCAB, **SIZES, **MLP, position_embedding_type="rotary",
                                                         pad_token_id=1, mask_token_id=2)),
                                      add_pooling_layer=False), TOKENS, HIDDEN, {}),
    "squeezebert_w384": lambda t: (t.SqueezeBertModel(t.SqueezeBertConfig(**SMALL_VOCAB, **SIZES, **MLP,
                                                                          embedding_size=WIDTH)), TOKENS, HIDDEN, {}),
    "modernbert_w384": lambda t: (t.ModernBertModel(t.ModernBertConfig(
        hidden_size=WIDTH, num_hidden_layers=WIDE_LAYERS, num_attention_heads=WIDE_HEADS, intermediate_size=1024,
        vocab_size=WORDS, max_position_embeddings=512, local_attention=64, global_attn_every_n_layers=2,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)), TOKENS, HIDDEN, {}),
    "xlnet_w384": lambda t: (t.XLNetModel(t.XLNetConfig(vocab_size=WORDS, d_model=WIDTH, n_layer=WIDE_LAYERS,
                                                        n_head=WIDE_HEADS, d_inner=FFN, use_mems_eval=False)),
                             TOKENS, HIDDEN, {"use_mems": False}),
    "funnel_w384": lambda t: (t.FunnelModel(t.FunnelConfig(vocab_size=WORDS, block_sizes=[2, 2], block_repeats=[1, 1],
                                                           num_decoder_layers=2, d_model=WIDTH, n_head=WIDE_HEADS,
                                                           d_head=64, d_inner=FFN)), TOKENS, HIDDEN, {}),
    "cliptext_w384": lambda t: (t.CLIPTextModel(t.CLIPTextConfig(vocab_size=WORDS, hidden_size=WIDTH,
                                                                 max_position_embeddings=256, bos_token_id=1,
                                                                 eos_token_id=WORDS - 1, **LAYERS)),
                                TOKENS, _POOLED, {}),
    "convbert_w384": lambda t: (t.ConvBertModel(t.ConvBertConfig(vocab_size=WORDS, hidden_size=WIDTH,
                                                                 embedding_size=WIDTH, head_ratio=2, conv_kernel_size=9,
                                                                 num_groups=1, **LAYERS)), TOKENS, HIDDEN, {}),
    "mpnet_w384": lambda t: (t.MPNetModel(t.MPNetConfig(relative_attention_num_buckets=32, pad_token_id=1,
                                                        max_position_embeddings=514, **_FULL)), TOKENS, _POOLED, {}),
    "bigbird_w384": lambda t: (t.BigBirdModel(t.BigBirdConfig(attention_type="original_full",
                                                              max_position_embeddings=512, **_FULL)),
                               TOKENS, _POOLED, {}),
}

_DESCRIPTIONS: dict[str, Description] = {
    "bert_w384": (TEXT, HIDDEN, "BERT encoder at width 384: 4 layers, 6 heads, sequence 128, GELU (erf), post-LN", {}),
    "deberta_w384": (TEXT, HIDDEN, "DeBERTa-v2 encoder at width 384: 4 layers, disentangled relative-position "
                                   "attention", {}),
    "xlmr_w384": (TEXT, HIDDEN, "XLM-RoBERTa encoder at width 384: 4 layers, 6 heads, positions from the padding "
                                "mask", {}),
    "mobilebert_l4": (TEXT, HIDDEN, "MobileBERT (4 layers, the config's widths): bottlenecks, NoNorm in place of "
                                    "LayerNorm", {}),
    "roformer_w384": (TEXT, HIDDEN, "RoFormer encoder at width 384: rotary positions in every layer", {}),
    "esm_w384": (TEXT, HIDDEN, "ESM protein encoder at width 384: rotary positions, pre-LayerNorm", {}),
    "squeezebert_w384": (TEXT, HIDDEN, "SqueezeBERT encoder at width 384: grouped 1-D convolutions for the "
                                       "projections", {}),
    "modernbert_w384": (TEXT, HIDDEN, "ModernBERT encoder at width 384: local (64) and global attention alternating, "
                                      "rotary, GeGLU MLP, no biases", {}),
    "xlnet_w384": (TEXT, HIDDEN, "XLNet encoder at width 384: two-stream relative attention, relative segment "
                                 "encodings", {}),
    "funnel_w384": (TEXT, HIDDEN, "Funnel transformer at width 384: the sequence pooled between blocks (2 + 2 "
                                  "layers), then upsampled by a 2-layer decoder", {}),
    "cliptext_w384": (TEXT, _POOLED, "CLIP text encoder at width 384: causal mask, the pooled row of each sequence's "
                                     "end token", {}),
    "convbert_w384": (TEXT, HIDDEN, "ConvBERT encoder at width 384: span-based dynamic convolution heads beside "
                                    "attention", {}),
    "mpnet_w384": (TEXT, _POOLED, "MPNet encoder at width 384: a relative position bias of 32 buckets", {}),
    "bigbird_w384": (TEXT, _POOLED, "BigBird encoder at width 384, full attention", {}),
}

SPECS_ENCODERS: dict[str, Spec] = specs(_BUILT, _DESCRIPTIONS)
"""the text encoders' specs"""

__all__ = ["SPECS_ENCODERS"]
