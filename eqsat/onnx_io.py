"""Saving and loading ONNX models of any size (protobuf caps one message at 2 GiB: larger models keep
their weights in an external data file beside the model)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator

import onnx

LIMIT = 1_800_000_000


def is_large(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is too big to serialize as one message (protobuf fails past 2 GiB, even to size it)."""
    if sum(len(t.raw_data) for t in model.graph.initializer) > LIMIT:
        return True
    try:
        return model.ByteSize() > LIMIT
    except Exception:  # google.protobuf.message.EncodeError: over 2 GiB
        return True


@contextlib.contextmanager
def as_path(model: onnx.ModelProto) -> Iterator[str]:
    """A temporary file holding ``model`` (external data for large models)."""
    with tempfile.TemporaryDirectory(prefix="eqsat-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        save(model, path)
        yield path


def save(model: onnx.ModelProto, path: str) -> None:
    if is_large(model):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        onnx.save_model(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data", size_threshold=1024)
    else:
        onnx.save_model(model, path)


def check(model: onnx.ModelProto) -> None:
    """onnx.checker with the full (shape-inference) check; path-based for large models."""
    if is_large(model):
        with as_path(model) as path:
            onnx.checker.check_model(path, full_check=True)
    else:
        onnx.checker.check_model(model, full_check=True)


def write_atomic(model: onnx.ModelProto, path: str) -> None:
    """Write ``model`` to ``path`` through temporary files and renames: a failure leaves ``path`` as it was."""
    parent = os.path.dirname(os.path.abspath(path))
    with tempfile.TemporaryDirectory(dir=parent, prefix=".eqsat-") as tmp:
        staged = os.path.join(tmp, os.path.basename(path))
        save(model, staged)
        data = staged + ".data"
        if os.path.exists(data):
            os.replace(data, path + ".data")
        os.replace(staged, path)
