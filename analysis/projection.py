"""Projected end-to-end effect: what the kernel speedups imply for each model (Amdahl), next to the measured one.

For a model m with base compiled latency L (ms per step, as the model comparison measured it: the paired
model rounds where they ran, else the suite's ``abs_latency``):

* its kernels are the kernels.csv rows whose ``graphs`` names m (tokens split on ``;``, ``|``, ``,`` or
  whitespace; a token matches when it is the model name or starts with ``<model>/``, ``<model>:``, ``<model>#``
  or ``<model>@``). With a single model in the suite every kernel belongs to it. A kernel listed under k models
  contributes 1/k of its launches to each, because ``calls`` counts launches over all the graphs that use it.
* kernel time per step K = Σ median_ms × calls over those kernels (standalone timings; ``calls`` missing → 1);
* share s = K_base / L (clipped to 1 for the projection when standalone timings add up to more than L);
* kernel speedup S = K_base / K_pr (each side's own kernels, paired or not, so new and vanished kernels count);
* projected model speedup = 1 / ((1 − s) + s / S), the non-kernel time assumed unchanged.

The measured speedup beside the projection is the model comparison's own (per model its estimate, for "(all
models)" the total-latency one), so the projection, the model table and the time decomposition quote one figure.
The "(all models)" row treats one step of every model as a single workload, so it needs no attribution.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.model_compare import ModelComparison

ALL_MODELS = "(all models)"
_SPLIT = re.compile(r"[;|,\s]+")
_SUFFIX_SEPARATORS = ("/", ":", "#", "@")

METHOD_NOTE = (
    "share = Σ(kernel median ms × launches per step) over the kernels whose `graphs` names the model, divided "
    "by the model's base compiled latency as the model comparison measured it; kernels listed under k models "
    "give 1/k of their launches to each. Projected speedup = 1 / ((1 − share) + share / S) with "
    "S = Σbase kernel time / Σpr kernel time of that model (Amdahl; non-kernel time assumed unchanged). "
    "Standalone kernel timings miss overlap and cache effects, so a share above 100 % is shown as measured and "
    "clipped for the projection."
)


@dataclass(frozen=True)
class Projection:
    table: pd.DataFrame  # model, base_latency_ms, base_kernel_ms, share, pr_kernel_ms, kernel_speedup, ...
    method: str
    unattributed_base: int  # kernels (with timing) that no model in the suite claims
    unattributed_pr: int


def kernel_owners(graphs: str, models: list[str]) -> list[str]:
    """The models a kernel belongs to, by its `graphs` cell (see the module docstring); with a single model in
    the suite, every kernel is that model's."""
    return list(models) if len(models) == 1 else _owners(graphs, models)


def _owners(graphs: str, models: list[str]) -> list[str]:
    tokens = [t for t in _SPLIT.split(graphs or "") if t]
    found = []
    for model in models:
        prefixes = tuple(model + sep for sep in _SUFFIX_SEPARATORS)
        if any(t == model or t.startswith(prefixes) for t in tokens):
            found.append(model)
    return found


def attribute(kernels: pd.DataFrame, models: list[str]) -> tuple[pd.DataFrame, int]:
    """Per (model, kernel) rows with ms per step for that model; and how many timed kernels no model claims."""
    timed = _timed(kernels)
    calls = timed["calls"].where(timed["calls"] > 0, 1.0).fillna(1.0)
    rows, unclaimed = [], 0
    for graphs, median, n_calls in zip(timed["graphs"], timed["median_ms"], calls, strict=True):
        owners = kernel_owners(graphs, models)
        if not owners:
            unclaimed += 1
            continue
        for model in owners:
            rows.append((model, median * n_calls / len(owners)))
    return pd.DataFrame(rows, columns=["model", "ms_per_step"]), unclaimed


def _amdahl(share: float, kernel_speedup: float) -> float:
    if not (math.isfinite(share) and math.isfinite(kernel_speedup)) or kernel_speedup <= 0:
        return math.nan
    s = min(share, 1.0)
    return 1.0 / ((1.0 - s) + s / kernel_speedup)


def _row(model: str, latency: float, measured: float, kb: float, kp: float, nb: int, np_: int) -> dict:
    share = kb / latency if latency > 0 else math.nan
    speed = kb / kp if kp > 0 else math.nan
    note = "kernel time > latency (clipped)" if share > 1 else ""
    if nb == 0:
        note = "no kernels attributed"
    return {"model": model, "base_latency_ms": latency, "base_kernel_ms": kb, "pr_kernel_ms": kp,
            "kernels_base": nb, "kernels_pr": np_, "share": share, "kernel_speedup": speed,
            "projected_speedup": _amdahl(share, speed), "measured_speedup": measured, "note": note}


def project(base_kernels: pd.DataFrame, pr_kernels: pd.DataFrame, models: ModelComparison) -> Projection:
    """Projected vs measured model speedups for the models compared on both sides (see the module docstring)."""
    compared = models.table[np.isfinite(models.table["speedup"].to_numpy(dtype=float))]
    compared = compared.drop_duplicates("model", keep="first").set_index("model")
    names = sorted(compared.index)
    per_base, lost_base = attribute(base_kernels, names)
    per_pr, lost_pr = attribute(pr_kernels, names)
    kb = per_base.groupby("model")["ms_per_step"].agg(["sum", "count"])
    kp = per_pr.groupby("model")["ms_per_step"].agg(["sum", "count"])
    rows = []
    for m in names:
        rows.append(_row(m, float(compared.at[m, "base_latency_ms"]), float(compared.at[m, "speedup"]),
                         float(kb["sum"].get(m, 0.0)), float(kp["sum"].get(m, 0.0)),
                         int(kb["count"].get(m, 0)), int(kp["count"].get(m, 0))))
    if len(names) > 1:
        rows.append(_row(ALL_MODELS, float(compared["base_latency_ms"].sum()),
                         models.summary.total_latency.speedup,
                         _timed_total(base_kernels), _timed_total(pr_kernels),
                         _timed_count(base_kernels), _timed_count(pr_kernels)))
    table = pd.DataFrame(rows, columns=["model", "base_latency_ms", "base_kernel_ms", "pr_kernel_ms",
                                        "kernels_base", "kernels_pr", "share", "kernel_speedup",
                                        "projected_speedup", "measured_speedup", "note"])
    return Projection(table, METHOD_NOTE, lost_base, lost_pr)


def _timed(kernels: pd.DataFrame) -> pd.DataFrame:
    return kernels[(kernels["status"].str.lower().isin(["ok", ""])) & (kernels["median_ms"] > 0)]


def _timed_total(kernels: pd.DataFrame) -> float:
    timed = _timed(kernels)
    return float(np.sum(timed["median_ms"] * timed["calls"].where(timed["calls"] > 0, 1.0).fillna(1.0)))


def _timed_count(kernels: pd.DataFrame) -> int:
    return len(_timed(kernels))
