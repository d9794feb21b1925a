"""Kernel-level comparison of two ``kernels.csv`` tables (base vs PR).

Three parts:

* **pairing** (`pair_kernels`): kernels are matched by ``body_hash``+``shape_key`` first (robust to renumbering),
  then by the seed's ``legacy_key``, then by ``kernel_name``. Each stage only sees rows the earlier stages left;
  rows that share a key on one side are paired in a fixed order (path, name) one to one, never as a cartesian
  product, and leftovers fall through to the next stage or end up "only in base / only in PR".
* **per-kernel statistics** (`compare_kernels`): speedup = base median / PR median, a two-sided Mann–Whitney U
  test on the raw samples plus an effect threshold, and a noise flag (CV ≥ 10 % on either side, pyperf's rule).
* **summary**: geometric mean of speedups with a BCa bootstrap CI on log speedups, the time-weighted speedup
  Σbase/Σpr (weighted by launches per step), and per-category geomeans.

`seed_compare` re-implements the seed's ``kernel_perf_simple.py`` exactly (its filters, its inner join with
duplicates, its geomean), so a user can check that prbench reproduces the number they used to get.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.errors import UserError

# The data contract of kernels.csv (docs/architecture.md): index columns + timing columns.
INDEX_COLUMNS = ("category", "kernel_name", "body_hash", "shape_key", "legacy_key", "path", "calls", "graphs",
                 "backend", "source")
TIMING_COLUMNS = ("n", "median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s", "status", "error")
KERNEL_COLUMNS = INDEX_COLUMNS + TIMING_COLUMNS
_TEXT_COLUMNS = ("category", "kernel_name", "body_hash", "shape_key", "legacy_key", "path", "graphs", "backend",
                 "source", "status", "error")
_NUMERIC_COLUMNS = ("calls", "n", "median_ms", "mean_ms", "std_ms", "min_ms", "gb", "gb_per_s")

# The seed's CSV (run_triton_new.sh); kernels_seed.csv in a run directory has the same header.
SEED_COLUMNS = ("relative_dir", "filename", "kernel_name", "ms_per_call", "gb_per_s")
SEED_MIN_MS = 0.008  # kernel_perf_simple.py: `threshold = 0.008`
SEED_NAME_PATTERN = r"^triton_poi_"  # kernel_perf_simple.py keeps pointwise kernels only

MATCH_METHODS = ("body_hash+shape_key", "legacy_key", "kernel_name")
VERDICTS = ("improved", "regressed", "unchanged", "noisy", "failed")


# --- reading ---------------------------------------------------------------------------------------------


def read_table(path: Path, required: tuple[str, ...], what: str, dtype: dict[str, Any] | None = None) -> pd.DataFrame:
    """Read a CSV or raise a one-line UserError naming the file (missing, empty, unparsable, wrong columns)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: file not found (expected {what})")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: empty file (expected {what} with header {','.join(required)})")
    try:
        frame = pd.read_csv(path, dtype=dtype)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: cannot parse as {what} ({first})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise UserError(f"{path}: not {what}: missing column(s) {', '.join(missing)}")
    if frame.empty:
        raise UserError(f"{path}: {what} has a header but no rows")
    return frame


def read_kernels_csv(path: Path) -> pd.DataFrame:
    """Read a kernels.csv; identity columns stay text (hashes such as ``1e10`` must not become floats)."""
    frame = read_table(path, KERNEL_COLUMNS, "a kernels.csv", dtype={c: str for c in _TEXT_COLUMNS})
    return normalize_kernels(frame)


def normalize_kernels(frame: pd.DataFrame) -> pd.DataFrame:
    """Fill missing identity text with "" and coerce timing columns to numbers (bad cells become NaN)."""
    frame = frame.copy()
    for col in _TEXT_COLUMNS:
        if col in frame.columns:
            frame[col] = frame[col].fillna("").astype(str).str.strip()
    for col in _NUMERIC_COLUMNS:
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce")
    return frame.reset_index(drop=True)


def check_kernels_frame(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """Validate a DataFrame handed over in Python (not read from disk) against the kernels.csv contract."""
    missing = [c for c in KERNEL_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"{label}: not a kernels table: missing column(s) {', '.join(missing)}")
    return normalize_kernels(frame)


def read_samples_json(path: Path) -> dict[str, list[float]]:
    """Read kernel_samples.json: ``{organized relative path: [ms, ...]}``."""
    data = _read_json(path, "kernel_samples.json")
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise UserError(f"{path}: expected an object mapping kernel paths to lists of milliseconds")
    try:
        return {str(k): [float(x) for x in v] for k, v in data.items()}
    except (TypeError, ValueError):
        raise UserError(f"{path}: sample lists must hold numbers (milliseconds)") from None


def _read_json(path: Path, what: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: file not found (expected {what})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc.__class__.__name__}: {str(exc).splitlines()[0]})") from None


# --- pairing ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairingSummary:
    """How the pairs were found; rendered in the report so a reader can judge the matching."""

    by_method: dict[str, int]
    only_base: int
    only_pr: int
    duplicate_keys: int  # keys seen more than once on a side (paired one to one in path order)

    @property
    def paired(self) -> int:
        return sum(self.by_method.values())


@dataclass(frozen=True)
class Pairing:
    pairs: pd.DataFrame  # columns: base_row, pr_row, matched_by
    only_base: list[int]
    only_pr: list[int]
    summary: PairingSummary


def _stage_keys(frame: pd.DataFrame, method: str) -> pd.Series:
    """The key of one matching stage; "" means "this row cannot be matched this way"."""
    if method == "body_hash+shape_key":
        ok = frame["body_hash"] != ""
        return (frame["body_hash"] + "|" + frame["shape_key"]).where(ok, "")
    return frame[method]


def _grouped(frame: pd.DataFrame, rows: list[int], keys: pd.Series) -> dict[str, list[int]]:
    """Rows per key in a fixed order (path, kernel_name, row) so duplicate keys pair deterministically."""
    paths, names, key_list = frame["path"].tolist(), frame["kernel_name"].tolist(), keys.tolist()
    order = sorted(rows, key=lambda r: (paths[r], names[r], r))
    groups: dict[str, list[int]] = {}
    for r in order:
        key = key_list[r]
        if key:
            groups.setdefault(key, []).append(r)
    return groups


def pair_kernels(base: pd.DataFrame, pr: pd.DataFrame) -> Pairing:
    """Pair base and PR kernels in three stages; see the module docstring for the rules."""
    base_left = list(range(len(base)))
    pr_left = list(range(len(pr)))
    records: list[tuple[int, int, str]] = []
    by_method: dict[str, int] = {}
    duplicates = 0
    for method in MATCH_METHODS:
        base_groups = _grouped(base, base_left, _stage_keys(base, method))
        pr_groups = _grouped(pr, pr_left, _stage_keys(pr, method))
        matched_base: set[int] = set()
        matched_pr: set[int] = set()
        for key, b_rows in base_groups.items():
            p_rows = pr_groups.get(key)
            if not p_rows:
                continue
            duplicates += len(b_rows) > 1 or len(p_rows) > 1
            for b, p in zip(b_rows, p_rows, strict=False):  # one to one; extras fall through
                records.append((b, p, method))
                matched_base.add(b)
                matched_pr.add(p)
        by_method[method] = len(matched_base)
        base_left = [r for r in base_left if r not in matched_base]
        pr_left = [r for r in pr_left if r not in matched_pr]
    pairs = pd.DataFrame(records, columns=["base_row", "pr_row", "matched_by"])
    summary = PairingSummary(by_method, len(base_left), len(pr_left), duplicates)
    return Pairing(pairs, base_left, pr_left, summary)


# --- statistics ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompareSettings:
    threshold: float = 0.05  # relative effect below which a change is "unchanged"
    alpha: float = 0.05  # Mann–Whitney significance level
    noise_cv: float = 0.10  # CV (std/mean) at or above which a side is "noisy" (pyperf's warning level)
    min_ms: float = 0.0  # pairs whose slower side is below this are left out of the summary
    n_resamples: int = 9999
    confidence: float = 0.95
    seed: int = 0  # bootstrap RNG seed: the same inputs always give the same CI

    def validate(self) -> None:
        if not 0 <= self.threshold < 10:
            raise UserError(f"--threshold {self.threshold}: expected a fraction such as 0.05")
        if not 0 < self.alpha < 1:
            raise UserError(f"--alpha {self.alpha}: expected a probability such as 0.05")
        if self.min_ms < 0:
            raise UserError(f"--min-ms {self.min_ms}: expected a non-negative number of milliseconds")


def classify(speedup: float, p_value: float, tested: bool, cv_base: float, cv_pr: float,
             settings: CompareSettings) -> str:
    """improved / regressed / unchanged / noisy for one pair (failed pairs are decided by the caller).

    The effect is symmetric in log space: improved when speedup ≥ 1+t, regressed when speedup ≤ 1/(1+t).
    Without a usable test (no or too few samples) the threshold alone decides. A side with CV ≥ noise_cv is
    noisy: its pair is called changed only when the effect is also larger than that spread (a 35 % change
    measured with 12 % spread is a change; a 7 % one is not), and never "unchanged" — noise cannot vouch
    for the absence of a change.
    """
    spread = max(_nan_to(cv_base, 0.0), _nan_to(cv_pr, 0.0))
    noisy = spread >= settings.noise_cv
    effect = abs(math.log(speedup))
    if effect < math.log1p(settings.threshold) or (tested and not p_value < settings.alpha):
        return "noisy" if noisy else "unchanged"
    if noisy and effect < math.log1p(spread):
        return "noisy"
    return "improved" if speedup > 1 else "regressed"


def _nan_to(x: float, default: float) -> float:
    return default if x is None or not math.isfinite(x) else x


def min_two_sided_p(n: int, m: int) -> float:
    """Smallest p an exact two-sided Mann–Whitney test can give: 2 / C(n+m, n) (asv's reasoning)."""
    return min(1.0, 2.0 / math.comb(n + m, n))


def mann_whitney(pairs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Two-sided Mann–Whitney U p-values, vectorised over pairs with the same sample counts."""
    from scipy.stats import mannwhitneyu

    out = np.full(len(pairs), np.nan)
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(pairs):
        by_shape.setdefault((len(x), len(y)), []).append(i)
    for idx in by_shape.values():
        xs = np.vstack([pairs[i][0] for i in idx])
        ys = np.vstack([pairs[i][1] for i in idx])
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            p = mannwhitneyu(xs, ys, axis=1, alternative="two-sided", method="auto").pvalue
        out[idx] = np.where(np.isfinite(p), p, 1.0)  # all-tied samples give NaN: no evidence of a change
    return out


@dataclass(frozen=True)
class GeomeanCI:
    geomean: float
    low: float
    high: float
    n: int
    method: str  # how the interval was obtained (or why there is none)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def geomean_ci(speedups: np.ndarray, settings: CompareSettings, unit: str = "kernels") -> GeomeanCI:
    """Geomean of speedups with a bootstrap CI: BCa on log speedups (resampling ``unit``), then exp."""
    from scipy.stats import bootstrap

    logs = np.log(np.asarray(speedups, dtype=float))
    n = len(logs)
    if n == 0:
        return GeomeanCI(math.nan, math.nan, math.nan, 0, f"no {unit} to summarise")
    g = float(np.exp(logs.mean()))
    if n < 3:
        return GeomeanCI(g, math.nan, math.nan, n, f"no CI: {n} of {unit}, a bootstrap needs at least 3")
    if np.ptp(logs) == 0:
        return GeomeanCI(g, g, g, n, "all speedups are equal: the interval is a point")
    label = (f"{settings.confidence:.0%} BCa bootstrap over {unit}, {settings.n_resamples} resamples, "
             f"seed {settings.seed}")
    for method in ("BCa", "percentile"):  # BCa can degenerate on tiny or lumpy data; percentile then
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            res = bootstrap((logs,), np.mean, n_resamples=settings.n_resamples, batch=500, method=method,
                            confidence_level=settings.confidence, rng=np.random.default_rng(settings.seed))
        low, high = res.confidence_interval
        if math.isfinite(low) and math.isfinite(high):
            if method != "BCa":
                label = label.replace("BCa", "percentile (BCa degenerate)")
            return GeomeanCI(g, float(np.exp(low)), float(np.exp(high)), n, label)
    return GeomeanCI(g, math.nan, math.nan, n, "no CI: the bootstrap did not converge")


def geomean(values: pd.Series | np.ndarray) -> float:
    arr = np.asarray(values, dtype=float)
    return float(np.exp(np.log(arr).mean())) if len(arr) else math.nan


# --- comparison ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelSummary:
    n_pairs: int
    n_summarised: int  # pairs in the geomean: both sides ok and above min_ms
    n_failed: int
    n_below_min: int
    ci: GeomeanCI
    time_weighted: float  # Σ base ms per step / Σ PR ms per step
    weighted_by: str
    verdicts: dict[str, int]
    n_tested: int  # pairs decided with Mann–Whitney (the rest by threshold only)
    base_ms_only: float  # per-step time of kernels that exist only in base / only in PR
    pr_ms_only: float


@dataclass
class KernelComparison:
    table: pd.DataFrame  # one row per pair, sorted by priority (see `_priority_order`)
    only_base: pd.DataFrame
    only_pr: pd.DataFrame
    categories: pd.DataFrame
    pairing: PairingSummary
    summary: KernelSummary
    settings: CompareSettings
    notes: list[str] = field(default_factory=list)


def _weights(frame: pd.DataFrame) -> tuple[pd.Series, bool]:
    """Launches per step; a missing or non-positive count counts as one launch."""
    calls = frame["calls"] if "calls" in frame.columns else pd.Series(np.nan, index=frame.index)
    present = bool(calls.notna().any())
    return calls.where(calls > 0, 1.0).fillna(1.0).astype(float), present


def _sample_stats(rows: pd.DataFrame, samples: dict[str, list[float]] | None) -> tuple[list, pd.Series]:
    """Per row: the raw samples (or None) and the CV (from samples, else std_ms/mean_ms from the CSV)."""
    arrays: list[np.ndarray | None] = []
    cvs: list[float] = []
    for path, std, mean in zip(rows["path"], rows["std_ms"], rows["mean_ms"], strict=True):
        arr = np.asarray(samples.get(path, []), dtype=float) if samples else np.empty(0)
        arr = arr[np.isfinite(arr)]
        if len(arr) >= 2 and arr.mean() > 0:
            arrays.append(arr)
            cvs.append(float(arr.std(ddof=1) / arr.mean()))
        else:
            arrays.append(None)
            cvs.append(float(std / mean) if mean and math.isfinite(mean) and mean > 0 else math.nan)
    return arrays, pd.Series(cvs, index=rows.index, dtype=float)


def _side(frame: pd.DataFrame, rows: list[int], samples: dict[str, list[float]] | None, prefix: str
          ) -> tuple[pd.DataFrame, list]:
    part = frame.iloc[rows].reset_index(drop=True)
    arrays, cv = _sample_stats(part, samples)
    weights, _ = _weights(part)
    ok = (part["status"].str.lower().isin(["ok", ""])) & (part["median_ms"] > 0)
    out = pd.DataFrame({
        f"{prefix}_name": part["kernel_name"], f"{prefix}_path": part["path"],
        f"{prefix}_median_ms": part["median_ms"], f"{prefix}_cv": cv, f"{prefix}_n": part["n"],
        f"{prefix}_calls": weights, f"{prefix}_ms_per_step": part["median_ms"] * weights,
        f"{prefix}_ok": ok, f"{prefix}_status": part["status"], f"{prefix}_error": part["error"],
    })
    return out, arrays


def _test_pairs(base_arrays: list, pr_arrays: list, alpha: float) -> tuple[np.ndarray, list[str]]:
    """p-values where both sides have enough samples for the test to reach alpha; a label for every row."""
    labels: list[str] = []
    todo: list[int] = []
    for i, (x, y) in enumerate(zip(base_arrays, pr_arrays, strict=True)):
        if x is None or y is None:
            labels.append("threshold only (no samples)")
        elif min_two_sided_p(len(x), len(y)) >= alpha:
            labels.append(f"threshold only ({len(x)}+{len(y)} samples cannot reach alpha)")
        else:
            labels.append("mann-whitney")
            todo.append(i)
    p = np.full(len(labels), np.nan)
    if todo:
        p[todo] = mann_whitney([(base_arrays[i], pr_arrays[i]) for i in todo])
    return p, labels


def _pair_table(base: pd.DataFrame, pr: pd.DataFrame, pairing: Pairing, samples_base, samples_pr,
                settings: CompareSettings) -> pd.DataFrame:
    b_rows = pairing.pairs["base_row"].tolist()
    p_rows = pairing.pairs["pr_row"].tolist()
    b, b_arrays = _side(base, b_rows, samples_base, "base")
    p, p_arrays = _side(pr, p_rows, samples_pr, "pr")
    ident = base.iloc[b_rows].reset_index(drop=True)
    table = pd.concat([ident[["category", "body_hash", "shape_key", "legacy_key"]], b, p], axis=1)
    table.insert(0, "matched_by", pairing.pairs["matched_by"].to_numpy())
    both_ok = table["base_ok"] & table["pr_ok"]
    table["speedup"] = np.where(both_ok, table["base_median_ms"] / table["pr_median_ms"], np.nan)
    table["change_pct"] = (1.0 / table["speedup"] - 1.0) * 100.0  # PR time vs base time; negative = faster
    p_values, tests = _test_pairs(b_arrays, p_arrays, settings.alpha)
    table["p_value"] = p_values
    table["test"] = tests
    verdicts = []
    for row in table.itertuples(index=False):
        if not (row.base_ok and row.pr_ok):
            verdicts.append("failed")
        else:
            tested = row.test == "mann-whitney"
            verdicts.append(classify(row.speedup, row.p_value, tested, row.base_cv, row.pr_cv, settings))
    table["verdict"] = verdicts
    slower = table[["base_median_ms", "pr_median_ms"]].max(axis=1)
    table["in_summary"] = both_ok & (slower >= settings.min_ms)
    return _priority_order(table)


_VERDICT_RANK = {"regressed": 0, "improved": 1, "noisy": 2, "failed": 3, "unchanged": 4}


def _priority_order(table: pd.DataFrame) -> pd.DataFrame:
    """Regressions first, then improvements, noisy, failed, unchanged; within each, the largest effect first.

    Truncated tables in the report keep the head of this order, so the rows a reviewer needs come first.
    """
    effect = np.abs(np.log(table["speedup"].astype(float))).fillna(0.0)
    key = pd.DataFrame({"rank": table["verdict"].map(_VERDICT_RANK), "effect": -effect,
                        "time": -table["base_ms_per_step"].fillna(0.0), "name": table["base_name"]})
    order = key.sort_values(["rank", "effect", "time", "name"], kind="stable").index
    return table.loc[order].reset_index(drop=True)


def _unpaired(frame: pd.DataFrame, rows: list[int]) -> pd.DataFrame:
    part = frame.iloc[rows].reset_index(drop=True)
    weights, _ = _weights(part)
    cols = ["category", "kernel_name", "body_hash", "shape_key", "legacy_key", "path", "median_ms", "status"]
    out = part[cols].copy()
    out["calls"] = weights
    out["ms_per_step"] = part["median_ms"] * weights
    return out.sort_values(["ms_per_step", "kernel_name"], ascending=[False, True], na_position="last",
                           kind="stable").reset_index(drop=True)


def time_weighted(table: pd.DataFrame) -> float:
    """Σ base ms per step / Σ PR ms per step: the speedup of the paired kernels as a workload."""
    pr_total = float(table["pr_ms_per_step"].sum())
    return float(table["base_ms_per_step"].sum()) / pr_total if pr_total > 0 else math.nan


def category_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per category: counts, geomean and time-weighted speedup of the summarised pairs."""
    used = table[table["in_summary"]]
    rows = []
    for cat, grp in used.groupby("category", sort=True):
        counts = grp["verdict"].value_counts()
        rows.append({
            "category": cat or "(none)", "kernels": len(grp), "geomean": geomean(grp["speedup"]),
            "time_weighted": time_weighted(grp), "base_ms_per_step": float(grp["base_ms_per_step"].sum()),
            "pr_ms_per_step": float(grp["pr_ms_per_step"].sum()),
            **{v: int(counts.get(v, 0)) for v in ("improved", "regressed", "unchanged", "noisy")},
        })
    cols = ["category", "kernels", "geomean", "time_weighted", "base_ms_per_step", "pr_ms_per_step",
            "improved", "regressed", "unchanged", "noisy"]
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(["base_ms_per_step", "category"], ascending=[False, True]).reset_index(drop=True)


def compare_kernels(base: pd.DataFrame, pr: pd.DataFrame, samples_base: dict[str, list[float]] | None = None,
                    samples_pr: dict[str, list[float]] | None = None,
                    settings: CompareSettings | None = None) -> KernelComparison:
    """Pair, test and summarise two kernels tables (as read by `read_kernels_csv`)."""
    settings = settings or CompareSettings()
    settings.validate()
    base = check_kernels_frame(base, "base kernels")
    pr = check_kernels_frame(pr, "PR kernels")
    pairing = pair_kernels(base, pr)
    table = _pair_table(base, pr, pairing, samples_base, samples_pr, settings)
    only_base = _unpaired(base, pairing.only_base)
    only_pr = _unpaired(pr, pairing.only_pr)
    used = table[table["in_summary"]]
    _, calls_present = _weights(pd.concat([base, pr], ignore_index=True))
    summary = KernelSummary(
        n_pairs=len(table), n_summarised=len(used), n_failed=int((table["verdict"] == "failed").sum()),
        n_below_min=int(((table["verdict"] != "failed") & ~table["in_summary"]).sum()),
        ci=geomean_ci(used["speedup"].to_numpy(), settings), time_weighted=time_weighted(used),
        weighted_by="launches per step (`calls`)" if calls_present else "one launch per kernel (no `calls`)",
        verdicts={v: int((used["verdict"] == v).sum()) for v in VERDICTS if v != "failed"},
        n_tested=int((table["test"] == "mann-whitney").sum()),
        base_ms_only=float(only_base["ms_per_step"].sum()), pr_ms_only=float(only_pr["ms_per_step"].sum()),
    )
    return KernelComparison(table, only_base, only_pr, category_table(table), pairing.summary, summary, settings,
                            _notes(table, summary, samples_base, samples_pr, settings))


def _notes(table: pd.DataFrame, summary: KernelSummary, samples_base, samples_pr,
           settings: CompareSettings) -> list[str]:
    notes = []
    if not samples_base or not samples_pr:
        notes.append("raw samples missing on at least one side: kernels were classified by the "
                     f"{settings.threshold:.0%} threshold only (no Mann–Whitney test)")
    elif summary.n_tested < summary.n_pairs:
        notes.append(f"{summary.n_pairs - summary.n_tested} pair(s) had too few samples for Mann–Whitney to "
                     f"reach alpha={settings.alpha}: classified by the threshold only")
    if summary.n_below_min:
        notes.append(f"{summary.n_below_min} pair(s) faster than --min-ms {settings.min_ms} on both sides "
                     "are listed but left out of the summary")
    if summary.n_failed:
        notes.append(f"{summary.n_failed} pair(s) failed or have no timing on a side: left out of the summary")
    return notes


# --- the seed's kernel_perf_simple.py --------------------------------------------------------------------


@dataclass(frozen=True)
class SeedResult:
    merged: pd.DataFrame  # kernel_name, ms_per_call_ref, ms_per_call_opt, latency_ratio (the seed's out.csv)
    geomean: float
    n_ref: int  # rows left after the seed's filters
    n_opt: int


def read_seed_csv(path: Path) -> pd.DataFrame:
    """Read a seed-format CSV the way the seed does (plain ``pd.read_csv``); only the columns it uses matter."""
    frame = read_table(path, ("kernel_name", "ms_per_call"), "a seed-format kernel CSV (kernels_seed.csv)")
    if not pd.api.types.is_numeric_dtype(frame["ms_per_call"]):
        raise UserError(f"{path}: column ms_per_call holds non-numbers (the seed script would crash here)")
    return frame


def seed_compare(ref: pd.DataFrame, opt: pd.DataFrame) -> SeedResult:
    """kernel_perf_simple.py, step by step (reference = base, optimised = PR)."""
    ref = ref.dropna(subset=["kernel_name", "ms_per_call"])
    opt = opt.dropna(subset=["kernel_name", "ms_per_call"])
    ref = ref[ref["kernel_name"].astype(str).str.match(SEED_NAME_PATTERN)]
    opt = opt[opt["kernel_name"].astype(str).str.match(SEED_NAME_PATTERN)]
    ref = ref[(ref["ms_per_call"] > 0) & (ref["ms_per_call"] > SEED_MIN_MS)]
    # The seed's inner join: a name present k times in ref and m times in opt yields k*m rows, on purpose here.
    merged = pd.merge(ref, opt, on="kernel_name", suffixes=("_ref", "_opt"))
    merged["latency_ratio"] = merged["ms_per_call_ref"] / merged["ms_per_call_opt"]
    result = merged[["kernel_name", "ms_per_call_ref", "ms_per_call_opt", "latency_ratio"]]
    with np.errstate(all="ignore"):
        value = float(np.exp(np.log(result["latency_ratio"]).mean()))
    return SeedResult(result.reset_index(drop=True), value, len(ref), len(opt))
