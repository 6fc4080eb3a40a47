#!/usr/bin/env python3
"""One MCTS search on a built-in model, limited by real steps rather than time, so that two versions of the
code (or two settings) run the same simulations: prints one JSON line with simulations per second, CPU
milliseconds per simulation (steadier than wall time on shared cores), the steps and their costs; ``--profile``
adds cProfile's top functions.

    python scripts/profile_search.py squeezenet [--steps 3] [--budget 128] [--cost analytic-a100] [--no-finish]
                                             [--profile]

Compare two checkouts by running this once with each, interleaved (A B B A), and compare ``cpu_ms_per_sim``;
equal ``rules`` and ``costs`` show the searches took the same decisions. Install the other checkout into a folder
of its own (``pip install --no-deps --no-build-isolation --target /tmp/old_site OLD_CHECKOUT``) and run this
script with ``PYTHONPATH=/tmp/old_site``: with PYTHONPATH pointing at the old sources instead, an editable
install of this checkout still supplies ``eqsat.rules``, ``eqsat.mcts``, ... from here.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time

from eqsat.cost import make
from eqsat.egglog.egraph import EGraph
from eqsat.mcts import SearchConfig, run_scheduler
from eqsat.models import MODELS, build


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=3, help="real steps (the search's max_iterations)")
    p.add_argument("--budget", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost", default="analytic-a100")
    p.add_argument("--node-limit", type=int, default=2000)
    p.add_argument("--small", action="store_true")
    p.add_argument("--no-finish", action="store_true",
                   help="leave out MCTS's finishing phase (its seconds would count in simulations per second; "
                        "checkouts older than the phase had none)")
    p.add_argument("--profile", action="store_true", help="print cProfile's top functions after the JSON line")
    args = p.parse_args(argv)
    spec = MODELS[args.model]
    egraph = EGraph.from_graph(build(args.model, small=args.small))
    config = SearchConfig(budget=args.budget, seed=args.seed, node_limit=args.node_limit, time_limit=1e9,
                          max_iterations=args.steps, k_multi=spec.k_multi, rule_set=spec.rule_set,
                          **({"finish": False} if args.no_finish else {}))
    profiler = cProfile.Profile() if args.profile else None
    cpu = time.process_time()
    if profiler:
        profiler.enable()
    report = run_scheduler("mcts", egraph, config, make(args.cost))
    if profiler:
        profiler.disable()
    cpu = time.process_time() - cpu
    print(json.dumps({"model": args.model, "simulations": report.simulations, "seconds": round(report.seconds, 3),
                      "simulations_per_second": round(report.simulations_per_second, 3),
                      "cpu_ms_per_sim": round(1000 * cpu / max(report.simulations, 1), 2),
                      "rules": [s.rule for s in report.steps], "costs": [s.cost_us for s in report.steps],
                      "extractions": report.extractions, "extraction_seconds": round(report.extraction_seconds, 3),
                      # constructors with analysis rules registered (absent in checkouts that registered all)
                      "analysed": len(getattr(egraph, "analysed", ())) or None,
                      "stop_reason": str(report.stop_reason)}))
    if profiler:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
