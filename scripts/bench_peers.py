#!/usr/bin/env python3
"""eqsat against the ONNX optimizers users already have (issue 26, point 1), measured end to end.

For each model (the zoo's, tests/zoo, in the exporters asked for, and any ``--onnx FILE``), every tool writes
its program from the same original:

- ``eqsat``: ``eqsat.optimize`` with default flags (its own measured gate included; ``--eqsat-time-limit``),
- ``onnxsim``: ``onnxsim.simplify``,
- ``onnxslim``: ``onnxslim.slim``,
- ``ort-transformers``: onnxruntime's transformers optimizer (``optimize_model``, model type from the name),
- ``onnxscript``: ``onnxscript.optimizer.optimize`` then ``onnxscript.rewriter.ort_fusions.optimize_for_ort``,
- ``no-value-info``: the baseline of one line, the input with its ``value_info`` deleted (counted among the peers:
  onnxruntime runs many dynamic exports faster without their inner shapes, and eqsat writes none).

``--weights trained`` spreads every parameter the zoo's families initialize to a constant (zero biases, unit norm
scales) as training leaves it (``zoo.spread_constants``), so that no tool gains from a neutral bias a trained model
does not have. Files given with ``--onnx`` are labelled by their name, or by their folder and name where two share
one.

Each program is verified against the original in onnxruntime (``eqsat.verification``: seeded random inputs, every
output; the peers' outputs too: they break), at the shapes eqsat tunes at (``peers_tools.tuned_shapes``), where
it is timed too. The verified ones are then timed together with an unchanged copy
of the original (the A/A control, which shows the noise) in one process, interleaved, with eqsat.measurement.timing's
protocol (paired rounds, ORT_ENABLE_ALL on every side, the median ratio original / program with a bootstrap
95% interval), at each ``--threads`` count, the rounds sized to the variance seen until every interval is at most
``--resolution`` wide (1%) or ``--time-budget`` seconds (20) per model and thread count are spent (peers_timing).
A tool that is not installed, fails, or writes a program that does not verify is reported as such with the reason,
never timed. The peers are optional extras (``pip install -e '.[peers]'``), never runtime dependencies of eqsat.

Two phases, so that the timing can run alone on a quiet machine:

- ``--optimize-only --workdir DIR``: export each model, run every tool (``--tools``), verify, and store the
  programs with a manifest in DIR (peers_workdir: per tool its wall seconds, verification, ONNX operators added;
  eqsat's measured ratio, decision, kernels and whole report). Into an existing DIR it starts from the stored
  originals and replaces only the tools it runs (``--tools eqsat`` re-optimizes eqsat alone, keeping the peers');
  ``--skip-done`` keeps the tools a model already has (resuming an interrupted run).
- ``--time-only --workdir DIR``: time every verified program of DIR (or the ``--models``/``--tools`` named) at
  each thread count, write the JSON (default DIR/peers.json) and the figure (DIR/peers.png).
- neither: both, into ``--workdir`` or a temporary directory.

    python scripts/bench_peers.py --optimize-only --models all --workdir runs/peers
    python scripts/bench_peers.py --optimize-only --models all --tools eqsat --workdir runs/peers
    python scripts/bench_peers.py --time-only --workdir runs/peers
    python scripts/bench_peers.py --models bert,vit --exporters torchscript --json results/peers.json
    python scripts/bench_peers.py --onnx my.onnx --threads 1,2 --json results/mine.json --figure results/mine.png

One JSON document per run: per model, per tool, the wall seconds the tool took, whether it verified (and the worst
errors), and per thread count the speedup with its interval; and the summary of issue 26's targets (peers_report:
per model eqsat against the best peer and the 0.99 floor, whether the A/A control resolves it; the medians over
the transformer models and the BERT family), printed as a table too.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "scripts")):
    if path not in sys.path:
        sys.path.insert(0, path)

import peers_workdir as wd  # noqa: E402
from peers_report import figure, summarize, summary_table  # noqa: E402
from peers_timing import CONTROL, Budget, time_all  # noqa: E402
from peers_tools import TOOLS, run_tool, tool_version, tuned_shapes  # noqa: E402

from eqsat.errors import InputError  # noqa: E402
from eqsat.measurement import timing  # noqa: E402
from eqsat.onnx.axes.interface import shapes_text  # noqa: E402
from eqsat.onnx.importer import parse_input_shapes  # noqa: E402

ALL = ("bert", "bert_s128", "distilbert", "gpt2", "llama", "llama_s128", "qwen2", "t5_encoder", "vit",
       "whisper_encoder", "convnext", "resnet50")
"""``--models all``: issue 26's families from the zoo (BERT at sequence 16 and 128, DistilBERT, GPT-2, LLaMA with
grouped KV heads at sequence 16 and 128, Qwen2, T5 encoder, ViT, Whisper encoder, ConvNeXt, ResNet-50)"""
DEFAULT_MODELS = "bert,gpt2,vit,llama,resnet"


def models_from(args: argparse.Namespace) -> list[tuple[str, Callable[[], onnx.ModelProto]]]:
    """(label, loader) of each model asked for: the zoo's (name/exporter), then the ``--onnx`` files."""
    out: list[tuple[str, Callable[[], onnx.ModelProto]]] = []
    if args.models:
        import zoo  # tests/zoo: small random-weight transformers models exported by torch

        groups = {"zoo": zoo.NAMES, "extra": zoo.EXTRA, "unseen": zoo.UNSEEN, "wide": zoo.WIDE,
                  "serving": zoo.SERVING, "families": zoo.FAMILIES, "third": zoo.THIRD, "fourth": zoo.FOURTH,
                  "fifth": zoo.FIFTH, "sixth": zoo.SIXTH, "seventh": zoo.SEVENTH, "eighth": zoo.EIGHTH,
                  "all": ALL}
        for name in [n for m in args.models for n in groups.get(m, (m,))]:
            for exporter in args.exporters:
                load = functools.partial(load_dynamic, zoo, name, exporter, args.seed, args.weights) \
                    if name in zoo.SERVING or args.dynamic else \
                    functools.partial(zoo.build, name, exporter, args.opset, seed=args.seed, weights=args.weights)
                out.append((f"{name}/{exporter}", load))
    for label, path in onnx_labels(args.onnx).items():
        out.append((label, functools.partial(onnx.load, path)))
    return out


def onnx_labels(paths: list[str]) -> dict[str, str]:
    """A label per ``--onnx`` file: its name without ``.onnx``, or, where two files share that name (two exports
    each saved as ``model.onnx`` in a folder of its own), the folder's name and the file's
    (``bert/model``); the same file given twice is refused, not timed twice under one label."""
    stem = {path: os.path.basename(path).removesuffix(".onnx") for path in paths}
    clash = {s for s in stem.values() if list(stem.values()).count(s) > 1}
    labels: dict[str, str] = {}
    for path in paths:
        label = stem[path] if stem[path] not in clash else \
            f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{stem[path]}"
        if label in labels:
            raise SystemExit(f"error: --onnx {path} and --onnx {labels[label]} would both be labelled {label!r} "
                             "in the workdir; give each model a file name of its own")
        labels[label] = path
    return labels


def load_dynamic(zoo: Any, name: str, exporter: str, seed: int, weights: str) -> onnx.ModelProto:
    """A model exported as serving code exports it: dynamic batch and sequence, a decode step's past
    (``zoo.export_dynamic``)."""
    with tempfile.TemporaryDirectory() as tmp:
        return zoo.export_dynamic(name, exporter, os.path.join(tmp, "model.onnx"), seed=seed, weights=weights)


def _line(name: str, t: dict[str, Any]) -> str:
    return f"   {name:17} {t['status']:11} {t.get('seconds', 0.0):7.1f} s  {t.get('reason', '')}"


def optimize_model(label: str, load: Callable[[], onnx.ModelProto], manifest: dict[str, Any],
                   args: argparse.Namespace) -> None:
    """Every tool of ``args.tools`` on one model, each program verified and stored in the workdir, the manifest
    rewritten after each; the model is the stored original where the workdir has one (else exported now)."""
    workdir = args.workdir
    entry = manifest["models"].get(label)
    folder = os.path.relpath(wd.model_dir(workdir, label), workdir)
    original = os.path.join(folder, "original.onnx")
    if entry and "original" in entry and os.path.exists(os.path.join(workdir, entry["original"])):
        model = wd.load_model(workdir, entry["original"])
    else:
        try:
            model = load()
        except Exception as exc:  # an export this torch cannot write
            traceback.print_exc()
            manifest["models"][label] = {"error": f"{type(exc).__name__}: {exc}"}
            wd.save_manifest(workdir, manifest)
            return
        entry = manifest["models"][label] = {"original": wd.store_model(workdir, original, model),
                                             "nodes": len(model.graph.node), "tools": {}}
    assert entry is not None
    print(f"== {label}: {len(model.graph.node)} nodes", flush=True)
    try:  # the sizes every tool's program is verified at, worked out once (Shaping.of runs the model)
        shapes = tuned_shapes(model, args.eqsat_input_shapes)
    except Exception:  # noqa: BLE001 - each tool's verification then says why
        shapes = None
    for name in args.tools:
        if args.skip_done and name in entry["tools"]:
            print(_line(name, entry["tools"][name]) + " (kept)", flush=True)
            continue
        result = run_tool(name, model, label, args, shapes)
        for stale in (f"{name}.onnx", f"{name}.report.json"):
            if os.path.exists(os.path.join(workdir, folder, stale)):
                os.remove(os.path.join(workdir, folder, stale))
        program = result.pop("program", None)
        if program is not None:
            result["program"] = wd.store_model(workdir, os.path.join(folder, f"{name}.onnx"), program)
        if isinstance(result.get("report"), dict):  # eqsat's whole report: a file of its own
            relative = os.path.join(folder, f"{name}.report.json")
            wd.write_json(os.path.join(workdir, relative), result["report"])
            result["report"] = relative
        result["version"] = tool_version(name)
        entry["tools"][name] = result
        wd.save_manifest(workdir, manifest)
        print(_line(name, result), flush=True)


def optimize_phase(args: argparse.Namespace) -> dict[str, Any]:
    """The optimize phase into ``args.workdir``: the manifest (see peers_workdir)."""
    os.makedirs(args.workdir, exist_ok=True)
    manifest = wd.load_manifest(args.workdir)
    manifest.update(seed=args.seed, weights=args.weights, opset=args.opset, eqsat_commit=wd.source_commit(ROOT),
                    eqsat_time_limit=args.eqsat_time_limit,
                    eqsat_input_shapes={k: list(v) for k, v in args.eqsat_input_shapes.items()}, dynamic=args.dynamic)
    for label, load in models_from(args):
        optimize_model(label, load, manifest, args)
    wd.save_manifest(args.workdir, manifest)
    return manifest


def time_model(label: str, entry: dict[str, Any], args: argparse.Namespace,
               given: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    """One model's verified programs timed beside the A/A control at each thread count: its row. ``given``: the
    input sizes eqsat was given (the workdir's ``--eqsat-input-shape``)."""
    original = wd.load_model(args.workdir, entry["original"])
    tools = {n: dict(t) for n, t in entry["tools"].items()
             if args.tools is None or n in args.tools}
    programs = {n: wd.load_model(args.workdir, t["program"]) for n, t in tools.items() if t["status"] == "verified"}
    # a dynamic model at the sizes eqsat tuned it for (the workdir's --eqsat-input-shape, else its defaults: batch
    # 1, sequence 128, a waveform's samples where its front-end runs), not at 1 for every dynamic dimension
    shapes = tuned_shapes(original, given)
    print(f"== {label}: {len(original.graph.node)} nodes, timing {', '.join(programs) or 'no program'} at "
          f"{shapes_text(shapes)}", flush=True)
    tools[CONTROL] = {"status": "control"}
    budget = Budget(resolution=args.resolution, budget_s=args.time_budget, seed=args.seed)
    for threads in args.threads:
        for name, r in time_all(original, programs, threads, budget, input_shapes=shapes).items():
            print(f"   {threads}t {name:17} {r['speedup']:.3f}x [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
                  f"{r['rounds']} rounds", flush=True)
            tools[name].setdefault("timed", {})[str(threads)] = r
    return {"model": label, "nodes": len(original.graph.node), "shapes": {k: list(v) for k, v in shapes.items()},
            "tools": tools}


def time_phase(args: argparse.Namespace, manifest: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The timing phase on the workdir's programs: the run's document and its exit code."""
    labels = list(manifest["models"]) if args.models is None and not args.onnx else \
        [label for label, _ in models_from(args)]
    missing = [label for label in labels if label not in manifest["models"]]
    if missing:
        print(f"not in {args.workdir}'s manifest (left out): {', '.join(missing)}", file=sys.stderr)
    given = {k: tuple(v) for k, v in manifest.get("eqsat_input_shapes", {}).items()} or args.eqsat_input_shapes
    rows = []
    start = time.perf_counter()
    for label in [label for label in labels if label in manifest["models"]]:
        entry = manifest["models"][label]
        if "error" in entry:
            rows.append({"model": label, "error": entry["error"]})
            continue
        try:
            rows.append(time_model(label, entry, args, given))
        except Exception as exc:  # a model onnxruntime cannot time
            traceback.print_exc()
            rows.append({"model": label, "error": f"{type(exc).__name__}: {exc}"})
    seconds = time.perf_counter() - start
    timed = [r for r in rows if "tools" in r]
    summary = summarize(rows, args.threads)  # a model that failed counts, as missing
    print(f"timed {len(timed)} models in {seconds:.0f} s", flush=True)
    print(summary_table(summary, args.threads), flush=True)
    doc = {"script": "bench_peers", "argv": args.argv, "seed": args.seed, "threads": args.threads,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "load_average": os.getloadavg()},
           "runtime": timing.runtime_info(args.threads[0]), "workdir": os.path.abspath(args.workdir),
           "seconds": seconds,
           "budget": dataclasses.asdict(Budget(resolution=args.resolution, budget_s=args.time_budget,
                                               seed=args.seed)),
           "optimized": {k: v for k, v in manifest.items() if k != "models"}, "summary": summary, "rows": rows}
    return doc, 0 if rows and all("tools" in r for r in rows) and not missing else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None,
                   help="comma-separated zoo models (tests/zoo: NAMES, EXTRA, UNSEEN, WIDE, SERVING, FAMILIES, THIRD, FOURTH, FIFTH, SIXTH, SEVENTH, EIGHTH) "
                        "or "
                        "groups "
                        "'zoo', 'extra', 'unseen' (issue 26's families beyond the zoo), 'wide' (issue 41's families at "
                        "width 384), 'serving' (issue 42's decode steps, exported with dynamic batch and past), "
                        "'families' (a second round of families a new user tries: GPT-J, Falcon, DeBERTa, BEiT, "
                        "SegFormer, HuBERT, ...), 'third' (a third round: Gemma 2, GPT-Neo, MPT, Swin V2, BiT, "
                        "WavLM, AST, an LSTM, ...), 'fourth' (BART, T5, Whisper, YOLOS, MobileNetV1, Mamba), 'fifth' "
                        "(Qwen3, Phi-3, Gemma 3, ModernBERT, Pegasus, Hiera), 'sixth' (Granite, StarCoder2, XLNet, Funnel, "
                        "Marian, DETR, DPT, SigLIP, VideoMAE, TimeSformer, Data2VecAudio), 'seventh' (Nemotron, "
                        "Persimmon, EXAONE 4, CLIP text, ConvBERT, M2M100), 'eighth' (LFM2, SmolLM3, OLMo 2, Arcee, MPNet, "
                        "BigBird), "
                        "'all' (every family issue 26 names); '' for "
                        f"none (default: {DEFAULT_MODELS}; --time-only: every model of the workdir)")
    p.add_argument("--exporters", default="torchscript,dynamo", help="torchscript,dynamo")
    p.add_argument("--opset", type=int, default=18, help="the zoo export's opset")
    p.add_argument("--onnx", action="append", default=[], metavar="FILE", help="an ONNX model to add (repeatable)")
    p.add_argument("--tools", default=None,
                   help=f"comma-separated, of {','.join(TOOLS)} (default: all; --time-only: all in the workdir)")
    phase = p.add_mutually_exclusive_group()
    phase.add_argument("--optimize-only", action="store_true",
                       help="export, optimize with each tool, verify, and store the programs in --workdir")
    phase.add_argument("--time-only", action="store_true", help="time the programs stored in --workdir")
    p.add_argument("--workdir", help="the programs and their manifest (default without a phase flag: a temporary one)")
    p.add_argument("--skip-done", action="store_true",
                   help="--optimize-only: keep the tools the workdir's manifest already has for a model")
    p.add_argument("--threads", default="1,2", help="onnxruntime intra-op thread counts to time at")
    p.add_argument("--resolution", type=float, default=0.01,
                   help="the widest 95%% interval wanted on every speedup, the A/A control's included")
    p.add_argument("--time-budget", type=float, default=20.0,
                   help="the most seconds of timed rounds per model and thread count")
    p.add_argument("--eqsat-time-limit", type=float, help="eqsat's --time-limit (default: eqsat's own)")
    p.add_argument("--eqsat-input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="eqsat's --input-shape (repeatable): the size it tunes and measures at, e.g. a padded batch "
                        "input_ids=8,128")
    p.add_argument("--dynamic", action="store_true",
                   help="export every zoo model with dynamic batch and sequence axes, as serving code does (the "
                        "'serving' models always are)")
    p.add_argument("--seed", type=int, default=0, help="weights, inputs and timing order")
    p.add_argument("--weights", choices=("init", "trained"), default="init",
                   help="the zoo models' weights: as the family initializes them (zero biases, unit norm scales), or "
                        "trained: every parameter its initializer leaves constant spread about its value, as training "
                        "leaves it, so that no tool gains from a neutral bias a trained model does not have "
                        "(zoo.spread_constants)")
    p.add_argument("--json", help="write the run's results to this JSON file (default with --workdir: "
                                  "WORKDIR/peers.json)")
    p.add_argument("--figure", help="write a bar chart (PNG) of the speedups at each thread count (default with "
                                    "--workdir: WORKDIR/peers.png)")
    args = p.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.models is None and not args.time_only:
        args.models = DEFAULT_MODELS
    args.models = None if args.models is None else [m for m in args.models.split(",") if m]
    args.exporters = [e for e in args.exporters.split(",") if e]
    args.tools = None if args.tools is None else [t for t in args.tools.split(",") if t]
    args.threads = [int(t) for t in args.threads.split(",") if t]
    try:
        args.eqsat_input_shapes = parse_input_shapes(args.eqsat_input_shape, "--eqsat-input-shape")
    except InputError as exc:
        p.error(str(exc))
    unknown = [t for t in args.tools or () if t not in TOOLS]
    if unknown or not args.threads or min(args.threads) < 1:
        p.error(f"unknown tool {', '.join(unknown)} (tools: {', '.join(TOOLS)})" if unknown
                else "--threads takes positive counts, e.g. 1,2")
    if (args.optimize_only or args.time_only) and not args.workdir:
        p.error("--optimize-only and --time-only need --workdir DIR")
    if args.time_only and not os.path.exists(os.path.join(args.workdir, wd.MANIFEST)):
        p.error(f"{args.workdir} holds no {wd.MANIFEST}: run --optimize-only into it first")
    if not args.time_only and args.tools is None:
        args.tools = list(TOOLS)
    with tempfile.TemporaryDirectory(prefix="peers-") as scratch:
        if args.workdir is None:
            args.workdir = scratch
        elif not args.optimize_only:
            args.json = args.json or os.path.join(args.workdir, "peers.json")
            args.figure = args.figure or os.path.join(args.workdir, "peers.png")
        manifest = wd.load_manifest(args.workdir) if args.time_only else optimize_phase(args)
        if args.optimize_only:
            done = [m for m in manifest["models"].values() if "error" not in m]
            print(f"optimized {len(done)} of {len(manifest['models'])} models into {args.workdir}")
            return 0 if len(done) == len(manifest["models"]) else 1
        doc, rc = time_phase(args, manifest)
    if args.json:
        wd.write_json(args.json, doc)
        print(f"wrote {args.json}")
    if args.figure:
        figure([r for r in doc["rows"] if "tools" in r], args.figure, args.threads)
        print(f"wrote {args.figure}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
