"""Model-level comparison of two suite.csv tables (base vs PR).

Per model: the PR's speedup on compiled latency from the paired model rounds (base and PR processes alive
side by side, alternating model by model; `analysis.stats.verdict` for the estimate, interval and verdict), the
speedups vs eager of each side, compile-time, compression and peak-memory changes. The dashboard's gates on
these numbers are in `analysis.report.sections.gates`.

Suite summaries are given with two labelled semantics, because readers compare against both:

* **HUD** (PyTorch's TorchInductor dashboard): geomean of speedup vs eager over passing models with
  speedup ≠ 0, no clipping.
* **runner.py** (``benchmarks/dynamo/runner.py``, what the seed ran): failing models get speedup 0, then
  ``gmean(speedup[speedup > 0].clip(1))`` — speedups below 1 count as 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.kernels.compare import geomean, read_table
from analysis.stats.verdict import (
    ControlResult,
    Estimate,
    FamilyData,
    FamilyJudgement,
    block_matrix,
    central_ms,
    family_matrix,
    halves_matrix,
    judge_family,
    robust_spread,
    round_medians,
)
from analysis.stats.verdict_settings import VerdictSettings
from foundation.errors import UserError
from foundation.formats.dynamo_csv import CACHE_COLUMNS, REQUIRED_COLUMNS, SUITE_COLUMNS
from foundation.formats.dynamo_csv import TEXT_COLUMNS as _SUITE_TEXT
from foundation.formats.paired_rounds import PairedBlocks, RoundSamples

_KEY = ("name", "mode", "dtype")


def read_suite_frame(path: Path) -> pd.DataFrame:
    """A suite.csv (`foundation.formats.dynamo_csv`'s contract) as a frame with numeric cells; the rows reader for the
    stages is `foundation.formats.dynamo_csv.read_suite_csv` (stdlib only, so it runs in any environment)."""
    frame = read_table(path, REQUIRED_COLUMNS, "a suite.csv", dtype=dict.fromkeys(_SUITE_TEXT, str))
    return normalize_suite(frame)


def normalize_suite(frame: pd.DataFrame) -> pd.DataFrame:
    """Numbers as numbers, words as stripped text; a column added to the contract later is empty (NaN: not
    recorded) where the file predates it."""
    frame = frame.copy()
    for col in SUITE_COLUMNS:
        if col not in frame.columns:
            frame[col] = np.nan
    for col in frame.columns:
        if col in _SUITE_TEXT:
            frame[col] = frame[col].fillna("").astype(str).str.strip()
        else:
            frame[col] = pd.to_numeric(frame[col], errors="coerce")
    return frame.reset_index(drop=True)


def check_suite_frame(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"{label}: not a suite table: missing column(s) {', '.join(missing)}")
    return normalize_suite(frame)


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
    # Inductor's FX-graph cache hits and misses during the passing models' cold compiles, summed (None: not
    # recorded for every one of them, as by a suite.csv older than these columns or the upstream harness).
    graph_cache: tuple[int, int] | None


def variant_summary(suite: pd.DataFrame) -> VariantSummary:
    ok = suite[passing(suite)]
    cache = ok[list(CACHE_COLUMNS)]
    recorded = len(ok) > 0 and bool(cache.notna().to_numpy().all())
    return VariantSummary(len(suite), len(ok), hud_geomean(suite), runner_geomean(suite),
                          float(ok["compilation_latency"].mean()) if len(ok) else math.nan,
                          float(ok["dynamo_peak_mem"].mean()) if len(ok) else math.nan,
                          (int(cache.iloc[:, 0].sum()), int(cache.iloc[:, 1].sum())) if recorded else None)


@dataclass(frozen=True)
class ModelSummary:
    n_compared: int
    geomean: Estimate  # geomean of the PR's latency speedups, interval over rounds
    total_latency: Estimate  # Σ base latency / Σ PR latency (one step of each model), interval over rounds
    method: str
    verdicts: dict[str, int]  # improved / regressed / equivalent / inconclusive among the compared models
    failed: int
    verdict: str
    rounds: int
    paired: bool  # latencies from the paired rounds (else the suite's own, one round per side)
    detectable_pct: float  # the geomean's resolution: smallest change told apart from none, 80 % power, %
    selection_level: float  # level of the intervals shown for the models called changed (NaN: none called)
    base: VariantSummary
    pr: VariantSummary
    only_base: list[str]
    only_pr: list[str]


@dataclass
class ModelComparison:
    table: pd.DataFrame
    summary: ModelSummary
    controls: list[ControlResult]
    resolution: float
    settings: VerdictSettings  # the level this family's verdicts and intervals are stated at
    notes: list[str] = field(default_factory=list)


def _dedupe(suite: pd.DataFrame, label: str, notes: list[str]) -> pd.DataFrame:
    dup = suite.duplicated(list(_KEY), keep="first")
    if dup.any():
        notes.append(f"{label}: {int(dup.sum())} duplicate model row(s) (same name, mode, dtype); the first was used")
    return suite[~dup]


def _latency_rounds(names: pd.Series, latency: pd.Series, ok: np.ndarray, paired: RoundSamples | None,
                    suite_samples: dict[str, Any] | None) -> list[np.ndarray]:
    """Per model: compiled-latency round medians from the paired rounds, else the suite's samples as one round."""
    rows = []
    for name, value, good in zip(names, latency, ok, strict=True):
        if not good:
            rows.append(np.full(1, np.nan))
        elif paired and name in paired:
            rows.append(round_medians(paired[name]))
        elif suite_samples and suite_samples.get(name, {}).get("compiled"):
            rows.append(round_medians([suite_samples[name]["compiled"]]))
        else:
            rows.append(np.array([value], dtype=float))
    return rows


def _pct(new: pd.Series, old: pd.Series) -> pd.Series:
    return (new / old.where(old > 0) - 1.0) * 100.0


def compare_models(base: pd.DataFrame, pr: pd.DataFrame, samples_base: dict[str, Any] | None = None,
                   samples_pr: dict[str, Any] | None = None, settings: VerdictSettings | None = None,
                   paired_base: RoundSamples | None = None, paired_pr: RoundSamples | None = None,
                   blocks: PairedBlocks | None = None, level: float | None = None) -> ModelComparison:
    """Join the two suites on (name, mode, dtype) and compare each model; see the module docstring.
    ``level``: the level of the table's ``ci_low``/``ci_high`` (`analysis.kernels.compare.compare_kernels`).

    ``paired_*`` are the compiled latencies of the paired model rounds (``suite/paired_samples.json``), and
    ``blocks`` the same rounds visit by visit (each round's log ratio over its ABBA blocks);
    ``samples_*`` the suite's own samples (one round per side), used only without paired rounds.
    """
    settings = (settings or VerdictSettings()).validate()
    notes: list[str] = []
    base = _dedupe(check_suite_frame(base, "base suite"), "base suite.csv", notes)
    pr = _dedupe(check_suite_frame(pr, "PR suite"), "PR suite.csv", notes)
    keep = ["name", "mode", "dtype", "status", "error", "speedup", "abs_latency", "compilation_latency",
            "compression_ratio", "dynamo_peak_mem", *CACHE_COLUMNS]
    merged = pd.merge(base[keep], pr[keep], on=list(_KEY), how="outer", suffixes=("_base", "_pr"), indicator=True)
    only_base = sorted(merged.loc[merged["_merge"] == "left_only", "name"].tolist())
    only_pr = sorted(merged.loc[merged["_merge"] == "right_only", "name"].tolist())
    both = merged[merged["_merge"] == "both"].drop(columns="_merge").sort_values(list(_KEY), kind="stable")
    both = both.reset_index(drop=True)
    paired = bool(paired_base) and bool(paired_pr)
    table, judged, rounds = _model_rows(both, paired_base if paired else None, paired_pr if paired else None,
                                        None if paired else samples_base, None if paired else samples_pr, settings,
                                        blocks if paired else None, level)
    compared = (table["verdict"] != "failed").to_numpy(dtype=bool)
    summary = ModelSummary(
        n_compared=int(compared.sum()), geomean=judged.summary.geomean, total_latency=judged.summary.time_weighted,
        method=judged.summary.method, verdicts=judged.counts(compared), failed=int((~compared).sum()),
        verdict=judged.verdict, rounds=rounds, paired=paired, detectable_pct=100 * judged.detectable,
        selection_level=judged.selection_level,
        base=variant_summary(base), pr=variant_summary(pr), only_base=only_base, only_pr=only_pr,
    )
    if not paired:
        notes.append("models were not timed in paired rounds: each side's suite timing counts as one round, so "
                     "no interval can be given and no model is called a change")
    return ModelComparison(table, summary, judged.controls, judged.resolution, settings, notes)


def _model_rows(both: pd.DataFrame, paired_base: RoundSamples | None, paired_pr: RoundSamples | None,
                samples_base: dict[str, Any] | None, samples_pr: dict[str, Any] | None, settings: VerdictSettings,
                blocks: PairedBlocks | None, level: float | None) -> tuple[pd.DataFrame, FamilyJudgement, int]:
    ok = ((both["status_base"].str.lower() == "ok") & (both["status_pr"].str.lower() == "ok")
          & (both["abs_latency_base"] > 0) & (both["abs_latency_pr"] > 0)).to_numpy(dtype=bool)
    b_rounds = _latency_rounds(both["name"], both["abs_latency_base"], ok, paired_base, samples_base)
    p_rounds = _latency_rounds(both["name"], both["abs_latency_pr"], ok, paired_pr, samples_pr)
    b_matrix = family_matrix(b_rounds)
    data = FamilyData(b_matrix, family_matrix(p_rounds), np.ones(len(both)),
                      block_matrix(blocks, [(name, name) for name in both["name"]], b_matrix),
                      halves_matrix(blocks, both["name"].tolist(), b_matrix))
    judged = judge_family(data, settings, ok, headline="geomean")
    shown = [e.at_level(level if level is not None else settings.confidence) for e in judged.estimates]
    table = pd.DataFrame({
        "model": both["name"], "mode": both["mode"], "dtype": both["dtype"],
        "base_status": both["status_base"], "pr_status": both["status_pr"],
        "base_latency_ms": [central_ms(r) for r in b_rounds], "pr_latency_ms": [central_ms(r) for r in p_rounds],
        "speedup": [e.speedup if good else np.nan for e, good in zip(judged.estimates, ok, strict=True)],
        "ci_low": [e.ci_low for e in shown], "ci_high": [e.ci_high for e in shown],  # one level (`level`)
        "verdict_ci_low": [e.ci_low for e in judged.estimates],  # the verdict's own interval
        "verdict_ci_high": [e.ci_high for e in judged.estimates],
        "p_value": [e.p_value for e in judged.estimates], "q_value": judged.q_values,
        "rounds": [e.rounds for e in judged.estimates],
        "base_spread": [robust_spread(r) for r in b_rounds], "pr_spread": [robust_spread(r) for r in p_rounds],
        "base_speedup_vs_eager": both["speedup_base"], "pr_speedup_vs_eager": both["speedup_pr"],
        "base_compile_s": both["compilation_latency_base"], "pr_compile_s": both["compilation_latency_pr"],
        "compile_change_pct": _pct(both["compilation_latency_pr"], both["compilation_latency_base"]),
        **{f"{side}_{col}": both[f"{col}_{side}"] for side in ("base", "pr") for col in CACHE_COLUMNS},
        "base_compression": both["compression_ratio_base"], "pr_compression": both["compression_ratio_pr"],
        "base_peak_gb": both["dynamo_peak_mem_base"], "pr_peak_gb": both["dynamo_peak_mem_pr"],
        "peak_change_pct": _pct(both["dynamo_peak_mem_pr"], both["dynamo_peak_mem_base"]),
        "verdict": np.where(ok, judged.verdicts, "failed"),
        "step_share": judged.shares,
    })
    return table, judged, int(data.base.shape[1])
