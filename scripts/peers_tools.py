"""The tools scripts/bench_peers.py runs (eqsat with default flags and the ONNX optimizers users already have),
each on one model: its program, the wall seconds it took, its verification against the original, and which ONNX
operators it wrote that the original lacks (the runtime forms and kernels it used). A tool returns its program, or
its program and what it reports about itself (eqsat: its report's measured ratio, its decision, the kernels and the
operator changes; its whole report is kept beside the program by the optimize phase)."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import onnx

from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.app.shaping import Shaping
from eqsat.verification import verify

Tool = Callable[[onnx.ModelProto, str, argparse.Namespace], onnx.ModelProto | tuple[onnx.ModelProto, dict[str, Any]]]
ORT_MODEL_TYPES = {"bert": "bert", "bert_s128": "bert", "gpt2": "gpt2", "vit": "vit", "llama": "gpt2",
                   "llama_s128": "gpt2", "qwen2": "gpt2", "distilbert": "bert", "t5_encoder": "t5",
                   "bert_w384": "bert", "opt_w384": "gpt2", "bloom_w384": "gpt2", "neox_w384": "gpt_neox",
                   "phi_w384": "phi"}
"""the transformers optimizer's model type per zoo family (others: ``bert``, its default)"""


def _eqsat(model: onnx.ModelProto, _name: str, args: argparse.Namespace) -> tuple[onnx.ModelProto, dict[str, Any]]:
    config = OptimizeConfig()
    if args.eqsat_time_limit is not None:
        config = config.updated(time_limit=args.eqsat_time_limit)
    if getattr(args, "eqsat_input_shapes", None):
        config = config.updated(input_shapes=args.eqsat_input_shapes)
    result = optimize(model, config)
    return result.optimized, eqsat_summary(result.report.to_json())


def eqsat_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the peers table needs of eqsat's report (its JSON): its own measured ratio and decision, the program it
    returned and why, the runtime kernels it used and the operator kinds it changed, its phase times; the whole
    report under ``report`` (the optimize phase writes it to a file of its own and keeps its path)."""
    measured = report.get("measured") or {}
    return {"measured": {k: measured.get(k) for k in ("speedup", "ci_low", "ci_high", "decision", "candidate",
                                                      "rounds", "looks")} if measured else None,
            "returned": report.get("returned"), "returned_reason": report.get("returned_reason"),
            "shipped": report.get("shipped"), "kernels": report.get("kernels", {}),
            "changes": [{k: c.get(k) for k in ("op", "original", "optimized", "description")}
                        for c in report.get("changes", [])],
            "times": report.get("times", {}), "stop_reason": report.get("stop_reason"), "report": report}


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


def _bare(model: onnx.ModelProto, _name: str, _args: argparse.Namespace) -> onnx.ModelProto:
    """The baseline of one line: the input with its inner shapes (``value_info``) deleted, nothing else changed.
    onnxruntime runs many exports faster so (its memory planner, and the SkipLayerNormalization it fuses only
    where it knows the shapes; ``eqsat.generic.annotate``), and eqsat writes no inner shapes: this row says
    how much of a gain that alone is."""
    del model.graph.value_info[:]
    return model


TOOLS: dict[str, tuple[Tool, str]] = {
    "eqsat": (_eqsat, "eqsat"),
    "onnxsim": (_onnxsim, "onnxsim"),
    "onnxslim": (_onnxslim, "onnxslim"),
    "ort-transformers": (_ort_transformers, "onnxruntime"),
    "onnxscript": (_onnxscript, "onnxscript"),
    "no-value-info": (_bare, "onnx"),
}
"""name -> (the tool, the module that must be importable for it)"""


def tuned_shapes(model: onnx.ModelProto, given: dict[str, tuple[int, ...]] | None = None) -> dict[str, tuple[int, ...]]:
    """The input shapes eqsat tunes ``model`` at (``given``: the sizes it was given; ``eqsat.app.shaping.Shaping``):
    each tool's program is verified and timed there, so that a model refused at a default size (a waveform's
    front-end at 128 samples) is checked where it runs, at the size every tool's program was measured at."""
    inputs = {i.name for i in model.graph.input}
    config = OptimizeConfig().updated(input_shapes={k: tuple(v) for k, v in (given or {}).items() if k in inputs})
    return dict(Shaping.of(model, config).shapes)


def tool_version(name: str) -> str | None:
    """The installed version of the tool's package (None where it is absent or unnamed)."""
    module = TOOLS[name][1]
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def operator_changes(original: onnx.ModelProto, program: onnx.ModelProto) -> dict[str, dict[str, int]]:
    """The ONNX operators (``domain::op_type``, the default domain unnamed) whose count differs between the two
    top-level graphs: ``added`` (more in the program: the forms and kernels it wrote) and ``removed``."""
    def counts(m: onnx.ModelProto) -> Counter[str]:
        return Counter(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                       for n in m.graph.node)
    a, b = counts(original), counts(program)
    return {"added": dict(sorted((b - a).items())), "removed": dict(sorted((a - b).items()))}


def run_tool(name: str, model: onnx.ModelProto, label: str, args: argparse.Namespace,
             shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    """One tool on one model: its program (or why there is none), wall seconds, verification at ``shapes`` (the
    model's :func:`tuned_shapes`, worked out once per model by the caller; None: here)."""
    fn, module = TOOLS[name]
    if importlib.util.find_spec(module) is None:
        return {"status": "unavailable", "reason": f"{module} is not installed (pip install -e '.[peers]')"}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # tools may change their input in place
    start = time.perf_counter()
    try:
        made = fn(copy, label, args)
    except Exception as exc:  # a peer crashing is a result to report, not a reason to stop
        return {"status": "failed", "seconds": time.perf_counter() - start,
                "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    seconds = time.perf_counter() - start
    program, info = made if isinstance(made, tuple) else (made, {})
    try:
        if shapes is None:
            shapes = tuned_shapes(model, getattr(args, "eqsat_input_shapes", None))
        check = verify(model, program, seed=args.seed, input_shapes=shapes)
    except Exception as exc:  # onnxruntime cannot load or run what the tool wrote
        return {"status": "invalid", "seconds": seconds, "program": program, **info,
                "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    entry: dict[str, Any] = {"seconds": seconds, "max_abs_error": check.max_abs_error,
                             "max_rel_error": check.max_rel_error, "program": program,
                             "onnx_operators": operator_changes(model, program), **info}
    if not check.passed:
        return {**entry, "status": "wrong", "reason": check.detail}
    return {**entry, "status": "verified", "operators": len(program.graph.node)}
