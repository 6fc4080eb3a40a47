"""The zoo's benchmark sets: the lists of models each benchmark pass timed, as data. A set's name in lower case is
the ``--models`` word that ``scripts/bench_peers.py`` takes for it (``NAMES``: ``zoo``; ``THIRD``: ``third``), and
docs/benchmarks.md's reproduction commands name them (``scripts/bench_peers.py --models third``): a set's members and
their order stay as they were timed. A set holds models of several kinds; the modules named by kind build them
(:mod:`.small`, :mod:`.decoders`, :mod:`.encoders`, :mod:`.seq2seq`, :mod:`.vision`, :mod:`.audio`, :mod:`.serving`).

Every zoo model is in exactly one set; :data:`EVERY` is their concatenation, the order of ``zoo.SPECS``."""

from __future__ import annotations

NAMES = ("bert", "gpt2", "vit", "resnet", "mobilenetv2", "efficientnet", "llama")
"""the first models, small (``--models zoo``): what the tests run over (tests/onnx/test_zoo.py)"""
EXTRA = ("qwen2", "bert_s128", "llama_s128")
"""further small ones (a Qwen2-like decoder with grouped KV heads, sequence-128 variants), built only by the tests
and benchmarks that name them (``--models extra``)"""
UNSEEN = ("distilbert", "t5_encoder", "whisper_encoder", "convnext", "resnet50")
"""issue 26's families beyond the first models, small, at their natural input sizes (sequence 128, 224x224 images,
256 audio frames; ``--models unseen``)"""
WIDE = ("bert_w384", "opt_w384", "bloom_w384", "neox_w384", "phi_w384", "vit_w384", "swin_w384", "convnext_w384",
        "wav2vec2_w384", "efficientnet_b0")
"""common families at a realistic width (384 wide, 4 layers, 6 heads, sequence 128, 224 pixels, one second of
audio; ``--models wide``): docs/benchmarks.md, issue 41's first pass"""
SERVING = ("llama_decode", "llama_decode_w384", "llama_prefill_w384", "qwen2_prefill_w384", "qwen2_decode_w384",
           "llama_sdpa_decode_w384", "llama_decode_total_w384")
"""the serving forms: decode steps against a key/value cache and the prefills before them (``--models serving``,
``scripts/bench_serving.py``): docs/benchmarks.md, issue 42's passes"""
FAMILIES = ("gptj_w384", "codegen_w384", "falcon_w384", "stablelm_w384", "mistral_w384", "bigcode_w384", "deberta_w384",
            "xlmr_w384", "deit_w384", "dinov2_w384", "beit_w384", "segformer_b0", "mobilevit_s", "regnet_y",
            "resnet50_full", "hubert_w384")
"""decoders with interleaved or partial rotary, multi-query attention, parallel attention and MLP; encoders with
relative positions; vision models with layer scale, relative-position biases, spatially reduced keys; a
convolutional audio front-end (``--models families``): docs/benchmarks.md, the seventh pass of issues 40-42"""
THIRD = ("mobilebert_l4", "gemma2_w384", "gptneo_w384", "mpt_w384", "roformer_w384", "esm_w384", "squeezebert_w384",
         "olmo_w384", "cohere_w384", "lstm_w384", "convnextv2_t", "swinv2_t", "poolformer_s12", "levit_128s",
         "mobilenetv2_full", "bit_50", "cvt_13", "pvt_t", "focalnet_t", "wavlm_w384", "ast_w384")
"""Gemma 2, GPT-Neo, MPT, OLMo, Cohere, MobileBERT, RoFormer, ESM, SqueezeBERT, an LSTM, ConvNeXt V2, Swin V2,
PoolFormer, LeViT, MobileNetV2, BiT, CvT, PVT, FocalNet, WavLM, AST (``--models third --dynamic``):
docs/benchmarks.md, the eighth pass of issues 40-42"""
FOURTH = ("bart_w384", "t5_w384", "whisper_w384", "yolos_w384", "mobilenetv1_full", "mamba_w384")
"""BART, T5, Whisper, YOLOS, MobileNetV1, Mamba (``--models fourth --exporters torchscript --dynamic``):
docs/benchmarks.md, the twenty-third pass of issues 40-41"""
FIFTH = ("qwen3_w384", "phi3_w384", "gemma3_w384", "modernbert_w384", "pegasus_w384", "hiera_base")
"""Qwen3, Phi-3, Gemma 3, ModernBERT, Pegasus, Hiera (``--models fifth --exporters torchscript --dynamic``):
docs/benchmarks.md, the twenty-fourth pass of issues 40-41"""
SIXTH = ("granite_w384", "starcoder2_w384", "xlnet_w384", "funnel_w384", "marian_w384", "detr_w384", "dpt_w384",
         "siglip_w384", "videomae_w384", "timesformer_w384", "data2vec_audio_w384")
"""Granite, StarCoder2, XLNet, Funnel, Marian, DETR, DPT, SigLIP, VideoMAE, TimeSformer, Data2VecAudio (``--models
sixth --exporters torchscript --dynamic``): docs/benchmarks.md, the twenty-fifth pass of issues 40-41. The pass's
mixture-of-experts decoders (Mixtral, Qwen2-MoE) are not in the zoo: eqsat's shape probes of them at 128 tokens
needed more memory than a 24 GiB machine has."""
SEVENTH = ("nemotron_w384", "persimmon_w384", "exaone4_w384", "cliptext_w384", "convbert_w384", "m2m100_w384")
"""Nemotron, Persimmon, EXAONE 4, CLIP text, ConvBERT, M2M100 (``--models seventh --exporters torchscript
--dynamic``): docs/benchmarks.md, the twenty-eighth pass of issues 40-41. The pass's vision and audio models
(HGNetV2, UperNet over ConvNeXt, ViTMAE, Wav2Vec2-Conformer, SEW-D) and its mixture of experts (OLMoE) were exported
with fixed sides, lengths or noise that the zoo's builder does not write."""
EIGHTH = ("lfm2_w384", "smollm3_w384", "olmo2_w384", "arcee_w384", "mpnet_w384", "bigbird_w384")
"""LFM2, SmolLM3, OLMo 2, Arcee, MPNet, BigBird (``--models eighth --exporters torchscript --dynamic``):
docs/benchmarks.md, the twenty-ninth pass of issues 40-41. The pass's vision and audio models (PVTv2, SwiftFormer,
data2vec vision, TextNet, SEW, UniSpeech) and its Whisper decoders with their past were exported with fixed sides,
lengths or caches the zoo's builder does not write."""

EVERY = NAMES + EXTRA + UNSEEN + WIDE + SERVING + FAMILIES + THIRD + FOURTH + FIFTH + SIXTH + SEVENTH + EIGHTH
"""every zoo model, set after set: the order of ``zoo.SPECS``"""

__all__ = ["EIGHTH", "EVERY", "EXTRA", "FAMILIES", "FIFTH", "FOURTH", "NAMES", "SERVING", "SEVENTH", "SIXTH", "THIRD",
           "UNSEEN", "WIDE"]
