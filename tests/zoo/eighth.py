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

from collections.abc import Callable
from typing import Any

import torch

import zoo
from zoo import _LONG_IDS, _LONG_MASK, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

EIGHTH = ("lfm2_w384", "smollm3_w384", "olmo2_w384", "arcee_w384", "mpnet_w384", "bigbird_w384")

_WORDS = 1000
_FFN = 1536


def _eighth(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import transformers as t

        layers = {"num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS, "intermediate_size": _FFN}
        dec = {"hidden_size": WIDTH, "num_key_value_heads": 2, "vocab_size": _WORDS, "max_position_embeddings": 512,
               "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, **layers}
        enc = {"vocab_size": _WORDS, "hidden_size": WIDTH, "max_position_embeddings": 514, **layers}
        tokens, out, no_cache = ("input_ids", "attention_mask"), ("last_hidden_state",), {"use_cache": False}
        pooled = ("last_hidden_state", "pooler_output")
        made: dict[str, Callable[[], tuple[Any, tuple[str, ...], tuple[str, ...], dict[str, Any]]]] = {
            "lfm2_w384": lambda: (t.Lfm2Model(t.Lfm2Config(
                layer_types=["conv", "full_attention", "conv", "full_attention"], **dec)), tokens, out, no_cache),
            "smollm3_w384": lambda: (t.SmolLM3Model(t.SmolLM3Config(no_rope_layer_interval=2, **dec)), tokens, out,
                                     no_cache),
            "olmo2_w384": lambda: (t.Olmo2Model(t.Olmo2Config(**dec)), tokens, out, no_cache),
            "arcee_w384": lambda: (t.ArceeModel(t.ArceeConfig(head_dim=64, **dec)), tokens, out, no_cache),
            "mpnet_w384": lambda: (t.MPNetModel(t.MPNetConfig(relative_attention_num_buckets=32, pad_token_id=1,
                                                              **enc)), tokens, pooled, {}),
            "bigbird_w384": lambda: (t.BigBirdModel(t.BigBirdConfig(attention_type="original_full", **{
                **enc, "max_position_embeddings": 512})), tokens, pooled, {}),
        }
        model, names, fields, fixed = made[name]()
        return zoo._Outputs(model, names, fields, **fixed)
    return make


_TEXT = (_LONG_IDS, _LONG_MASK)
_DESCRIPTIONS: dict[str, tuple[tuple[tuple[str, str, tuple[int, ...]], ...], tuple[str, ...], str, dict[str, Any]]] = {
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
SPECS_EIGHTH = {name: Spec(_eighth(name), _DESCRIPTIONS[name][0], _DESCRIPTIONS[name][1], _DESCRIPTIONS[name][2],
                           **_DESCRIPTIONS[name][3])
                for name in EIGHTH}

__all__ = ["EIGHTH", "SPECS_EIGHTH"]
