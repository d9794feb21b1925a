"""The report's PNG plots: the distribution of per-kernel speedups, the per-category geomeans and the waterfall of
where the PR's time went.

matplotlib is imported when a plot is drawn (Agg, no pyplot state), so reading or fitting a report never pays for it.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from analysis import atomic_io
from analysis.kernels.compare import KernelComparison
from analysis.rendering import finite
from analysis.report.time_decomposition import COMPONENTS, Decomposition


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display, no global pyplot state
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_io.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def plot_distribution(kc: KernelComparison, path: Path) -> Path:
    speedups = kc.table.loc[kc.table["in_summary"], "speedup"].astype(float)
    speedups = speedups[np.isfinite(speedups) & (speedups > 0)]  # a ratio beyond a float's range has no bar
    fig = _figure()
    ax = fig.add_subplot()
    ax.hist(np.log2(speedups), bins=min(60, max(10, len(speedups) // 20)), color="#4c72b0")
    ax.axvline(0.0, color="black", linewidth=1)
    if finite(kc.summary.geomean.speedup):
        ax.axvline(math.log2(kc.summary.geomean.speedup), color="#c44e52", linestyle="--",
                   label=f"geomean {kc.summary.geomean.speedup:.3f}×")
        ax.legend()
    ax.set_xlabel("log2(speedup) = log2(base ms / PR ms); > 0 means the PR is faster")
    ax.set_ylabel("kernels")
    ax.set_title(f"Per-kernel speedups ({len(speedups)} kernels)")
    return _save_png(fig, path)


def plot_categories(kc: KernelComparison, path: Path) -> Path:
    cats = kc.categories.head(20).iloc[::-1]
    fig = _figure()
    ax = fig.add_subplot()
    values = cats["geomean"].astype(float)
    ax.barh(cats["category"].astype(str), values - 1.0, left=1.0,
            color=["#55a868" if v >= 1 else "#c44e52" for v in values])
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("geomean speedup (base / PR)")
    ax.set_title("Per-category geomean speedup")
    return _save_png(fig, path)



def plot_waterfall(decomposition: Decomposition, path: Path) -> Path:
    """Base step → each component of the change → PR step, for one step of every model together (or the one
    model), in ms; the measured PR step's interval is drawn on the last bar."""
    row = decomposition.table.iloc[-1]
    steps = [(label, float(row[key])) for key, label in COMPONENTS]
    base, pr = float(row["base_ms"]), float(row["pr_ms"])
    fig = _figure()
    ax = fig.add_subplot()
    labels = ["base step", *(label for label, _ in steps), "PR step"]
    level = base
    ax.bar(0, base, color="#8c8c8c")
    for i, (_, delta) in enumerate(steps, 1):
        value = delta if finite(delta) else 0.0
        ax.bar(i, value, bottom=level, color="#c44e52" if value > 0 else "#55a868")
        ax.text(i, level + max(value, 0.0), f"{value:+.4f}" if finite(delta) else "none", ha="center",
                va="bottom", fontsize=7)
        level += value
    low, high = float(row["measured_low_ms"]), float(row["measured_high_ms"])
    error = ([[pr - (base + low)], [(base + high) - pr]] if finite(low) and finite(high) else None)
    ax.bar(len(labels) - 1, pr, color="#4c72b0", yerr=error, capsize=4)
    floor = min(base, pr, level) * 0.9
    ax.set_ylim(bottom=floor)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([textwrap.fill(label, 16) for label in labels], fontsize=7)
    ax.set_ylabel("ms per step")
    ax.set_title(f"Where the PR's time went: {row['model']} (PR − base {float(row['measured_delta_ms']):+.4f} ms)")
    return _save_png(fig, path)
