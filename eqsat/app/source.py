"""The model arguments shared by the commands that read a model: ``MODEL.onnx`` or ``--model NAME [--small]``,
and ``--input-shape`` / ``--static-shape``."""

from __future__ import annotations

import argparse
import sys

import onnx

from eqsat.errors import InputError
from eqsat.generic import import_generic
from eqsat.ir import Graph
from eqsat.models import build
from eqsat.onnx import load_model, parse_input_shapes
from eqsat.onnx.reading import check_model_file, read_stream

from .config import OptimizeConfig
from .shaping import Shaping


def add_model_source(p: argparse.ArgumentParser) -> None:
    """The arguments naming a model."""
    p.add_argument("model_path", nargs="?", metavar="MODEL.onnx", help="an ONNX model file (- reads it from standard input)")
    p.add_argument("--model", dest="builtin", metavar="NAME", help="a built-in architecture (eqsat models list)")
    p.add_argument("--small", action="store_true", help="the reduced size of a built-in model (fast)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                   help="the shape to tune and measure at (repeatable); the written model keeps the dynamic "
                        "dimensions. Default: a batch-like dynamic dimension 1, an image's side 224, "
                        "any other 128")
    p.add_argument("--static-shape", action="append", metavar="NAME=D1,D2,...",
                   help="specialize the written model to this input shape (repeatable): the interface changes")


def check_source_flags(args: argparse.Namespace) -> None:
    """Refuse flags that do not apply to the model given, before any work."""
    if args.small and args.model_path:
        raise InputError("--small applies to built-in models (--model NAME) only; leave it out with MODEL.onnx")
    if args.model_path and args.model_path != "-":
        check_model_file(args.model_path)  # before anything reads it (the external data files it names, ...)


def source(args: argparse.Namespace) -> tuple[onnx.ModelProto | Graph, str]:
    """(ONNX model or IR graph, label) from the model arguments."""
    if bool(args.model_path) == bool(args.builtin):
        raise InputError("give either MODEL.onnx or --model NAME (eqsat models list shows the names)")
    if args.builtin:
        return build(args.builtin, small=args.small), args.builtin
    if args.model_path == "-":
        return read_stream(sys.stdin.buffer), "-"
    return load_model(args.model_path), args.model_path


def source_graph(args: argparse.Namespace) -> tuple[Graph, str]:
    """(IR graph, label) from the model arguments, imported as ``optimize-model`` imports it (at the
    representative shapes: ``--input-shape``, ``--static-shape``, else the defaults; :mod:`eqsat.app.shaping`)."""
    graph, label, _ = source_shaped(args)
    return graph, label


def source_shaped(args: argparse.Namespace) -> tuple[Graph, str, dict[str, int]]:
    """:func:`source_graph` with the sizes its dynamic dimensions were imported at (symbol -> size)."""
    config = OptimizeConfig(input_shapes=parse_input_shapes(args.input_shape),
                            static_shapes=parse_input_shapes(args.static_shape, "--static-shape"))
    model, label = source(args)
    if isinstance(model, Graph):
        return model, label, {}
    shaping = Shaping.of(model, config)
    try:
        named = label if args.model_path and label != "-" else None  # a file's path in messages
        return import_generic(model, shaping.shapes, source=named, generic=shaping.generic), label, shaping.values
    except InputError as exc:
        raise shaping.explain(exc) from exc


__all__ = ["add_model_source", "check_source_flags", "source", "source_graph", "source_shaped"]
