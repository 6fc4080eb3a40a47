"""``eqsat cost profile|show``."""

from __future__ import annotations

import sys

from rich.progress import Progress

from eqsat.cost import make
from eqsat.cost.base import node_keys
from eqsat.cost.cache import CostCache
from eqsat.egglog.egraph import EGraph
from eqsat.models import MODELS
from eqsat.rules import RuleEngine, actions, rule_set

from .source import add_model_source, source_graph


def _profile(args) -> int:
    graph, label = source_graph(args)
    cost = make(args.cost, args.cache)
    eg = EGraph.from_graph(graph)
    variant = MODELS[args.builtin].rule_set if args.builtin else "default"
    engine = RuleEngine(eg, rule_set(variant))
    for rule in actions(engine.rules.values()):  # one guarded pass of every rule: the operators search creates
        engine.apply(rule.name, node_limit=args.node_limit)
    snap = eg.snapshot().restrict()
    keys = list(dict.fromkeys(k for k in node_keys(snap, cost) if k is not None))  # what the run will look up
    total = 0.0
    with Progress(transient=not sys.stderr.isatty()) as bar:
        task = bar.add_task(f"profiling {label} ({len(keys)} operators)", total=len(keys))
        for key in keys:
            total += cost.op_cost(key)
            bar.advance(task)
    measured = getattr(cost, "measured", 0)
    outliers = getattr(cost, "outliers", 0)
    print(f"{label}: {len(keys)} distinct operators in a {len(snap.nodes)}-e-node e-graph; {measured} timed now "
          f"({outliers} contention outliers, not cached), "
          f"{len(keys) - measured} from the cache ({cost.name})")
    return 0


def _show(args) -> int:
    cache = CostCache(args.cache)
    rows = cache.summary()
    print(f"cache {cache.path}: {len(cache)} measurements")
    for device, backend, op, count, total in rows:
        print(f"  {device:16} {backend:18} {op:12} {count:6} entries, mean {total / count:10.2f} us")
    return 0


def register(sub) -> None:
    p = sub.add_parser("cost", help="operator cost measurements and their cache")
    cs = p.add_subparsers(dest="cost_command", required=True)
    pr = cs.add_parser("profile", help="time every operator a model's e-graph can contain, filling the cache")
    add_model_source(pr)
    pr.add_argument("--cost", default="auto", choices=["ort-cpu", "cpu", "cuda", "auto"],
                    help="the measured cost model to fill (auto: the default run's, ort-cpu without a GPU)")
    pr.add_argument("--node-limit", type=int, default=2000)
    pr.add_argument("--cache", metavar="FILE", help="SQLite cache file (default ~/.cache/eqsat/costs.sqlite)")
    pr.set_defaults(fn=_profile)
    sh = cs.add_parser("show", help="summarize the cache")
    sh.add_argument("--cache", metavar="FILE")
    sh.set_defaults(fn=_show)
