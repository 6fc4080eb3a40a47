"""The eighth round of families a new user tries (:data:`EIGHTH`, session 34): decoders with a gated short
convolution in every other layer (LFM2: its convolutions read the mask's last ``seq`` columns), with no rotary
embedding every second layer (SmolLM3), with q and k RMS norms over all heads (OLMo 2), with a squared-ReLU MLP
(Arcee), and encoders with a relative position bias of 32 buckets (MPNet) and BigBird's full attention. Width 384,
4 layers, 6 heads (2 key/value heads in the decoders), 1536 wide MLPs, a vocabulary of 1000, at 128 tokens; no test
builds them (``scripts/bench_peers.py --models eighth --exporters torchscript --dynamic``). The round's vision and
audio models (PVTv2, SwiftFormer, data2vec vision, TextNet, SEW, UniSpeech) and its Whisper decoders with their past
were exported with fixed sides, lengths or caches the zoo's builder does not write: docs/benchmarks.md, the
twenty-ninth pass."""

from __future__ import annotations

from types import ModuleType

from zoo import _LONG_IDS, _LONG_MASK, WIDTH

from .rounds import DECODER, HIDDEN, LAYERS, NO_CACHE, TOKENS, WORDS, Built, Description, specs

EIGHTH = ("lfm2_w384", "smollm3_w384", "olmo2_w384", "arcee_w384", "mpnet_w384", "bigbird_w384")


def _built(name: str, t: ModuleType) -> Built:
    encoder = {"vocab_size": WORDS, "hidden_size": WIDTH, **LAYERS}
    pooled = ("last_hidden_state", "pooler_output")
    if name == "lfm2_w384":
        return t.Lfm2Model(t.Lfm2Config(layer_types=["conv", "full_attention", "conv", "full_attention"],
                                        **DECODER)), TOKENS, HIDDEN, NO_CACHE
    if name == "smollm3_w384":
        return t.SmolLM3Model(t.SmolLM3Config(no_rope_layer_interval=2, **DECODER)), TOKENS, HIDDEN, NO_CACHE
    if name == "olmo2_w384":
        return t.Olmo2Model(t.Olmo2Config(**DECODER)), TOKENS, HIDDEN, NO_CACHE
    if name == "arcee_w384":
        return t.ArceeModel(t.ArceeConfig(head_dim=64, **DECODER)), TOKENS, HIDDEN, NO_CACHE
    if name == "mpnet_w384":
        return t.MPNetModel(t.MPNetConfig(relative_attention_num_buckets=32, pad_token_id=1,
                                          max_position_embeddings=514, **encoder)), TOKENS, pooled, {}
    assert name == "bigbird_w384", name
    return t.BigBirdModel(t.BigBirdConfig(attention_type="original_full", max_position_embeddings=512, **encoder)), \
        TOKENS, pooled, {}


_TEXT = (_LONG_IDS, _LONG_MASK)
_DESCRIPTIONS: dict[str, Description] = {
    "lfm2_w384": (_TEXT, ("last_hidden_state",), "LFM2 decoder at width 384: gated short convolutions in two layers, "
                                                "attention in two", {}),
    "smollm3_w384": (_TEXT, ("last_hidden_state",), "SmolLM3 decoder at width 384: no rotary embedding every "
                                                   "second layer", {}),
    "olmo2_w384": (_TEXT, ("last_hidden_state",), "OLMo 2 decoder at width 384: q and k RMS norms over all heads, "
                                                 "norms after each block", {}),
    "arcee_w384": (_TEXT, ("last_hidden_state",), "Arcee decoder at width 384: a squared-ReLU MLP", {}),
    "mpnet_w384": (_TEXT, ("last_hidden_state", "pooler_output"), "MPNet encoder at width 384: a relative position "
                                                                 "bias of 32 buckets", {}),
    "bigbird_w384": (_TEXT, ("last_hidden_state", "pooler_output"), "BigBird encoder at width 384, full attention",
                     {}),
}
SPECS_EIGHTH = specs(EIGHTH, _built, _DESCRIPTIONS)

__all__ = ["EIGHTH", "SPECS_EIGHTH"]
