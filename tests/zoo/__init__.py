"""A real-model zoo for tests and benchmarks: small random-weight models of real architectures, exported to
ONNX with torch's two exporters at opsets 17 and 18 (both exporters a user may have used).

Every model is built from a random config (``transformers``' own model classes, ``from_config``; nothing
downloaded), seeded with ``torch.manual_seed(seed)``, in eval mode, with static shapes (the first models: batch 1,
sequence 16, images 3x32x32; the others at their natural sizes: sequence 128, 224x224 images, one second of audio).
``build(name, exporter, opset)`` returns the exported ``onnx.ModelProto``; ``export_dynamic`` writes one with dynamic
axes, as serving code does; ``feeds(name, seed)`` gives seeded inputs in range (token ids below the vocabulary size,
attention masks of 0/1 with the first position kept).

An exporter/model combination that this torch cannot export is listed in :data:`UNSUPPORTED` with the
reason, and ``build`` raises :class:`Unsupported` for it (never a silent skip). With torch 2.13 and
onnxscript 0.7: the dynamo exporter writes opset 18 natively and down-converts; at opset 17 that gives an
invalid model for GPT-2 (Split with ``num_outputs``) and fails (the exporter keeps opset 18) for ResNet,
MobileNet-v2, EfficientNet and LLaMA. Every other combination exports.

The models come in benchmark sets (:mod:`.sets`: the lists of models each benchmark pass timed, each the
``--models`` word of ``scripts/bench_peers.py`` in lower case): :data:`NAMES`, the first models, which the tests run
over; :data:`EXTRA`, :data:`UNSEEN`, :data:`WIDE`, :data:`SERVING`, :data:`FAMILIES`, :data:`THIRD`, :data:`FOURTH`,
:data:`FIFTH`, :data:`SIXTH`, :data:`SEVENTH` and :data:`EIGHTH`, built only by the tests and benchmarks that name
them. :data:`SPECS` holds every model, set after set.

    >>> NAMES
    ('bert', 'gpt2', 'vit', 'resnet', 'mobilenetv2', 'efficientnet', 'llama')

The zoo is a package: this module holds the shapes, :class:`Spec` and :class:`Outputs`, and builds and exports the
models (:func:`module`, :func:`build`, :func:`export_dynamic`, the inputs); the modules named by kind hold the torch
modules and specs: :mod:`.small` the small models at tiny configs, :mod:`.decoders` the decoder-only language models,
:mod:`.encoders` the text encoders, :mod:`.seq2seq` the encoder-decoders, :mod:`.vision` the image and video models,
:mod:`.audio` the audio encoders (:mod:`.configs` the sizes the width-384 families share) and :mod:`.serving` the
decode steps and prefills. Their builders pass each attention config through :func:`eager`, which calls this
module's ``configure`` as it is at the call, so that a caller that replaces ``zoo.configure``
(``scripts/bench_default.py``'s ``resized``) sees every config.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch

from .sets import (
    EIGHTH,
    EVERY,
    EXTRA,
    FAMILIES,
    FIFTH,
    FOURTH,
    NAMES,
    SERVING,
    SEVENTH,
    SIXTH,
    THIRD,
    UNSEEN,
    WIDE,
)

EXPORTERS = ("torchscript", "dynamo")
OPSETS = (17, 18)
SEQ = 16
LONG_SEQ = 128
VOCAB = 128
IMAGE = 32
FULL_IMAGE = 224
MEL_BINS = 80
WIDTH, WIDE_LAYERS, WIDE_HEADS = 384, 4, 6

IDS = ("input_ids", "ids", (1, SEQ))
LONG_IDS = ("input_ids", "ids", (1, LONG_SEQ))
MASK = ("attention_mask", "mask", (1, SEQ))
PIXELS = ("pixel_values", "float", (1, 3, IMAGE, IMAGE))
FULL_PIXELS = ("pixel_values", "float", (1, 3, FULL_IMAGE, FULL_IMAGE))
LONG_MASK = ("attention_mask", "mask", (1, LONG_SEQ))
AUDIO = ("input_values", "float", (1, 16000))
"""the inputs the specs share, as :attr:`Spec.inputs` lists them: (name, kind, shape)"""

UNSUPPORTED: dict[tuple[str, str, int], str] = {}
"""(name, exporter, opset) -> why this torch cannot export it; filled in as found (see the module docstring)."""


class Unsupported(RuntimeError):
    """This exporter cannot export this model in the installed torch; the message says why."""


@dataclass(frozen=True)
class Spec:
    make: Callable[[], torch.nn.Module]
    """the module (seeded, eval mode) whose forward takes the inputs positionally and returns a tuple"""
    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    """(name, 'ids' | 'mask' | 'float', shape) in order"""
    outputs: tuple[str, ...]
    description: str
    axes: tuple[dict[int, str], ...] | None = None
    """the dynamic axes :func:`export_dynamic` writes, per input (axis -> symbol; ``past + 1``: one more than
    ``past``), None for its default (a batch axis, and a sequence axis on token inputs)"""
    out_axes: dict[str, dict[int, str]] | None = None
    """the same for the outputs (None: the default)"""


class Outputs(torch.nn.Module):
    """Calls a transformers model with keyword inputs and returns the named fields of its output as a tuple."""

    def __init__(self, model: torch.nn.Module, input_names: tuple[str, ...], fields: tuple[str, ...],
                 full_mask: bool = False, **fixed):
        super().__init__()
        self.model, self.input_names, self.fields, self.fixed = model, input_names, fields, fixed
        self.full_mask = full_mask
        """pass an all-ones attention mask: without one, transformers probes position ids for packed
        sequences with aten::diff, which the TorchScript exporter cannot export"""

    def forward(self, *args):
        kwargs = dict(zip(self.input_names, args))
        if self.full_mask:
            kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
        out = self.model(**kwargs, **self.fixed)
        return tuple(getattr(out, f) for f in self.fields)


def configure(config):
    """The plain MatMul/Softmax attention (what the TorchScript exporter writes for any implementation), the same
    for both exporters so that they export one computation. The hook :func:`eager` calls: a caller may replace it
    (``zoo.configure = ...``: scripts/bench_default.py's ``resized`` resizes every config)."""
    config._attn_implementation = "eager"
    return config


def eager(config):
    """``config`` with the plain attention, through this module's ``configure`` as it is at the call (a caller may
    have replaced it): what the builders call on every config they want exported alike."""
    return configure(config)


from .audio import SPECS_AUDIO  # noqa: E402 - the modules by kind read this one's names
from .decoders import SPECS_DECODERS  # noqa: E402
from .encoders import SPECS_ENCODERS  # noqa: E402
from .seq2seq import SPECS_SEQ2SEQ  # noqa: E402
from .serving import DECODE_PAST as DECODE_PAST  # noqa: E402 - re-exported
from .serving import DECODE_WIDE_PAST as DECODE_WIDE_PAST  # noqa: E402
from .serving import SPECS_SERVING  # noqa: E402
from .small import SPECS_SMALL  # noqa: E402
from .vision import SPECS_VISION  # noqa: E402

_BY_KIND = (SPECS_SMALL, SPECS_SERVING, SPECS_DECODERS, SPECS_ENCODERS, SPECS_SEQ2SEQ, SPECS_VISION, SPECS_AUDIO)
assert sorted(n for kind in _BY_KIND for n in kind) == sorted(EVERY), "every model in one module and in one set"
SPECS: dict[str, Spec] = {name: next(kind[name] for kind in _BY_KIND if name in kind) for name in EVERY}
"""zoo model name -> its :class:`Spec`, set after set (:data:`sets.EVERY`)"""


WEIGHTS = ("init", "trained")


def module(name: str, seed: int = 0, weights: str = "init") -> torch.nn.Module:
    """The torch module of zoo model ``name``, with seeded random weights, in eval mode.

    ``weights="init"``: as the family initializes them (its biases zero, its norms' scales one, and in a model with
    zero biases the exporter may store one zero tensor for every layer's). ``"trained"``: every parameter its
    initializer leaves constant is spread about that value (a zero one drawn from N(0, 0.02), any other scaled by
    1 + N(0, 0.1)), as training leaves them, so that no gain comes from a neutral bias or scale a trained model does
    not have (:func:`spread_constants`)."""
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; one of {', '.join(WEIGHTS)}")
    if name not in SPECS:
        raise KeyError(f"unknown zoo model {name!r}; one of {', '.join(SPECS)}")
    torch.manual_seed(seed)
    m = SPECS[name].make().eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.Conv2d):  # torch's default init: transformers' N(0, 0.02) fades to ~1e-3
                mod.reset_parameters()
        for mod in m.modules():  # non-trivial batch-norm statistics, so that folding them is observable
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)  # transformers draws some from N(0, 0.02), which zeroes the signal
                mod.bias.uniform_(-0.2, 0.2)
        if weights == "trained":
            spread_constants(m, torch.Generator().manual_seed(seed + 1))
    return m


def spread_constants(m: torch.nn.Module, gen: torch.Generator) -> int:
    """Every floating parameter of ``m`` whose values are all equal, redrawn about that value (0: N(0, 0.02);
    c: c * (1 + N(0, 0.1))); returns how many were redrawn."""
    count = 0
    for p in m.parameters():
        if not p.is_floating_point() or p.numel() < 2 or not bool((p == p.flatten()[0]).all()):
            continue
        value = float(p.flatten()[0])
        noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        p.copy_(noise * 0.02 if value == 0.0 else value * (1.0 + 0.1 * noise))
        count += 1
    return count


def feeds(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs in range for zoo model ``name``: token ids in [0, VOCAB), masks of 0/1 with position 0
    kept (a row with every position masked is undefined), images from a standard normal."""
    return sized_feeds(name, np.random.default_rng(seed))


def sized_feeds(name: str, rng: np.random.Generator, batch: int | None = None,
                seq: int | None = None) -> dict[str, np.ndarray]:
    """:func:`feeds` drawn from ``rng``; every input of batch ``batch`` and the token inputs (ids, masks) of
    sequence ``seq`` where given (a model exported with dynamic axes), else of the zoo's shapes."""
    out = {}
    for input_name, kind, shape in SPECS[name].inputs:
        if batch is not None:
            shape = (batch, *shape[1:])
        if seq is not None and kind in ("ids", "mask"):
            shape = (shape[0], seq)
        if kind == "ids":
            out[input_name] = rng.integers(0, VOCAB, shape).astype(np.int64)
        elif kind == "ones":  # a decode step's mask: the whole past attended
            out[input_name] = np.ones(shape, np.int64)
        elif kind == "mask":
            mask = rng.integers(0, 2, shape).astype(np.int64)
            mask[..., 0] = 1
            out[input_name] = mask
        else:
            out[input_name] = rng.standard_normal(shape).astype(np.float32)
    return out


def example_args(name: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(v) for v in feeds(name, seed).values())


def export(name: str, exporter: str, opset: int, seed: int = 0, weights: str = "init") -> onnx.ModelProto:
    """Export zoo model ``name`` with ``exporter`` ('torchscript': ``dynamo=False``; 'dynamo': ``dynamo=True``)
    at ``opset``; raises :class:`Unsupported` (with torch's reason) when the export fails."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; one of {', '.join(EXPORTERS)}")
    if (name, exporter, opset) in UNSUPPORTED:
        raise Unsupported(UNSUPPORTED[name, exporter, opset])
    spec = SPECS[name]
    m = module(name, seed, weights)
    args = example_args(name, seed)
    input_names = [i[0] for i in spec.inputs]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        path = os.path.join(tmp, f"{name}.onnx")
        try:
            if exporter == "torchscript":
                torch.onnx.export(m, args, path, input_names=input_names, output_names=list(spec.outputs),
                                  opset_version=opset, dynamo=False, do_constant_folding=True)
            else:
                prog = torch.onnx.export(m, args, input_names=input_names, output_names=list(spec.outputs),
                                         opset_version=opset, dynamo=True, external_data=False, verbose=False)
                prog.save(path, external_data=False)
            model = onnx.load(path)
            onnx.checker.check_model(model, full_check=True)  # the down-converted opset-17 dynamo export can fail
            got = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
            if got != opset:
                raise RuntimeError(f"asked for opset {opset}, the exporter wrote opset {got} (its version "
                                   "conversion failed and it kept the opset it exports natively)")
        except Exception as e:  # noqa: BLE001 - the reason is recorded, not hidden
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            UNSUPPORTED[name, exporter, opset] = reason
            raise Unsupported(reason) from e
    return model


_CACHE: dict[tuple[str, str, int, int, str], bytes] = {}


def build(name: str, exporter: str = "torchscript", opset: int = 17, seed: int = 0,
          weights: str = "init") -> onnx.ModelProto:
    """The exported model (a fresh copy each call; exports are cached per process)."""
    key = (name, exporter, opset, seed, weights)
    if key not in _CACHE:
        _CACHE[key] = export(name, exporter, opset, seed, weights).SerializeToString()
    m = onnx.ModelProto()
    m.ParseFromString(_CACHE[key])
    return m


def export_dynamic(name: str, exporter: str, path: str, seed: int = 0, weights: str = "init") -> onnx.ModelProto:
    """Zoo model ``name`` exported with dynamic axes, the way serving code exports it: a batch axis
    ``batch`` on every input and output, and a sequence axis ``seq`` on token inputs and on the token models'
    ``last_hidden_state`` (a model's :attr:`Spec.axes` and :attr:`Spec.out_axes` where it gives them: a decode step's
    ``past`` and ``past + 1``). TorchScript at opset 17 (``dynamic_axes``), dynamo at opset 18 (``dynamic_shapes``:
    no upper bound, so that the sequence-128 models export; traced at batch 2, since a batch of 1 lets
    ``torch.export`` specialize, e.g. ConvNeXt's guard ``batch <= 2``); written to ``path``."""
    spec = SPECS[name]
    m, args = module(name, seed, weights), example_args(name, seed)
    names = [i[0] for i in spec.inputs]
    axes = list(spec.axes) if spec.axes is not None else \
        [{0: "batch", 1: "seq"} if kind != "float" else {0: "batch"} for _, kind, _ in spec.inputs]
    tokens = any(kind == "ids" for _, kind, _ in spec.inputs)
    out_axes = spec.out_axes if spec.out_axes is not None else \
        {o: {0: "batch", 1: "seq"} if tokens and o == "last_hidden_state" else {0: "batch"} for o in spec.outputs}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            dims: dict[str, Any] = {s: torch.export.Dim(s) for a in axes for s in a.values() if s.isidentifier()}
            for a in axes:  # "past + 1": one more than past (a cache's length with the new token)
                for s in a.values():
                    if s not in dims:
                        base, plus = s.split("+")
                        dims[s] = dims[base.strip()] + int(plus)
            shapes = {"args": tuple({k: dims[v] for k, v in a.items()} for a in axes)}
            doubled = tuple(torch.cat([a, a]) for a in args)
            prog = torch.onnx.export(m, doubled, input_names=names, output_names=list(spec.outputs),
                                     opset_version=18, dynamo=True, dynamic_shapes=shapes, verbose=False)
            prog.save(path, external_data=False)
        else:
            dynamic = dict(zip(names, axes)) | out_axes
            torch.onnx.export(m, args, path, input_names=names, output_names=list(spec.outputs), opset_version=17,
                              dynamo=False, dynamic_axes=dynamic)
    return onnx.load(path)


__all__ = ["EXPORTERS", "EXTRA", "FAMILIES", "FIFTH", "FOURTH", "NAMES", "OPSETS", "SERVING", "SEVENTH", "EIGHTH",
           "SIXTH", "SPECS", "THIRD", "UNSEEN", "UNSUPPORTED", "WIDE", "Unsupported", "build", "export", "export_dynamic",
           "feeds", "module"]
