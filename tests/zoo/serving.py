"""The zoo's serving forms (:data:`zoo.SERVING`): a LLaMA or Qwen2 decoder's step against a key/value cache (one new
token, the past per layer in, the present out), small and at width 384 (the LLaMA one also with transformers'
default SDPA attention), and the prefill before it (the prompt in, the cache out)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from zoo import LONG_IDS, LONG_MASK, VOCAB, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec, eager


class _DecodeStep(torch.nn.Module):
    """A decoder's step against a key/value cache, as serving code exports it: ``input_ids`` [batch, 1],
    ``attention_mask`` [batch, past + 1] and, per layer, the past key and value [batch, kv_heads, past, head_dim] in;
    ``last_hidden_state`` and, per layer, the present key and value (the past and the new token's) out."""

    def __init__(self, model: torch.nn.Module, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, *args):  # positional only, as export_dynamic's dynamic shapes name them
        from transformers import DynamicCache

        input_ids, attention_mask, *past = args  # no past: a prefill, which returns the cache it starts
        cache = DynamicCache(config=self.model.config)
        for i in range(self.layers if past else 0):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        present = out.past_key_values
        return (out.last_hidden_state,
                *[t for i in range(self.layers) for t in (present.layers[i].keys, present.layers[i].values)])


DECODE_PAST, DECODE_WIDE_PAST = 15, 127
"""the past lengths of the decode steps: the small one's, and the wide ones' (a 128-token context with the new one)"""


def _decode_step(family: str, wide: bool, sdpa: bool = False) -> Callable[[], torch.nn.Module]:
    """LLaMA or Qwen2 (grouped KV heads) as a decode step: hidden 32, 1 layer, 4 heads / 2 KV heads; or at width 384,
    4 layers, 6 heads / 2 KV heads, head dimension 64. ``sdpa``: transformers' default attention (torch's
    ``scaled_dot_product_attention``, which the TorchScript exporter writes with a boolean mask and its NaN rows
    zeroed), not the zoo's eager one."""
    def make() -> torch.nn.Module:
        import transformers as t

        cls, config = {"llama": (t.LlamaModel, t.LlamaConfig), "qwen2": (t.Qwen2Model, t.Qwen2Config)}[family]
        layers = WIDE_LAYERS if wide else 1
        size = {"hidden_size": WIDTH, "intermediate_size": 1024, "num_attention_heads": WIDE_HEADS} if wide else \
            {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}
        cfg = config(vocab_size=VOCAB, num_hidden_layers=layers, num_key_value_heads=2, max_position_embeddings=1024,
                     **size)
        cfg = cfg if sdpa else eager(cfg)
        return _DecodeStep(cls(cfg), layers)
    return make


def _prefill_spec(family: str, description: str) -> Spec:
    """The wide decode step's model as the prefill before it: the prompt's ids and mask in (batch and sequence
    dynamic), the hidden states and the cache it starts out."""
    present = tuple(f"present.{i}.{kv}" for i in range(WIDE_LAYERS) for kv in ("key", "value"))
    return Spec(_decode_step(family, True), (LONG_IDS, LONG_MASK), ("last_hidden_state", *present), description,
                out_axes={"last_hidden_state": {0: "batch", 1: "seq"}} | {o: {0: "batch", 2: "seq"} for o in present})


def _decode_spec(family: str, wide: bool, description: str, sdpa: bool = False, mask: str = "past + 1") -> Spec:
    """``mask``: the name of the mask's (and the present's) length; ``total`` as a TorchScript user names it beside
    ``past``, the relation not in the names."""
    layers, kv_shape = (WIDE_LAYERS, (1, 2, DECODE_WIDE_PAST, WIDTH // WIDE_HEADS)) if wide else \
        (1, (1, 2, DECODE_PAST, 8))
    past = tuple((f"past_key_values.{i}.{kv}", "float", kv_shape) for i in range(layers) for kv in ("key", "value"))
    present = tuple(f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value"))
    cache_axes = {0: "batch", 2: "past"}
    return Spec(_decode_step(family, wide, sdpa),
                (("input_ids", "ids", (1, 1)), ("attention_mask", "ones", (1, kv_shape[2] + 1)), *past),
                ("last_hidden_state", *present), description,
                axes=({0: "batch"}, {0: "batch", 1: mask}, *[cache_axes] * len(past)),
                out_axes={"last_hidden_state": {0: "batch"}} | {o: {0: "batch", 2: mask} for o in present})


SPECS_SERVING: dict[str, Spec] = {
    "llama_decode": _decode_spec("llama", False, "LLaMA decode step: 1 layer, hidden 32, 4 heads / 2 KV heads, a "
                                 f"past of {DECODE_PAST} in, the present out"),
    "llama_decode_w384": _decode_spec("llama", True, "LLaMA decode step at width 384: 4 layers, 6 heads / 2 KV heads, "
                                      f"a past of {DECODE_WIDE_PAST} in, the present out"),
    "llama_prefill_w384": _prefill_spec("llama", "LLaMA prefill at width 384: the 128-token prompt with its mask in, "
                                        "the hidden states and the cache out (4 layers, 6 heads / 2 KV heads)"),
    "qwen2_prefill_w384": _prefill_spec("qwen2", "Qwen2 prefill at width 384: the 128-token prompt with its mask in, "
                                        "the hidden states and the cache out (4 layers, 6 heads / 2 KV heads)"),
    "qwen2_decode_w384": _decode_spec("qwen2", True, "Qwen2 decode step at width 384 (Q/K/V biases): 4 layers, 6 "
                                      f"heads / 2 KV heads, a past of {DECODE_WIDE_PAST} in, the present out"),
    "llama_sdpa_decode_w384": _decode_spec("llama", True, "LLaMA decode step at width 384 as transformers exports it by "
                                           "default (SDPA attention: a boolean mask, NaN rows zeroed): 4 layers, 6 "
                                           f"heads / 2 KV heads, a past of {DECODE_WIDE_PAST} in", sdpa=True),
    "llama_decode_total_w384": _decode_spec("llama", True, "LLaMA decode step at width 384, its mask's length named "
                                            "total beside the cache's past (as a TorchScript user names the axes: "
                                            "the relation total = past + 1 not in the names; transformers reads the "
                                            "mask at the keys' positions, so a longer one runs): 4 layers, 6 heads / "
                                            f"2 KV heads, a past of {DECODE_WIDE_PAST} in", mask="total"),
}
"""the specs of :data:`zoo.SERVING`"""

__all__ = ["DECODE_PAST", "DECODE_WIDE_PAST", "SPECS_SERVING"]
