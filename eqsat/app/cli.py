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
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

from eqsat import memory
from eqsat.errors import EqsatError, InputError
from eqsat.models import MODELS
from eqsat.onnx.axes.tied import parse_assumed
from eqsat.onnx.external import data_file
from eqsat.onnx.importer import parse_input_shapes, parse_sizes
from eqsat.onnx.io import external_data_files
from eqsat.progress import progress_printer

from . import cost_cli, memory_guard, models_cli, rules_cli, watchdog
from .config import OptimizeConfig, choices, options, value_type
from .guards import check_not_a_stream, check_output_path, check_replaceable, late_write_errors, tolerant_stderr
from .pipeline import optimize
from .report import Report, assumptions, report_bytes
from .source import add_model_source, check_source_flags, source, source_shaped


def _escaped(text: str) -> str:
    """A help text as argparse reads it: its ``%`` doubled (argparse formats help with ``%``: a "2% gain" would
    make ``--help`` fail)."""
    return text.replace("%", "%%")


def add_config_arguments(p: argparse.ArgumentParser, base: OptimizeConfig | None = None) -> None:
    """One argument per flagged field of OptimizeConfig and SearchConfig: its type, documentation, the names its
    registry accepts and its default in ``base`` (the documented config if None) come from the field. Every
    argument defaults to None (not given): :func:`config_from_args` then keeps ``base``'s value."""
    base = base or OptimizeConfig()
    for owner, f in options():
        if not f.metadata.get("flag"):
            continue
        default = getattr(base.search if owner else base, f.name)
        names = choices(f)
        if isinstance(default, bool):
            dashed = f.name.replace("_", "-")
            p.add_argument(f"--{dashed}" if not default else f"--no-{dashed}", dest=f.name, action="store_const",
                           const=not default, default=None,
                           help=_escaped(f"leave out: {f.metadata['doc']}" if default else f.metadata["doc"]))
            continue
        kind = value_type(type(base.search) if owner else type(base), f)
        shown = "by the input" if default is None else default
        p.add_argument(f.metadata["flag"], dest=f.name, type=kind, default=None,
                       metavar="{" + ",".join(names) + "}" if names else kind.__name__.upper(),
                       help=_escaped(f"{f.metadata['doc']} (default: {shown})"))


def config_from_args(args: argparse.Namespace, base: OptimizeConfig | None = None,
                     builtin: str | None = None) -> OptimizeConfig:
    """``base`` (the documented config if None) with the flags given in ``args``; a built-in model's own
    defaults (eqsat.models.MODELS: k_multi, rule_set) where its flags were not given."""
    given = {f.name: getattr(args, f.name) for _owner, f in options()
             if f.metadata.get("flag") and getattr(args, f.name, None) is not None}
    config = (base or OptimizeConfig()).updated(**given)
    if "k_multi" in given and config.scheduler != "tensat":
        raise InputError(f"--k-multi applies to --scheduler tensat only (not {config.scheduler}); leave it out")
    spec = MODELS.get(builtin) if builtin else None
    if spec is not None:
        config = config.updated(**{k: getattr(spec, k) for k in ("k_multi", "rule_set") if k not in given})
    return config


def _check_distinct_paths(args) -> None:
    """Refuse any two of the input (and the external data files it owns), ``-o`` (and its external data file) and
    ``--report`` naming one file (symbolic and hard links included), before any work."""
    named = [("-o", "-o", args.output), ("-o", "-o's external data file", _output_data(args.output))]
    if args.report is not None:
        named.append(("--report", "--report", args.report))
    if args.model_path:
        named[:0] = [("in", "the input model", args.model_path)] + [
            ("in", "the input's external data file", f) for f in external_data_files(args.model_path)]
    for a in range(len(named)):
        for b in range(a + 1, len(named)):
            (side_a, flag_a, path_a), (side_b, flag_b, path_b) = named[a], named[b]
            if side_a == side_b:  # the files of one side: -o and its data file, or the input and its data
                continue
            if _same_file(path_a, path_b):
                raise InputError(f"{flag_b} {path_b} is the same file as {flag_a} {path_a}; writing it would "
                                 "destroy the other: give different paths")


def _output_data(output: str) -> str:
    """The external data file written with ``-o output``: beside the file a symbolic link ``output`` names (the
    writer writes through links), else beside ``output`` as given."""
    return data_file(os.path.realpath(output) if os.path.islink(output) else output)


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def _cmd_optimize(args) -> int:
    check_source_flags(args)
    for flag, path in (("-o", args.output), ("--report", args.report)):
        if path is not None:
            check_not_a_stream(path, flag)
            check_output_path(path, flag)
            check_replaceable(path, flag)
    _check_distinct_paths(args)
    config = config_from_args(args, builtin=args.builtin)
    config = replace(config, input_shapes=parse_input_shapes(args.input_shape),
                     static_shapes=parse_input_shapes(args.static_shape, "--static-shape"),
                     also_at=parse_sizes(args.also_at), assume_dims=parse_assumed(args.assume_dim))
    config.validate()
    path = args.model_path if args.model_path and args.model_path != "-" and not args.builtin else None
    # a file goes by its path: eqsat.optimize reads it, and the run then holds the only copy of its weights
    model, label = (path, path) if path is not None else source(args)
    # the input's layout is kept; asked before the run: reading the file again beside the result would hold its
    # weights twice more
    external = bool(args.model_path and external_data_files(args.model_path))
    memory.release()
    result = optimize(model, config, progress=progress_printer(args.quiet))
    data = _output_data(args.output) if result.writes_data_file(external) else None
    report = replace(result.report, input=label, output=args.output, external_data=data)
    if not args.quiet:
        _summary(report)
    others = {args.report: report_bytes(report)} if args.report is not None else {}
    with late_write_errors(args.output, args.report):
        result.write(args.output, others, external)  # the weights read from the run's pool: no copy restored
    if not args.quiet:
        written = [args.output] + ([data] if data else []) + ([args.report] if args.report is not None else [])
        print(f"eqsat: wrote {', '.join(written[:-1])} and {written[-1]}" if len(written) > 1
              else f"eqsat: wrote {args.output}", file=sys.stderr)
    return 0


def _summary(r: Report) -> None:
    returned = r.returned.program == "original"  # the file written is the input: its column shows the input's figures
    t = Table(title="eqsat optimize-model", show_header=True)
    t.add_column("")
    t.add_column("original", justify="right")
    t.add_column("returned (the original)" if returned else "optimized", justify="right")
    t.add_row("estimated cost (us)", f"{r.original_cost:.1f}", f"{r.optimized_cost:.1f}")
    m = r.measured
    if m:
        t.add_row("measured latency (ms)", f"{m.original_ms:.3f}", f"{m.original_ms if returned else m.optimized_ms:.3f}")
    ops = r.to_json()["operators"]
    t.add_row("operators", str(sum(ops["original"].values())), str(sum(ops["optimized"].values())))
    con = Console(stderr=True, soft_wrap=True)
    con.print(t)
    speed = f"estimated speedup {r.estimated_speedup:.3f}x" if r.estimated_speedup else ""
    if m and returned:
        speed += f"; the original returned (the candidate timed: {m.speedup:.3f}x in {m.runtime.get('name')})"
    elif m:
        speed += f", measured {m.speedup:.3f}x ({m.runtime.get('name')})"
    con.print(f"verified (max abs error {r.verification.max_abs_error:.2e}); {speed}")
    if r.interface.note:
        con.print(f"interface: {r.interface.note}", highlight=False)
    for assumed in assumptions(r.config):
        con.print(f"assumed {assumed}", highlight=False)
    if len(r.candidates) > 2:
        for c in r.candidates:
            measured = f"{c.measured_ms:.3f} ms" if c.measured_ms is not None else "not measured"
            ratio = f", {c.speedup:.3f}x [{c.ci_low:.3f}, {c.ci_high:.3f}]" if c.speedup is not None else ""
            screened = " (screening run)" if c.note.startswith("screened out") else ""
            con.print(f"  {'*' if c.shipped else ' '} {c.name}: estimated {c.estimated_cost:.1f} us, {measured}{ratio}"
                      f"{screened}")
    _changes(r)


def _changes(r: Report) -> None:
    """Where the gain came from: the operator kinds the returned program dropped or has fewer of, and those it
    holds instead, each with its estimated cost (printed in full, unwrapped, on stderr)."""
    changes = r.changes()
    if not changes:
        return
    out = [f"where the gain came from (estimated by operator kind under {r.cost_model}; "
           f"{r.original_cost:.1f} -> {r.optimized_cost:.1f} us):"]
    fewer = [c for c in changes if c.saved_us > 0 or c.optimized < c.original]
    instead = sorted((c for c in changes if c not in fewer), key=lambda c: (-c.optimized_us, c.op))
    for title, rows in (("replaced", fewer), ("by", instead)):
        out.append(f"  {title}:")
        out += [f"    {c.op:10} {c.original:>3} -> {c.optimized:<3} {c.original_us:8.1f} -> {c.optimized_us:8.1f} us"
                f"  {c.description}" for c in rows]
    print("\n".join(out), file=sys.stderr)


def _cmd_info(args: argparse.Namespace) -> int:
    check_source_flags(args)
    graph, label, sizes = source_shaped(args)
    counts = graph.op_counts()
    opaque = sorted({n.attrs[0] for n in graph.nodes() if n.op == "opaque"})
    info: dict[str, Any] = {
        "model": label,
        "inputs": {i.name: list(i.shape) for i in graph.inputs},
        "outputs": {n: list(o.shape) for n, o in zip(graph.output_names, graph.outputs)},
        "operators": dict(sorted(counts.items())),
        "opaque": opaque,
        "parameters": graph.num_parameters(),
        "dynamic": sizes,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"model: {label}")
    for k in ("inputs", "outputs"):
        for name, shape in info[k].items():
            print(f"  {k[:-1]:6} {name}: {shape}")
    if sizes:
        print("  dynamic: " + ", ".join(f"{k}={v}" for k, v in sizes.items())
              + (" (fixed by --static-shape)" if args.static_shape else
                 " (the sizes tuned at: --input-shape chooses others; the written model keeps the dimensions)"))
    print(f"  parameters: {info['parameters']:,}")
    print("  operators: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
    print("  opaque (no rules): " + (", ".join(opaque) if opaque else "none"))
    return 0


OUTPUT_HELP = ("the optimized model, written with the report in one step (staged beside them, then renamed: a "
               "failure leaves every file as it was); its weights go to OUT.onnx.data beside it when the input "
               "keeps its weights in external data (in one file, several, or one per tensor: all go to "
               "OUT.onnx.data; the report's external_data names it) or when the model is too large for one ONNX "
               "file (2 GiB); otherwise they stay inside OUT.onnx")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqsat", description="Optimize tensor graphs with equality saturation.")
    sub = p.add_subparsers(dest="command", required=True)

    o = sub.add_parser("optimize-model", help="optimize an ONNX model or a built-in architecture")
    add_model_source(o)
    o.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help=OUTPUT_HELP)
    o.add_argument("--also-at", action="append", metavar="SYMBOL=N[,SYMBOL=N...]",
                   help="further sizes of the dynamic dimensions (their dim_param names, as 'eqsat info' lists them) "
                        "to verify and measure the shipped program at, beside the tuned shapes (repeatable, e.g. "
                        "--also-at past=511): one measured slower with confidence at any is not shipped; the "
                        "report gives the figure at each")
    o.add_argument("--assume-dim", action="append", metavar="SYMBOL=EXPR",
                   help="vouch that a dynamic dimension is always fed as integer arithmetic of others (repeatable, "
                        "e.g. --assume-dim total=past+seq, a mask over the cache and the new tokens): tuned, fitted "
                        "and verified with it holding; at other sizes the written model may refuse them or differ. "
                        "The report's assumptions name it; a run that sees such a dimension says so")
    add_config_arguments(o)
    o.add_argument("--report", metavar="REPORT.json")
    o.add_argument("-q", "--quiet", action="store_true")
    o.set_defaults(fn=_cmd_optimize)

    i = sub.add_parser("info", help="operators, inputs and outputs of a model")
    add_model_source(i)
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


def main(argv: Sequence[str] | None = None, *, process: bool = False) -> int:
    """Run the command line; its exit code. ``process``: this is the whole process (the ``eqsat`` script,
    ``python -m eqsat``), so once interrupted it ignores any further SIGINT or SIGTERM on its way out (a second
    or late-delivered one would otherwise kill it with the signal instead of exit code 130); in-process callers
    (tests) get their handlers back."""
    parser = build_parser()
    args = parser.parse_args(argv)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None  # SIGTERM ends like Ctrl-C
    disarm = watchdog.arm() if process and in_main else None  # ... even inside a long native call
    unwatch = memory_guard.arm() if process else None  # a message before the system's out-of-memory killer
    rc = 1
    try:
        with tolerant_stderr():  # a full or closed stderr must not stop the run
            rc = _run(args, quiet_after_interrupt=process and in_main)
            return rc
    finally:
        if unwatch is not None:
            unwatch()
        if disarm is not None and rc != 130:
            disarm()
        if in_main and not (process and rc == 130):
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def entry() -> None:
    """The ``eqsat`` console script and ``python -m eqsat``."""
    sys.exit(main(process=True))


def _run(args: argparse.Namespace, quiet_after_interrupt: bool = False) -> int:
    """Run the command; its exit code (errors as one ``eqsat: error:`` line)."""
    try:
        return int(args.fn(args) or 0)
    except EqsatError as exc:
        print(f"eqsat: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if quiet_after_interrupt:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
        print("eqsat: interrupted; no output was written or changed", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (eqsat info ... | head): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    entry()


__all__ = ["add_config_arguments", "build_parser", "config_from_args", "entry", "main"]
