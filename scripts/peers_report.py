"""The figure of scripts/bench_peers.py: the speedups per model and tool with their intervals."""

from __future__ import annotations

from typing import Any


def figure(rows: list[dict[str, Any]], path: str, threads: int) -> None:
    """Speedup (original / program) per model and tool with its interval, at ``threads``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for r in rows for n, t in r["tools"].items() if str(threads) in t.get("timed", {})})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows) * len(names) / 2), 4))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        xs, ys, lo, hi = [], [], [], []
        for i, r in enumerate(rows):
            t = r["tools"].get(name, {}).get("timed", {}).get(str(threads))
            if t:
                xs.append(i + k * width)
                ys.append(t["speedup"])
                lo.append(t["speedup"] - t["ci_low"])
                hi.append(t["ci_high"] - t["speedup"])
        ax.bar(xs, ys, width, yerr=[lo, hi], label=name, capsize=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [r["model"] for r in rows], rotation=30,
                  ha="right")
    ax.set_ylabel(f"speedup over the original ({threads} thread{'s' if threads > 1 else ''})")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
