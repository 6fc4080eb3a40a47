"""What the modules of the width-384 families (:mod:`.decoders`, :mod:`.encoders`, :mod:`.seq2seq`, :mod:`.vision`,
:mod:`.audio`) share: the sizes of their configs, their inputs and outputs, and :func:`specs`, which makes a module's
specs from a builder per name (a transformers model, its input names, the output fields it returns and the keyword
arguments it is called with) and a description per name."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from zoo import LONG_IDS, LONG_MASK, VOCAB, WIDE_HEADS, WIDE_LAYERS, WIDTH, Outputs, Spec

SMALL_VOCAB = {"vocab_size": VOCAB}
"""the zoo's vocabulary of 128, for the families configured on transformers' defaults and the zoo's sizes"""
SIZES = {"hidden_size": WIDTH, "num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS}
"""384 wide, 4 layers, 6 heads, under transformers' common names"""
MLP = {"intermediate_size": 4 * WIDTH}
"""a feed-forward layer four times as wide"""

WORDS = 1000
"""the vocabulary of the families configured in full (their special tokens' ids below it)"""
FFN = 1536
LAYERS = {"num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS, "intermediate_size": FFN}
"""the depth, heads and MLP width of the families configured in full"""
DECODER = {"hidden_size": WIDTH, "num_key_value_heads": 2, "vocab_size": WORDS, "max_position_embeddings": 512,
           "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, **LAYERS}
"""a decoder's config: two key/value heads, positions up to 512"""
ENCODER_DECODER = {"d_model": WIDTH, "encoder_layers": WIDE_LAYERS, "decoder_layers": WIDE_LAYERS,
                   "encoder_attention_heads": WIDE_HEADS, "decoder_attention_heads": WIDE_HEADS,
                   "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN}
"""an encoder-decoder's sizes (4 + 4 layers), as BART's config names them"""

TEXT = (LONG_IDS, LONG_MASK)
"""a text model's inputs: 128 token ids and their mask"""
TOKENS, HIDDEN, NO_CACHE = ("input_ids", "attention_mask"), ("last_hidden_state",), {"use_cache": False}

Built = tuple[Any, tuple[str, ...], tuple[str, ...], dict[str, Any]]
"""a model, its input names, the fields of its output returned, the keyword arguments it is called with"""
Description = tuple[tuple[tuple[str, str, tuple[int, ...]], ...], tuple[str, ...], str, dict[str, Any]]
"""a spec's inputs, outputs, description and further fields (its axes)"""


def specs(built: dict[str, Callable[[ModuleType], Built]], descriptions: dict[str, Description]) -> dict[str, Spec]:
    """The specs of the names ``descriptions`` lists: each model made by ``built[name](transformers)`` when asked
    for."""
    assert list(built) == list(descriptions), (list(built), list(descriptions))

    def maker(name: str) -> Callable[[], torch.nn.Module]:
        def make() -> torch.nn.Module:
            import transformers

            model, inputs, fields, fixed = built[name](transformers)
            return Outputs(model, inputs, fields, **fixed)
        return make

    return {name: Spec(maker(name), inputs, outputs, text, **further)
            for name, (inputs, outputs, text, further) in descriptions.items()}


__all__ = ["DECODER", "ENCODER_DECODER", "FFN", "HIDDEN", "LAYERS", "MLP", "NO_CACHE", "SIZES", "SMALL_VOCAB", "TEXT",
           "TOKENS", "WORDS", "Built", "Description", "specs"]
