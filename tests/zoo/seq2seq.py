"""The zoo's encoder-decoders at width 384 (6 heads, a vocabulary of 1000; the decoder's ids a second input of its own
length, ``dec_seq``, attending to the encoder's output): BART (learned positions), T5 (relative position buckets,
RMSNorm), Pegasus (sinusoidal positions, pre-norm layers), Marian and M2M100 (translation: sinusoidal positions) and
Whisper, a speech encoder-decoder (80 mel bins of 3000 frames through two 1-D convolutions). Each is a
``transformers`` model built ``from_config`` (nothing downloaded), with the config's own attention implementation."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from zoo import LONG_IDS, LONG_MASK, LONG_SEQ, WIDE_HEADS, WIDE_LAYERS, WIDTH, Spec

from .configs import ENCODER_DECODER, FFN, HIDDEN, NO_CACHE, WORDS, Built, Description, specs

_IDS = ("input_ids", "attention_mask", "decoder_input_ids")
_HALVES = {"encoder_layers": WIDE_LAYERS // 2, "decoder_layers": WIDE_LAYERS // 2,
           "encoder_attention_heads": WIDE_HEADS, "decoder_attention_heads": WIDE_HEADS,
           "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024, "d_model": WIDTH, "vocab_size": WORDS}
"""2 + 2 layers, a 1024-wide MLP (BART, Whisper)"""

_BUILT: dict[str, Callable[[ModuleType], Built]] = {
    "bart_w384": lambda t: (t.BartModel(t.BartConfig(**_HALVES, max_position_embeddings=512)), _IDS, HIDDEN,
                            NO_CACHE),
    "t5_w384": lambda t: (t.T5Model(t.T5Config(d_model=WIDTH, d_kv=WIDTH // WIDE_HEADS, d_ff=1024,
                                               num_layers=WIDE_LAYERS // 2, num_decoder_layers=WIDE_LAYERS // 2,
                                               num_heads=WIDE_HEADS, vocab_size=WORDS)), _IDS, HIDDEN, NO_CACHE),
    "whisper_w384": lambda t: (t.WhisperModel(t.WhisperConfig(**_HALVES, num_mel_bins=80, max_source_positions=1500,
                                                              pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                              decoder_start_token_id=1)),
                               ("input_features", "decoder_input_ids"), HIDDEN, {}),
    "pegasus_w384": lambda t: (t.PegasusModel(t.PegasusConfig(
        d_model=WIDTH, encoder_layers=WIDE_LAYERS // 2, decoder_layers=WIDE_LAYERS // 2,
        encoder_attention_heads=WIDE_HEADS, decoder_attention_heads=WIDE_HEADS, encoder_ffn_dim=1024,
        decoder_ffn_dim=1024, vocab_size=WORDS, max_position_embeddings=512)), _IDS, HIDDEN, NO_CACHE),
    "marian_w384": lambda t: (t.MarianModel(t.MarianConfig(vocab_size=WORDS, max_position_embeddings=512,
                                                           pad_token_id=WORDS - 1, decoder_start_token_id=WORDS - 1,
                                                           **ENCODER_DECODER)), _IDS, HIDDEN, NO_CACHE),
    "m2m100_w384": lambda t: (t.M2M100Model(t.M2M100Config(
        vocab_size=WORDS, d_model=WIDTH, encoder_layers=2, decoder_layers=2, encoder_attention_heads=WIDE_HEADS,
        decoder_attention_heads=WIDE_HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_position_embeddings=512,
        pad_token_id=1, decoder_start_token_id=2, encoder_layerdrop=0.0, decoder_layerdrop=0.0)), _IDS, HIDDEN,
        NO_CACHE),
}

_DECODER_IDS = ("decoder_input_ids", "ids", (1, LONG_SEQ))
_INPUTS = (LONG_IDS, LONG_MASK, _DECODER_IDS)
_AXES: dict[str, Any] = {"axes": ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}, {0: "batch", 1: "dec_seq"}),
                         "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}
"""the encoder's ids and mask of one length, the decoder's ids and the output of another"""
_DESCRIPTIONS: dict[str, Description] = {
    "bart_w384": (_INPUTS, HIDDEN, "BART encoder-decoder at width 384 (2 + 2 layers): learned positions, "
                                   "cross-attention", _AXES),
    "t5_w384": (_INPUTS, HIDDEN, "T5 encoder-decoder at width 384 (2 + 2 layers): relative position buckets, "
                                 "RMSNorm, no score scale", _AXES),
    "whisper_w384": ((("input_features", "float", (1, 80, 3000)), _DECODER_IDS), HIDDEN,
                     "Whisper encoder-decoder at width 384 (2 + 2 layers): 80 mel bins of 3000 frames, two 1-D "
                     "convolutions, sinusoidal positions",
                     {"axes": ({0: "batch"}, {0: "batch", 1: "dec_seq"}),
                      "out_axes": {"last_hidden_state": {0: "batch", 1: "dec_seq"}}}),
    "pegasus_w384": (_INPUTS, HIDDEN, "Pegasus encoder-decoder at width 384 (2 + 2 layers): sinusoidal positions, "
                                      "pre-norm layers", _AXES),
    "marian_w384": (_INPUTS, HIDDEN, "Marian translation encoder-decoder at width 384: sinusoidal positions, "
                                     "post-norm layers", _AXES),
    "m2m100_w384": (_INPUTS, HIDDEN, "M2M100 translation encoder-decoder at width 384 (2 + 2 layers): sinusoidal "
                                     "positions", _AXES),
}

SPECS_SEQ2SEQ: dict[str, Spec] = specs(_BUILT, _DESCRIPTIONS)
"""the encoder-decoders' specs"""

__all__ = ["SPECS_SEQ2SEQ"]
