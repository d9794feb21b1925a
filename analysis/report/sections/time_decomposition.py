"""Where the PR's time went: the measured change of a model's step, split into what the kernels explain.

Per model (and for one step of every model together), with each kernel's time per step = its standalone median
× its launches per step (`analysis.kernels.compare`), a kernel that k models launch counting 1/k for each
(`analysis.report.sections.projection.kernel_owners`, each side by its own `graphs`):

* **changed code**: Σ(PR − base) time of the paired kernels whose normalised code or shapes differ;
* **identical code**: the same over the pairs with identical code and shapes: the in-run control, ≈ 0 unless
  the machine drifted between the sides (NaN for a model none of whose pairs has identical code);
* **fusion changes**: Σ PR-only − Σ base-only kernel time (`analysis.kernels.fusion_changes`), plus the change in the
  number of launches per step × the measured cost of one launch (`foundation.formats.launch_cost`, both sides' mean);
* **remainder** = measured change − the three above: what the wrapper and the host do between kernels
  (Python, allocations, extern calls such as aten matmuls) and how far the standalone timings are from the
  kernels' time inside the graph.

With per-round samples, the kernel components are also formed round by round (base and PR round i ran together)
and their sum gets a Student-t interval over rounds; the remainder's interval combines it with the measured
change's (independent rounds: the half-widths add in quadrature), so a remainder is shown with how well it is
known rather than as a share "explained".

The measured change is PR − base of the model's step as the paired model rounds estimate it
(`analysis.models.compare`: base step × (1 / speedup − 1), the estimate the verdict uses), with the range its
interval implies; the "(all models)" row uses the estimate for one step of every model together. The components add
up to it by construction; the remainder's size is what says how much of the change the kernels explain."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.kernels.compare import IDENTICAL_CODE, KernelComparison
from analysis.models.compare import ModelComparison
from analysis.report.sections.projection import ALL_MODELS, common_rounds, kernel_owners, model_round_ms
from analysis.stats.verdict import t_interval
from foundation.formats.launch_cost import LaunchCost

COMPONENTS = (("changed_code_ms", "paired kernels, code changed"),
              ("identical_code_ms", "paired kernels, identical code (control)"),
              ("fusion_ms", "fusion changes (unpaired kernels + launches × cost)"),
              ("remainder_ms", "remainder (wrapper / host)"))
DECOMPOSITION_COLUMNS = ("model", "base_ms", "pr_ms", "measured_delta_ms", "measured_low_ms", "measured_high_ms",
                         "changed_code_ms", "identical_code_ms", "fusion_kernels_ms", "base_launches",
                         "pr_launches", "launch_ms", "fusion_ms", "kernels_low_ms", "kernels_high_ms",
                         "remainder_ms", "remainder_low_ms", "remainder_high_ms", "explained_share")


@dataclass(frozen=True)
class Decomposition:
    table: pd.DataFrame  # DECOMPOSITION_COLUMNS; per model, then the ALL_MODELS row
    launch_cost_us: float | None  # the per-launch cost used (None: not measured; launches then count 0)
    launch_cost_source: str  # where that figure comes from, in words
    unattributed: int  # kernels no compared model claims (left out of every row)

    @property
    def control_missing(self) -> bool:
        """Some model has no pair with identical code: its control component is NaN."""
        return bool(self.table["identical_code_ms"].isna().any())


def _per_model(values: pd.Series, graphs: pd.Series, models: list[str]) -> tuple[dict[str, float], int]:
    """Σ value / k per model over the kernels (k = how many of ``models`` launch it); and the unclaimed count."""
    totals = dict.fromkeys(models, 0.0)
    unclaimed = 0
    for value, cell in zip(values, graphs, strict=True):
        owners = kernel_owners(str(cell), models)
        if not owners:
            unclaimed += 1
            continue
        if not (isinstance(value, (int, float, np.floating)) and math.isfinite(float(value))):
            continue  # a kernel without a timing on a side adds nothing it could be blamed for
        for model in owners:
            totals[model] += float(value) / len(owners)
    return totals, unclaimed


def launch_cost_figure(base: LaunchCost | None, pr: LaunchCost | None) -> tuple[float | None, str]:
    """The cost of one launch, in µs, used for both sides (their mean), and where it comes from."""
    values = {side: c.per_launch_us for side, c in (("base", base), ("PR", pr)) if c is not None}
    measured = {side: v for side, v in values.items() if v is not None}
    if not measured:
        reasons = [c.reason for c in (base, pr) if c is not None and c.reason]
        why = reasons[0] if reasons else "no launch_cost.json in this run (made before the launch-cost stage)"
        return None, f"not measured ({why}); launches counted at 0"
    figure = float(np.mean(list(measured.values())))
    detail = ", ".join(f"{side} {v:.3f} µs" for side, v in measured.items())
    method = next(c.method for c in (base, pr) if c is not None and c.per_launch_us is not None)
    return figure, f"{figure:.3f} µs per launch ({detail}; launch_cost.json: {method})"


def _kernel_rounds(kc: KernelComparison, models: list[str]) -> dict[str, np.ndarray]:
    """Per model and round, Σ (PR − base) kernel time per step over every paired and unpaired kernel ({} without
    two or more rounds on both sides)."""
    base_rounds, pr_rounds = kc.round_ms.get("base", {}), kc.round_ms.get("pr", {})
    n = common_rounds(kc.round_ms)
    if n < 2:
        return {}
    pairs, ob, op = kc.table, kc.only_base, kc.only_pr
    sides = [model_round_ms(pairs[f"{s}_path"], pairs[f"{s}_graphs"], pairs[f"{s}_calls"], pairs[f"{s}_median_ms"],
                            models, rounds, n) for s, rounds in (("base", base_rounds), ("pr", pr_rounds))]
    unpaired = [model_round_ms(f["path"], f["graphs"], f["calls"], f["median_ms"], models, rounds, n)
                for f, rounds in ((ob, base_rounds), (op, pr_rounds))]
    return {m: (sides[1][m] + unpaired[1][m]) - (sides[0][m] + unpaired[0][m]) for m in models}


def _half_width(per_round: np.ndarray | None, confidence: float) -> float:
    """Half the t interval over rounds of a per-round series (NaN without one)."""
    if per_round is None or len(per_round) < 2 or not np.isfinite(per_round).all():
        return math.nan
    mean, low, _, _ = t_interval(per_round, confidence)
    return mean - low


def _with_intervals(row: dict[str, Any], per_round: np.ndarray | None, confidence: float) -> dict[str, Any]:
    """The kernels' sum and the remainder with their intervals (see the module docstring)."""
    kernels = row["changed_code_ms"] + _known(row["identical_code_ms"]) + row["fusion_kernels_ms"]
    half_k = _half_width(per_round, confidence)
    half_m = (row["measured_high_ms"] - row["measured_low_ms"]) / 2
    half_r = math.hypot(half_k, half_m) if math.isfinite(half_k) and math.isfinite(half_m) else math.nan
    remainder = row["remainder_ms"]
    return {**row, "kernels_low_ms": kernels - half_k, "kernels_high_ms": kernels + half_k,
            "remainder_low_ms": remainder - half_r, "remainder_high_ms": remainder + half_r}


def decompose(kc: KernelComparison, mc: ModelComparison, base_cost: LaunchCost | None = None,
              pr_cost: LaunchCost | None = None, confidence: float = 0.95) -> Decomposition:
    compared = mc.table[mc.table["verdict"] != "failed"]
    models = compared["model"].astype(str).tolist()
    cost_us, source = launch_cost_figure(base_cost, pr_cost)
    pairs = kc.table
    identical = (pairs["matched_by"] == IDENTICAL_CODE).to_numpy(dtype=bool)

    def side_sum(frame: pd.DataFrame, column: str, graphs: str) -> dict[str, float]:
        return _per_model(frame[column], frame[graphs], models)[0]

    changed_b = side_sum(pairs[~identical], "base_ms_per_step", "base_graphs")
    changed_p = side_sum(pairs[~identical], "pr_ms_per_step", "pr_graphs")
    same_b = side_sum(pairs[identical], "base_ms_per_step", "base_graphs")
    same_p = side_sum(pairs[identical], "pr_ms_per_step", "pr_graphs")
    only_b = side_sum(kc.only_base, "ms_per_step", "graphs")
    only_p = side_sum(kc.only_pr, "ms_per_step", "graphs")
    launches_b = _add(side_sum(pairs, "base_calls", "base_graphs"), side_sum(kc.only_base, "calls", "graphs"))
    launches_p = _add(side_sum(pairs, "pr_calls", "pr_graphs"), side_sum(kc.only_pr, "calls", "graphs"))
    unclaimed = sum(_per_model(frame["calls" if "calls" in frame else "base_calls"], frame[graphs], models)[1]
                    for frame, graphs in ((pairs, "base_graphs"), (kc.only_base, "graphs"), (kc.only_pr, "graphs")))
    rows = []
    per_round = _kernel_rounds(kc, models)
    control_pairs = _per_model(pd.Series(1.0, index=pairs.index)[identical], pairs.loc[identical, "base_graphs"],
                               models)[0]
    for model, base_ms, speedup, low, high in zip(compared["model"], compared["base_latency_ms"],
                                                  compared["speedup"], compared["ci_low"], compared["ci_high"],
                                                  strict=True):
        rows.append(_with_intervals(
            _row(str(model), float(base_ms), _change(float(base_ms), speedup), _range(float(base_ms), low, high),
                 changed_p[model] - changed_b[model],
                 same_p[model] - same_b[model] if control_pairs[model] else math.nan,
                 only_p[model] - only_b[model], launches_b[model], launches_p[model], cost_us),
            per_round.get(str(model)), confidence))
    table = pd.DataFrame(rows, columns=list(DECOMPOSITION_COLUMNS))
    if len(table) > 1:
        total = mc.summary.total_latency
        base_total = float(table["base_ms"].sum())
        summed = {c: float(table[c].sum()) for c in DECOMPOSITION_COLUMNS[1:] if c != "explained_share"}
        # One step of every model: its own paired estimate (the sum of the models' changes is not one).
        summed["measured_delta_ms"] = _change(base_total, total.speedup)
        summed["pr_ms"] = base_total + summed["measured_delta_ms"]
        summed["measured_low_ms"], summed["measured_high_ms"] = _range(base_total, total.ci_low, total.ci_high)
        summed["identical_code_ms"] = (float(table["identical_code_ms"].sum())
                                       if table["identical_code_ms"].notna().any() else math.nan)
        summed["remainder_ms"] = summed["measured_delta_ms"] - sum(
            _known(summed[c]) for c in ("changed_code_ms", "identical_code_ms", "fusion_ms"))
        summed["explained_share"] = _explained(summed["measured_delta_ms"], summed["remainder_ms"])
        every = np.sum([per_round[m] for m in models], axis=0) if per_round else None
        table = pd.concat([table, pd.DataFrame([_with_intervals({"model": ALL_MODELS, **summed}, every, confidence)])],
                          ignore_index=True)
    return Decomposition(table, cost_us, source, unclaimed)


def _add(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in a}


def _known(value: float) -> float:
    """A component that does not exist for a model (no pair with identical code) adds nothing."""
    return value if math.isfinite(value) else 0.0


def _change(base_ms: float, speedup: float) -> float:
    """PR − base of one step implied by the paired speedup estimate (base / PR) on the base step."""
    return base_ms / speedup - base_ms if math.isfinite(speedup) and speedup > 0 else math.nan


def _range(base_ms: float, ci_low: float, ci_high: float) -> tuple[float, float]:
    """PR − base implied by the speedup interval (speedup = base / PR, so its upper end is the smaller change)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_low <= 0 or ci_high <= 0:
        return math.nan, math.nan
    return base_ms / ci_high - base_ms, base_ms / ci_low - base_ms


def _explained(measured: float, remainder: float) -> float:
    """Share of the measured change the kernel components account for (1 − remainder / measured)."""
    return 1.0 - remainder / measured if measured and math.isfinite(measured) else math.nan


def _row(model: str, base_ms: float, measured: float, measured_range: tuple[float, float], changed: float,
         identical: float, fusion_kernels: float, base_launches: float, pr_launches: float,
         cost_us: float | None) -> dict[str, object]:
    launch_ms = (pr_launches - base_launches) * cost_us / 1000.0 if cost_us is not None else 0.0
    fusion = fusion_kernels + launch_ms
    remainder = measured - changed - _known(identical) - fusion
    return {"model": model, "base_ms": base_ms, "pr_ms": base_ms + measured, "measured_delta_ms": measured,
            "measured_low_ms": measured_range[0], "measured_high_ms": measured_range[1],
            "changed_code_ms": changed, "identical_code_ms": identical, "fusion_kernels_ms": fusion_kernels,
            "base_launches": base_launches, "pr_launches": pr_launches, "launch_ms": launch_ms,
            "fusion_ms": fusion, "remainder_ms": remainder, "explained_share": _explained(measured, remainder)}
