"""The report's PNG plots: the distribution of per-kernel speedups, the per-category geomeans and the waterfall of
where the PR's time went.

matplotlib is imported when a plot is drawn (Agg, no pyplot state), so reading or fitting a report never pays for it.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from analysis.kernels.compare import KernelComparison
from analysis.rendering import finite
from analysis.report.sections.time_decomposition import COMPONENTS, Decomposition
from foundation import atomic_io


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


_KIND_COLORS = {"changed": "#c44e52", "fusion": "#8172b2", "identical": "#8c8c8c"}


def _forest(ax, labels: list[str], points: list[float], lows: list[float], highs: list[float], colors: list[str]
            ) -> None:
    """One row per item, top to bottom: its point and interval on a log axis, 1× marked."""
    ys = np.arange(len(labels))[::-1]
    for y, x, lo, hi, color in zip(ys, points, lows, highs, colors, strict=True):
        if finite(lo) and finite(hi):
            ax.plot([lo, hi], [y, y], color=color, linewidth=1.5)
        if finite(x) and x > 0:
            ax.plot([x], [y], marker="o", color=color, markersize=4)
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(0.1, 0.2, 0.3, 0.5, 0.7, 1.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
    ax.set_yticks(ys)
    ax.set_yticklabels([_middle_cut(label, 64) for label in labels], fontsize=6)


def _middle_cut(text: str, width: int) -> str:
    """Kernel names run to hundreds of characters: their two ends tell them apart."""
    return text if len(text) <= width else f"{text[:width // 2 - 1]}…{text[-(width // 2):]}"


def plot_kernel_forest(contributors, kc: KernelComparison, path: Path, rows: int = 30) -> Path:
    """Per kernel, sorted by the time it adds: speedup and interval on a log axis, changed pairs, fusion groups
    (kernels on one side only: no interval) and the identical pairs (the control) in their own colours; at most
    ``rows`` of each: of many identical pairs, those farthest from 1× (the ones the control judges by)."""
    from matplotlib.lines import Line2D

    head = contributors.head(rows)
    identical = _farthest_from_one(
        kc.table[~kc.table["code_changed"].astype(bool) & kc.table["in_summary"].astype(bool)], rows)
    labels = [f"{k} ({d:+.3g} ms)" for k, d in zip(head["kernel"], head["delta_ms_per_step"], strict=True)]
    labels += [f"{k} (identical)" for k in identical["base_name"]]
    kinds = ["fusion" if c.startswith("fusion") else "changed" for c in head["change"]] + ["identical"] * len(identical)
    fig = _figure()
    fig.set_size_inches(8, max(3.0, 0.22 * len(labels) + 1.2))
    ax = fig.add_subplot()
    _forest(ax, labels, [*head["speedup"], *identical["speedup"]], [*head["ci_low"], *identical["ci_low"]],
            [*head["ci_high"], *identical["ci_high"]], [_KIND_COLORS[k] for k in kinds])
    ax.set_xlabel("speedup (base / PR, log axis; > 1: the PR is faster)")
    shown = ("" if identical.attrs["of"] == len(identical)
             else f"\n{len(identical)} of {identical.attrs['of']} identical pairs shown: those farthest from 1×")
    ax.set_title(f"Kernels by the time they add per step, then the identical pairs (the control){shown}", fontsize=9)
    ax.legend(handles=[Line2D([], [], color=c, marker="o", label=k) for k, c in _KIND_COLORS.items()],
              fontsize=6, loc="lower right")
    return _save_png(fig, path)


def _farthest_from_one(pairs, rows: int):
    """The ``rows`` pairs whose speedup lies farthest from 1× (either way), in table order; ``attrs["of"]``: how
    many there were. A figure of thousands of rows is as tall as a building and takes minutes to draw."""
    speedups = pairs["speedup"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        distance = np.where(np.isfinite(speedups) & (speedups > 0), np.abs(np.log(speedups)), -1.0)  # no ratio: last
    kept = pairs.iloc[np.sort(np.argsort(-distance, kind="stable")[:rows])].copy()
    kept.attrs["of"] = len(pairs)
    return kept


def plot_model_forest(mc, proj, path: Path) -> Path:
    """Per model: the measured speedup and interval on a log axis, and beside it (hollow) what the kernels project."""
    t = mc.table[mc.table["verdict"] != "failed"].sort_values("speedup")
    fig = _figure()
    fig.set_size_inches(7, max(2.5, 0.3 * len(t) + 1.2))
    ax = fig.add_subplot()
    _forest(ax, list(t["model"]), list(t["speedup"]), list(t["ci_low"]), list(t["ci_high"]), ["#4c72b0"] * len(t))
    if proj is not None:
        projected = proj.table.set_index("model")["projected_speedup"]
        ys = np.arange(len(t))[::-1]
        for y, model in zip(ys, t["model"], strict=True):
            value = projected.get(model)
            if finite(value) and value > 0:
                ax.plot([value], [y - 0.25], marker="D", markerfacecolor="none", color="#dd8452", markersize=4)
    ax.set_xlabel("speedup (base / PR, log axis); hollow: projected from the kernels")
    ax.set_title("Models: measured speedup with its interval, the kernels' projection beside it", fontsize=9)
    return _save_png(fig, path)
