"""The tools scripts/bench_peers.py runs (eqsat with default flags and the ONNX optimizers users already have),
each on one model: its program, the wall seconds it took, and its verification against the original."""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import onnx

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.verify import verify

Tool = Callable[[onnx.ModelProto, str, argparse.Namespace], onnx.ModelProto]
ORT_MODEL_TYPES = {"bert": "bert", "gpt2": "gpt2", "vit": "vit", "llama": "gpt2", "distilbert": "bert",
                   "t5_encoder": "t5"}
"""the transformers optimizer's model type per zoo family (others: ``bert``, its default)"""


def _eqsat(model: onnx.ModelProto, _name: str, args: argparse.Namespace) -> onnx.ModelProto:
    config = OptimizeConfig()
    if args.eqsat_time_limit is not None:
        config = config.updated(time_limit=args.eqsat_time_limit)
    return optimize(model, config).optimized


def _onnxsim(model: onnx.ModelProto, _name: str, _args: argparse.Namespace) -> onnx.ModelProto:
    import onnxsim

    simplified, ok = onnxsim.simplify(model)
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    return simplified


def _onnxslim(model: onnx.ModelProto, _name: str, _args: argparse.Namespace) -> onnx.ModelProto:
    import onnxslim

    return onnxslim.slim(model)


def _ort_transformers(model: onnx.ModelProto, name: str, _args: argparse.Namespace) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    family = name.split("/")[0]
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:  # it takes a path for models it re-runs
        path = os.path.join(tmp, "in.onnx")
        onnx.save(model, path)
        return optimize_model(path, model_type=ORT_MODEL_TYPES.get(family, "bert")).model


def _onnxscript(model: onnx.ModelProto, _name: str, _args: argparse.Namespace) -> onnx.ModelProto:
    import onnx_ir
    import onnxscript.optimizer
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    ir_model = onnx_ir.from_proto(model)
    ir_model = onnxscript.optimizer.optimize(ir_model)
    ir_model, _counts = optimize_for_ort(ir_model)
    return onnx_ir.to_proto(ir_model)


TOOLS: dict[str, tuple[Tool, str]] = {
    "eqsat": (_eqsat, "eqsat"),
    "onnxsim": (_onnxsim, "onnxsim"),
    "onnxslim": (_onnxslim, "onnxslim"),
    "ort-transformers": (_ort_transformers, "onnxruntime"),
    "onnxscript": (_onnxscript, "onnxscript"),
}
"""name -> (the tool, the module that must be importable for it)"""


def run_tool(name: str, model: onnx.ModelProto, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """One tool on one model: its program (or why there is none), wall seconds, verification."""
    fn, module = TOOLS[name]
    if importlib.util.find_spec(module) is None:
        return {"status": "unavailable", "reason": f"{module} is not installed (pip install -e '.[peers]')"}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # tools may change their input in place
    start = time.perf_counter()
    try:
        program = fn(copy, label, args)
    except Exception as exc:  # a peer crashing is a result to report, not a reason to stop
        return {"status": "failed", "seconds": time.perf_counter() - start,
                "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    seconds = time.perf_counter() - start
    try:
        check = verify(model, program, seed=args.seed)
    except Exception as exc:  # onnxruntime cannot load or run what the tool wrote
        return {"status": "invalid", "seconds": seconds, "program": program,
                "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    entry: dict[str, Any] = {"seconds": seconds, "max_abs_error": check.max_abs_error,
                             "max_rel_error": check.max_rel_error, "program": program}
    if not check.passed:
        return {**entry, "status": "wrong", "reason": check.detail}
    return {**entry, "status": "verified", "operators": len(program.graph.node)}
