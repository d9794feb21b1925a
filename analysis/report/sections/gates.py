"""The model-level checks reviewers know from the PyTorch dashboard, each with its own interval where it has one.

* geomean latency speedup < 0.95× (interval: over the paired rounds, as in `analysis.stats.verdict`);
* compile time > 1.15×, on the dashboard's definition: the mean cold compile of the PR (the suite's compile of
  every model passing on both sides, ``compilation_latency``) over base's, with the interval of that ratio over
  models (the ratio estimator's t interval, paired by model); the model whose ratio is worst is named beside it.
  The rounds' repeated compiles from a warm cache (`analysis.report.sections.resources`) explain a model's spread; they
  are not the dashboard's figure and do not decide the gate;
* pass rate drop (a model that passes on base fails on the PR; counts, no interval);
* peak-memory compression < 0.9× (geomean of PR/base ``compression_ratio``; interval over models), the
  dashboard's limit.

A gate *fails* when its whole interval lies past the limit, *passes* when the whole interval lies on the good
side, and is *inconclusive* otherwise; a gate without an interval is decided by its value, as the dashboard does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from analysis.models.compare import ModelComparison
from analysis.stats.verdict import Estimate, estimate, t_interval, t_quantile

GEOMEAN_LIMIT = 0.95
COMPILE_LIMIT = 1.15
COMPRESSION_LIMIT = 0.9


@dataclass(frozen=True)
class Gate:
    name: str
    value: float
    ci_low: float | None
    ci_high: float | None
    limit: float
    bad_when: str  # "below" or "above" the limit
    status: str  # pass / fail / inconclusive
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def _status(value: float, low: float | None, high: float | None, limit: float, bad_when: str) -> str:
    if not math.isfinite(value):
        return "inconclusive"
    bad = (lambda x: x < limit) if bad_when == "below" else (lambda x: x > limit)
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "fail" if bad(value) else "pass"
    if bad(low) and bad(high):
        return "fail"
    if not bad(low) and not bad(high):
        return "pass"
    return "inconclusive"


def _gate(name: str, est: Estimate, limit: float, bad_when: str, detail: str) -> Gate:
    low = est.ci_low if est.has_interval else None
    high = est.ci_high if est.has_interval else None
    return Gate(name, est.speedup, low, high, limit, bad_when, _status(est.speedup, low, high, limit, bad_when),
                detail)


def ratio_over_models(ratios: np.ndarray, confidence: float) -> Estimate:
    """Geomean of per-model ratios with a Student-t interval over models (NaN and non-positive ratios dropped)."""
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if len(ratios) == 0:
        return Estimate(math.nan, math.nan, math.nan, math.nan, 0, "no models")
    logs = np.log(ratios)
    if len(logs) < 2:
        return Estimate(float(ratios[0]), math.nan, math.nan, math.nan, 1, "one model")
    mean, low, high, p = t_interval(logs, confidence)
    return Estimate(math.exp(mean), math.exp(low), math.exp(high), p, len(logs), "over models")


def model_compile_ratio(base: list[float], pr: list[float], suite_base: float, suite_pr: float,
                        confidence: float) -> Estimate:
    """PR / base compile time of one model: over its repeated compiles where both sides have two or more (paired
    by round when the counts match), else the suite's single compile of each side (a point)."""
    if len(base) >= 2 and len(pr) >= 2:
        est = estimate(np.array(base, dtype=float), np.array(pr, dtype=float), confidence)
        if est.has_interval:  # estimate() gives base / PR: the ratio here is PR / base
            return Estimate(1 / est.speedup, 1 / est.ci_high, 1 / est.ci_low, est.p_value, est.rounds, est.design)
    if suite_base > 0 and suite_pr > 0:
        return Estimate(suite_pr / suite_base, math.nan, math.nan, math.nan, 1, "one suite compile per side")
    return Estimate(math.nan, math.nan, math.nan, math.nan, 0, "no compile time")


def ratio_of_means(base: np.ndarray, pr: np.ndarray, confidence: float) -> Estimate:
    """mean(pr) / mean(base) over paired values (models), with the ratio estimator's Student-t interval: the
    residuals pr − r·base carry the spread (n − 1 degrees of freedom)."""
    keep = np.isfinite(base) & np.isfinite(pr) & (base > 0) & (pr > 0)
    base, pr = base[keep], pr[keep]
    if len(base) == 0:
        return Estimate(math.nan, math.nan, math.nan, math.nan, 0, "no models")
    ratio = float(pr.sum() / base.sum())
    if len(base) < 2:
        return Estimate(ratio, math.nan, math.nan, math.nan, 1, "one model")
    n = len(base)
    se = float(np.sqrt(np.sum((pr - ratio * base) ** 2) / (n - 1) / n) / base.mean())
    half = t_quantile(0.5 + confidence / 2, n - 1) * se
    return Estimate(ratio, max(ratio - half, 1e-12), ratio + half, math.nan, n, "ratio of means over models")


def compile_gate(mc: ModelComparison, confidence: float) -> Gate:
    """The compile-time check on the dashboard's definition (see the module docstring)."""
    table = mc.table[mc.table["verdict"] != "failed"]
    base = table["base_compile_s"].to_numpy(dtype=float)
    pr = table["pr_compile_s"].to_numpy(dtype=float)
    est = ratio_of_means(base, pr, confidence)
    if not math.isfinite(est.speedup):
        return Gate("compile time ratio", math.nan, None, None, COMPILE_LIMIT, "above", "inconclusive",
                    "no compile time on both sides")
    with np.errstate(divide="ignore", invalid="ignore"):
        per_model = pr / base
    worst = int(np.nanargmax(np.where(np.isfinite(per_model), per_model, -np.inf)))
    detail = (f"mean cold compile (the suites' compile, as the dashboard) base {np.nanmean(base):.3g} s, PR "
              f"{np.nanmean(pr):.3g} s over {est.rounds} model(s); worst model {table['model'].iloc[worst]} "
              f"{per_model[worst]:.2f}×")
    return _gate("compile time ratio", est, COMPILE_LIMIT, "above", detail)


def model_gates(mc: ModelComparison, confidence: float) -> list[Gate]:
    table = mc.table
    ok = (table["verdict"] != "failed").to_numpy(dtype=bool)
    compression = (table["pr_compression"] / table["base_compression"]).to_numpy(dtype=float)[ok]
    base_pass = table["base_status"].str.lower() == "ok"
    newly_failing = sorted(table.loc[base_pass & (table["pr_status"].str.lower() != "ok"), "model"].tolist())
    s = mc.summary
    base_rate = s.base.passed / s.base.models if s.base.models else math.nan
    pr_rate = s.pr.passed / s.pr.models if s.pr.models else math.nan
    pass_ratio = pr_rate / base_rate if base_rate else math.nan
    return [
        _gate("geomean latency speedup", s.geomean, GEOMEAN_LIMIT, "below",
              f"PR vs base over {s.n_compared} model(s); {s.method}"),
        compile_gate(mc, confidence),
        Gate("pass rate", pass_ratio, None, None, 1.0, "below",
             "fail" if newly_failing or (math.isfinite(pass_ratio) and pass_ratio < 1.0) else "pass",
             f"base {s.base.passed}/{s.base.models}, PR {s.pr.passed}/{s.pr.models}"
             + (f"; newly failing: {', '.join(newly_failing)}" if newly_failing else "")),
        _gate("peak-memory compression ratio", ratio_over_models(compression, confidence), COMPRESSION_LIMIT,
              "below", "PR / base compression (eager peak / compiled peak), geomean over models"),
    ]
