"""Kernel-level comparison of two ``kernels.csv`` tables (base vs PR).

Three parts:

* **pairing** (`pair_kernels`): kernels are matched by ``body_hash``+``shape_key`` first (robust to renumbering),
  then by the seed's ``legacy_key``, then by the fused ops and shapes whatever the codegen kind
  (``fused_ops_name``+``shape_key``: a persistent reduction that a PR makes a looped one), then by its place
  (``graphs+shape_key``: the one kernel left unpaired with these shapes in exactly these graphs on each side is
  the kernel the PR renamed where it stands, e.g. ``…_log_softmax__unsafe_view_nll_loss_forward_view_3`` →
  ``…_log_softmax_nll_loss_forward_view_4``), then by ``kernel_name``. Each stage only sees rows the earlier
  stages left. Rows that share a key are paired one to one, never as a cartesian product: the candidates
  launched by the same graphs first, then by the same models, then by overlapping ones, and only then in a fixed
  order (path, name), so two same-named kernels of different models do not cross. A fallback key (every stage
  after the first: names and shapes, not code) never pairs kernels whose models differ; leftovers fall through
  to the next stage or end up "only in base / only in PR".
  The paired timing stage pairs with the same function, so it interleaves exactly the pairs compared here.
* **per-pair statistics**: each side's per-round samples (``kernel_samples.json``) become round medians, and
  the paired rounds' blocks (where both sides were timed together) give each round's log ratio; the speedup,
  its interval, its adjusted p-value and its verdict come from `analysis.stats.verdict` (the round is the unit of
  replication). Pairs with the same body and shapes on both sides are the in-run control, except, when the two
  sides ran different compilers of one backend (``compiled_by``: a Triton A/B), that backend's pairs: their
  source is the same but what runs is what each side's compiler made of it, so they are changed pairs. Likewise
  the C++ pairs when the sides build C++ kernels otherwise (``cpp_build``: another torch build, flags or headers,
  `analysis.kernels.cpp_build.cpp_build_difference`): the family's control then falls back as without identical
  pairs (`analysis.stats.verdict`), and the Triton pairs stay the control.
* **summary**: geomean and time-weighted speedups with intervals over rounds, per-category geomeans.

`seed_compare` re-implements the seed's ``kernel_perf_simple.py`` exactly (its filters, its inner join with
duplicates, its geomean), so a user can check that prbench reproduces the number they used to get.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.kernels.identity import fused_ops_name
from analysis.kernels.results import KERNEL_COLUMNS, NUMERIC_KERNEL_COLUMNS, check_row_widths
from analysis.stats.noise_rules import rounds_are_noisy
from analysis.stats.verdict import (
    ControlResult,
    Estimate,
    FamilyData,
    FamilyJudgement,
    block_matrix,
    family_matrix,
    halves_matrix,
    judge_family,
    robust_spread,
    round_medians,
)
from analysis.stats.verdict_settings import VERDICTS, VerdictSettings
from foundation.errors import UserError
from foundation.formats.kernel_index import graph_entries, graph_keys
from foundation.formats.paired_rounds import PairedBlocks, RoundSamples
from foundation.records import check_regular, invalid

# The kernels.csv columns are `analysis.kernels.results`' contract; everything not a number there stays text.
_TEXT_COLUMNS = tuple(c for c in KERNEL_COLUMNS if c not in NUMERIC_KERNEL_COLUMNS)
_NUMERIC_COLUMNS = NUMERIC_KERNEL_COLUMNS

SEED_MIN_MS = 0.008  # kernel_perf_simple.py: `threshold = 0.008`
SEED_NAME_PATTERN = r"^triton_poi_"  # kernel_perf_simple.py keeps pointwise kernels only

MATCH_METHODS = ("body_hash+shape_key", "legacy_key", "ops+shape_key", "graphs+shape_key", "kernel_name")
IDENTICAL_CODE = MATCH_METHODS[0]  # the pairing stage that matched identical code and shapes
PLACE = MATCH_METHODS[3]  # the one kernel of these shapes left in these graphs: renamed in place


# --- reading ---------------------------------------------------------------------------------------------


def read_table(path: Path, required: tuple[str, ...], what: str, dtype: Any = None,
               keep_default_na: bool = True) -> pd.DataFrame:
    """Read a CSV or raise a one-line UserError naming the file (missing, empty, unparsable, wrong columns)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found (expected {what})")
    check_regular(path, what)  # a FIFO or a device is one line, not a read that never ends
    if path.stat().st_size == 0:
        raise UserError(f"{path}: empty file (expected {what} with header {','.join(required)})")
    try:
        frame = pd.read_csv(path, dtype=dtype, keep_default_na=keep_default_na)
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
    """Read a kernels.csv; identity columns stay text (hashes such as ``1e10`` must not become floats).

    Every cell is read as text (``nan`` stays the word, not a missing value) so that only an empty cell counts
    as "no number"; a timing cell that is text, ``nan``, ``inf`` or negative is a UserError naming its line.
    """
    frame = read_table(path, KERNEL_COLUMNS, "a kernels.csv", dtype=str, keep_default_na=False)
    check_row_widths(path, "a kernels.csv")
    return normalize_kernels(frame, where=lambda row: f"{path}: line {row + 2}")


def normalize_kernels(frame: pd.DataFrame, where: Callable[[int], str] | None = None) -> pd.DataFrame:
    """Fill missing identity text with "" and turn timing columns into numbers (an empty cell becomes NaN).

    ``where(row)`` names a row in errors (default: "kernels table: row N"): a timing cell must be empty or a
    finite number ≥ 0 (whole for ``calls`` and ``n``); a kernel cannot take ``inf`` or a negative time.
    """
    frame = frame.copy()
    for col in _TEXT_COLUMNS:
        if col in frame.columns:
            frame[col] = frame[col].fillna("").astype(str).str.strip()
    for col in _NUMERIC_COLUMNS:
        if col in frame.columns:
            frame[col] = _checked_numbers(frame[col], col, where or (lambda row: f"kernels table: row {row + 1}"))
    return frame.reset_index(drop=True)


def _checked_numbers(raw: pd.Series, col: str, where: Callable[[int], str]) -> pd.Series:
    # On numpy arrays rather than Series: each Series operation costs a fixed ~0.1 ms, and a report reads
    # several tables of eight timing columns (the checks were most of the time of reading a small table).
    values = pd.to_numeric(raw, errors="coerce")
    number = values.to_numpy(dtype=float, na_value=np.nan)
    empty = _empty_cells(raw)
    with np.errstate(invalid="ignore"):
        bad = ~empty & ~(np.isfinite(number) & (number >= 0))
        if col in ("calls", "n"):
            bad |= ~empty & np.isfinite(number) & (number != np.round(number))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        kind = "a whole number ≥ 0" if col in ("calls", "n") else "a finite number ≥ 0 (or an empty cell)"
        raise invalid(f"{where(row)}, column {col}", kind, raw.iloc[row])
    return values


def _empty_cells(raw: pd.Series) -> np.ndarray:
    """The cells that mean "no number": missing values and blank text."""
    missing = raw.isna().to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(raw.dtype):
        return missing
    blank = np.fromiter((isinstance(v, str) and not v.strip() for v in raw.tolist()), dtype=bool, count=len(raw))
    return missing | blank


def check_kernels_frame(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """Validate a DataFrame handed over in Python (not read from disk) against the kernels.csv contract."""
    missing = [c for c in KERNEL_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"{label}: not a kernels table: missing column(s) {', '.join(missing)}")
    return normalize_kernels(frame, where=lambda row: f"{label}: row {row + 1}")


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
    if method == "ops+shape_key":
        ok = frame["shape_key"] != ""
        return (frame["kernel_name"].map(fused_ops_name) + "|" + frame["shape_key"]).where(ok, "")
    if method == PLACE:
        # The same graphs (as both sides name them) and the same shapes, whatever the PR named the kernel; only a
        # key left with one row on each side pairs (`pair_kernels`), so the place is unambiguous.
        graphs = frame["graphs"].map(lambda g: ";".join(sorted(graph_keys(g))))
        ok = (frame["shape_key"] != "") & (graphs != "")
        return (frame["category"] + "|" + graphs + "|" + frame["shape_key"]).where(ok, "")
    return frame[method]


def _models(graphs: str) -> frozenset[str]:
    """The models of a `graphs` cell (empty when its entries name no model)."""
    return frozenset(m for m, _, _ in (e.rpartition("/") for e in graph_entries(graphs)) if m)


def _closeness(base_graphs: str, pr_graphs: str) -> tuple[int, int, int, int]:
    """How surely two rows that share a key are the same kernel, largest first: the same graphs, the same
    models, graphs in common, models in common."""
    bg, pg = graph_keys(base_graphs), graph_keys(pr_graphs)
    bm, pm = _models(base_graphs), _models(pr_graphs)
    return (int(bool(bg) and bg == pg), int(bool(bm) and bm == pm), len(bg & pg), len(bm & pm))


def models_differ(base_graphs: str, pr_graphs: str) -> bool:
    """Both rows name their models and the sets are not the same."""
    bm, pm = _models(base_graphs), _models(pr_graphs)
    return bool(bm) and bool(pm) and bm != pm


def _order(frame: pd.DataFrame, rows: list[int]) -> dict[int, int]:
    """Each row's place in the fixed order (path, kernel_name, row) that breaks the remaining ties."""
    paths, names = frame["path"].tolist(), frame["kernel_name"].tolist()
    return {r: i for i, r in enumerate(sorted(rows, key=lambda r: (paths[r], names[r], r)))}


def _grouped(frame: pd.DataFrame, rows: list[int], keys: pd.Series) -> dict[str, list[int]]:
    """Rows per key (rows whose key is "" are left out)."""
    key_list = keys.tolist()
    groups: dict[str, list[int]] = {}
    for r in rows:
        if key_list[r]:
            groups.setdefault(key_list[r], []).append(r)
    return groups


def _match_group(b_graphs: list[str], p_graphs: list[str], b_rows: list[int], p_rows: list[int], fallback: bool,
                 order: tuple[dict[int, int], dict[int, int]]) -> list[tuple[int, int]]:
    """One to one within a key: the closest candidates first (`_closeness`), file order breaking ties; a
    fallback key leaves rows whose models differ unpaired. ``b_graphs``/``p_graphs``: each side's ``graphs``
    column as a list (made once per pairing: a column per key made pairing thousands of kernels quadratic)."""
    candidates = [(b, p) for b in b_rows for p in p_rows
                  if not (fallback and models_differ(b_graphs[b], p_graphs[p]))]
    candidates.sort(key=lambda bp: (tuple(-c for c in _closeness(b_graphs[bp[0]], p_graphs[bp[1]])),
                                    order[0][bp[0]], order[1][bp[1]]))
    used_b: set[int] = set()
    used_p: set[int] = set()
    chosen = []
    for b, p in candidates:
        if b not in used_b and p not in used_p:
            chosen.append((b, p))
            used_b.add(b)
            used_p.add(p)
    return sorted(chosen, key=lambda bp: order[0][bp[0]])


def pair_kernels(base: pd.DataFrame, pr: pd.DataFrame) -> Pairing:
    """Pair base and PR kernels stage by stage; see the module docstring for the rules."""
    base_left = list(range(len(base)))
    pr_left = list(range(len(pr)))
    order = (_order(base, base_left), _order(pr, pr_left))
    graphs = (base["graphs"].tolist(), pr["graphs"].tolist())
    records: list[tuple[int, int, str]] = []
    by_method: dict[str, int] = {}
    duplicates = 0
    for method in MATCH_METHODS:
        base_groups = _grouped(base, base_left, _stage_keys(base, method))
        pr_groups = _grouped(pr, pr_left, _stage_keys(pr, method))
        matched_base: set[int] = set()
        matched_pr: set[int] = set()
        for key, b_rows in sorted(base_groups.items(), key=lambda kv: min(order[0][r] for r in kv[1])):
            p_rows = pr_groups.get(key)
            if not p_rows or (method == PLACE and (len(b_rows) > 1 or len(p_rows) > 1)):
                continue
            duplicates += len(b_rows) > 1 or len(p_rows) > 1
            for b, p in _match_group(*graphs, b_rows, p_rows, method != IDENTICAL_CODE, order):
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
class KernelSummary:
    n_pairs: int
    n_summarised: int  # pairs in the summary: both sides ok and above min_ms
    n_failed: int
    n_below_min: int
    geomean: Estimate  # geomean speedup of the changed pairs with its interval over rounds (secondary figure)
    time_weighted: Estimate  # the step: Σ base ms / Σ PR ms per step over all kernels, identical ones unchanged
    method: str  # how the intervals were obtained
    weighted_by: str
    verdicts: dict[str, int]  # improved / regressed / equivalent / inconclusive among the changed pairs summarised
    verdict: str  # the family's verdict (analysis.stats.verdict.family_verdict)
    rounds: int  # rounds per side (the unit of replication)
    base_ms_only: float  # per-step time of kernels that exist only in base / only in PR
    pr_ms_only: float
    code_changed: int  # pairs whose normalised code or shapes differ
    code_identical: int  # pairs with identical code and shapes (the control family)
    n_changed: int  # changed pairs in the summary (the effect family)
    control_verdicts: dict[str, int]  # the identical pairs' verdicts as their control judged them (an A/A's
    # evidence; improved + regressed = the control's flagged: `FamilyJudgement.control_verdicts`)
    detectable_pct: float  # the step's resolution: smallest change told apart from none, 80 % power, % (NaN: none)
    offsets_used: bool  # pairs were estimated against the identical kernels' per-round mean
    selection_level: float  # level of the intervals shown for the pairs called changed (NaN: none called)
    compiled_anew: int = 0  # pairs of identical source each side's own compiler built (`compare_kernels`' compiled_by)
    compiled_otherwise: int = 0  # C++ pairs of identical source the sides built otherwise (counted as changed)
    compiled_otherwise_why: str = ""  # why (`compare_kernels`' cpp_build); "" when the sides build C++ alike


@dataclass
class KernelComparison:
    table: pd.DataFrame  # one row per pair, sorted by priority (see `_priority_order`)
    only_base: pd.DataFrame
    only_pr: pd.DataFrame
    categories: pd.DataFrame
    pairing: PairingSummary
    summary: KernelSummary
    settings: VerdictSettings
    controls: list[ControlResult]
    resolution: float  # relative effect below which a failed control made verdicts inconclusive
    notes: list[str] = field(default_factory=list)
    # side → kernel path → its round medians (ms; NaN where a round has none), for the per-round figures built
    # on the comparison (the projection, the time decomposition); empty without per-round samples
    round_ms: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def _weights(frame: pd.DataFrame) -> tuple[pd.Series, bool]:
    """Launches per step; a missing or non-positive count counts as one launch."""
    calls = frame["calls"] if "calls" in frame.columns else pd.Series(np.nan, index=frame.index)
    present = bool(calls.notna().any())
    return calls.where(calls > 0, 1.0).fillna(1.0).astype(float), present


def _round_medians(part: pd.DataFrame, samples: RoundSamples | None, ok: pd.Series) -> list[np.ndarray]:
    """Per row: its round medians from the samples; without samples, the CSV median as a single round."""
    rows = []
    for path, median, good in zip(part["path"], part["median_ms"], ok, strict=True):
        if not good:
            rows.append(np.full(1, np.nan))
        elif samples and path in samples:
            rows.append(round_medians(samples[path]))
        else:
            rows.append(np.array([median], dtype=float))
    return rows


def _side(frame: pd.DataFrame, rows: list[int], samples: RoundSamples | None, prefix: str
          ) -> tuple[pd.DataFrame, list[np.ndarray]]:
    part = frame.iloc[rows].reset_index(drop=True)
    weights, _ = _weights(part)
    ok = (part["status"].str.lower().isin(["ok", ""])) & (part["median_ms"] > 0)
    medians = _round_medians(part, samples, ok)
    out = pd.DataFrame({
        f"{prefix}_name": part["kernel_name"], f"{prefix}_path": part["path"], f"{prefix}_graphs": part["graphs"],
        f"{prefix}_median_ms": part["median_ms"], f"{prefix}_spread": [robust_spread(m) for m in medians],
        f"{prefix}_n": part["n"], f"{prefix}_calls": weights, f"{prefix}_ms_per_step": part["median_ms"] * weights,
        f"{prefix}_ok": ok, f"{prefix}_status": part["status"], f"{prefix}_error": part["error"],
    })
    return out, medians


def _pair_table(base: pd.DataFrame, pr: pd.DataFrame, pairing: Pairing, samples_base: RoundSamples | None,
                samples_pr: RoundSamples | None, settings: VerdictSettings, blocks: PairedBlocks | None,
                level: float | None, compiled_by: str | None, cpp_build: str | None
                ) -> tuple[pd.DataFrame, FamilyJudgement, int, int, int]:
    b_rows = pairing.pairs["base_row"].tolist()
    p_rows = pairing.pairs["pr_row"].tolist()
    b, b_medians = _side(base, b_rows, samples_base, "base")
    p, p_medians = _side(pr, p_rows, samples_pr, "pr")
    ident = base.iloc[b_rows].reset_index(drop=True)
    table = pd.concat([ident[["category", "body_hash", "shape_key", "legacy_key"]], b, p], axis=1)
    table.insert(0, "matched_by", pairing.pairs["matched_by"].to_numpy())
    both_ok = (table["base_ok"] & table["pr_ok"]).to_numpy(dtype=bool)
    slower = table[["base_median_ms", "pr_median_ms"]].max(axis=1)
    in_summary = both_ok & (slower >= settings.min_ms).to_numpy(dtype=bool)
    # Identical normalised body and shapes on both sides: the same code, so any "change" is the machine's; unless
    # each side's own compiler built it (a Triton A/B's Triton kernels), or the sides build C++ otherwise.
    same_source = (table["matched_by"] == IDENTICAL_CODE).to_numpy(dtype=bool)
    anew = same_source & (ident["backend"] == compiled_by).to_numpy(dtype=bool)
    otherwise = same_source & (cpp_build is not None) & (ident["backend"] == "cpp").to_numpy(dtype=bool)
    identical = same_source & ~anew & ~otherwise
    control = in_summary & identical
    b_matrix, p_matrix = family_matrix(b_medians), family_matrix(p_medians)
    data = FamilyData(b_matrix, p_matrix, table["base_calls"].to_numpy(float),
                      block_matrix(blocks, list(zip(table["base_path"], table["pr_path"], strict=True)), b_matrix),
                      halves_matrix(blocks, table["base_path"].tolist(), b_matrix),
                      *_unpaired_rounds(base, pr, pairing, samples_base, samples_pr, b_matrix.shape[1],
                                        p_matrix.shape[1]))
    judged = judge_family(data, settings, in_summary, control,
                          code_changed=bool((~identical).any()) or bool(pairing.only_base or pairing.only_pr))
    table["speedup"] = [e.speedup if ok else np.nan for e, ok in zip(judged.estimates, both_ok, strict=True)]
    shown = [e.at_level(level if level is not None else settings.confidence) for e in judged.estimates]
    table["ci_low"] = [e.ci_low for e in shown]  # one level for every row (`level`)
    table["ci_high"] = [e.ci_high for e in shown]
    table["verdict_ci_low"] = [e.ci_low for e in judged.estimates]  # what the verdict rests on: the family's
    table["verdict_ci_high"] = [e.ci_high for e in judged.estimates]  # level, selection-adjusted where called
    table["change_pct"] = (1.0 / table["speedup"] - 1.0) * 100.0  # PR time vs base time; negative = faster
    table["p_value"] = [e.p_value for e in judged.estimates]
    table["q_value"] = judged.q_values
    table["rounds"] = [e.rounds for e in judged.estimates]
    table["noisy"] = rounds_are_noisy(table[["base_spread", "pr_spread"]].max(axis=1), settings.noise).to_numpy()
    table["verdict"] = np.where(both_ok, judged.verdicts, "failed")
    table["control"] = judged.control  # the identical pairs the control measured with (`on_timer_step`: not all)
    table["code_changed"] = ~identical
    table["step_share"] = judged.shares
    table["in_summary"] = in_summary
    return table, judged, int(data.base.shape[1]), int(anew.sum()), int(otherwise.sum())


def _all_round_medians(frame: pd.DataFrame, samples: RoundSamples | None) -> dict[str, np.ndarray]:
    """Every kernel's round medians by path ({} without per-round samples)."""
    if not samples:
        return {}
    return {path: round_medians(samples[path]) for path in frame["path"] if path in samples}


def _unpaired_rounds(base: pd.DataFrame, pr: pd.DataFrame, pairing: Pairing, samples_base: RoundSamples | None,
                     samples_pr: RoundSamples | None, rounds_base: int, rounds_pr: int
                     ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per round, the time per step of the kernels found on one side only (the fusion changes): their round
    medians × launches where every round has one, else their CSV median. None for both when there are none."""
    if not pairing.only_base and not pairing.only_pr:
        return None, None
    return (_side_total(base, pairing.only_base, samples_base, rounds_base),
            _side_total(pr, pairing.only_pr, samples_pr, rounds_pr))


def _side_total(frame: pd.DataFrame, rows: list[int], samples: RoundSamples | None, rounds: int) -> np.ndarray:
    part = frame.iloc[rows].reset_index(drop=True)
    weights, _ = _weights(part)
    ok = (part["status"].str.lower().isin(["ok", ""])) & (part["median_ms"] > 0)
    total = np.zeros(rounds)
    for medians, median, weight, good in zip(_round_medians(part, samples, ok), part["median_ms"], weights, ok,
                                             strict=True):
        if not good:
            continue
        per_round = medians if len(medians) == rounds and np.isfinite(medians).all() else np.full(rounds, median)
        total += weight * per_round
    return total


_VERDICT_RANK = {"regressed": 0, "improved": 1, "inconclusive": 2, "failed": 3, "equivalent": 4}


def _priority_order(table: pd.DataFrame) -> pd.DataFrame:
    """Regressions first, then improvements, inconclusive, failed, equivalent; the largest effect first.

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
    cols = ["category", "kernel_name", "body_hash", "shape_key", "legacy_key", "path", "graphs", "median_ms", "status"]
    out = part[cols].copy()
    out["calls"] = weights
    out["ms_per_step"] = part["median_ms"] * weights
    return out.sort_values(["ms_per_step", "kernel_name"], ascending=[False, True], na_position="last",
                           kind="stable").reset_index(drop=True)


def time_weighted(table: pd.DataFrame) -> float:
    """Σ base ms per step / Σ PR ms per step: the speedup of the paired kernels as a workload."""
    pr_total = float(table["pr_ms_per_step"].sum())
    return float(table["base_ms_per_step"].sum()) / pr_total if pr_total > 0 else math.nan


def geomean(values: pd.Series | np.ndarray) -> float:
    arr = np.asarray(values, dtype=float)
    return float(np.exp(np.log(arr).mean())) if len(arr) else math.nan


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
            **{v: int(counts.get(v, 0)) for v in VERDICTS},
        })
    cols = ["category", "kernels", "geomean", "time_weighted", "base_ms_per_step", "pr_ms_per_step", *VERDICTS]
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(["base_ms_per_step", "category"], ascending=[False, True]).reset_index(drop=True)


def compare_kernels(base: pd.DataFrame, pr: pd.DataFrame, samples_base: RoundSamples | None = None,
                    samples_pr: RoundSamples | None = None, settings: VerdictSettings | None = None,
                    blocks: PairedBlocks | None = None, level: float | None = None,
                    compiled_by: str | None = None, cpp_build: str | None = None) -> KernelComparison:
    """Pair, estimate, judge and summarise two kernels tables (as read by `read_kernels_csv`).

    ``level``: the two-sided level of the table's ``ci_low``/``ci_high`` (default: the settings'), so that a
    report whose families were stated at different levels shows one; ``verdict_ci_low``/``verdict_ci_high``
    keep the interval each verdict rests on.

    ``samples_*`` are per-round samples (`foundation.formats.paired_rounds`): round i of both sides ran together;
    ``blocks``, the same rounds visit by visit, pairs them block by block (`analysis.stats.verdict`).
    ``compiled_by``: the ``backend`` whose kernels each side's own compiler built (a Triton A/B's "triton"):
    its pairs of identical source are changed pairs, not the control. ``cpp_build``: why the sides build C++
    kernels otherwise (`analysis.kernels.cpp_build.cpp_build_difference`; None: alike): then the C++ pairs of
    identical source are changed pairs too.
    """
    settings = (settings or VerdictSettings()).validate()
    base = check_kernels_frame(base, "base kernels")
    pr = check_kernels_frame(pr, "PR kernels")
    pairing = pair_kernels(base, pr)
    table, judged, rounds, anew, otherwise = _pair_table(base, pr, pairing, samples_base, samples_pr, settings,
                                                         blocks, level, compiled_by, cpp_build)
    only_base = _unpaired(base, pairing.only_base)
    only_pr = _unpaired(pr, pairing.only_pr)
    in_summary = table["in_summary"].to_numpy(dtype=bool)
    identical = ~table["code_changed"].to_numpy(dtype=bool)
    _, calls_present = _weights(pd.concat([base, pr], ignore_index=True))
    summary = KernelSummary(
        n_pairs=len(table), n_summarised=int(in_summary.sum()), n_failed=int((table["verdict"] == "failed").sum()),
        n_below_min=int(((table["verdict"] != "failed") & ~table["in_summary"]).sum()),
        geomean=judged.summary.geomean, time_weighted=judged.summary.time_weighted, method=judged.summary.method,
        weighted_by="launches per step (`calls`)" if calls_present else "one launch per kernel (no `calls`)",
        verdicts=judged.counts(judged.changed), verdict=judged.verdict, rounds=rounds,
        base_ms_only=float(only_base["ms_per_step"].sum()), pr_ms_only=float(only_pr["ms_per_step"].sum()),
        code_changed=int((~identical).sum()), code_identical=int(identical.sum()), n_changed=int(judged.changed.sum()),
        control_verdicts=judged.control_verdicts, detectable_pct=100 * judged.detectable,
        offsets_used=judged.offsets_used, selection_level=judged.selection_level, compiled_anew=anew,
        compiled_otherwise=otherwise, compiled_otherwise_why=(cpp_build or "") if otherwise else "",
    )
    return KernelComparison(_priority_order(table), only_base, only_pr, category_table(table), pairing.summary,
                            summary, settings, judged.controls, judged.resolution,
                            _notes(summary, judged, samples_base, samples_pr, settings),
                            {"base": _all_round_medians(base, samples_base), "pr": _all_round_medians(pr, samples_pr)})


def _notes(summary: KernelSummary, judged: FamilyJudgement, samples_base: RoundSamples | None,
           samples_pr: RoundSamples | None, settings: VerdictSettings) -> list[str]:
    notes = []
    if not samples_base or not samples_pr:
        notes.append("per-round samples missing on at least one side: each side counts as one round (the CSV "
                     "medians), so no interval can be given and no pair is called a change")
    elif summary.rounds < 2:
        notes.append("one timing round per side: without replication no interval is honest; run "
                     "`invoke compare` (several paired rounds) for verdicts")
    if summary.n_changed > judged.summary.n:
        notes.append(f"{summary.n_changed - judged.summary.n} changed pair(s) lack a timing in some round: they "
                     "have their own estimates but are left out of the per-round geomean")
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
