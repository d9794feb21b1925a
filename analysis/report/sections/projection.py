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

With per-round samples (`KernelComparison.round_ms`), the kernel speedup and the projection are also formed round
by round (each kernel's round median × its launches, its CSV median in a round without one; base and PR round i
ran together), and the projection gets a Student-t interval over rounds: run to run it moved by about ±0.9 % under
an A/A, which a point value hid. The share stays the point value (base kernels over the base latency).

The measured speedup beside the projection is the model comparison's own (per model its estimate, for "(all
models)" the total-latency one), so the projection, the model table and the time decomposition quote one figure.
The "(all models)" row treats one step of every model as a single workload, so it needs no attribution.

The share is also the report's statement of how much a kernel change can show in a model at all
(`kernel_shares`, `low_share_line`): below `LOW_SHARE` the step is mostly the wrapper and host around the kernels
(a CPU run at tiny size: hidden size 64, where the quick start's kernels were 17 % of a step), and the report says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.models.compare import ModelComparison
from analysis.stats.verdict import t_interval

ALL_MODELS = "(all models)"
_SPLIT = re.compile(r"[;|,\s]+")
_SUFFIX_SEPARATORS = ("/", ":", "#", "@")

# Below this share a kernel change shows in the model at under a third of its size: a 6 % kernel regression moves
# the step by less than the 2 % margin a model verdict needs, so the report warns that the size hides kernel changes.
LOW_SHARE = 0.30

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


RoundMs = dict[str, np.ndarray]  # kernel path → round medians (ms)


def common_rounds(round_ms: dict[str, RoundMs]) -> int:
    """How many rounds both sides' round medians have (0 without them)."""
    return min(max((len(v) for v in round_ms.get(side, {}).values()), default=0) for side in ("base", "pr"))


def model_round_ms(paths: pd.Series, graphs: pd.Series, calls: pd.Series, medians: pd.Series, models: list[str],
                   rounds: RoundMs, n_rounds: int, attribute_all: bool = False) -> dict[str, np.ndarray]:
    """Per model, the time per step of its kernels in each round: Σ launches / k × the kernel's round median
    (its ``medians`` value in a round without one); ``attribute_all`` puts every kernel in the one model given."""
    totals = {m: np.zeros(n_rounds) for m in models}
    for path, cell, n_calls, median in zip(paths, graphs, calls, medians, strict=True):
        if not (isinstance(median, (int, float, np.floating)) and math.isfinite(median) and median > 0):
            continue
        owners = list(models) if attribute_all else kernel_owners(str(cell), models)
        series = rounds.get(str(path))
        per_round = (np.where(np.isfinite(series), series, median) if series is not None and len(series) == n_rounds
                     else np.full(n_rounds, float(median)))
        weight = float(n_calls) if isinstance(n_calls, (int, float, np.floating)) and n_calls > 0 else 1.0
        for model in owners:
            totals[model] += weight * per_round / len(owners)
    return totals


def _amdahl(share: float, kernel_speedup: float) -> float:
    if not (math.isfinite(share) and math.isfinite(kernel_speedup)) or kernel_speedup <= 0:
        return math.nan
    s = min(share, 1.0)
    return 1.0 / ((1.0 - s) + s / kernel_speedup)


def _row(model: str, latency: float, measured: float, kb: float, kp: float, nb: int, np_: int,
         per_round: tuple[np.ndarray, np.ndarray] | None, confidence: float) -> dict:
    share = kb / latency if latency > 0 else math.nan
    speed = kb / kp if kp > 0 else math.nan
    note = "kernel time > latency (clipped)" if share > 1 else ""
    if nb == 0:
        note = "no kernels attributed"
    low, high = _projected_interval(share, per_round, confidence)
    return {"model": model, "base_latency_ms": latency, "base_kernel_ms": kb, "pr_kernel_ms": kp,
            "kernels_base": nb, "kernels_pr": np_, "share": share, "kernel_speedup": speed,
            "projected_speedup": _amdahl(share, speed), "projected_low": low, "projected_high": high,
            "measured_speedup": measured, "note": note}


def _projected_interval(share: float, per_round: tuple[np.ndarray, np.ndarray] | None, confidence: float
                        ) -> tuple[float, float]:
    """The projection's interval over rounds (NaN without two or more rounds of both sides)."""
    if per_round is None or len(per_round[0]) < 2:
        return math.nan, math.nan
    base, pr = per_round
    with np.errstate(divide="ignore", invalid="ignore"):
        projected = np.array([_amdahl(share, b / p) if p > 0 else math.nan for b, p in zip(base, pr, strict=True)])
    logs = np.log(projected[np.isfinite(projected) & (projected > 0)])
    if len(logs) < 2:
        return math.nan, math.nan
    _, low, high, _ = t_interval(logs, confidence)
    return math.exp(low), math.exp(high)


def project(base_kernels: pd.DataFrame, pr_kernels: pd.DataFrame, models: ModelComparison,
            round_ms: dict[str, RoundMs] | None = None, confidence: float = 0.95) -> Projection:
    """Projected vs measured model speedups for the models compared on both sides (see the module docstring);
    ``round_ms`` (side → path → round medians) adds the projection's interval over rounds."""
    compared = models.table[np.isfinite(models.table["speedup"].to_numpy(dtype=float))]
    compared = compared.drop_duplicates("model", keep="first").set_index("model")
    names = sorted(compared.index)
    per_base, lost_base = attribute(base_kernels, names)
    per_pr, lost_pr = attribute(pr_kernels, names)
    kb = per_base.groupby("model")["ms_per_step"].agg(["sum", "count"])
    kp = per_pr.groupby("model")["ms_per_step"].agg(["sum", "count"])
    per_model = _per_round(base_kernels, pr_kernels, names, round_ms or {})
    everything = _per_round(base_kernels, pr_kernels, [ALL_MODELS], round_ms or {}, attribute_all=True)
    rows = []
    for m in names:
        rows.append(_row(m, float(compared.at[m, "base_latency_ms"]), float(compared.at[m, "speedup"]),
                         float(kb["sum"].get(m, 0.0)), float(kp["sum"].get(m, 0.0)),
                         int(kb["count"].get(m, 0)), int(kp["count"].get(m, 0)), per_model.get(m), confidence))
    if len(names) > 1:
        rows.append(_row(ALL_MODELS, float(compared["base_latency_ms"].sum()),
                         models.summary.total_latency.speedup,
                         _timed_total(base_kernels), _timed_total(pr_kernels),
                         _timed_count(base_kernels), _timed_count(pr_kernels), everything.get(ALL_MODELS),
                         confidence))
    table = pd.DataFrame(rows, columns=["model", "base_latency_ms", "base_kernel_ms", "pr_kernel_ms",
                                        "kernels_base", "kernels_pr", "share", "kernel_speedup",
                                        "projected_speedup", "projected_low", "projected_high",
                                        "measured_speedup", "note"])
    return Projection(table, METHOD_NOTE, lost_base, lost_pr)


def _per_round(base_kernels: pd.DataFrame, pr_kernels: pd.DataFrame, models: list[str],
               round_ms: dict[str, RoundMs], attribute_all: bool = False
               ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per model, both sides' kernel time per step in each round ({} without rounds on both sides)."""
    base_rounds, pr_rounds = round_ms.get("base", {}), round_ms.get("pr", {})
    n = common_rounds(round_ms)
    if n < 2:
        return {}
    sides = []
    for frame, rounds in ((_timed(base_kernels), base_rounds), (_timed(pr_kernels), pr_rounds)):
        sides.append(model_round_ms(frame["path"], frame["graphs"], frame["calls"], frame["median_ms"], models,
                                    rounds, n, attribute_all))
    return {m: (sides[0][m], sides[1][m]) for m in models}


def _timed(kernels: pd.DataFrame) -> pd.DataFrame:
    return kernels[(kernels["status"].str.lower().isin(["ok", ""])) & (kernels["median_ms"] > 0)]


def _timed_total(kernels: pd.DataFrame) -> float:
    timed = _timed(kernels)
    return float(np.sum(timed["median_ms"] * timed["calls"].where(timed["calls"] > 0, 1.0).fillna(1.0)))


def _timed_count(kernels: pd.DataFrame) -> int:
    return len(_timed(kernels))



@dataclass(frozen=True)
class KernelShares:
    """The base kernels' share of the step: of one step of every model, and per compared model."""

    all_models: float  # NaN: nothing attributed
    models: dict[str, float]

    @property
    def low(self) -> list[str]:
        """The models whose kernels are below `LOW_SHARE` of their step."""
        return sorted(m for m, v in self.models.items() if v < LOW_SHARE)

    def as_dict(self) -> dict[str, Any]:
        """summary.json's ``kernel_share``."""
        return {"all_models": self.all_models if math.isfinite(self.all_models) else None,
                "models": dict(self.models), "low_below": LOW_SHARE, "low": self.low}


def kernel_shares(proj: Projection) -> KernelShares:
    """The projection's finite shares; one step of every model is the single model's own with one model."""
    shares = {str(m): float(v) for m, v in zip(proj.table["model"], proj.table["share"], strict=True)
              if isinstance(v, (int, float, np.floating)) and math.isfinite(v)}
    models = {m: v for m, v in shares.items() if m != ALL_MODELS}
    overall = shares.get(ALL_MODELS, next(iter(models.values()), math.nan))
    return KernelShares(overall, models)


def low_share_line(shares: KernelShares, size: str | None) -> str | None:
    """One sentence when the Inductor kernels are a small share of the step (all models together, else the models
    below `LOW_SHARE`); None when they are not, or nothing was attributed."""
    low = shares.low
    if not low:
        return None
    at_size = f" at {size} size" if size else ""
    # Measured (docs/models.md): small raises the share only a little on the CPU, where the GEMMs and attention are
    # library calls, not Inductor's kernels; no CPU size took most models past LOW_SHARE.
    hint = (" (`--size small`, hidden size 256, gives them a somewhat larger share on the CPU, where the GEMMs and "
            "attention stay library calls)") if size == "tiny" else ""
    if shares.all_models < LOW_SHARE:
        values = shares.models.values()
        spread = f"; per model {_pct(min(values))}–{_pct(max(values))}" if len(shares.models) > 1 else ""
        return (f"Inductor kernels are only {_pct(shares.all_models)} of the compiled latency{at_size}{spread} "
                "(standalone kernel time per call / compiled latency, base): the rest is library calls (GEMMs, "
                "attention), the wrapper and the host, so the models' latency says little about the kernels, and a "
                f"kernel change that matters at a real hidden size may not show here{hint}.")
    named = ", ".join(f"`{m}` {_pct(shares.models[m])}" for m in low)
    return (f"Inductor kernels are below {_pct(LOW_SHARE)} of the compiled latency in {len(low)} of "
            f"{len(shares.models)} model(s){at_size}: {named}; those models' latency says little about their "
            f"kernels{hint}.")


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"
