#!/usr/bin/env python3
"""How well the cost model predicts onnxruntime on this machine's CPU.

For each built-in model: the estimated cost of the whole program (sum of operator costs, cpu backend by
default) next to the measured end-to-end onnxruntime latency, and their ratio; and for a pair of programs
from the same model (the original, and the program TENSAT's schedule rewrites it into), whether the
estimate orders the pair as the measurement does.

    python scripts/bench_cost_model.py [--models all] [--small] [--cost cpu] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

from eqsat.app.pipeline import OptimizeConfig, optimize
from eqsat.cost import cost_names
from eqsat.models import MODELS, build


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all")
    p.add_argument("--small", action="store_true")
    p.add_argument("--cost", default="cpu", choices=cost_names())
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    names = list(MODELS) if args.models == "all" else args.models.split(",")
    rows = []
    print(f"{'model':12} {'est. ms':>9} {'measured ms':>11} {'ratio':>6} | {'rewritten est.':>14} {'measured':>9} "
          f"{'est. order':>10} {'meas. order':>11} {'agree':>5}")
    for name in names:
        g = build(name, small=args.small)
        cfg = OptimizeConfig.of(scheduler="tensat", cost=args.cost, final_extractor="greedy-dag", measure=True,
                                allow_slower=True, k_multi=MODELS[name].k_multi, rule_set=MODELS[name].rule_set,
                                time_limit=300)
        r = optimize(g, cfg).report
        m = r.measured
        assert m is not None  # measure=True
        est_a, est_b = r.original_cost / 1e3, r.optimized_cost / 1e3
        meas_a, meas_b = m.original_ms, m.optimized_ms
        order_est = "same" if abs(est_a - est_b) < 1e-9 else ("faster" if est_b < est_a else "slower")
        order_meas = "faster" if meas_b < meas_a * 0.98 else "slower" if meas_b > meas_a * 1.02 else "same"
        agree = order_est == order_meas or "same" in (order_est, order_meas)
        rows.append({"model": name, "estimated_ms": est_a, "measured_ms": meas_a, "ratio": est_a / meas_a,
                     "rewritten_estimated_ms": est_b, "rewritten_measured_ms": meas_b, "estimate_order": order_est,
                     "measured_order": order_meas, "agree": agree, "cost_model": r.cost_model})
        print(f"{name:12} {est_a:>9.3f} {meas_a:>11.3f} {est_a / meas_a:>6.2f} | {est_b:>14.3f} {meas_b:>9.3f} "
              f"{order_est:>10} {order_meas:>11} {'yes' if agree else 'NO':>5}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"small": args.small, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
