"""The input model's metadata written onto the optimized one: who produced it (name and version), its domain
and version, the model's and the graph's doc strings and ``metadata_props`` (the optimizer changes the program,
not what the model says about itself)."""

from __future__ import annotations

import onnx

FIELDS = ("producer_name", "producer_version", "domain", "model_version", "doc_string")


def with_metadata(model: onnx.ModelProto, source: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (changed in place, and returned) with ``source``'s metadata; fields ``source`` leaves empty keep
    ``model``'s value."""
    if model is source:
        return model
    for name in FIELDS:
        value = getattr(source, name)
        if value:
            setattr(model, name, value)
    if source.graph.doc_string:
        model.graph.doc_string = source.graph.doc_string
    if source.metadata_props:
        del model.metadata_props[:]
        model.metadata_props.extend(source.metadata_props)
    return model


__all__ = ["FIELDS", "with_metadata"]
