"""What the later rounds of families (:mod:`.seventh`, :mod:`.eighth`) share: the sizes of their configs and the
making of their specs from a builder per name (a transformers model, its input names, the output fields it returns
and the keyword arguments it is called with)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

import zoo
from zoo import WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

WORDS = 1000
FFN = 1536
LAYERS = {"num_hidden_layers": WIDE_LAYERS, "num_attention_heads": WIDE_HEADS, "intermediate_size": FFN}
"""the depth, heads and MLP width of every model of the rounds"""
DECODER = {"hidden_size": WIDTH, "num_key_value_heads": 2, "vocab_size": WORDS, "max_position_embeddings": 512,
           "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, **LAYERS}
"""a decoder's config: two key/value heads, positions up to 512"""
TOKENS, HIDDEN, NO_CACHE = ("input_ids", "attention_mask"), ("last_hidden_state",), {"use_cache": False}

Built = tuple[Any, tuple[str, ...], tuple[str, ...], dict[str, Any]]
"""a model, its input names, the fields of its output returned, the keyword arguments it is called with"""
Description = tuple[tuple[tuple[str, str, tuple[int, ...]], ...], tuple[str, ...], str, dict[str, Any]]
"""a spec's inputs, outputs, description and further fields (its axes)"""


def specs(names: tuple[str, ...], built: Callable[[str, ModuleType], Built],
          descriptions: dict[str, Description]) -> dict[str, Spec]:
    """The specs of ``names``: each model made by ``built(name, transformers)`` when asked for."""
    def maker(name: str) -> Callable[[], torch.nn.Module]:
        def make() -> torch.nn.Module:
            import transformers

            model, inputs, fields, fixed = built(name, transformers)
            return zoo._Outputs(model, inputs, fields, **fixed)
        return make

    return {name: Spec(maker(name), descriptions[name][0], descriptions[name][1], descriptions[name][2],
                       **descriptions[name][3]) for name in names}


__all__ = ["DECODER", "FFN", "HIDDEN", "LAYERS", "NO_CACHE", "TOKENS", "WORDS", "Built", "Description", "specs"]
