#!/usr/bin/env python3
"""Extraction time against e-graph size, on e-graphs grown by seeded random rule applications.

    python scripts/bench_extract.py [--model nasrnn] [--sizes 2000,10000,30000] [--ilp-time-limit 60] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from eqsat.cost import make, node_costs
from eqsat.egglog.egraph import EGraph
from eqsat.extract import EXTRACTORS, WARM_START, extract, info
from eqsat.models import MODELS, build
from eqsat.rules import RuleEngine, actions, rule_set


def grow(model: str, target: int, seed: int, small: bool) -> EGraph:
    eg = EGraph.from_graph(build(model, small=small))
    engine = RuleEngine(eg, rule_set(MODELS[model].rule_set))
    engine.grow_randomly([r.name for r in actions(engine.rules.values())], target, seed)
    return eg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="nasrnn")
    p.add_argument("--small", action="store_true")
    p.add_argument("--sizes", default="2000,10000,30000")
    p.add_argument("--extractors", default=",".join(EXTRACTORS))
    p.add_argument("--cost", default="analytic")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ilp-time-limit", type=float, default=60.0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    cost = make(args.cost)
    rows = []
    print(f"{'target':>7} {'e-nodes':>8} {'extractor':20} {'seconds':>9} {'DAG cost':>12} {'gap':>8}")
    for target in (int(s) for s in args.sizes.split(",")):
        t = time.perf_counter()
        eg = grow(args.model, target, args.seed, args.small)
        snap = eg.snapshot().restrict()
        costs = node_costs(snap, cost)
        print(f"  [grew {args.model} to {len(snap.nodes)} reachable e-nodes in {time.perf_counter() - t:.1f}s]",
              file=sys.stderr)
        warm = None
        for name in args.extractors.split(","):
            r = extract(name, snap, costs, info(name).options(time_limit=args.ilp_time_limit, warm_start=warm))
            if name == WARM_START:
                warm = r
            gap = "" if r.gap is None else f"{r.gap:.2%}"
            print(f"{target:>7} {len(snap.nodes):>8} {name:20} {r.seconds:>9.3f} {r.dag_cost:>12.1f} {gap:>8}", flush=True)
            rows.append({"target": target, "enodes": len(snap.nodes), "eclasses": snap.num_classes, "extractor": name,
                         "seconds": r.seconds, "dag_cost": r.dag_cost, "gap": r.gap, "optimal": r.optimal})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "seed": args.seed, "cost_model": cost.name, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
