"""``eqsat rules list|verify``."""

from __future__ import annotations

import json
import sys
import time

from eqsat.errors import InputError
from eqsat.rules.registry import all_rules
from eqsat.rules.verify import DEFAULT_INSTANCES, MIN_FIRED, check_rule


def _list(args) -> int:
    rules = all_rules(nasrnn=args.nasrnn)
    if args.json:
        print(json.dumps([{"name": r.name, "kind": r.kind, "source": r.source, "identity": r.statement,
                           "duplicate_of": r.duplicate_of} for r in rules], indent=2))
        return 0
    for r in rules:
        dup = f"  [duplicate of {r.duplicate_of}]" if r.duplicate_of else ""
        print(f"{r.name:24} {r.kind:6} {r.source:4}  {r.statement}{dup}")
    taso = [r for r in rules if r.source == "taso"]
    print(f"{len(rules)} rules: TASO {sum(r.kind == 'single' for r in taso)} single + "
          f"{sum(r.kind == 'multi' for r in taso)} multi, ours {len(rules) - len(taso)}", file=sys.stderr)
    return 0


def _verify(args) -> int:
    if args.instances < 1:
        raise InputError(f"--instances must be at least 1, got {args.instances}")
    rules = [r for r in all_rules(nasrnn=args.nasrnn) if args.rule is None or r.name == args.rule]
    if not rules:
        raise InputError(f"unknown rule {args.rule!r}; 'eqsat rules list' shows the names")
    t = time.perf_counter()
    failed = 0
    results, thin = [], []
    for r in rules:
        c = check_rule(r, seed=args.seed, instances=args.instances)
        results.append(c)
        failed += not c.passed
        if c.thin:
            thin.append(c)
        status = "FAIL" if not c.passed else "thin" if c.thin else "ok  "
        mod = "float64+mod-p" if c.modular else "float64"
        print(f"{status} {r.name:24} fired on {c.fired}/{c.instances} distinct instances, {mod:13} {c.seconds:6.2f}s"
              + (f"  {c.detail}" if c.detail else ""), flush=True)
    print(f"{len(rules) - failed} passed, {failed} failed ({time.perf_counter() - t:.1f}s, seed {args.seed}, "
          f"{args.instances} instances per rule)")
    if thin:
        print(f"{len(thin)} rules fired on fewer than {min(MIN_FIRED, args.instances)} distinct instances "
              f"(thinly tested): {' '.join(c.rule for c in thin)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([c.__dict__ for c in results], f, indent=2)
    return 1 if failed else 0


def register(sub) -> None:
    p = sub.add_parser("rules", help="the rewrite rules")
    rs = p.add_subparsers(dest="rules_command", required=True)
    ls = rs.add_parser("list", help="name, kind, source and identity of every rule")
    ls.add_argument("--nasrnn", action="store_true", help="the NASRNN variant of the multi-pattern rules")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=_list)
    v = rs.add_parser("verify", help="check every rule on random instances (exit 1 if any fails)")
    v.add_argument("--rule", help="only this rule")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--instances", type=int, default=DEFAULT_INSTANCES,
                   help=f"random instances drawn per rule (default {DEFAULT_INSTANCES})")
    v.add_argument("--nasrnn", action="store_true")
    v.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    v.set_defaults(fn=_verify)
