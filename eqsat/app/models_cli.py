"""``eqsat models list|export``."""

from __future__ import annotations

import json

from eqsat.egglog.egraph import EGraph
from eqsat.models import MODELS, build
from eqsat.onnx.export import export_model
from eqsat.onnx.io import write_atomic

from .guards import check_output_path


def _list(args) -> int:
    rows = []
    for name, spec in MODELS.items():
        g = build(name, small=args.small)
        ops = sum(v for k, v in g.op_counts().items() if k not in ("input", "weight"))
        rows.append({"name": name, "parameters": g.num_parameters(), "operators": ops,
                     "enodes": EGraph.from_graph(g).size().enodes, "description": spec.description})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':12} {'parameters':>13} {'operators':>9} {'e-nodes':>8}  description")
    for r in rows:
        print(f"{r['name']:12} {r['parameters']:>13,} {r['operators']:>9} {r['enodes']:>8}  {r['description']}")
    return 0


def _export(args) -> int:
    check_output_path(args.output)
    model = export_model(build(args.name, small=args.small, seed=args.seed))
    write_atomic(model, args.output)
    print(f"wrote {args.output}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("models", help="the built-in benchmark architectures")
    ms = p.add_subparsers(dest="models_command", required=True)
    ls = ms.add_parser("list", help="name, parameters, operators, initial e-graph e-nodes")
    ls.add_argument("--small", action="store_true")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=_list)
    ex = ms.add_parser("export", help="write a built-in model as ONNX")
    ex.add_argument("name")
    ex.add_argument("-o", "--output", required=True)
    ex.add_argument("--small", action="store_true")
    ex.add_argument("--seed", type=int, default=0)
    ex.set_defaults(fn=_export)
