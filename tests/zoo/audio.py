"""The zoo's audio encoders at width 384 (4 layers, 6 heads): on one second of 16 kHz audio, wav2vec2 (a convolutional
feature extractor and a grouped positional convolution), HuBERT, WavLM (gated relative positions) and Data2VecAudio
(a convolutional positional embedding of 5 layers); on a spectrogram, the Audio Spectrogram Transformer (1024 frames
x 128 mel bins as patches). Each is a ``transformers`` model built ``from_config`` (nothing downloaded). (Whisper's
encoders are in :mod:`.small` and, with its decoder, :mod:`.seq2seq`.)"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from zoo import AUDIO, WIDTH, Spec, eager

from .configs import HIDDEN, LAYERS, MLP, SIZES, Built, Description, specs


def _audio(model: Callable[[ModuleType], Any]) -> Callable[[ModuleType], Built]:
    """An audio model's builder: ``model(transformers)`` called with the input values, its last hidden state."""
    return lambda t: (model(t), ("input_values",), HIDDEN, {})


_BUILT: dict[str, Callable[[ModuleType], Built]] = {
    "wav2vec2_w384": _audio(lambda t: t.Wav2Vec2Model(eager(t.Wav2Vec2Config(**SIZES, **MLP,
                                                                             do_stable_layer_norm=False)))),
    "hubert_w384": _audio(lambda t: t.HubertModel(eager(t.HubertConfig(**SIZES, **MLP)))),
    "wavlm_w384": _audio(lambda t: t.WavLMModel(eager(t.WavLMConfig(**SIZES, **MLP)))),
    "ast_w384": _audio(lambda t: t.ASTModel(eager(t.ASTConfig(**SIZES, **MLP)))),
    "data2vec_audio_w384": _audio(lambda t: t.Data2VecAudioModel(t.Data2VecAudioConfig(
        hidden_size=WIDTH, num_conv_pos_embedding_groups=16, **LAYERS))),
}

_SAMPLES: dict[str, Any] = {"axes": ({0: "batch", 1: "samples"},),
                            "out_axes": {"last_hidden_state": {0: "batch", 1: "frames"}}}
"""a waveform of any length in, frames out"""
_DESCRIPTIONS: dict[str, Description] = {
    "wav2vec2_w384": ((AUDIO,), HIDDEN, "wav2vec2 encoder on one second of 16 kHz audio: its convolutional feature "
                                        "extractor, a grouped positional convolution, 384 wide, 4 layers, 6 heads", {}),
    "hubert_w384": ((AUDIO,), HIDDEN, "HuBERT encoder at width 384 on one second of 16 kHz audio (dynamic: batch and "
                                      "samples)", _SAMPLES),
    "wavlm_w384": ((AUDIO,), HIDDEN, "WavLM encoder at width 384 on one second of 16 kHz audio: gated relative "
                                     "positions", _SAMPLES),
    "ast_w384": ((("input_values", "float", (1, 1024, 128)),), HIDDEN,
                 "Audio Spectrogram Transformer at width 384: 1024 frames x 128 mel bins as 1212 patches",
                 {"axes": ({0: "batch"},)}),
    "data2vec_audio_w384": ((AUDIO,), HIDDEN, "Data2VecAudio encoder at width 384: convolutional feature extractor, "
                                              "convolutional positional embedding of 5 layers", {}),
}

SPECS_AUDIO: dict[str, Spec] = specs(_BUILT, _DESCRIPTIONS)
"""the audio encoders' specs"""

__all__ = ["SPECS_AUDIO"]
