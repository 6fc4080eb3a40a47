#!/usr/bin/env python3
"""Where several ONNX programs of one function spend their time, by operator type, in onnxruntime's own profile:
each program's session (the timing's options: eqsat.measurement.clock.session_options, profiling on) called in
turn, ``--rounds`` times over, on the same seeded inputs, so that what drifts on a noisy machine drifts for all of
them alike. Prints a table (microseconds a call per operator type as onnxruntime ran it after its own fusions,
with the node count) and the median call; ``--json`` writes the same. An attribution, not a speedup: the
profiler's own overhead is in every kernel's time (compare_programs.py measures speedups).

    python scripts/profile_programs.py original.onnx eqsat.onnx onnxslim.onnx --shape pixel_values=1,3,224,224
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from eqsat.measurement.clock import session_options  # noqa: E402
from eqsat.onnx.importer import parse_input_shapes  # noqa: E402
from eqsat.verification.feeds import index_bounds, random_inputs, with_values  # noqa: E402


def profile(paths: list[str], rounds: int, shapes: dict[str, tuple[int, ...]], threads: int = 1,
            seed: int = 0, values: list[str] | None = None) -> list[dict]:
    """Per program: its median call (us) and, per operator type, the microseconds a call and the nodes run a call."""
    with tempfile.TemporaryDirectory() as tmp:
        sessions = []
        for k, path in enumerate(paths):
            opts = session_options(threads)
            opts.enable_profiling = True
            opts.profile_file_prefix = os.path.join(tmp, f"p{k}")
            sessions.append(ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]))
        feeds = random_inputs(sessions[0], np.random.default_rng(seed), shapes or None,
                              index_bounds(onnx.load(paths[0], load_external_data=False)))
        feeds = with_values(feeds, values or [])
        for s in sessions:  # the first calls allocate
            for _ in range(3):
                s.run(None, feeds)
        for _ in range(rounds):
            for s in sessions:
                s.run(None, feeds)
        out = []
        for path, s in zip(paths, sessions):
            with open(s.end_profiling()) as f:
                events = json.load(f)
            calls = [e["dur"] for e in events if e.get("name") == "model_run"][3:]
            us: dict[str, float] = collections.defaultdict(float)
            nodes: collections.Counter[str] = collections.Counter()
            for e in events:
                if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                    us[e["args"]["op_name"]] += e["dur"]
                    nodes[e["args"]["op_name"]] += 1
            n = len(calls) + 3
            out.append({"program": path, "median_call_us": statistics.median(calls),
                        "ops": {op: {"us": us[op] / n, "nodes": nodes[op] // n} for op in us}})
    return out


def table(rows: list[dict]) -> str:
    ops = sorted({op for r in rows for op in r["ops"]}, key=lambda op: -max(r["ops"].get(op, {"us": 0})["us"]
                                                                             for r in rows))
    head = f"{'':24s}" + "".join(f"{os.path.basename(r['program'])[:20]:>22s}" for r in rows)
    lines = [head, f"{'median call (us)':24s}" + "".join(f"{r['median_call_us']:22.0f}" for r in rows)]
    for op in ops:
        cells = [r["ops"].get(op, {"us": 0.0, "nodes": 0}) for r in rows]
        lines.append(f"{op:24s}" + "".join(f"{c['us']:15.1f} ({c['nodes']:3d})" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("programs", nargs="+", help="ONNX files of one function (the first's inputs are fed to all)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2",
                   help="an input's shape where it has dynamic axes (repeatable)")
    p.add_argument("--value", action="append", default=[], metavar="NAME=V1,V2",
                   help="an input's values rather than drawn ones, in its shape (repeatable; 1/0 for a bool)")
    p.add_argument("--rounds", type=int, default=100, help="calls of each program, in turn")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="the inputs' seed")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    missing = [f for f in args.programs if not os.path.isfile(f)]
    if missing:
        print(f"profile_programs: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    rows = profile(args.programs, args.rounds, parse_input_shapes(args.shape, "--shape"), args.threads, args.seed,
                   args.value)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"script": "profile_programs", "argv": sys.argv[1:], "rounds": args.rounds,
                       "threads": args.threads, "programs": rows}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
