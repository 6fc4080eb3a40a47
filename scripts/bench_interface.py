#!/usr/bin/env python3
"""What keeping the interface costs (issue 27): for each zoo model exported with dynamic batch and sequence axes
(tests/zoo: ``export_dynamic``, both exporters), two runs at one representative shape (batch 1, sequence 16 or
``--seq``: the tiny models' position tables stop below the default 128; bert_s128 and llama_s128 take 128):

- generic: ``--input-shape`` (the written model keeps the dynamic axes),
- static: ``--static-shape`` at the same shape (the written model takes only that shape),

printing each run's measured speedup over the original (eqsat.timing's interleaved protocol, with its interval),
the sizes the generic result was verified at, the original and the two written models timed in one interleaved
run (``one_run``: each written model's speedup over the original), and the two written models timed against each
other at that shape (``static_over_generic``: the static model's latency over the generic one's; below 1, the
generic one is slower; the issue's target is within 1%). One JSON document per run (``--json``).

    python scripts/bench_interface.py --models bert --exporters torchscript --budget 4 --measure-budget 2  # ~1 min
    python scripts/bench_interface.py --json results/interface.json  # bert, gpt2, llama; both exporters
    python scripts/bench_interface.py --models bert_s128,llama_s128 --exporters torchscript --seq 128
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

import zoo  # noqa: E402

from eqsat.app.pipeline import OptimizeConfig, optimize  # noqa: E402
from eqsat.runtimes import Program, compare_programs, make  # noqa: E402
from eqsat.timing import Protocol  # noqa: E402


def run_one(name: str, exporter: str, budget: int, measure_budget: float, seq: int = 16) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        original = zoo.export_dynamic(name, exporter, os.path.join(tmp, f"{name}.onnx"))
    shapes = {n: (1, seq) if kind in ("ids", "mask") else tuple(shape) for n, kind, shape in zoo.SPECS[name].inputs}
    base = OptimizeConfig.of(budget=budget, measure_budget=measure_budget, allow_slower=True)
    out: dict[str, Any] = {"model": name, "exporter": exporter, "shapes": {k: list(v) for k, v in shapes.items()}}
    written = {}
    for kind, config in (("generic", base.updated(input_shapes=shapes)), ("static", base.updated(static_shapes=shapes))):
        result = optimize(original, config)
        r, m = result.report, result.report.measured
        out[kind] = {"returned": r.returned.program, "speedup": m.speedup if m else None,
                     "ci": [m.ci_low, m.ci_high] if m else None, "interface_kept": r.interface.kept,
                     "verified_at": r.interface.verified_at, "skipped": r.interface.skipped}
        written[kind] = result.optimized
    protocol = Protocol(budget_s=measure_budget)
    three = compare_programs(Program(original), [Program(written["static"]), Program(written["generic"])],
                             make("ort-cpu"), protocol, input_shapes=shapes).comparisons
    out["one_run"] = {kind: {"speedup": c.speedup, "ci": [c.ci_low, c.ci_high], "original_ms": c.original_ms,
                             "ms": c.optimized_ms} for kind, c in zip(("static", "generic"), three)}
    cmp = compare_programs(Program(written["static"]), [Program(written["generic"])], make("ort-cpu"), protocol,
                           input_shapes=shapes).comparisons[0]
    out["static_over_generic"] = {"ratio": cmp.speedup, "ci": [cmp.ci_low, cmp.ci_high],
                                  "static_ms": cmp.original_ms, "generic_ms": cmp.optimized_ms}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="bert,gpt2,llama")
    p.add_argument("--exporters", default="torchscript,dynamo")
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--measure-budget", type=float, default=5.0)
    p.add_argument("--seq", type=int, default=16, help="the sequence length tuned and timed at (batch 1)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    results = []
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            row = run_one(name, exporter, args.budget, args.measure_budget, args.seq)
            results.append(row)
            g, s, c, one = row["generic"], row["static"], row["static_over_generic"], row["one_run"]
            print(f"{name:6} {exporter:11} generic {g['returned']:9} x{g['speedup'] or 0:.3f} "
                  f"(verified at {', '.join(g['verified_at']) or '-'}) | static x{s['speedup'] or 0:.3f} "
                  f"(interface kept: {s['interface_kept']}) | one run: static x{one['static']['speedup']:.3f} "
                  f"[{one['static']['ci'][0]:.3f}, {one['static']['ci'][1]:.3f}], generic "
                  f"x{one['generic']['speedup']:.3f} [{one['generic']['ci'][0]:.3f}, {one['generic']['ci'][1]:.3f}] "
                  f"| static/generic {c['ratio']:.3f} [{c['ci'][0]:.3f}, {c['ci'][1]:.3f}] "
                  f"({c['static_ms'] * 1000:.1f} vs {c['generic_ms'] * 1000:.1f} us)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
