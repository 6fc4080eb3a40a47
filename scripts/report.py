#!/usr/bin/env python3
"""Aggregate result JSONs (from reproduce.py or bench_search.py) into Table 2/Table 1-style markdown and
PNG figures.

    python scripts/report.py results/ -o report/ [--table1 table1.json] [--seeds 5]

Table 2 gives mean ± standard deviation over the seeds per model and approach (scheduler, main and final
extractor), as the paper's does; "Time of the sweep" the wall time reproduce.py measured (its sweep-*.json)
and per model the runs' seconds with an estimate for the full protocol (``timing.json``).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
from collections import defaultdict

# The MCTS paper's A100 speedups (%), Table 2 means: MCTS with ILP/ILP and TENSAT (for orientation only:
# other hardware, TASO's GPU cost model, not end-to-end measurements).
PAPER_A100 = {
    "bert": (18.20, 18.27), "inceptionv3": (0.25, 0.36), "mobilenetv2": (4.16, 1.52), "nasneta": (19.62, 11.18),
    "nasrnn": (42.07, 36.92), "resnet50": (-0.22, 0.43), "resnext50": (74.20, 66.87), "squeezenet": (50.66, 46.02),
    "vgg19": (39.21, 39.58),
}


def _json_files(folder: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)):
        with open(path) as f:
            try:
                out.append(json.load(f))
            except json.JSONDecodeError:
                continue
    return out


def load(folder: str) -> list[dict]:
    """experiment.run's records (failed runs left out)."""
    return [r for r in _json_files(folder) if isinstance(r, dict) and "spec" in r and "report" in r]


def load_sweeps(folder: str) -> list[dict]:
    """reproduce.py's ``sweep-*.json`` (one per invocation: wall time, runs' seconds per model), oldest first."""
    sweeps = [r["sweep"] for r in _json_files(folder) if isinstance(r, dict) and "sweep" in r]
    return sorted(sweeps, key=lambda s: s["started_utc"])


def approach(config: dict) -> str:
    """The series a run's config (OptimizeConfig.to_json) belongs to."""
    if config["scheduler"] == "mcts":
        return f"MCTS {config['search']['main_extractor']} / {config['final_extractor']}"
    if config["scheduler"] == "tensat":  # k_multi differs per model: one series, k shown in the table
        return f"TENSAT / {config['final_extractor']}"
    return f"{config['scheduler']} / {config['final_extractor']}"


def extractors(r: dict) -> tuple[str, str]:
    c = r["spec"]["config"]
    return c["search"]["main_extractor"], c["final_extractor"]


def ms(xs) -> str:
    if not xs:
        return "-"
    m = statistics.mean(xs)
    s = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{m:.4g} ± {s:.2g}"


def table2(records: list[dict]) -> tuple[str, dict]:
    """The paper's Table 2: per model and approach (scheduler, main and final extractor), mean ± standard
    deviation over the seeds; and the means per model and :func:`approach` (``summary``)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["spec"]["model"], approach(r["spec"]["config"]))].append(r)
    lines = ["| Model | Approach | Main extraction | Final extraction | Seeds | Original (ms, est.) | "
             "Optimized (ms, est.) | Speedup (%) | Optimization time (s) | Measured speedup (x) | Final e-nodes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    summary: dict = defaultdict(dict)
    for (model, appr), rs in sorted(groups.items()):
        orig = [r["report"]["original_cost"] / 1e3 for r in rs]
        opt = [r["report"]["extracted_cost"] / 1e3 for r in rs]  # the program the search found
        speed = [100.0 * (a - b) / a for a, b in zip(orig, opt)]
        meas = [r["report"]["measured"]["speedup"] for r in rs if r["report"].get("measured")]
        t = [r["report"]["times"]["search"] for r in rs]
        nodes = [r["report"]["egraph"]["enodes"] for r in rs]
        c = rs[0]["spec"]["config"]
        if c["scheduler"] == "mcts":
            label, main = "MCTS", c["search"]["main_extractor"]
        elif c["scheduler"] == "tensat":
            label, main = f"TENSAT k_multi={c['search']['k_multi']}", "-"
        else:
            label, main = c["scheduler"], "-"
        seeds = len({r["spec"]["config"]["search"]["seed"] for r in rs})
        lines.append(f"| {model} | {label} | {main} | {c['final_extractor']} | {seeds} | {ms(orig)} | {ms(opt)} | "
                     f"{ms(speed)} | {ms(t)} | {ms(meas)} | {ms(nodes)} |")
        summary[model][appr] = {"speedup": statistics.mean(speed), "speedup_std": stdev(speed),
                                "seconds": statistics.mean(t), "seconds_std": stdev(t), "seeds": seeds}
    return "\n".join(lines), summary


def stdev(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def sweep_time(records: list[dict], sweeps: list[dict], seeds: int = 5, approaches: int = 7) -> tuple[str, dict]:
    """The sweeps' measured wall time, and per model the runs' seconds with an estimate of the model's share
    of the full protocol: ``seeds`` seeds of ``approaches`` approaches (reproduce.py's 6 MCTS extractor pairs and
    TENSAT), each at its mean run time, an approach without runs at the mean of those with."""
    lines = []
    wall = sum(s["wall_seconds"] for s in sweeps)
    if sweeps:
        lines += [f"Measured wall time of the sweep: {wall:.0f} s over {len(sweeps)} invocation(s) of reproduce.py "
                  f"({sum(s['runs'] for s in sweeps)} runs, {sum(s['failed'] for s in sweeps)} failed):", ""]
        lines += [f"- {s['started_utc']} UTC: {s['runs']} runs ({s['skipped']} skipped as done) in "
                  f"{s['wall_seconds']:.0f} s wall{'' if s.get('finished', True) else ' (interrupted)'}, "
                  f"{s['run_seconds']:.0f} s of runs, on the {s['dispatcher']}" for s in sweeps]
        lines.append("")
    per_approach: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        per_approach[r["spec"]["model"]][approach(r["spec"]["config"])].append(r["seconds"])
    lines += [f"| Model | Runs | Run time (s, sum) | Mean per run (s) | Approaches run | "
              f"{seeds} seeds x {approaches} approaches, estimate (s, one job) |", "|---|---|---|---|---|---|"]
    per_model = {}
    for model, by in sorted(per_approach.items()):
        xs = [x for v in by.values() for x in v]
        means = [statistics.mean(v) for v in by.values()]
        estimate = seeds * (sum(means) + max(0, approaches - len(means)) * statistics.mean(means))
        per_model[model] = {"runs": len(xs), "run_seconds": sum(xs), "mean_run_seconds": statistics.mean(xs),
                            "approaches": len(by), "estimate_seconds": estimate}
        lines.append(f"| {model} | {len(xs)} | {sum(xs):.0f} | {statistics.mean(xs):.1f} | {len(by)} of {approaches} | "
                     f"{estimate:.0f} |")
    total = sum(m["estimate_seconds"] for m in per_model.values())
    lines.append(f"| all | {len(records)} | {sum(m['run_seconds'] for m in per_model.values()):.0f} | | | {total:.0f} |")
    return "\n".join(lines), {"wall_seconds": wall, "sweeps": sweeps, "per_model": per_model,
                              "estimate_seconds": total}


def table1(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    exts = list(next(iter(data["models"].values())))
    lines = [f"Cost model: {data['cost_model']}; estimated runtime of the initial program ({data['unit']}), "
             "extraction time in parentheses.", "", "| Model | " + " | ".join(exts) + " |",
             "|---" * (len(exts) + 1) + "|"]
    for model, row in data["models"].items():
        lines.append(f"| {model} | " + " | ".join(f"{row[e]['cost']:.4g} ({row[e]['seconds'] * 1e3:.0f} ms)"
                                                  for e in exts) + " |")
    return "\n".join(lines)


def paper_comparison(summary: dict) -> str:
    lines = ["| Model | ours: best MCTS (%) | ours: TENSAT (%) | paper A100: MCTS ILP/ILP (%) | paper A100: TENSAT (%) |",
             "|---|---|---|---|---|"]
    for model, appr in sorted(summary.items()):
        mcts = max((v["speedup"] for k, v in appr.items() if k.startswith("MCTS")), default=float("nan"))
        tensat = max((v["speedup"] for k, v in appr.items() if k.startswith("TENSAT")), default=float("nan"))
        paper = PAPER_A100.get(model)
        p = f"{paper[0]:.1f} | {paper[1]:.1f}" if paper else "- | -"
        lines.append(f"| {model} | {mcts:.1f} | {tensat:.1f} | {p} |")
    return "\n".join(lines)


def figures(records: list[dict], summary: dict, out: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    models = sorted(summary)
    approaches = sorted({a for m in summary.values() for a in m})
    def grouped_bars(field: str, ylabel: str, name: str, log: bool = False) -> None:
        fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(models)) + 3, 4.5))
        width = 0.8 / max(len(approaches), 1)
        for i, a in enumerate(approaches):
            values = [summary[m].get(a, {}).get(field, math.nan) for m in models]  # NaN: no bar
            ax.bar([j + i * width for j in range(len(models))],
                   [v if not (log and v <= 0) else math.nan for v in values], width, label=a)
        if log:
            ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models, rotation=30, ha="right")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        path = os.path.join(out, name)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        made.append(path)

    grouped_bars("speedup", "estimated speedup (%)", "speedup.png")
    grouped_bars("seconds", "optimization time (s)", "optimization_time.png", log=True)

    # rule-application timeline of one MCTS run per model (the paper's Figures 7, 8, 10): ours, greedy-dag /
    # ilp, where the results hold it
    runs = {}
    for r in sorted(records, key=lambda r: extractors(r) != ("greedy-dag", "ilp")):
        if r["spec"]["config"]["scheduler"] == "mcts" and r["report"]["steps"]:
            runs.setdefault(r["spec"]["model"], r)
    if runs:
        fig, axes = plt.subplots(len(runs), 1, figsize=(9, 1.6 * len(runs) + 0.5), squeeze=False)
        for ax, (model, r) in zip(axes[:, 0], sorted(runs.items())):
            steps = r["report"]["steps"]
            rules = list(dict.fromkeys(s["rule"] for s in steps))
            ax.scatter(range(1, len(steps) + 1), [rules.index(s["rule"]) for s in steps], s=18)
            ax.set_yticks(range(len(rules)), rules, fontsize=6)
            ax.set_title(f"{model}: {approach(r['spec']['config'])}, seed {r['report']['seed']}", fontsize=8)
        axes[-1, 0].set_xlabel("step")
        fig.tight_layout()
        path = os.path.join(out, "rule_timeline.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        made.append(path)
    return made


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("-o", "--out", default="report")
    p.add_argument("--table1", metavar="JSON", help="output of scripts/table1_extractors.py --json")
    p.add_argument("--seeds", type=int, default=5, help="seeds of the full protocol, for the time estimate (default 5)")
    args = p.parse_args(argv)
    records = load(args.results)
    if not records:
        print(f"no result records in {args.results}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    t2, summary = table2(records)
    times, timing = sweep_time(records, load_sweeps(args.results), args.seeds)
    parts = ["# eqsat results", "", f"{len(records)} runs from `{args.results}`. Costs are the cost model's estimates "
             "(sum of operator costs); measured speedups are end-to-end onnxruntime latencies where runs measured them.",
             "", "## Table 2: optimization results (mean ± std over seeds)", "", t2, "",
             "## Time of the sweep", "", times, "",
             "## Against the paper", "", "The paper's figures are A100 GPU costs from TASO's measurements; ours come from "
             "the cost model named in each run. Compare orderings (which configuration wins, MCTS vs TENSAT), not "
             "magnitudes.", "", paper_comparison(summary), ""]
    if args.table1:
        parts += ["## Table 1: initial programs by extractor", "", table1(args.table1), ""]
    figs = figures(records, summary, args.out)
    parts += ["## Figures", ""] + [f"![{os.path.basename(f)}]({os.path.basename(f)})" for f in figs]
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write("\n".join(parts) + "\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    with open(os.path.join(args.out, "timing.json"), "w") as f:
        json.dump(timing, f, indent=2)
    if timing["sweeps"]:
        print(f"sweep wall time {timing['wall_seconds']:.0f} s (measured over {len(timing['sweeps'])} invocation(s)); "
              f"{args.seeds}-seed estimate from the runs' times {timing['estimate_seconds']:.0f} s (one job)")
    print(f"wrote {os.path.join(args.out, 'report.md')} (with timing.json, summary.json) and {len(figs)} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
