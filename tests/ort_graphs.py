"""What onnxruntime makes of a model after its own graph optimizations, and the no-rewrite round trip, shared by
the fidelity tests (tests/onnx/test_fidelity.py, tests/onnx/test_attention.py, tests/onnx/test_gemm_import.py,
tests/rules/test_rules_attention.py, tests/rules/test_rules_spelling.py).

``ort_graph`` is ``scripts/bench_roundtrip.py``'s (one definition of the fused kinds for the benchmark and the
tests); the script is loaded on first use, so that a test module that imports this one is collected even where
the script cannot be loaded (the tests that read onnxruntime's graph then fail, the others run)."""

from __future__ import annotations

import collections
import functools
from types import ModuleType

import onnx
from script_loader import load_script
from zoo_cases import ROUND_TRIP

from eqsat import optimize


@functools.cache
def bench_script() -> ModuleType:
    """scripts/bench_roundtrip.py, whose ``ort_graph`` reads onnxruntime's optimized graph."""
    return load_script("bench_roundtrip")


def ort_graph(model: onnx.ModelProto) -> dict:
    """What onnxruntime runs after its own optimizations (ORT_ENABLE_ALL, CPU, one thread): ``nodes``, ``ops``
    and ``fused`` (fused operator kinds: com.microsoft operators, standard fused ones, Conv+activation/sum)."""
    return bench_script().ort_graph(model)


def fused(g: dict) -> collections.Counter:
    """The fused operator kinds of an ``ort_graph``, counted."""
    return collections.Counter(g["fused"])


def round_trip(original: onnx.ModelProto) -> onnx.ModelProto:
    """``original`` through the e-graph with no rewrite (:data:`zoo_cases.ROUND_TRIP`): verified, and the
    exporter's model returned (not the input handed back)."""
    result = optimize(original, ROUND_TRIP)
    report = result.report.to_json()
    assert report["verified"], report
    assert report["returned"] == "optimized", report["returned_reason"]  # the exporter's model, not the input
    return result.optimized
