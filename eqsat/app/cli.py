"""The ``eqsat`` command line. Exit codes: 0 success, 1 internal error, 2 bad input or usage,
3 verification failed (nothing written), 130 interrupted (SIGINT or SIGTERM; nothing written), 141 stdout
closed early (a pipe)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Sequence

from eqsat.errors import EqsatError, InputError
from . import cost_cli, models_cli, rules_cli


def _add_model_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_path", nargs="?", metavar="MODEL.onnx", help="an ONNX model file")
    p.add_argument("--model", dest="builtin", metavar="NAME", help="a built-in architecture (eqsat models list)")
    p.add_argument("--small", action="store_true", help="the reduced size of a built-in model (fast)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                   help="fix a dynamic input dimension (repeatable)")


def _source(args):
    """(ONNX model or IR graph, label) from the model arguments."""
    from eqsat.onnx_import import load_model

    if bool(args.model_path) == bool(args.builtin):
        raise InputError("give either MODEL.onnx or --model NAME (eqsat models list shows the names)")
    if args.builtin:
        from eqsat.models import build

        return build(args.builtin, small=args.small), args.builtin
    return load_model(args.model_path), args.model_path


def _check_source_flags(args) -> None:
    if args.small and args.model_path:
        raise InputError("--small applies to built-in models (--model NAME) only; leave it out with MODEL.onnx")


def _k_multi(args) -> int:
    if args.k_multi is not None:
        if args.scheduler != "tensat":
            raise InputError(f"--k-multi applies to --scheduler tensat only (not {args.scheduler}); leave it out")
        return args.k_multi
    if args.builtin:
        from eqsat.models import MODELS

        spec = MODELS.get(args.builtin)
        return spec.k_multi if spec else 1
    return 1


def _check_distinct_paths(args) -> None:
    """Refuse any two of the input, ``-o`` (and its external data file) and ``--report`` naming one file
    (symbolic and hard links included), before any work."""
    named = [("-o", args.output), ("-o's external data file", args.output + ".data")]
    if args.report is not None:
        named.append(("--report", args.report))
    if args.model_path:
        named.insert(0, ("the input model", args.model_path))
    for a in range(len(named)):
        for b in range(a + 1, len(named)):
            (flag_a, path_a), (flag_b, path_b) = named[a], named[b]
            if flag_a.startswith("-o") and flag_b.startswith("-o"):
                continue
            if _same_file(path_a, path_b):
                raise InputError(f"{flag_b} {path_b} is the same file as {flag_a} {path_a}; writing it would "
                                 "destroy the other: give different paths")


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def _cmd_optimize(args) -> int:
    from eqsat.onnx_import import parse_input_shapes
    from eqsat.onnx_io import write_together
    from .pipeline import OptimizeConfig, check_output_path, optimize, report_bytes

    _check_source_flags(args)
    check_output_path(args.output, "-o")
    if args.report is not None:
        check_output_path(args.report, "--report")
    _check_distinct_paths(args)
    config = OptimizeConfig(scheduler=args.scheduler, main_extractor=args.main_extractor,
                            final_extractor=args.final_extractor, cost=args.cost, seed=args.seed, budget=args.budget,
                            depth=args.depth, node_limit=args.node_limit, k_multi=_k_multi(args),
                            time_limit=args.time_limit, ilp_time_limit=args.ilp_time_limit,
                            measure=not args.no_measure, allow_slower=args.allow_slower,
                            input_shapes=parse_input_shapes(args.input_shape))
    config.validate()
    model, label = _source(args)
    from eqsat.progress import progress_printer

    result = optimize(model, config, progress=progress_printer(args.quiet))
    result.report["input"] = label
    result.report["output"] = args.output
    if not args.quiet:
        _summary(result.report)
    others = {args.report: report_bytes(result.report)} if args.report is not None else {}
    write_together(result.optimized, args.output, others)
    if not args.quiet:
        print(f"eqsat: wrote {args.output}" + (f" and {args.report}" if args.report is not None else ""),
              file=sys.stderr)
    return 0


def _summary(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="eqsat optimize-model", show_header=True)
    t.add_column("")
    t.add_column("original", justify="right")
    t.add_column("optimized", justify="right")
    t.add_row("estimated cost (us)", f"{r['original_cost']:.1f}", f"{r['optimized_cost']:.1f}")
    m = r.get("measured")
    if m:
        t.add_row("measured latency (ms)", f"{m['original_ms']:.3f}", f"{m['optimized_ms']:.3f}")
    t.add_row("operators", str(sum(r["operators"]["original"].values())), str(sum(r["operators"]["optimized"].values())))
    con = Console(stderr=True)
    con.print(t)
    speed = f"estimated speedup {r['estimated_speedup']:.3f}x" if r.get("estimated_speedup") else ""
    if m and m.get("speedup"):
        speed += f", measured {m['speedup']:.3f}x"
    con.print(f"verified (max abs error {r['max_abs_error']:.2e}); {speed}")


def _cmd_info(args) -> int:
    from eqsat.onnx_import import import_model

    from eqsat.onnx_import import parse_input_shapes

    _check_source_flags(args)
    shapes = parse_input_shapes(args.input_shape)
    model, label = _source(args)
    graph = model if not hasattr(model, "graph") else import_model(model, shapes)
    counts = graph.op_counts()
    opaque = sorted({n.attrs[0] for n in graph.nodes() if n.op == "opaque"})
    info = {
        "model": label,
        "inputs": {i.name: list(i.shape) for i in graph.inputs},
        "outputs": {n: list(o.shape) for n, o in zip(graph.output_names, graph.outputs)},
        "operators": dict(sorted(counts.items())),
        "opaque": opaque,
        "parameters": graph.num_parameters(),
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"model: {label}")
    for k in ("inputs", "outputs"):
        for name, shape in info[k].items():
            print(f"  {k[:-1]:6} {name}: {shape}")
    print(f"  parameters: {info['parameters']:,}")
    print("  operators: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
    print("  opaque (no rules): " + (", ".join(opaque) if opaque else "none"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqsat", description="Optimize tensor graphs with equality saturation.")
    sub = p.add_subparsers(dest="command", required=True)

    o = sub.add_parser("optimize-model", help="optimize an ONNX model or a built-in architecture")
    _add_model_source(o)
    o.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    o.add_argument("--scheduler", default="mcts", choices=["mcts", "tensat", "random", "none"])
    o.add_argument("--main-extractor", default="greedy-dag")
    o.add_argument("--final-extractor", default="ilp")
    o.add_argument("--cost", default="auto", choices=["analytic", "analytic-a100", "cpu", "cuda", "auto"],
                   help="operator cost model (auto: cuda if a GPU is present, else cpu)")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--budget", type=int, default=128, help="MCTS simulations per decision")
    o.add_argument("--depth", type=int, default=10, help="MCTS rollout depth")
    o.add_argument("--node-limit", type=int, default=None,
                   help="e-node limit of the search (default: max(2000, 4 x the initial e-graph); in the report)")
    o.add_argument("--k-multi", type=int, default=None,
                   help="TENSAT: iterations in which multi-pattern rules run (default: the model's, else 1)")
    o.add_argument("--time-limit", type=float, default=600.0,
                   help="seconds for search plus extraction; the ILP takes what the search left (default 600)")
    o.add_argument("--ilp-time-limit", type=float, default=60.0, help="at most this many seconds of ILP (default 60)")
    o.add_argument("--report", metavar="REPORT.json")
    o.add_argument("--no-measure", action="store_true", help="skip the end-to-end latency measurement")
    o.add_argument("--allow-slower", action="store_true",
                   help="keep the optimized program even if it measures slower than the original")
    o.add_argument("-q", "--quiet", action="store_true")
    o.set_defaults(fn=_cmd_optimize)

    i = sub.add_parser("info", help="operators, inputs and outputs of a model")
    _add_model_source(i)
    i.add_argument("--json", action="store_true")
    i.set_defaults(fn=_cmd_info)

    for register in _extra_commands():
        register(sub)
    return p


def _extra_commands():
    """Subcommand groups of the models, rules and cost packages."""
    return [models_cli.register, rules_cli.register, cost_cli.register]


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None  # SIGTERM ends like Ctrl-C
    try:
        return int(args.fn(args) or 0)
    except EqsatError as exc:
        print(f"eqsat: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("eqsat: interrupted; no output was written or changed", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (eqsat info ... | head): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser"]
