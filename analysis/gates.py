"""The model-level checks reviewers know from the PyTorch dashboard, each with its own interval where it has one.

* geomean latency speedup < 0.95× (interval: over the paired rounds, as in `analysis.verdict`);
* compile time > 1.15× (geomean of PR/base compile time; interval: Student-t over models, each model's
  compile measured once per side);
* pass rate drop (a model that passes on base fails on the PR; counts, no interval);
* peak-memory compression < 0.95× (geomean of PR/base ``compression_ratio``; interval over models).

A gate *fails* when its whole interval lies past the limit, *passes* when the whole interval lies on the good
side, and is *inconclusive* otherwise; a gate without an interval is decided by its value, as the dashboard does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from analysis.model_compare import ModelComparison
from analysis.verdict import Estimate, t_interval

GEOMEAN_LIMIT = 0.95
COMPILE_LIMIT = 1.15
COMPRESSION_LIMIT = 0.95


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


def model_gates(mc: ModelComparison, confidence: float) -> list[Gate]:
    table = mc.table
    ok = (table["verdict"] != "failed").to_numpy(dtype=bool)
    compile_ratio = (table["pr_compile_s"] / table["base_compile_s"]).to_numpy(dtype=float)[ok]
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
        _gate("compile time ratio", ratio_over_models(compile_ratio, confidence), COMPILE_LIMIT, "above",
              "PR / base compile time, geomean over models, interval over models"),
        Gate("pass rate", pass_ratio, None, None, 1.0, "below",
             "fail" if newly_failing or (math.isfinite(pass_ratio) and pass_ratio < 1.0) else "pass",
             f"base {s.base.passed}/{s.base.models}, PR {s.pr.passed}/{s.pr.models}"
             + (f"; newly failing: {', '.join(newly_failing)}" if newly_failing else "")),
        _gate("peak-memory compression ratio", ratio_over_models(compression, confidence), COMPRESSION_LIMIT,
              "below", "PR / base compression (eager peak / compiled peak), geomean over models"),
    ]
