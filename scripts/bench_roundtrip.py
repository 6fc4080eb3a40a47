#!/usr/bin/env python3
"""Where the round trip stands on real models (issue 14): for each zoo model (tests/zoo: transformers models
from small random configs, exported by torch), what onnxruntime actually runs and how fast, for

- the original export,
- the round trip (``scheduler='none'``: import, e-graph, extraction, export, no rewrite),
- the optimized program (MCTS search, ``cost='analytic'``, a small ``--budget``),

printing the node counts of onnxruntime's optimized graphs (``SessionOptions.optimized_model_filepath``,
ORT_ENABLE_ALL, one intra-op thread: what eqsat.measurement.timing times), the fused operator kinds in each, and the
latency ratios original / round trip and original / optimized (eqsat.measurement.timing's interleaved protocol: median
of paired rounds, with a bootstrap confidence interval). A ratio below 1 means the program is slower than
the original. One JSON document per run (``--json``).

    python scripts/bench_roundtrip.py --exporters torchscript --opsets 17 --json results/rt_ts17.json  # ~80 s
    python scripts/bench_roundtrip.py --exporters dynamo --opsets 18 --json results/rt_dyn18.json      # ~95 s
    python scripts/bench_roundtrip.py --models bert,vit --json results/rt.json  # both exporters, opsets 17 and 18

Combinations the exporter cannot produce (tests/zoo: UNSUPPORTED) print as ``unsupported`` with the reason.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import platform
import sys
import tempfile
import time
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import zoo  # noqa: E402  (tests/zoo)

from eqsat import OptimizeConfig, optimize  # noqa: E402
from eqsat.measurement.clock import session_options  # noqa: E402
from eqsat.measurement.timing import Protocol, compare  # noqa: E402

FUSED_STANDARD = {"Gemm", "LayerNormalization", "Gelu", "RMSNormalization", "Attention", "RotaryEmbedding",
                  "SimplifiedLayerNormalization",
                  "HardSwish", "Mish"}
"""standard operators that are the fused form of a decomposition (besides every com.microsoft operator)"""
PROGRAMS = ("original", "roundtrip", "optimized")


def ort_graph(model: onnx.ModelProto, threads: int = 1) -> dict[str, Any]:
    """The graph onnxruntime runs after its own optimizations (ORT_ENABLE_ALL): node count, operator counts,
    and the fused kinds among them."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = session_options(threads)
        opts.optimized_model_filepath = os.path.join(tmp, "ort.onnx")
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        g = onnx.load(opts.optimized_model_filepath).graph
    ops = collections.Counter(("nchwc." if n.domain == "com.microsoft.nchwc" else "") + n.op_type for n in g.node)
    fused = collections.Counter(k for n in g.node for k in fused_kinds(n))
    return {"nodes": len(g.node), "ops": dict(sorted(ops.items())), "fused": dict(sorted(fused.items()))}


def config(**options: Any) -> OptimizeConfig:
    """An OptimizeConfig from flat options (search options such as budget and seed included)."""
    of = getattr(OptimizeConfig, "of", None)
    return of(**options) if of is not None else OptimizeConfig(**options)


def fused_kinds(node: onnx.NodeProto) -> list[str]:
    """The fusions one node of onnxruntime's optimized graph stands for: a com.microsoft operator (FusedGemm,
    SkipLayerNormalization, QuickGelu: x*sigmoid(a*x), ...), a standard fused operator (Gemm,
    LayerNormalization, ...), a convolution with a fused activation (``Conv+Relu``) or, in the NCHWc layout,
    a fused residual sum (``Conv+Add``). Layout conversions (Reorder*) are none."""
    kinds = []
    if node.domain == "com.microsoft" or (node.domain in ("", "ai.onnx") and node.op_type in FUSED_STANDARD):
        kinds.append(node.op_type)
    if node.op_type in ("Conv", "FusedConv"):
        act = next((a.s.decode() for a in node.attribute if a.name == "activation"), None)
        if act:
            kinds.append(f"Conv+{act}")
        if node.domain == "com.microsoft.nchwc" and len([i for i in node.input if i]) == 4:
            kinds.append("Conv+Add")
    return kinds


def report_json(result) -> dict[str, Any]:
    r = result.report
    return r if isinstance(r, dict) else r.to_json()


def ratio(cmp) -> dict[str, Any]:
    return {"speedup": cmp.speedup, "ci_low": cmp.ci_low, "ci_high": cmp.ci_high, "original_ms": cmp.original_ms,
            "program_ms": cmp.optimized_ms, "rounds": cmp.rounds, "repeats_per_round": cmp.repeats,
            "confidence": cmp.confidence}


def bench_one(name: str, exporter: str, opset: int, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name, "exporter": exporter, "opset": opset}
    try:
        original = zoo.build(name, exporter, opset, seed=args.seed)
    except zoo.Unsupported as e:
        row["unsupported"] = str(e)
        return row
    programs = {"original": original}
    t = time.perf_counter()
    try:
        rt = optimize(original, config(scheduler="none", cost="analytic", measure=False, allow_slower=True,
                                       seed=args.seed))
        programs["roundtrip"] = rt.optimized
        row["roundtrip_report"] = {k: report_json(rt).get(k) for k in ("verified", "max_abs_error", "returned")}
        row["roundtrip_s"] = time.perf_counter() - t
        t = time.perf_counter()
        if args.defaults:  # what a user gets: default flags (measured selection, fallback to the original)
            opt = optimize(original, config(seed=args.seed, time_limit=args.time_limit))
        else:  # the searched program itself, whatever its measured speed
            opt = optimize(original, config(scheduler=args.scheduler, cost="analytic", budget=args.budget,
                                            depth=args.depth, time_limit=args.time_limit, measure=False,
                                            allow_slower=True, seed=args.seed))
        programs["optimized"] = opt.optimized
        rep = report_json(opt)
        row["optimized_report"] = {k: rep.get(k) for k in ("verified", "max_abs_error", "returned", "stop_reason",
                                                           "estimated_speedup", "rules_applied", "measured",
                                                           "candidates")}
        row["optimized_s"] = time.perf_counter() - t
    except Exception as e:  # noqa: BLE001 - a failing model is a result of the benchmark
        row["error"] = f"{type(e).__name__}: {e}"
        row["traceback"] = traceback.format_exc()
    row["ort"] = {k: ort_graph(m, args.threads) for k, m in programs.items()}
    feeds = zoo.feeds(name, args.seed)
    protocol = Protocol(threads=args.threads, budget_s=args.time_budget, seed=args.seed)
    row["latency"] = {k: ratio(compare(original, programs[k], protocol, feeds=feeds))
                      for k in ("roundtrip", "optimized") if k in programs}
    orig_fused = row["ort"]["original"]["fused"]
    row["lost_fusions"] = {k: {op: n - row["ort"][k]["fused"].get(op, 0) for op, n in orig_fused.items()
                               if row["ort"][k]["fused"].get(op, 0) < n}
                           for k in ("roundtrip", "optimized") if k in row["ort"]}
    return row


def _fused(d: dict[str, int]) -> str:
    short = {"SkipLayerNormalization": "SkipLN", "LayerNormalization": "LN", "SimplifiedLayerNormalization": "RMSN",
             "SkipSimplifiedLayerNormalization": "SkipRMSN", "FusedMatMul": "FMatMul", "FusedConv": "FConv",
             "MultiHeadAttention": "MHA", "QuickGelu": "QGelu", "BiasGelu": "BGelu"}
    return " ".join(f"{short.get(k, k)}{'' if v == 1 else 'x' + str(v)}" for k, v in d.items()) or "-"


def _ratio(lat: dict[str, Any] | None) -> str:
    return "-" if lat is None else f"{lat['speedup']:.3f} [{lat['ci_low']:.3f},{lat['ci_high']:.3f}]"


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'model':<13}{'exp':<4}{'opset':>5} {'nodes o/rt/opt':>15}  {'rt ratio [CI]':<22}{'opt ratio [CI]':<22}"
          f"{'est':>6}  fused: original | round trip | optimized")
    for r in rows:
        head = f"{r['model']:<13}{'ts' if r['exporter'] == 'torchscript' else 'dyn':<4}{r['opset']:>5} "
        if "unsupported" in r:
            print(head + f"unsupported: {r['unsupported']}")
            continue
        nodes = "/".join(str(r["ort"][p]["nodes"]) if p in r["ort"] else "-" for p in PROGRAMS)
        lat = r.get("latency", {})
        fused = " | ".join(_fused(r["ort"][p]["fused"]) if p in r["ort"] else "-" for p in PROGRAMS)
        est = (r.get("optimized_report") or {}).get("estimated_speedup")
        est_s = "-" if est is None else f"{est:.3f}"
        returned = (r.get("optimized_report") or {}).get("returned")
        print(head + f"{nodes:>15}  {_ratio(lat.get('roundtrip')):<22}{_ratio(lat.get('optimized')):<22}{est_s:>6}  "
              + fused + (f"  [returned: {returned}]" if returned else ""))
        if "error" in r:
            print(f"{'':<24}error: {r['error'][:200]}")
    print("ratios: original latency / program latency (median of interleaved rounds, 95% bootstrap CI); "
          "<1: slower than the original. est: the search's estimated speedup (analytic cost).\n"
          "nodes and fused kinds: of the graph onnxruntime runs after its ORT_ENABLE_ALL optimizations.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(zoo.NAMES), help=f"comma-separated, of {','.join(zoo.NAMES)}")
    p.add_argument("--exporters", default="torchscript,dynamo", help="torchscript,dynamo")
    p.add_argument("--opsets", default="17,18", help="comma-separated opsets (17,18)")
    p.add_argument("--seed", type=int, default=0, help="weights, inputs, search and timing order")
    p.add_argument("--budget", type=int, default=8, help="MCTS simulations per step of the optimized run")
    p.add_argument("--depth", type=int, default=4, help="MCTS rollout depth of the optimized run")
    p.add_argument("--scheduler", default="mcts", help="search of the optimized run (mcts|tensat|random)")
    p.add_argument("--time-limit", type=float, default=60.0, help="search plus extraction seconds per model")
    p.add_argument("--time-budget", type=float, default=2.0, help="seconds of timed rounds per comparison")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument("--defaults", action="store_true",
                   help="the optimized run with the optimizer's default flags (cost auto, measured candidates, "
                        "fallback to the original) instead of the searched program with the analytic cost")
    p.add_argument("--json", help="write the run's results to this JSON file")
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    exporters = [e for e in args.exporters.split(",") if e]
    opsets = [int(o) for o in args.opsets.split(",") if o]
    bad = [m for m in models if m not in zoo.NAMES] + [e for e in exporters if e not in zoo.EXPORTERS]
    if bad:
        p.error(f"unknown model or exporter: {', '.join(bad)} (models: {', '.join(zoo.NAMES)}; exporters: "
                f"{', '.join(zoo.EXPORTERS)})")
    for logger in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "transformers"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    rows = []
    start = time.perf_counter()
    for name in models:
        for exporter in exporters:
            for opset in opsets:
                rows.append(bench_one(name, exporter, opset, args))
                r = rows[-1]
                print(f"  {name} {exporter} {opset}: " + ("unsupported" if "unsupported" in r else
                      "error" if "error" in r else "done"), file=sys.stderr, flush=True)
    print_table(rows)
    if args.json:
        out = {"rows": rows, "args": vars(args), "seconds": time.perf_counter() - start,
               "versions": {"onnxruntime": ort.__version__, "onnx": onnx.__version__,
                            "torch": __import__("torch").__version__,
                            "transformers": __import__("transformers").__version__},
               "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                           "cores": os.cpu_count()}}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
