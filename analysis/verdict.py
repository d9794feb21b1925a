"""The statistical model behind every verdict: the timing round is the unit of replication.

On a shared machine almost all the variance that matters lies between worker processes and time windows,
not between the samples of one process (pooling samples made p-values of 1e-144 out of process offsets). So
each side's samples are reduced to one median per round, and:

* **per item** (a kernel pair or a model): the effect is the mean over rounds of the round's paired log ratio
  (rounds are index-aligned: round i of both sides ran together). Where the round's visits are known block by
  block (``analysis.paired_rounds.PairedBlocks``), a round's log ratio is the median over its ABBA blocks of
  ``log(base / PR)`` within each block, so a burst of load that hit a few blocks does not move it; otherwise it
  is ``log(base round median / PR round median)``. The interval is a Student-t interval over the per-round
  values (with the few rounds we can afford, a bootstrap over rounds gives intervals that are too narrow; t is
  exact for normal round effects);
* **per family** (all kernels, all models): the items' log ratios are averaged *within each round* first,
  then the t interval is taken over rounds, so an offset shared by every item of a round (a busy minute, a
  process placed on a slow core) widens the summary interval instead of posing as a change; time-weighted
  speedups are formed per round the same way;
* **tests**: two-sided t p-values per item, Benjamini–Hochberg adjusted across the family, so a report of
  40 kernels is not expected to hold two false "regressed" rows;
* **verdicts**: *equivalent* when the whole interval lies within ±margin (two one-sided tests at
  ``(1 − confidence) / 2`` each), *improved/regressed* when the adjusted p is below alpha and the whole
  interval lies beyond ±threshold (a one-sided test that the effect exceeds the threshold, the mirror of the
  equivalence test), else *inconclusive*. Asking only for a significant point beyond the threshold flagged
  one model in five loaded A/A runs: an effect of 2.3 % whose interval reached down to 0.7 %;
* **controls**: a population that cannot have changed (kernels identical on both sides) and a split-half of
  the base side's rounds (odd against even rounds, Welch) are put through the same machinery; their
  false-positive share is reported, and when a control fails, effects smaller than what it produced are not
  called changes.

Sides with different round counts (tables from separate runs) fall back to an unpaired Welch interval on the
round medians; a single round per side gives a point estimate with no interval (no replication).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from analysis.paired_rounds import PairedBlocks
from analysis.verdict_settings import VERDICTS, VerdictSettings, percent

MAD_TO_SD = 1.4826  # MAD of a normal sample × this = its standard deviation
PAIRED, UNPAIRED, SINGLE = "paired rounds", "unpaired rounds", "one round per side"


# --- per side ----------------------------------------------------------------------------------------------


def round_medians(rounds: list[list[float]]) -> np.ndarray:
    """One median per round; NaN for a round without a positive finite sample (a failed visit)."""
    out = np.full(len(rounds), np.nan)
    for i, samples in enumerate(rounds):
        usable = _positive_finite(samples)
        if usable:
            # The same value as np.median (the middle sample, or the mean of the middle two); a report of
            # thousands of kernels takes one per kernel, side and round, where np.median's overhead dominated.
            out[i] = statistics.median(usable)
    return out


def _positive_finite(samples: Iterable[float | None]) -> list[float]:
    """The samples that are positive finite numbers (``None``, as JSON's null, is not)."""
    values = (math.nan if v is None else float(v) for v in samples)
    return [v for v in values if 0.0 < v < math.inf]


def robust_spread(medians: np.ndarray) -> float:
    """Relative spread of a side's round medians: 1.4826 × MAD of their logs (≈ the CV, but outlier-proof)."""
    logs = np.log(medians[np.isfinite(medians)])
    if len(logs) < 3:
        return math.nan
    centre = statistics.median(logs.tolist())  # as np.median, without its overhead on a handful of values
    return float(MAD_TO_SD * statistics.median(np.abs(logs - centre).tolist()))


def central_ms(medians: np.ndarray) -> float:
    finite = medians[np.isfinite(medians)]
    return float(np.median(finite)) if len(finite) else math.nan


# --- per item ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    speedup: float  # base / PR, > 1 means the PR is faster
    ci_low: float
    ci_high: float
    p_value: float
    rounds: int  # rounds that entered the estimate
    design: str  # PAIRED, UNPAIRED or SINGLE

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.ci_low) and math.isfinite(self.ci_high)

    def contains(self, value: float) -> bool:
        return self.has_interval and self.ci_low <= value <= self.ci_high

    @property
    def half_width_pct(self) -> float:
        """The smallest effect this estimate resolves, in percent (half the interval's log width)."""
        if not self.has_interval:
            return math.nan
        return (math.exp((math.log(self.ci_high) - math.log(self.ci_low)) / 2) - 1) * 100


NO_ESTIMATE = Estimate(math.nan, math.nan, math.nan, math.nan, 0, SINGLE)


def t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """(mean, low, high, two-sided p of mean = 0) of a sample by Student's t."""
    n = len(values)
    mean = float(values.mean())
    sd = float(values.std(ddof=1))
    if sd == 0.0:
        return mean, mean, mean, 1.0 if mean == 0 else 0.0
    se = sd / math.sqrt(n)
    crit = _t_quantile(0.5 + confidence / 2, n - 1)
    p = 2 * _t_tail(abs(mean) / se, n - 1)
    return mean, mean - crit * se, mean + crit * se, p


def _welch_interval(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """(mean(a) − mean(b), low, high, two-sided p) by Welch's t."""
    diff = float(a.mean() - b.mean())
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return diff, diff, diff, 1.0 if diff == 0 else 0.0
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    crit = _t_quantile(0.5 + confidence / 2, df)
    p = 2 * _t_tail(abs(diff) / se, df)
    return diff, diff - crit * se, diff + crit * se, p


# Student's t through the special functions that scipy.stats.t evaluates itself (same values): its generic
# wrapper costs ~100 µs a call, and a report makes a few per kernel.
def _t_quantile(q: float, df: float) -> float:
    """``scipy.stats.t.ppf(q, df)``."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def _t_tail(x: float, df: float) -> float:
    """``scipy.stats.t.sf(x, df)``: the upper tail beyond ``x``."""
    from scipy.special import stdtr

    return float(stdtr(df, -x))


def _from_logs(mean: float, low: float, high: float, p: float, rounds: int, design: str) -> Estimate:
    return Estimate(math.exp(mean), math.exp(low), math.exp(high), p, rounds, design)


def paired_logs(base: np.ndarray, pr: np.ndarray, blocks: np.ndarray | None) -> np.ndarray:
    """Per round, the PR's log speedup: from the round's blocks where known, else from the two round medians."""
    from_medians = np.log(base) - np.log(pr)
    if blocks is None:
        return from_medians
    return np.where(np.isfinite(blocks) & np.isfinite(from_medians), blocks, from_medians)


def estimate(base: np.ndarray, pr: np.ndarray, confidence: float, blocks: np.ndarray | None = None) -> Estimate:
    """The PR's speedup on one item from its two sides' round medians and, where known, the per-round log
    ratios of its paired blocks (see the module docstring)."""
    if len(base) == len(pr) and len(base) > 1:
        both = np.isfinite(base) & np.isfinite(pr)
        ratios = paired_logs(base, pr, blocks)[both]
        if len(ratios) >= 2:
            return _from_logs(*t_interval(ratios, confidence), len(ratios), PAIRED)
    b, p = np.log(base[np.isfinite(base)]), np.log(pr[np.isfinite(pr)])
    if len(b) >= 2 and len(p) >= 2 and len(base) != len(pr):
        return _from_logs(*_welch_interval(b, p, confidence), min(len(b), len(p)), UNPAIRED)
    if len(b) and len(p):
        point = math.exp(float(b.mean() - p.mean()))
        return Estimate(point, math.nan, math.nan, math.nan, min(len(b), len(p)), SINGLE)
    return NO_ESTIMATE


def adjust_p(p_values: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (NaN stays NaN: an item without a test).

    The step-up rule is written here rather than taken from ``scipy.stats.false_discovery_control`` (the tests
    hold the two equal): importing ``scipy.stats`` costs every report about 1.2 s, for these few lines.
    """
    out = np.full(len(p_values), np.nan)
    tested = np.isfinite(p_values)
    if tested.any():
        p = np.clip(p_values[tested], 0.0, 1.0)
        order = np.argsort(p, kind="stable")
        scaled = p[order] * len(p) / np.arange(1, len(p) + 1)
        adjusted = np.empty(len(p))
        # q of the i-th smallest p: the least m·p(j)/j over j ≥ i, never above 1.
        adjusted[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
        out[tested] = adjusted
    return out


def within_margin(est: Estimate, margin: float) -> bool:
    return est.has_interval and 1 / (1 + margin) <= est.ci_low and est.ci_high <= 1 + margin


def beyond(est: Estimate, effect: float) -> bool:
    """The whole interval lies beyond ±effect: the change is shown to be at least that large."""
    return est.has_interval and (est.ci_low >= 1 + effect or est.ci_high <= 1 / (1 + effect))


def classify(est: Estimate, q_value: float, settings: VerdictSettings, resolution: float = 0.0) -> str:
    """improved / regressed / equivalent / inconclusive for one item.

    ``resolution`` is the relative effect a failed control produced: a change must be shown to exceed it too.
    """
    if not math.isfinite(est.speedup):
        return "inconclusive"
    if within_margin(est, settings.margin):
        return "equivalent"
    significant = math.isfinite(q_value) and q_value < settings.alpha
    if significant and beyond(est, max(settings.effect_floor, resolution)):
        return "improved" if est.speedup > 1 else "regressed"
    return "inconclusive"


# --- per family --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyData:
    """Round medians of a family of items: rows = items, columns = rounds (NaN where a visit failed)."""

    base: np.ndarray
    pr: np.ndarray
    weights: np.ndarray  # per item, for the time-weighted speedup (launches per step; 1 for models)
    blocks: np.ndarray | None = None  # per item and round: log(base/PR) over the round's paired blocks (NaN: none)

    @property
    def paired(self) -> bool:
        return self.base.shape == self.pr.shape and self.base.shape[1] > 1

    def item_blocks(self, row: int) -> np.ndarray | None:
        return None if self.blocks is None else self.blocks[row]

    def complete(self) -> np.ndarray:
        """Items with a median in every round on both sides: the only ones a per-round average can use."""
        return np.isfinite(self.base).all(axis=1) & np.isfinite(self.pr).all(axis=1)

    def subset(self, rows: np.ndarray) -> FamilyData:
        return FamilyData(self.base[rows], self.pr[rows], self.weights[rows],
                          None if self.blocks is None else self.blocks[rows])


def block_matrix(blocks: PairedBlocks | None, items: list[tuple[str, str]], medians: np.ndarray) -> np.ndarray | None:
    """Per (base item, PR item) and round, the log ratio over the round's paired blocks; None without blocks or
    when their rounds are not the rounds of ``medians`` (the per-side round medians of the same items)."""
    if blocks is None or len(blocks.rounds) != medians.shape[1] or not items:
        return None
    return np.array([blocks.round_log_ratios(base, pr) for base, pr in items], dtype=float)


def family_matrix(rows: list[np.ndarray]) -> np.ndarray:
    """Stack per-item round medians into a matrix, padding shorter rows with NaN."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


@dataclass(frozen=True)
class FamilySummary:
    geomean: Estimate  # geomean speedup of the items
    time_weighted: Estimate  # Σ weight × base / Σ weight × PR
    n: int  # items in the summary
    method: str


def summarize_family(data: FamilyData, confidence: float) -> FamilySummary:
    """Geomean and time-weighted speedup with intervals over rounds (items averaged within each round)."""
    if data.paired:
        keep = data.complete()
        if keep.sum() and data.base.shape[1] >= 2:
            b, p, w = data.base[keep], data.pr[keep], data.weights[keep]
            per_round = paired_logs(b, p, None if data.blocks is None else data.blocks[keep]).mean(axis=0)
            weighted = np.log((w[:, None] * b).sum(axis=0)) - np.log((w[:, None] * p).sum(axis=0))
            rounds = len(per_round)
            method = (f"{percent(confidence)} Student-t interval over {rounds} paired rounds "
                      f"(items averaged within each round)")
            return FamilySummary(_from_logs(*t_interval(per_round, confidence), rounds, PAIRED),
                                 _from_logs(*t_interval(weighted, confidence), rounds, PAIRED),
                                 int(keep.sum()), method)
    return _unpaired_family(data, confidence)


def _unpaired_family(data: FamilyData, confidence: float) -> FamilySummary:
    """Sides with different rounds: per-round family means per side, compared by Welch (or a point)."""
    rows = np.isfinite(data.base).all(axis=1) & np.isfinite(data.pr).all(axis=1)
    if not rows.any():
        return FamilySummary(NO_ESTIMATE, NO_ESTIMATE, 0, "no items measured on both sides in every round")
    b, p, w = data.base[rows], data.pr[rows], data.weights[rows]
    b_means, p_means = np.log(b).mean(axis=0), np.log(p).mean(axis=0)
    b_weighted, p_weighted = np.log((w[:, None] * b).sum(axis=0)), np.log((w[:, None] * p).sum(axis=0))
    if len(b_means) >= 2 and len(p_means) >= 2:
        method = f"{percent(confidence)} Welch interval over rounds ({len(b_means)} base, {len(p_means)} PR, unpaired)"
        return FamilySummary(
            _from_logs(*_welch_interval(b_means, p_means, confidence), min(len(b_means), len(p_means)), UNPAIRED),
            _from_logs(*_welch_interval(b_weighted, p_weighted, confidence), min(len(b_means), len(p_means)),
                       UNPAIRED),
            int(rows.sum()), method)
    point = Estimate(math.exp(float(b_means.mean() - p_means.mean())), math.nan, math.nan, math.nan, 1, SINGLE)
    weighted = replace(point, speedup=math.exp(float(b_weighted.mean() - p_weighted.mean())))
    return FamilySummary(point, weighted, int(rows.sum()),
                         "no interval: one round per side (no replication; run more rounds)")


def verdict_of(summary: Estimate, settings: VerdictSettings, resolution: float = 0.0) -> str:
    """The family's verdict from its geomean interval (no multiplicity: one test)."""
    q = summary.p_value if summary.has_interval else math.nan
    return classify(summary, q, settings, resolution)


# --- controls ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlResult:
    kind: str  # "identical kernels" or "split-half"
    summary: Estimate
    n: int
    flagged: int  # control items called improved/regressed
    available: bool
    reason: str = ""  # why unavailable
    flagged_effect: float = 0.0  # the largest relative effect among the flagged control items

    @property
    def false_positive_share(self) -> float:
        return self.flagged / self.n if self.n else math.nan

    def passed(self, settings: VerdictSettings) -> bool:
        if not self.available:
            return True
        # A control interval that misses 1.0 but lies within the margin measured a negligible bias.
        summary_ok = (not self.summary.has_interval or self.summary.contains(1.0)
                      or within_margin(self.summary, settings.margin))
        return summary_ok and self.false_positive_share <= settings.alpha

    def produced_effect(self) -> float:
        """The largest relative effect the control produced: the far end of its interval when that misses 1.0,
        or the largest effect among its flagged items."""
        strayed = 0.0
        if self.summary.has_interval and not self.summary.contains(1.0):
            strayed = max(_relative(self.summary.ci_low), _relative(self.summary.ci_high))
        return max(strayed, self.flagged_effect)


def _relative(ratio: float) -> float:
    """A ratio's distance from 1 as a relative effect, the same for 1.1× and 1/1.1×."""
    return math.exp(abs(math.log(ratio))) - 1


def _flagged(estimates: list[Estimate], verdicts: list[str]) -> tuple[int, float]:
    effects = [_relative(e.speedup) for e, v in zip(estimates, verdicts, strict=True) if v in ("improved", "regressed")]
    return len(effects), max(effects, default=0.0)


def unavailable(kind: str, reason: str) -> ControlResult:
    return ControlResult(kind, NO_ESTIMATE, 0, 0, False, reason)


def identical_control(data: FamilyData, estimates: list[Estimate], verdicts: list[str], settings: VerdictSettings,
                      kind: str = "identical kernels") -> ControlResult:
    """Items that cannot have changed (same code on both sides): their summary and their flagged share."""
    if len(verdicts) < 3:
        return unavailable(kind, f"{len(verdicts)} item(s) identical on both sides; at least 3 are needed")
    summary = summarize_family(data, settings.confidence).geomean
    flagged, effect = _flagged(estimates, verdicts)
    return ControlResult(kind, summary, len(verdicts), flagged, True, flagged_effect=effect)


def split_half_control(base: np.ndarray, settings: VerdictSettings) -> ControlResult:
    """The base side against itself: even-indexed rounds vs odd-indexed rounds, per item and as a family."""
    kind = "split-half"
    rounds = base.shape[1] if base.ndim == 2 else 0
    if rounds < 4:
        return unavailable(kind, f"{rounds} round(s); a split-half needs at least 4 (two per half)")
    first, second = base[:, 0::2], base[:, 1::2]
    # Halves are different rounds, so each item is compared unpaired (Welch) even when counts match.
    estimates = [_welch_item(a, b, settings.confidence) for a, b in zip(first, second, strict=True)]
    q = adjust_p(np.array([e.p_value for e in estimates]))
    verdicts = [classify(e, qv, settings) for e, qv in zip(estimates, q, strict=True)]
    keep = np.isfinite(base).all(axis=1)
    if not keep.any():
        return unavailable(kind, "no item was measured in every base round")
    a_means, b_means = np.log(first[keep]).mean(axis=0), np.log(second[keep]).mean(axis=0)
    summary = _from_logs(*_welch_interval(a_means, b_means, settings.confidence), len(b_means), UNPAIRED)
    flagged, effect = _flagged(estimates, verdicts)
    return ControlResult(kind, summary, len(verdicts), flagged, True, flagged_effect=effect)


def _welch_item(a: np.ndarray, b: np.ndarray, confidence: float) -> Estimate:
    la, lb = np.log(a[np.isfinite(a)]), np.log(b[np.isfinite(b)])
    if len(la) < 2 or len(lb) < 2:
        return NO_ESTIMATE
    return _from_logs(*_welch_interval(la, lb, confidence), min(len(la), len(lb)), UNPAIRED)


def control_resolution(controls: list[ControlResult], settings: VerdictSettings) -> float:
    """The relative effect below which verdicts are refused: what the failed controls produced (0 if none)."""
    return max((c.produced_effect() for c in controls if not c.passed(settings)), default=0.0)


# --- a whole family, controls included ---------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyJudgement:
    estimates: list[Estimate]  # per item
    q_values: np.ndarray  # Benjamini–Hochberg adjusted p per item
    verdicts: list[str]  # per item, after refusing effects a failed control could produce
    summary: FamilySummary
    verdict: str  # the family's verdict
    controls: list[ControlResult]
    resolution: float  # relative effect below which verdicts were refused (0: the controls passed)

    def counts(self, rows: np.ndarray | None = None) -> dict[str, int]:
        chosen = [v for i, v in enumerate(self.verdicts) if rows is None or rows[i]]
        return {v: chosen.count(v) for v in VERDICTS}


def judge_family(data: FamilyData, settings: VerdictSettings, summary_rows: np.ndarray,
                 control_rows: np.ndarray | None = None) -> FamilyJudgement:
    """Per-item estimates and verdicts, the family summary, and the in-run controls.

    ``summary_rows`` picks the items of the summary; ``control_rows`` the items that cannot have changed
    (None: no such population, as for models). The controls are judged with the same rules first; if one
    fails, the effect it produced becomes the floor below which nothing is called a change.
    """
    estimates = [estimate(b, p, settings.confidence, data.item_blocks(i))
                 for i, (b, p) in enumerate(zip(data.base, data.pr, strict=True))]
    q = adjust_p(np.array([e.p_value for e in estimates], dtype=float))
    first = [classify(e, qv, settings) for e, qv in zip(estimates, q, strict=True)]
    controls = []
    if control_rows is not None:
        picked = np.flatnonzero(control_rows)
        controls.append(identical_control(data.subset(control_rows), [estimates[i] for i in picked],
                                          [first[i] for i in picked], settings))
    controls.append(split_half_control(data.base[summary_rows], settings))
    resolution = control_resolution(controls, settings)
    verdicts = [classify(e, qv, settings, resolution) for e, qv in zip(estimates, q, strict=True)]
    summary = summarize_family(data.subset(summary_rows), settings.confidence)
    return FamilyJudgement(estimates, q, verdicts, summary, verdict_of(summary.geomean, settings, resolution),
                           controls, resolution)
