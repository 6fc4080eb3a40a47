#!/usr/bin/env python3
"""Reproduce the MCTS paper's Table 1: the estimated runtime of each model's initial program under each
extractor (its own cost estimate: tree cost, constituent cost, greedy-dag's union cost, the ILP's
objective), with the extraction time.

    python scripts/table1_extractors.py [--cost analytic|cpu] [--models bert,nasneta] [--small] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from eqsat.cost import cost_names, make, node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.extract import EXTRACTORS, extract
from eqsat.models import BENCHMARKS, build


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cost", default="analytic", choices=cost_names())
    p.add_argument("--models", default=",".join(BENCHMARKS))
    p.add_argument("--small", action="store_true", help="reduced model sizes")
    p.add_argument("--ilp-time-limit", type=float, default=60.0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    cost = make(args.cost)
    names = [m for m in args.models.split(",") if m]
    table: dict[str, dict] = {}
    print(f"cost model: {cost.name}; values: estimated runtime of the initial program (ms)", file=sys.stderr)
    header = f"{'model':12}" + "".join(f"{n:>22}" for n in EXTRACTORS)
    print(header)
    for name in names:
        t = time.perf_counter()
        snap = EGraph.from_graph(build(name, small=args.small)).snapshot().restrict()
        costs = node_costs(snap, cost)
        row = {}
        for ext in EXTRACTORS:
            r = extract(ext, snap, costs, EXTRACTORS[ext].options(time_limit=args.ilp_time_limit))
            row[ext] = {"cost": r.estimate / 1e3, "dag_cost": r.dag_cost / 1e3, "seconds": r.seconds}
        table[name] = row
        cells = "".join(f"{row[e]['cost']:>13.4g} ({row[e]['seconds'] * 1e3:5.0f}ms)" for e in EXTRACTORS)
        print(f"{name:12}{cells}", flush=True)
        print(f"  [{name}: {len(snap.nodes)} e-nodes, {time.perf_counter() - t:.1f}s]", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cost_model": cost.name, "unit": "ms", "models": table}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
