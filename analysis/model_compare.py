"""Model-level comparison of two suite.csv tables (base vs PR).

Per model: the PR's speedup on compiled latency (base ``abs_latency`` / PR ``abs_latency``), the speedups vs eager
of each side, compile-time and peak-memory changes, and a Mann–Whitney test on the compiled samples of
``samples.json`` when both sides have them (else the effect threshold alone decides, as for kernels).

Suite summaries are given with two labelled semantics, because readers compare against both:

* **HUD** (PyTorch's TorchInductor dashboard): geomean of speedup vs eager over passing models with
  speedup ≠ 0, no clipping.
* **runner.py** (``benchmarks/dynamo/runner.py``, what the seed ran): failing models get speedup 0, then
  ``gmean(speedup[speedup > 0].clip(1))`` — speedups below 1 count as 1.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import UserError
from analysis.kernel_compare import (
    CompareSettings,
    GeomeanCI,
    classify,
    geomean,
    geomean_ci,
    mann_whitney,
    min_two_sided_p,
    read_table,
)

DYNAMO_COLUMNS = ("dev", "name", "batch_size", "speedup", "abs_latency", "compilation_latency", "compression_ratio",
                  "eager_peak_mem", "dynamo_peak_mem", "calls_captured", "unique_graphs", "graph_breaks",
                  "unique_graph_breaks")
OUR_COLUMNS = ("mode", "dtype", "size", "eager_median_ms", "eager_mean_ms", "eager_std_ms", "compiled_median_ms",
               "compiled_mean_ms", "compiled_std_ms", "first_run_s", "n", "warmup", "flags", "status", "error")
SUITE_COLUMNS = DYNAMO_COLUMNS + OUR_COLUMNS
_SUITE_TEXT = ("dev", "name", "mode", "dtype", "size", "flags", "status", "error")
_KEY = ("name", "mode", "dtype")


def read_suite_csv(path: Path) -> pd.DataFrame:
    frame = read_table(path, SUITE_COLUMNS, "a suite.csv", dtype={c: str for c in _SUITE_TEXT})
    return normalize_suite(frame)


def normalize_suite(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for col in frame.columns:
        if col in _SUITE_TEXT:
            frame[col] = frame[col].fillna("").astype(str).str.strip()
        else:
            frame[col] = pd.to_numeric(frame[col], errors="coerce")
    return frame.reset_index(drop=True)


def check_suite_frame(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    missing = [c for c in SUITE_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"{label}: not a suite table: missing column(s) {', '.join(missing)}")
    return normalize_suite(frame)


def read_suite_samples(path: Path) -> dict[str, dict[str, list[float]]]:
    """samples.json: ``{model: {"eager": [ms], "compiled": [ms]}}``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: file not found (expected suite samples.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(m): {str(k): [float(x) for x in v] for k, v in d.items()} for m, d in data.items()}
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: expected {{model: {{\"eager\": [ms], \"compiled\": [ms]}}}} ({type(exc).__name__})"
                        ) from None


def passing(suite: pd.DataFrame) -> pd.Series:
    return suite["status"].str.lower() == "ok"


def hud_geomean(suite: pd.DataFrame) -> float:
    """PyTorch HUD: plain geomean of speedup vs eager over passing models with speedup ≠ 0."""
    speedups = suite.loc[passing(suite) & (suite["speedup"] != 0) & suite["speedup"].notna(), "speedup"]
    return geomean(speedups)


def runner_geomean(suite: pd.DataFrame) -> float:
    """runner.py ``ParsePerformanceLogs.geomean``: failures → 0, then gmean of positive speedups clipped at 1."""
    speedups = suite["speedup"].where(passing(suite), 0.0).fillna(0.0)
    return geomean(speedups[speedups > 0].clip(lower=1))


@dataclass(frozen=True)
class VariantSummary:
    models: int
    passed: int
    hud_geomean: float
    runner_geomean: float
    mean_compile_s: float  # HUD: arithmetic mean over passing models
    mean_peak_gb: float


def variant_summary(suite: pd.DataFrame) -> VariantSummary:
    ok = suite[passing(suite)]
    return VariantSummary(len(suite), len(ok), hud_geomean(suite), runner_geomean(suite),
                          float(ok["compilation_latency"].mean()) if len(ok) else math.nan,
                          float(ok["dynamo_peak_mem"].mean()) if len(ok) else math.nan)


@dataclass(frozen=True)
class ModelSummary:
    n_compared: int
    ci: GeomeanCI  # geomean of the PR's latency speedups (base abs_latency / PR abs_latency)
    total_latency_speedup: float  # Σ base latency / Σ PR latency (one step of each model)
    verdicts: dict[str, int]
    base: VariantSummary
    pr: VariantSummary
    only_base: list[str]
    only_pr: list[str]


@dataclass
class ModelComparison:
    table: pd.DataFrame
    summary: ModelSummary
    notes: list[str] = field(default_factory=list)


def _dedupe(suite: pd.DataFrame, label: str, notes: list[str]) -> pd.DataFrame:
    dup = suite.duplicated(list(_KEY), keep="first")
    if dup.any():
        notes.append(f"{label}: {int(dup.sum())} duplicate model row(s) (same name, mode, dtype); the first was used")
    return suite[~dup]


def _samples_for(samples: dict[str, Any] | None, name: str) -> np.ndarray | None:
    arr = np.asarray((samples or {}).get(name, {}).get("compiled", []), dtype=float)
    arr = arr[np.isfinite(arr)]
    return arr if len(arr) >= 2 and arr.mean() > 0 else None


def _cv(arr: np.ndarray | None, std: float, mean: float) -> float:
    if arr is not None:
        return float(arr.std(ddof=1) / arr.mean())
    return float(std / mean) if math.isfinite(mean) and mean > 0 else math.nan


def _pct(new: pd.Series, old: pd.Series) -> pd.Series:
    return (new / old.where(old > 0) - 1.0) * 100.0


def compare_models(base: pd.DataFrame, pr: pd.DataFrame, samples_base: dict[str, Any] | None = None,
                   samples_pr: dict[str, Any] | None = None,
                   settings: CompareSettings | None = None) -> ModelComparison:
    """Join the two suites on (name, mode, dtype) and compare each model; see the module docstring."""
    settings = settings or CompareSettings()
    notes: list[str] = []
    base = _dedupe(check_suite_frame(base, "base suite"), "base suite.csv", notes)
    pr = _dedupe(check_suite_frame(pr, "PR suite"), "PR suite.csv", notes)
    keep = ["name", "mode", "dtype", "status", "error", "speedup", "abs_latency", "compilation_latency",
            "dynamo_peak_mem", "compiled_mean_ms", "compiled_std_ms"]
    merged = pd.merge(base[keep], pr[keep], on=list(_KEY), how="outer", suffixes=("_base", "_pr"), indicator=True)
    only_base = sorted(merged.loc[merged["_merge"] == "left_only", "name"].tolist())
    only_pr = sorted(merged.loc[merged["_merge"] == "right_only", "name"].tolist())
    both = merged[merged["_merge"] == "both"].drop(columns="_merge").reset_index(drop=True)
    table = _model_rows(both, samples_base, samples_pr, settings)
    ok = table[table["verdict"] != "failed"]
    summary = ModelSummary(
        n_compared=len(ok), ci=geomean_ci(ok["speedup"].to_numpy(), settings, unit="models"),
        total_latency_speedup=(float(ok["base_latency_ms"].sum() / ok["pr_latency_ms"].sum())
                               if len(ok) else math.nan),
        verdicts={v: int((table["verdict"] == v).sum())
                  for v in ("improved", "regressed", "unchanged", "noisy", "failed")},
        base=variant_summary(base), pr=variant_summary(pr), only_base=only_base, only_pr=only_pr,
    )
    if not samples_base or not samples_pr:
        notes.append("suite samples.json missing on a side: models were classified by the threshold only")
    return ModelComparison(table, summary, notes)


def _model_rows(both: pd.DataFrame, samples_base, samples_pr, settings: CompareSettings) -> pd.DataFrame:
    ok = ((both["status_base"].str.lower() == "ok") & (both["status_pr"].str.lower() == "ok")
          & (both["abs_latency_base"] > 0) & (both["abs_latency_pr"] > 0))
    table = pd.DataFrame({
        "model": both["name"], "mode": both["mode"], "dtype": both["dtype"],
        "base_status": both["status_base"], "pr_status": both["status_pr"],
        "base_latency_ms": both["abs_latency_base"], "pr_latency_ms": both["abs_latency_pr"],
        "speedup": np.where(ok, both["abs_latency_base"] / both["abs_latency_pr"], np.nan),
        "base_speedup_vs_eager": both["speedup_base"], "pr_speedup_vs_eager": both["speedup_pr"],
        "base_compile_s": both["compilation_latency_base"], "pr_compile_s": both["compilation_latency_pr"],
        "compile_change_pct": _pct(both["compilation_latency_pr"], both["compilation_latency_base"]),
        "base_peak_gb": both["dynamo_peak_mem_base"], "pr_peak_gb": both["dynamo_peak_mem_pr"],
        "peak_change_pct": _pct(both["dynamo_peak_mem_pr"], both["dynamo_peak_mem_base"]),
    })
    xs = [_samples_for(samples_base, n) for n in both["name"]]
    ys = [_samples_for(samples_pr, n) for n in both["name"]]
    table["base_cv"] = [_cv(x, s, m) for x, s, m in zip(xs, both["compiled_std_ms_base"],
                                                           both["compiled_mean_ms_base"], strict=True)]
    table["pr_cv"] = [_cv(y, s, m) for y, s, m in zip(ys, both["compiled_std_ms_pr"],
                                                         both["compiled_mean_ms_pr"], strict=True)]
    testable = [i for i, (x, y) in enumerate(zip(xs, ys, strict=True))
                if x is not None and y is not None and min_two_sided_p(len(x), len(y)) < settings.alpha]
    p = np.full(len(table), np.nan)
    if testable:
        p[testable] = mann_whitney([(xs[i], ys[i]) for i in testable])
    table["p_value"] = p
    table["test"] = ["mann-whitney" if i in set(testable) else "threshold only" for i in range(len(table))]
    table["verdict"] = [
        "failed" if not good else classify(s, pv, t == "mann-whitney", cb, cp, settings)
        for good, s, pv, t, cb, cp in zip(ok, table["speedup"], table["p_value"], table["test"],
                                          table["base_cv"], table["pr_cv"], strict=True)
    ]
    return table.sort_values(["model", "mode", "dtype"], kind="stable").reset_index(drop=True)
