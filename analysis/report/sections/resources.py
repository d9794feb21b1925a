"""Compile time and peak memory per model, judged by the dashboard's rules (`analysis.report.sections.gates` holds the
limits).

* **Compile time**: the suite's compile of each side (``compilation_latency``, a cold compile, once per side) and
  the PR / base ratio. Where the paired model rounds recorded each round's first compiled call
  (`foundation.formats.paired_rounds.side_compiles`, a compile from the side's warm cache, repeated every round) their
  median and range are shown per side, and the verdict is the compile gate's for this model
  (`analysis.report.sections.gates.model_compile_ratio`): their ratio with its interval over rounds against
  `COMPILE_LIMIT` (1.15×); without repeats, the suite's single compiles by value. Beside them, each side's FX-graph
  cache hits / misses in its cold compile (a hit is a graph loaded, not compiled: that compile was not wholly cold).
* **Peak memory**: each side's compiled peak in readable units, and the compression ratio (eager peak / compiled
  peak) PR vs base; a model fails the rule when PR / base compression is below `COMPRESSION_LIMIT` (0.9×, the
  dashboard's).
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

from analysis.models.compare import ModelComparison
from analysis.rendering import fmt_gb
from analysis.report.sections.gates import COMPILE_LIMIT, COMPRESSION_LIMIT, model_compile_ratio
from foundation.formats.dynamo_csv import CACHE_COLUMNS

RESOURCE_COLUMNS = ("model", "base_compile_s", "pr_compile_s", "compile_ratio", "base_graph_cache",
                    "pr_graph_cache", "base_repeat_s", "pr_repeat_s",
                    "repeats", "compile_verdict", "base_peak", "pr_peak", "peak_change_pct",
                    "compression_ratio", "memory_verdict")


def _spread(times: list[float]) -> str:
    if not times:
        return "–"
    if len(times) == 1:
        return f"{times[0]:.2f} s (1 compile)"
    return f"{statistics.median(times):.2f} s ({min(times):.2f}–{max(times):.2f}, {len(times)} compiles)"


def _compile_verdict(ratio: float, base_times: list[float], pr_times: list[float], confidence: float) -> str:
    """The compile-time gate's rule for one model (`analysis.report.sections.gates.model_compile_ratio`), in words."""
    est = model_compile_ratio(base_times, pr_times, 1.0, ratio, confidence)
    if not math.isfinite(est.speedup):
        return "not measured"
    if not est.has_interval:
        return f"slower to compile (> {COMPILE_LIMIT:g}×)" if ratio > COMPILE_LIMIT else f"within {COMPILE_LIMIT:g}×"
    shown = f"repeated compiles {est.speedup:.2f}× (CI {est.ci_low:.2f}–{est.ci_high:.2f}×)"
    if est.ci_low > COMPILE_LIMIT:
        return f"slower to compile (> {COMPILE_LIMIT:g}×): {shown}"
    if est.ci_high <= COMPILE_LIMIT:
        return f"within {COMPILE_LIMIT:g}×: {shown}; the suite's single compile {ratio:.2f}×"
    return f"cannot tell against {COMPILE_LIMIT:g}×: {shown}"


def _memory_verdict(compression: float) -> str:
    if not math.isfinite(compression):
        return "not measured"
    if compression < COMPRESSION_LIMIT:
        return f"worse compression (< {COMPRESSION_LIMIT:g}×)"
    return f"within {COMPRESSION_LIMIT:g}×"


def model_resources(mc: ModelComparison, base_compiles: dict[str, list[float]] | None = None,
                    pr_compiles: dict[str, list[float]] | None = None, confidence: float = 0.95) -> pd.DataFrame:
    """One row per model compared (columns `RESOURCE_COLUMNS`)."""
    base_compiles, pr_compiles = base_compiles or {}, pr_compiles or {}
    rows = []
    t = mc.table
    for row in t.to_dict("records"):
        model = str(row["model"])
        ratio = _ratio(row["pr_compile_s"], row["base_compile_s"])
        compression = _ratio(row["pr_compression"], row["base_compression"])
        b_times, p_times = base_compiles.get(model, []), pr_compiles.get(model, [])
        rows.append({"model": model, "base_compile_s": row["base_compile_s"], "pr_compile_s": row["pr_compile_s"],
                     "compile_ratio": ratio, **{f"{side}_graph_cache": _cache(row, side) for side in ("base", "pr")},
                     "base_repeat_s": _spread(b_times), "pr_repeat_s": _spread(p_times),
                     "repeats": min(len(b_times), len(p_times)),
                     "compile_verdict": _compile_verdict(ratio, b_times, p_times, confidence),
                     "base_peak": fmt_gb(row["base_peak_gb"]), "pr_peak": fmt_gb(row["pr_peak_gb"]),
                     "peak_change_pct": row["peak_change_pct"], "compression_ratio": compression,
                     "memory_verdict": _memory_verdict(compression)})
    return pd.DataFrame(rows, columns=list(RESOURCE_COLUMNS))


def _cache(row: dict[str, object], side: str) -> str:
    """A side's "hits / misses" in the model's cold compile; "–" where the suite did not record them."""
    counts = pd.to_numeric(pd.Series([row[f"{side}_{col}"] for col in CACHE_COLUMNS]), errors="coerce")
    return "–" if counts.isna().any() else " / ".join(str(int(c)) for c in counts)


def _ratio(new: float, old: float) -> float:
    try:
        new, old = float(new), float(old)
    except (TypeError, ValueError):
        return math.nan
    return new / old if math.isfinite(new) and math.isfinite(old) and old > 0 and new > 0 else math.nan
