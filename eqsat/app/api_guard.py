"""The arguments of the Python API's :func:`eqsat.app.pipeline.optimize`, checked before any work: a model of a
type it cannot take, a config that is not an :class:`OptimizeConfig`, input shapes not given as a mapping of
name to dimensions are InputErrors (exit 2 from the command line) that say what to give instead."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import onnx

from eqsat.errors import InputError
from eqsat.ir import Graph
from eqsat.onnx.reading import model_from_bytes

from .config import OptimizeConfig, bounded_workers

MODEL_KINDS = "an onnx.ModelProto, a path (str or os.PathLike), the bytes of a serialized model or an IR Graph"


def _model(model: Any) -> onnx.ModelProto | Graph | str:
    if isinstance(model, onnx.ModelProto | Graph):
        return model
    if isinstance(model, str | os.PathLike):
        return os.fspath(model) if isinstance(os.fspath(model), str) else os.fsdecode(os.fspath(model))
    if isinstance(model, bytes | bytearray | memoryview):
        return model_from_bytes(bytes(model), f"the model bytes ({len(model):,} bytes)")
    if isinstance(model, onnx.GraphProto):
        raise InputError("got an onnx.GraphProto; give a model: onnx.helper.make_model(graph, opset_imports="
                         "[onnx.helper.make_opsetid('', 17)])")
    if hasattr(model, "read"):
        raise InputError(f"got a file object ({type(model).__name__}); give its bytes (f.read()), "
                         "onnx.load(f) or the file's path")
    raise InputError(f"model: got {type(model).__name__} {_short(model)}; give {MODEL_KINDS}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _shapes(shapes: Any, field: str = "input_shapes") -> dict[str, tuple[int, ...]]:
    example = "{'x': (1, 32)}"
    flag = "--" + field.replace("_shapes", "-shape")
    if isinstance(shapes, str):
        raise InputError(f"{field}: got the string {_short(shapes)}; give a mapping such as {example} "
                         f"(the NAME=D1,D2 form is the command line's {flag})")
    if not isinstance(shapes, Mapping):
        raise InputError(f"{field}: got {type(shapes).__name__}; give a mapping such as {example}")
    out = {}
    for name, dims in shapes.items():
        if not isinstance(name, str) or isinstance(dims, str | bytes) or not hasattr(dims, "__iter__"):
            raise InputError(f"{field}: {_short(name)}: {_short(dims)} is not NAME: (D1, D2, ...); "
                             f"give a mapping such as {example}")
        dims = tuple(dims)
        if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in dims):
            raise InputError(f"{field}: {name}: {_short(dims)}: every dimension must be a positive integer")
        out[name] = dims
    return out


def _sizes(sizes: Any) -> tuple[dict[str, int], ...]:
    example = "({'past': 511},)"
    if isinstance(sizes, str | bytes | Mapping) or not hasattr(sizes, "__iter__"):
        raise InputError(f"also_at: got {_short(sizes)}; give a sequence of symbol -> size mappings such as "
                         f"{example} (the SYMBOL=N form is the command line's --also-at)")
    out = []
    for size in sizes:
        if not isinstance(size, Mapping) or not size or any(
                not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v <= 0
                for k, v in size.items()):
            raise InputError(f"also_at: {_short(size)} is not a mapping of symbols to positive sizes; give one such "
                             f"as {example}")
        out.append(dict(size))
    return tuple(out)


def api_arguments(model: Any, config: Any) -> tuple[onnx.ModelProto | Graph | str, OptimizeConfig]:
    """``optimize``'s model and config, checked (the config validated, ``--workers`` bounded by the machine:
    :func:`~eqsat.app.config.bounded_workers`); bytes parsed as a serialized model."""
    if config is None:
        config = OptimizeConfig()
    elif not isinstance(config, OptimizeConfig):
        raise InputError(f"config: got {type(config).__name__}; give an eqsat.app.config.OptimizeConfig, e.g. "
                         "OptimizeConfig.of(time_limit=10.0) (a dict d: OptimizeConfig.of(**d))")
    config = replace(config, input_shapes=_shapes(config.input_shapes),
                     static_shapes=_shapes(config.static_shapes, "static_shapes"), also_at=_sizes(config.also_at))
    config.validate()
    return _model(model), bounded_workers(config)


__all__ = ["MODEL_KINDS", "api_arguments"]
