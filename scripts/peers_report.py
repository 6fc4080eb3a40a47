"""The summary and the figure of scripts/bench_peers.py: issue 26's targets checked on the timed rows, the summary
table, and the speedups per model and tool with their intervals at each thread count.

The targets (issue 26), per thread count, on the speedups (original / program, point estimates):

- per model: eqsat >= the best verified peer's speedup minus :data:`PEER_MARGIN` (0.01), and eqsat >= :data:`FLOOR`
  (0.99); a model whose A/A control's 95% interval is wider than :data:`AA_WIDTH` (2%) is marked ``unresolved``
  (the noise there is larger than the differences the targets speak of);
- the median of eqsat's speedups over the transformer models (:data:`TRANSFORMERS`) >= 1.05, and over the BERT
  family (:data:`BERT_FAMILY`) >= 1.10; each exported model (family and exporter) counts once;
- every output verified: eqsat's program verified on every model (a model where it is not, or was not timed, fails
  its targets and is left out of the medians, listed under ``missing``).

>>> row = {"model": "bert/dynamo", "tools": {
...     "original-copy": {"status": "control", "timed": {"1": {"speedup": 1.0, "ci_low": 0.995, "ci_high": 1.004}}},
...     "eqsat": {"status": "verified", "timed": {"1": {"speedup": 1.2, "ci_low": 1.19, "ci_high": 1.21}}},
...     "onnxsim": {"status": "verified", "timed": {"1": {"speedup": 1.1, "ci_low": 1.09, "ci_high": 1.11}}}}}
>>> s = summarize([row], [1])
>>> s["models"][0]["at"]["1"]["best_peer"], s["models"][0]["at"]["1"]["met"], s["at"]["1"]["bert_median"]
('onnxsim', True, 1.2)
"""

from __future__ import annotations

import statistics
from typing import Any

PEER_MARGIN = 0.01
FLOOR = 0.99
TRANSFORMER_MEDIAN = 1.05
BERT_MEDIAN = 1.10
AA_WIDTH = 0.02
TRANSFORMERS = frozenset({"bert", "bert_s128", "distilbert", "gpt2", "llama", "llama_s128", "qwen2", "t5_encoder",
                          "vit", "whisper_encoder"})
"""the zoo families that count as transformer models (tests/zoo); the rest (CNNs, ``--onnx`` files) do not"""
BERT_FAMILY = frozenset({"bert", "bert_s128", "distilbert"})
EQSAT = "eqsat"
CONTROL = "original-copy"


def family(label: str) -> str:
    """A row's zoo family: its label up to the exporter (``bert_s128/dynamo`` -> ``bert_s128``)."""
    return label.split("/")[0]


def _timed(row: dict[str, Any], name: str, threads: int) -> dict[str, Any] | None:
    tool = row.get("tools", {}).get(name, {})
    if name != CONTROL and tool.get("status") != "verified":
        return None
    result: dict[str, Any] | None = tool.get("timed", {}).get(str(threads))
    return result


def model_summary(row: dict[str, Any], threads: int) -> dict[str, Any]:
    """One model's targets at one thread count (see the module's docstring)."""
    eqsat, aa = _timed(row, EQSAT, threads), _timed(row, CONTROL, threads)
    peers = {n: t for n in row.get("tools", {}) if n not in (EQSAT, CONTROL)
             for t in [_timed(row, n, threads)] if t is not None}
    best = max(peers, key=lambda n: peers[n]["speedup"]) if peers else None
    out: dict[str, Any] = {
        "eqsat": eqsat["speedup"] if eqsat else None,
        "eqsat_ci": [eqsat["ci_low"], eqsat["ci_high"]] if eqsat else None,
        "best_peer": best, "best_peer_speedup": peers[best]["speedup"] if best else None,
        "aa": aa["speedup"] if aa else None, "aa_width": aa["ci_high"] - aa["ci_low"] if aa else None}
    out["resolved"] = out["aa_width"] is not None and out["aa_width"] <= AA_WIDTH
    if eqsat is None:
        out.update(beats_peers=False, above_floor=False, met=False)
        return out
    out["beats_peers"] = best is None or eqsat["speedup"] >= peers[best]["speedup"] - PEER_MARGIN
    out["above_floor"] = eqsat["speedup"] >= FLOOR
    out["met"] = out["beats_peers"] and out["above_floor"]
    return out


def eqsat_facts(entry: dict[str, Any]) -> dict[str, Any]:
    """What eqsat said of its own run (the optimize phase's entry): whether its program verified, which program it
    returned, its own measured speedup (its gate's, at the run's thread count), the runtime kernels it used."""
    measured = entry.get("measured") or {}
    return {"verified": entry.get("status") == "verified", "returned": entry.get("returned"),
            "own_speedup": measured.get("speedup"), "kernels": entry.get("kernels") or {}}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rows: list[dict[str, Any]], threads: list[int]) -> dict[str, Any]:
    """Issue 26's targets on the timed rows, per model and over the models, at each thread count."""
    models = [{"model": r["model"], "family": family(r["model"]), **eqsat_facts(r.get("tools", {}).get(EQSAT, {})),
               "at": {str(t): model_summary(r, t) for t in threads}} for r in rows]
    at: dict[str, Any] = {}
    for t in threads:
        key = str(t)
        timed = [m for m in models if m["at"][key]["eqsat"] is not None]
        transformers = [m["at"][key]["eqsat"] for m in timed if m["family"] in TRANSFORMERS]
        bert = [m["at"][key]["eqsat"] for m in timed if m["family"] in BERT_FAMILY]
        tm, bm = _median(transformers), _median(bert)
        at[key] = {"transformer_median": tm, "transformer_models": len(transformers),
                   "transformer_met": tm is not None and tm >= TRANSFORMER_MEDIAN,
                   "bert_median": bm, "bert_models": len(bert), "bert_met": bm is not None and bm >= BERT_MEDIAN,
                   "models_met": sum(m["at"][key]["met"] for m in models), "models": len(models),
                   "not_met": [m["model"] for m in models if not m["at"][key]["met"]],
                   "unresolved": [m["model"] for m in models if not m["at"][key]["resolved"]],
                   "missing": [m["model"] for m in models if m["at"][key]["eqsat"] is None]}
    return {"targets": {"peer_margin": PEER_MARGIN, "floor": FLOOR, "transformer_median": TRANSFORMER_MEDIAN,
                        "bert_median": BERT_MEDIAN, "aa_width": AA_WIDTH},
            "all_verified": bool(models) and all(m["verified"] for m in models), "models": models, "at": at}


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summary_table(summary: dict[str, Any], threads: list[int]) -> str:
    """The summary as text: one line per model (eqsat, the best peer, the A/A width, whether its targets are met,
    at each thread count, the first one first), then the medians."""
    lines = []
    head = "model".ljust(28)
    for t in threads:
        head += f" | {t}t: A/A width  eqsat   best peer            met"
    lines.append(head + " | eqsat's own  kernels")
    for m in summary["models"]:
        line = m["model"].ljust(28)
        for t in threads:
            s = m["at"][str(t)]
            peer = f"{s['best_peer']} {_x(s['best_peer_speedup'])}" if s["best_peer"] else "-"
            met = ("yes" if s["met"] else "NO") + ("" if s["resolved"] else " (unresolved)")
            width = "-" if s["aa_width"] is None else f"{100 * s['aa_width']:.1f}%"
            line += f" | {width:>12}  {_x(s['eqsat']):>6}  {peer:20} {met:16}"
        kernels = ", ".join(f"{k} x{n}" for k, n in m["kernels"].items()) or "-"
        lines.append(f"{line} | {_x(m['own_speedup']):>11}  {kernels}")
    for t in threads:
        a = summary["at"][str(t)]
        lines.append(f"{t} thread{'s' if t > 1 else ''}: transformer median {_x(a['transformer_median'])} over "
                     f"{a['transformer_models']} (target {TRANSFORMER_MEDIAN}: {'met' if a['transformer_met'] else 'not met'}),"
                     f" BERT family median {_x(a['bert_median'])} over {a['bert_models']} (target {BERT_MEDIAN}: "
                     f"{'met' if a['bert_met'] else 'not met'}), per-model targets met on {a['models_met']} of "
                     f"{a['models']}; unresolved: {', '.join(a['unresolved']) or 'none'}")
    lines.append(f"every eqsat output verified: {'yes' if summary['all_verified'] else 'NO'}")
    return "\n".join(lines)


def figure(rows: list[dict[str, Any]], path: str, threads: list[int]) -> None:
    """Speedup (original / program) per model and tool with its interval, one panel per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for r in rows for n, t in r["tools"].items() if t.get("timed")})
    width = 0.8 / max(len(names), 1)
    fig, axes = plt.subplots(len(threads), 1, squeeze=False,
                             figsize=(max(6, 1.2 * len(rows) * len(names) / 2), 4 * len(threads)))
    for ax, t in zip(axes[:, 0], threads):
        low, high = 0.98, 1.02
        for k, name in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for i, r in enumerate(rows):
                timed = r["tools"].get(name, {}).get("timed", {}).get(str(t))
                if timed:
                    xs.append(i + k * width)
                    ys.append(timed["speedup"])
                    lo.append(timed["speedup"] - timed["ci_low"])
                    hi.append(timed["ci_high"] - timed["speedup"])
            # bars from 1.0 (no change), so that a 1% difference shows
            ax.bar(xs, [y - 1 for y in ys], width, bottom=1.0, yerr=[lo, hi], label=name, capsize=2)
            low = min([low, *(y - d for y, d in zip(ys, lo))])
            high = max([high, *(y + d for y, d in zip(ys, hi))])
        ax.axhline(1.0, color="black", linewidth=0.8)
        pad = 0.1 * (high - low)
        ax.set_ylim(low - pad, high + pad)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [r["model"] for r in rows], rotation=30,
                      ha="right")
        ax.set_ylabel(f"speedup over the original ({t} thread{'s' if t > 1 else ''})")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
