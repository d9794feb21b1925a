"""The statistical model behind every verdict: the timing round is the unit of replication.

On a shared machine almost all the variance that matters lies between worker processes and time windows,
not between the samples of one process (pooling samples made p-values of 1e-144 out of process offsets). So
each side's samples are reduced to one median per round, and:

* **per item** (a kernel pair or a model): the effect is the mean over rounds of the round's paired log ratio
  (rounds are index-aligned: round i of both sides ran together). Where the round's visits are known block by
  block (``foundation.formats.paired_rounds.PairedBlocks``), a round's log ratio is the median over its ABBA blocks of
  ``log(base / PR)`` within each block, so a burst of load that hit a few blocks does not move it; otherwise it
  is ``log(base round median / PR round median)``. The interval is a Student-t interval over the per-round
  values (with the few rounds we can afford, a bootstrap over rounds gives intervals that are too narrow; t is
  exact for normal round effects);
* **two families**: items whose code is identical on both sides (the *control*) cannot have changed; the
  effect is about the *changed* items. Where at least `MIN_DID_CONTROLS` identical items were measured in
  every round, each round's median log ratio over them measures the offset between the two sides' processes in
  that round, and every item is estimated against it (difference in differences; an identical item against
  the median of the others). In a simulation with the PR side's processes 5 % faster on everything, this
  turned ten kernels 5.3 % slower from "equivalent" into "regressed"; with an offset shared by every kernel
  of a round it removed the false calls at 10 rounds. Identical items on the timer's step (`on_timer_step`:
  their paired log ratio exactly 0 in at least half the rounds) are left out of the control: they tell nothing
  below the step, and would pull its offset and its summary toward no offset;
* **per family**: the items' log ratios are averaged *within each round* first, then the t interval is taken
  over rounds, so an offset shared by every item of a round widens the summary instead of posing as a change.
  The *step* (time-weighted) estimate is Σ base time / Σ PR time per round over every item and the unpaired
  extras, identical items counted at their base time on both sides: what one step of the workload gains or
  loses through the changed code alone. A changed item's PR time in a round is its base time over the round's
  paired log ratio (the blocks where known), so the step rests on visits timed side by side as the items do;
* **claims**: "improved/regressed" is a one-sided t test that the effect exceeds ±threshold (its p is small
  when the effect is shown to be larger than the threshold, not merely non-zero), Benjamini–Hochberg adjusted
  over the changed items only (the control items form their own family). The interval of an item so selected
  is adjusted for the selection (Benjamini–Yekutieli's false-coverage rate: its near end is the one-sided
  bound at level 1 − R·alpha/m, so it lies beyond the threshold exactly when the item is called); the others
  show the plain interval. Changes are decided before equivalence, so a threshold below the margin cannot make
  a shown change "equivalent";
* **equivalence**: the whole interval at ``confidence`` lies within ±margin (two one-sided tests at
  ``(1 − confidence) / 2`` each: 2.5 % at the default 95 %, rather than the 5 % of the textbook 90 % interval,
  so the interval shown is the one tested and a 3 % effect is called equivalent at most 2.5 % of the time);
* **controls**: the identical items (flagged share ≤ alpha; without difference in differences also their
  summary must contain 1.0 or stay within the margin) and a split-half of the base side (base against base
  within the same rounds, tested at `CONTROL_ALPHA`). A failed identical control refuses both kinds of claim
  below what it produced (changes must exceed it, equivalence must hold with the interval widened by it); a
  failed split-half widens every interval in proportion to how far it missed.

Sides with different round counts (tables from separate runs) fall back to an unpaired Welch interval on the
round medians; a single round per side gives a point estimate with no interval (no replication).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from analysis.stats.verdict_settings import VERDICTS, VerdictSettings, percent
from foundation.formats.paired_rounds import PairedBlocks

MAD_TO_SD = 1.4826  # MAD of a normal sample × this = its standard deviation
PAIRED, UNPAIRED, SINGLE = "paired rounds", "unpaired rounds", "one round per side"
# Fewer identical items than this: their per-round mean is too noisy to subtract (each adds its own noise to
# every estimate), so they are only checked, not used as the offset.
MIN_DID_CONTROLS = 5
CONTROL_ALPHA = 0.01  # the split-half control's test level: it is one test, and it widens rather than refuses
TIMER_TIED_SHARE = 0.5  # an item whose paired log ratio is exactly 0 in this share of its rounds is on the timer's step
POWER = 0.80  # of the minimum detectable effect every report states
NOTHING_CHANGED = "identical"  # the family verdict when no item changed
MIXED = "mixed"  # the headline improved while an item holding a material share of the step regressed


# --- per side ----------------------------------------------------------------------------------------------


def _exp(x: float) -> float:
    """``math.exp`` that gives inf instead of raising: a kernel at 1e308 ms against one at 1e-3 ms has a log ratio
    beyond what a float's exponential holds, and the report must still render (the pair is then inconclusive)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


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
    p_value: float  # two-sided p of "no change"
    rounds: int  # rounds that entered the estimate
    design: str  # PAIRED, UNPAIRED or SINGLE
    log_se: float = math.nan  # standard error of log(speedup); NaN without replication
    df: float = math.nan  # its degrees of freedom

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
        return (_exp((math.log(self.ci_high) - math.log(self.ci_low)) / 2) - 1) * 100

    def claim_p(self, effect: float) -> float:
        """One-sided p of "the change exceeds ±effect" in the estimate's direction (NaN: no test possible)."""
        if not (math.isfinite(self.log_se) and math.isfinite(self.speedup) and self.speedup > 0):
            return math.nan
        mean, delta = math.log(self.speedup), math.log1p(effect)
        if self.log_se == 0.0:
            return 0.0 if abs(mean) > delta else 1.0
        return _t_tail((abs(mean) - delta) / self.log_se, self.df)

    def at_level(self, level: float) -> Estimate:
        """The same estimate with its interval at another two-sided level."""
        if not math.isfinite(self.log_se):
            return self
        half = t_quantile(0.5 + level / 2, self.df) * self.log_se
        mean = math.log(self.speedup)
        return replace(self, ci_low=_exp(mean - half), ci_high=_exp(mean + half))

    def widened(self, effect: float) -> Estimate:
        """The interval stretched by a relative effect on both ends (what a failed control produced)."""
        if effect <= 0 or not self.has_interval:
            return self
        return replace(self, ci_low=self.ci_low / (1 + effect), ci_high=self.ci_high * (1 + effect))


NO_ESTIMATE = Estimate(math.nan, math.nan, math.nan, math.nan, 0, SINGLE)


def t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """(mean, low, high, two-sided p of mean = 0) of a sample by Student's t."""
    est = _t_estimate(values, confidence, 1.0, PAIRED)
    return math.log(est.speedup), math.log(est.ci_low), math.log(est.ci_high), est.p_value


def _t_estimate(logs: np.ndarray, confidence: float, inflate: float, design: str) -> Estimate:
    """The estimate of a sample of per-round log ratios; ``inflate`` scales its standard error."""
    n = len(logs)
    mean = float(logs.mean())
    se = float(logs.std(ddof=1)) / math.sqrt(n) * inflate
    return _estimate(mean, se, n - 1, confidence, n, design)


def _estimate(mean: float, se: float, df: float, confidence: float, rounds: int, design: str) -> Estimate:
    if se == 0.0:
        return Estimate(_exp(mean), _exp(mean), _exp(mean), 1.0 if mean == 0 else 0.0, rounds, design,
                        0.0, df)
    half = t_quantile(0.5 + confidence / 2, df) * se
    p = 2 * _t_tail(abs(mean) / se, df)
    return Estimate(_exp(mean), _exp(mean - half), _exp(mean + half), p, rounds, design, se, df)


def _welch(a: np.ndarray, b: np.ndarray, confidence: float, inflate: float = 1.0) -> Estimate:
    """mean(a) − mean(b) of two samples of logs by Welch's t."""
    diff = float(a.mean() - b.mean())
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb) * inflate
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    return _estimate(diff, se, df, confidence, min(len(a), len(b)), UNPAIRED)


# Student's t through the special functions that scipy.stats.t evaluates itself (same values): its generic
# wrapper costs ~100 µs a call, and a report makes a few per kernel.
def t_quantile(q: float, df: float) -> float:
    """``scipy.stats.t.ppf(q, df)``."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def _t_tail(x: float, df: float) -> float:
    """``scipy.stats.t.sf(x, df)``: the upper tail beyond ``x``."""
    from scipy.special import stdtr

    return float(stdtr(df, -x))


def paired_logs(base: np.ndarray, pr: np.ndarray, blocks: np.ndarray | None) -> np.ndarray:
    """Per round, the PR's log speedup: from the round's blocks where known, else from the two round medians."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        from_medians = np.log(base) - np.log(pr)
    if blocks is None:
        return from_medians
    return np.where(np.isfinite(blocks) & np.isfinite(from_medians), blocks, from_medians)


def estimate(base: np.ndarray, pr: np.ndarray, confidence: float, blocks: np.ndarray | None = None,
             offsets: np.ndarray | None = None, inflate: float = 1.0) -> Estimate:
    """The PR's speedup on one item from its two sides' round medians and, where known, the per-round log
    ratios of its paired blocks; ``offsets`` (per round, log) are subtracted first: the control's offset
    between the sides (see the module docstring); ``inflate`` scales the standard error."""
    if len(base) == len(pr) and len(base) > 1:
        ratios = paired_logs(base, pr, blocks)
        if offsets is not None:
            ratios = ratios - offsets
        ratios = ratios[np.isfinite(ratios)]
        if len(ratios) >= 2:
            return _t_estimate(ratios, confidence, inflate, PAIRED)
    with np.errstate(divide="ignore", invalid="ignore"):
        b, p = np.log(base[np.isfinite(base)]), np.log(pr[np.isfinite(pr)])
    if len(b) >= 2 and len(p) >= 2 and len(base) != len(pr):
        return _welch(b, p, confidence, inflate)
    if len(b) and len(p):
        point = _exp(float(b.mean() - p.mean()))
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


def adjust_by_group(p_values: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Benjamini–Hochberg within each group of items (boolean masks); items in no group stay untested."""
    out = np.full(len(p_values), np.nan)
    for rows in groups:
        if rows.any():
            out[rows] = adjust_p(p_values[rows])
    return out


def within_margin(est: Estimate, margin: float) -> bool:
    return est.has_interval and 1 / (1 + margin) <= est.ci_low and est.ci_high <= 1 + margin


def classify(est: Estimate, q_value: float, settings: VerdictSettings, resolution: float = 0.0) -> str:
    """improved / regressed / equivalent / inconclusive for one item.

    ``q_value`` is the adjusted p of the claim "the change exceeds ±max(threshold, resolution)"; ``resolution``
    is the relative effect a failed control produced, by which the interval is widened for equivalence too.
    A change is decided first: a claim shown beyond the threshold is never "equivalent".
    """
    if not math.isfinite(est.speedup):
        return "inconclusive"
    if math.isfinite(q_value) and q_value < settings.alpha:
        return "improved" if est.speedup > 1 else "regressed"
    if within_margin(est.widened(resolution), settings.margin):
        return "equivalent"
    return "inconclusive"


def selection_adjusted(est: Estimate, selected: int, tested: int, settings: VerdictSettings) -> Estimate:
    """The interval of an item selected as changed, adjusted for the selection (Benjamini–Yekutieli): its near
    end is the one-sided bound at level 1 − R·alpha/m (see the module docstring)."""
    if tested == 0 or selected == 0:
        return est
    return est.at_level(1 - 2 * selected * settings.alpha / tested)


def detectable_effect(est: Estimate, settings: VerdictSettings) -> float:
    """The run's resolution: the smallest true relative change this estimate's spread tells apart from no change
    with `POWER`, in a one-sided test at alpha (the claims' test and level: the strict level's after an early
    stop): ``exp((t(1 − alpha) + t(POWER)) · se) − 1``. NaN without an interval.

    It does not depend on ``--threshold``: it says how fine the measurement is, which more rounds improve, so a
    target such as ``--resolution 2%`` can be met whatever threshold the claims use. (It used to be the change a
    claim *beyond the threshold* finds, ``threshold + …``, which is never below the threshold: with the default 2 %
    a 2 % resolution could not be reached by any number of rounds.) A change is *called* only when shown beyond
    the threshold as well; the change called with `POWER` is `called_effect`."""
    if not (math.isfinite(est.log_se) and math.isfinite(est.df)):
        return math.nan
    z = t_quantile(1 - settings.alpha, est.df) + t_quantile(POWER, est.df)
    return math.expm1(z * est.log_se)


def called_effect(detectable: float, settings: VerdictSettings) -> float:
    """The smallest true relative change a claim beyond the threshold finds with `POWER`, from the resolution
    ``detectable`` (`detectable_effect`): the test's boundary moves out by the threshold, on the log scale."""
    return math.expm1(math.log1p(settings.effect_floor) + math.log1p(detectable))


# --- per family --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyData:
    """Round medians of a family of items: rows = items, columns = rounds (NaN where a visit failed)."""

    base: np.ndarray
    pr: np.ndarray
    weights: np.ndarray  # per item, for the time-weighted speedup (launches per step; 1 for models)
    blocks: np.ndarray | None = None  # per item and round: log(base/PR) over the round's paired blocks (NaN: none)
    halves: np.ndarray | None = None  # per item and round: log(base half A / base half B) within the round
    extra_base: np.ndarray | None = None  # per round: time per step of items only on the base side
    extra_pr: np.ndarray | None = None  # per round: the same on the PR side

    @property
    def paired(self) -> bool:
        return self.base.shape == self.pr.shape and self.base.shape[1] > 1

    def item_blocks(self, row: int) -> np.ndarray | None:
        return None if self.blocks is None else self.blocks[row]

    def complete(self) -> np.ndarray:
        """Items with a median in every round on both sides: the only ones a per-round average can use."""
        return np.isfinite(self.base).all(axis=1) & np.isfinite(self.pr).all(axis=1)

    def subset(self, rows: np.ndarray) -> FamilyData:
        return replace(self, base=self.base[rows], pr=self.pr[rows], weights=self.weights[rows],
                       blocks=None if self.blocks is None else self.blocks[rows],
                       halves=None if self.halves is None else self.halves[rows])

    def logs(self) -> np.ndarray:
        """Per item and round, the paired log ratio (blocks where known)."""
        return paired_logs(self.base, self.pr, self.blocks)


def block_matrix(blocks: PairedBlocks | None, items: list[tuple[str, str]], medians: np.ndarray) -> np.ndarray | None:
    """Per (base item, PR item) and round, the log ratio over the round's paired blocks; None without blocks or
    when their rounds are not the rounds of ``medians`` (the per-side round medians of the same items)."""
    if blocks is None or len(blocks.rounds) != medians.shape[1] or not items:
        return None
    return np.array([blocks.round_log_ratios(base, pr) for base, pr in items], dtype=float)


def halves_matrix(blocks: PairedBlocks | None, items: list[str], medians: np.ndarray) -> np.ndarray | None:
    """Per base item and round, the split-half log ratio within the round (`PairedBlocks.round_half_log_ratios`);
    None where ``block_matrix`` would be None or no item has two halves in any round."""
    if blocks is None or len(blocks.rounds) != medians.shape[1] or not items:
        return None
    out = np.array([blocks.round_half_log_ratios("base", item) for item in items], dtype=float)
    return out if np.isfinite(out).any() else None


def family_matrix(rows: list[np.ndarray]) -> np.ndarray:
    """Stack per-item round medians into a matrix, padding shorter rows with NaN."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


@dataclass(frozen=True)
class FamilySummary:
    geomean: Estimate  # geomean speedup of the changed items (against the control's offset where used)
    time_weighted: Estimate  # the step: Σ base / Σ PR over all items and extras, identical items unchanged
    n: int  # changed items in the geomean
    method: str


def _filled(matrix: np.ndarray) -> np.ndarray:
    """Round medians with a failed round replaced by the item's median over its other rounds (0: none)."""
    out = matrix.copy()
    for row in out:
        bad = ~np.isfinite(row)
        if bad.any():
            good = row[~bad]
            row[bad] = float(np.median(good)) if len(good) else 0.0
    return out


def _paired_pr(data: FamilyData, base: np.ndarray) -> np.ndarray:
    """Per item and round, the PR's time: the base time over the round's paired log ratio where it is known, else
    the PR's own round median.

    Why: a round in which the machine slows from some pass on moves each side's median by a different part of
    the step (the median falls between the slow and the fast visits), while a block's two visits stay side by
    side. With the sides' medians the step's t statistic had an excess kurtosis of 3.2 and its 95 % interval
    covered the truth in 93.8 % of 400 simulated runs (``benchmarks/verdict_sim.py``'s changed-but-equal
    scenario); from the blocks, 0.7 and 94.5 %.
    """
    pr = _filled(data.pr)
    if not data.paired:
        return pr
    logs = data.logs()
    known = np.isfinite(logs) & (base > 0)
    return np.where(known, base * np.exp(-np.where(known, logs, 0.0)), pr)


def _extra(values: np.ndarray | None, rounds: int) -> np.ndarray:
    return np.zeros(rounds) if values is None else np.broadcast_to(np.asarray(values, dtype=float), (rounds,))


def step_logs(data: FamilyData, changed: np.ndarray, control: np.ndarray, offsets: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per round, log of one step's time on each side: base = Σ weight × base over the changed and identical
    items + the base-only extras; PR = the identical items at their base time + Σ weight × PR over the changed
    items + the PR-only extras, the PR times scaled by the control's per-round offset where it is used."""
    b, w = _filled(data.base), data.weights[:, None]
    p = _paired_pr(data, b)
    rounds_b, rounds_p = b.shape[1], p.shape[1]
    identical_b = (w * b)[control].sum(axis=0)
    base = (w * b)[changed].sum(axis=0) + identical_b + _extra(data.extra_base, rounds_b)
    scale = np.exp(offsets) if offsets is not None else 1.0
    pr_changed = ((w * p)[changed].sum(axis=0) + _extra(data.extra_pr, rounds_p)) * scale
    identical_p = identical_b if rounds_b == rounds_p else float(np.median(identical_b)) if len(identical_b) else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(base), np.log(pr_changed + identical_p)


def summarize_family(data: FamilyData, confidence: float, changed: np.ndarray | None = None,
                     control: np.ndarray | None = None, offsets: np.ndarray | None = None,
                     inflate: float = 1.0) -> FamilySummary:
    """Geomean over the changed items and the step's speedup, with intervals over rounds (items averaged within
    each round). ``changed`` defaults to every item, ``control`` to none."""
    rows = len(data.base)
    changed = np.ones(rows, dtype=bool) if changed is None else changed
    control = np.zeros(rows, dtype=bool) if control is None else control
    no_change = not changed.any() and data.extra_base is None and data.extra_pr is None
    if data.paired:
        keep = changed & data.complete()
        logs = data.logs()
        geo = NO_ESTIMATE
        if keep.any():
            per_round = logs[keep].mean(axis=0) - (0.0 if offsets is None else offsets)
            geo = _t_estimate(per_round, confidence, inflate, PAIRED)
        base_step, pr_step = step_logs(data, changed, control, offsets)
        step = (_estimate(0.0, 0.0, len(base_step) - 1, confidence, len(base_step), PAIRED) if no_change
                else _t_estimate(base_step - pr_step, confidence, inflate, PAIRED))
        how = "against the identical items' per-round mean, " if offsets is not None else ""
        method = (f"{percent(confidence)} Student-t interval over {data.base.shape[1]} paired rounds "
                  f"({how}items averaged within each round)")
        return FamilySummary(geo, step, int(keep.sum()), method)
    return _unpaired_family(data, confidence, changed, control, inflate, no_change)


def _unpaired_family(data: FamilyData, confidence: float, changed: np.ndarray, control: np.ndarray,
                     inflate: float, no_change: bool) -> FamilySummary:
    """Sides with different rounds: per-round family means per side, compared by Welch (or a point)."""
    rows = changed & np.isfinite(data.base).all(axis=1) & np.isfinite(data.pr).all(axis=1)
    base_step, pr_step = step_logs(data, changed, control, None)
    if not rows.any() and no_change:
        return FamilySummary(NO_ESTIMATE, NO_ESTIMATE, 0, "no items measured on both sides in every round")
    with np.errstate(divide="ignore", invalid="ignore"):
        b_means = np.log(data.base[rows]).mean(axis=0) if rows.any() else np.array([])
        p_means = np.log(data.pr[rows]).mean(axis=0) if rows.any() else np.array([])
    if len(base_step) >= 2 and len(pr_step) >= 2:
        method = (f"{percent(confidence)} Welch interval over rounds ({len(base_step)} base, {len(pr_step)} PR, "
                  "unpaired)")
        geo = _welch(b_means, p_means, confidence, inflate) if rows.any() else NO_ESTIMATE
        return FamilySummary(geo, _welch(base_step, pr_step, confidence, inflate), int(rows.sum()), method)
    point = (Estimate(_exp(float(b_means.mean() - p_means.mean())), math.nan, math.nan, math.nan, 1, SINGLE)
             if rows.any() else NO_ESTIMATE)
    step = Estimate(_exp(float(base_step.mean() - pr_step.mean())), math.nan, math.nan, math.nan, 1, SINGLE)
    return FamilySummary(point, step, int(rows.sum()),
                         "no interval: one round per side (no replication; run more rounds)")


def headline_verdict(est: Estimate, settings: VerdictSettings, resolution: float = 0.0) -> str:
    """The verdict of one summary estimate (one test: no multiplicity), by the item rules."""
    q = est.claim_p(max(settings.effect_floor, resolution))
    return classify(est, q, settings, resolution)


# --- controls ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlResult:
    kind: str  # "identical kernels" or "split-half"
    summary: Estimate
    n: int
    flagged: int  # control items called improved/regressed, before the cut-off this control sets
    available: bool
    reason: str = ""  # why unavailable
    flagged_effect: float = 0.0  # the largest relative effect among the flagged control items
    offset_corrected: bool = False  # identical items: their per-round mean was subtracted from every estimate
    test_alpha: float | None = None  # split-half: the level of its one test (passes when p ≥ it)
    inflation: float = 1.0  # split-half: the factor a failure put on every standard error
    on_timer_step: int = 0  # identical items: those left out, their times on the timer's step (`on_timer_step`)

    @property
    def false_positive_share(self) -> float:
        return self.flagged / self.n if self.n else math.nan

    def passed(self, settings: VerdictSettings) -> bool:
        if not self.available:
            return True
        if self.test_alpha is not None:
            return not (math.isfinite(self.summary.p_value) and self.summary.p_value < self.test_alpha)
        # A control interval that misses 1.0 but lies within the margin measured a negligible bias; one whose
        # offset is subtracted from every estimate is judged by its items alone.
        summary_ok = (self.offset_corrected or not self.summary.has_interval or self.summary.contains(1.0)
                      or within_margin(self.summary, settings.margin))
        return summary_ok and self.false_positive_share <= settings.alpha

    def produced_effect(self) -> float:
        """The largest relative effect the control produced: the far end of its interval when that misses 1.0
        (unless its offset was corrected for), or the largest effect among its flagged items."""
        strayed = 0.0
        if not self.offset_corrected and self.summary.has_interval and not self.summary.contains(1.0):
            strayed = max(_relative(self.summary.ci_low), _relative(self.summary.ci_high))
        return max(strayed, self.flagged_effect)


def _relative(ratio: float) -> float:
    """A ratio's distance from 1 as a relative effect, the same for 1.1× and 1/1.1×."""
    return _exp(abs(math.log(ratio))) - 1


def _flagged(estimates: list[Estimate], verdicts: list[str]) -> tuple[int, float]:
    effects = [_relative(e.speedup) for e, v in zip(estimates, verdicts, strict=True) if v in ("improved", "regressed")]
    return len(effects), max(effects, default=0.0)


def unavailable(kind: str, reason: str) -> ControlResult:
    return ControlResult(kind, NO_ESTIMATE, 0, 0, False, reason)


def on_timer_step(data: FamilyData) -> np.ndarray:
    """Items whose paired log ratio is exactly 0 in at least `TIMER_TIED_SHARE` of their rounds: their times sit
    on the timer's step (README command 1's 0.12–1.4 µs C++ kernels on a 10 ns clock: both sides' block medians the
    same step, block after block), so below the step they tell nothing. A timing that is not quantized never ties
    exactly; one that ties in half its rounds is decided by the step, not by the code. Only paired rounds have
    per-round ratios to tie."""
    if not data.paired:
        return np.zeros(len(data.base), dtype=bool)
    logs = data.logs()
    return np.asarray((logs == 0.0).sum(axis=1) >= TIMER_TIED_SHARE * logs.shape[1], dtype=bool)


def control_offsets(data: FamilyData, control: np.ndarray) -> np.ndarray | None:
    """Per round, the median log ratio of the identical items measured in every round; None when fewer than
    `MIN_DID_CONTROLS` were, or the sides' rounds are not paired.

    The median rather than the mean: one identical kernel whose rounds wander (another tenant on its core)
    would otherwise move the offset subtracted from every estimate, and widen every interval with it.
    """
    rows = control & data.complete()
    if not data.paired or rows.sum() < MIN_DID_CONTROLS:
        return None
    return np.asarray(np.median(data.logs()[rows], axis=0), dtype=float)


def _leave_one_out(data: FamilyData, control: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per item and round, the offset to subtract: for an identical item the median of the *other* identical
    items (its own noise must not cancel itself), for every other item the median of them all."""
    rows = np.flatnonzero(control & data.complete())
    out = np.tile(offsets, (len(data.base), 1))
    logs = data.logs()[rows]  # identical items × rounds
    n = len(rows)
    order = np.argsort(logs, axis=0, kind="stable")
    ranks = np.argsort(order, axis=0, kind="stable")  # each item's rank within its round
    ordered = np.take_along_axis(logs, order, axis=0)
    # The median of the n − 1 others: the middle rank(s) of what is left, shifted past the removed rank.
    low, high = (n - 2) // 2, (n - 1) // 2
    pick_low = np.where(low >= ranks, low + 1, low)
    pick_high = np.where(high >= ranks, high + 1, high)
    columns = np.arange(logs.shape[1])[None, :]
    out[rows] = (ordered[pick_low, columns] + ordered[pick_high, columns]) / 2
    return out


def identical_control(data: FamilyData, estimates: list[Estimate], verdicts: list[str], settings: VerdictSettings,
                      corrected: bool = False, kind: str = "identical kernels") -> ControlResult:
    """Items that cannot have changed (same code on both sides): their summary (the offset between the sides)
    and their flagged share (with ``corrected``, each judged against the others' per-round mean)."""
    if len(verdicts) < 3:
        return unavailable(kind, f"{len(verdicts)} item(s) identical on both sides; at least 3 are needed")
    summary = summarize_family(data, settings.confidence).geomean
    flagged, effect = _flagged(estimates, verdicts)
    return ControlResult(kind, summary, len(verdicts), flagged, True, flagged_effect=effect,
                         offset_corrected=corrected and summary.has_interval and not summary.contains(1.0))


def split_half_control(data: FamilyData | np.ndarray, settings: VerdictSettings) -> ControlResult:
    """The base side against itself, as one test at `CONTROL_ALPHA`.

    Paired where the rounds' blocks are known (``FamilyData.halves``): within each round, one half of each
    item's base blocks against the other half, the halves balanced against the order in which the sides
    started (`foundation.formats.paired_rounds`), averaged over items per round, t over rounds. Otherwise even against
    odd rounds, unpaired (Welch), which keeps the round offsets and is much wider. A failure widens every
    interval in proportion (`ControlResult.inflation`).
    """
    kind = "split-half"
    data = data if isinstance(data, FamilyData) else FamilyData(data, data, np.ones(len(data)))
    base = data.base
    rounds = base.shape[1] if base.ndim == 2 else 0
    if data.halves is not None:
        rows = np.isfinite(data.halves).all(axis=1)
        if rows.any() and rounds >= 3:
            est = _t_estimate(data.halves[rows].mean(axis=0), settings.confidence, 1.0, PAIRED)
            return _split_result(kind, est, int(rows.sum()))
    if rounds < 4:
        return unavailable(kind, f"{rounds} round(s); a split-half needs at least 4 (two per half)")
    keep = np.isfinite(base).all(axis=1)
    if not keep.any():
        return unavailable(kind, "no item was measured in every base round")
    logs = np.log(base[keep])
    est = _welch(logs[:, 0::2].mean(axis=0), logs[:, 1::2].mean(axis=0), settings.confidence)
    return _split_result(kind, est, int(keep.sum()))


def _split_result(kind: str, est: Estimate, n: int) -> ControlResult:
    inflation = 1.0
    if math.isfinite(est.p_value) and est.p_value < CONTROL_ALPHA and est.log_se > 0:
        # How far past its own critical value the control landed: the noise the intervals did not hold.
        inflation = abs(math.log(est.speedup)) / est.log_se / t_quantile(1 - CONTROL_ALPHA / 2, est.df)
    return ControlResult(kind, est, n, 0, True, test_alpha=CONTROL_ALPHA, inflation=max(inflation, 1.0))


def control_resolution(controls: list[ControlResult], settings: VerdictSettings) -> float:
    """The relative effect below which claims are refused: what the failed identical controls produced."""
    return max((c.produced_effect() for c in controls if c.test_alpha is None and not c.passed(settings)),
               default=0.0)


# --- a whole family, controls included ---------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyJudgement:
    estimates: list[Estimate]  # per item (selected items' intervals adjusted for the selection)
    q_values: np.ndarray  # Benjamini–Hochberg adjusted p of the threshold claim, per family of items
    verdicts: list[str]  # per item, after refusing effects a failed control could produce
    summary: FamilySummary
    verdict: str  # the family's verdict (`family_verdict`)
    headline: Estimate  # the estimate the family verdict leads with
    controls: list[ControlResult]
    resolution: float  # relative effect below which claims were refused (0: the controls passed)
    changed: np.ndarray  # items whose code changed (the effect family)
    control: np.ndarray  # identical items in the summary that the control measures with (none on the timer's step)
    shares: np.ndarray  # per item, its share of the base step
    detectable: float  # the headline's resolution: the smallest change told apart from none with `POWER` (NaN: none)
    selection_level: float  # the level of the selected items' intervals (NaN: none selected)
    offsets_used: bool  # items were estimated against the identical items' per-round mean
    # The identical items' verdicts as their control judged them: before claims under the cut-off it set were
    # withheld (judged against it, a flagged item would be refused by its own effect); their improved + regressed
    # are the control's `ControlResult.flagged`, one definition for every table that counts them.
    control_verdicts: dict[str, int]

    def counts(self, rows: np.ndarray | None = None) -> dict[str, int]:
        chosen = [v for i, v in enumerate(self.verdicts) if rows is None or rows[i]]
        return {v: chosen.count(v) for v in VERDICTS}


def step_shares(data: FamilyData, rows: np.ndarray) -> np.ndarray:
    """Per item, its share of one base step: weight × median base time / the step (items in ``rows`` + extras)."""
    with np.errstate(invalid="ignore"):
        per_item = data.weights * np.nanmedian(np.where(np.isfinite(data.base), data.base, np.nan), axis=1)
    per_item = np.where(np.isfinite(per_item), per_item, 0.0)
    extra = float(np.median(data.extra_base)) if data.extra_base is not None and len(data.extra_base) else 0.0
    total = float(per_item[rows].sum()) + extra
    return per_item / total if total > 0 else np.zeros(len(per_item))


def family_verdict(headline: Estimate, verdicts: list[str], changed: np.ndarray, shares: np.ndarray,
                   settings: VerdictSettings, resolution: float, code_changed: bool, measured: bool,
                   anything: bool = True) -> str:
    """``inconclusive`` when nothing was measured on both sides (``anything`` false) or what changed was not
    (its items failed on a side); ``identical`` when no code changed; ``regressed`` when the headline regressed
    or a changed item holding at least ``fail_share`` of the step did (never hidden by the others); ``mixed``
    when the headline improved all the same; else the headline's own verdict."""
    if not anything or (code_changed and not measured):
        return "inconclusive"
    if not code_changed:
        return NOTHING_CHANGED
    material = any(v == "regressed" and changed[i] and shares[i] >= settings.fail_share
                   for i, v in enumerate(verdicts))
    own = headline_verdict(headline, settings, resolution)
    if own == "improved" and material:
        return MIXED
    return "regressed" if material else own


def judge_family(data: FamilyData, settings: VerdictSettings, summary_rows: np.ndarray,
                 control_rows: np.ndarray | None = None, headline: str = "step",
                 code_changed: bool | None = None) -> FamilyJudgement:
    """Per-item estimates and verdicts, the family summary and verdict, and the in-run controls.

    ``summary_rows`` picks the items of the summary; ``control_rows`` those that cannot have changed (None: no
    such population, as for models); ``headline`` is "step" (the time-weighted estimate) or "geomean";
    ``code_changed`` whether any item's code changed, measured or not (None: an item of the summary did).
    """
    control = summary_rows & (np.zeros(len(summary_rows), bool) if control_rows is None else control_rows)
    changed = summary_rows & ~control
    tied = control & on_timer_step(data)  # identical, but on the timer's step: no part of the control
    measuring = control & ~tied
    split = split_half_control(data.subset(summary_rows), settings)
    inflate = split.inflation
    offsets = control_offsets(data, measuring)
    per_item = _leave_one_out(data, measuring, offsets) if offsets is not None else None
    estimates = [estimate(b, p, settings.confidence, data.item_blocks(i),
                          None if per_item is None or not summary_rows[i] else per_item[i], inflate)
                 for i, (b, p) in enumerate(zip(data.base, data.pr, strict=True))]
    groups = [changed, measuring, tied, ~summary_rows]
    floor = settings.effect_floor
    q = adjust_by_group(np.array([e.claim_p(floor) for e in estimates], dtype=float), groups)
    first = [classify(e, qv, settings) for e, qv in zip(estimates, q, strict=True)]
    controls = []
    picked = np.flatnonzero(measuring)
    control_first = [first[i] for i in picked]
    if control_rows is not None:
        controls.append(replace(identical_control(data.subset(measuring), [estimates[i] for i in picked],
                                                  control_first, settings, corrected=offsets is not None),
                                on_timer_step=int(tied.sum())))
    controls.append(split)
    resolution = control_resolution(controls, settings)
    if resolution > floor:
        q = adjust_by_group(np.array([e.claim_p(resolution) for e in estimates], dtype=float), groups)
    verdicts = [classify(e, qv, settings, resolution) for e, qv in zip(estimates, q, strict=True)]
    estimates, level = _adjust_selected(estimates, verdicts, changed, settings)
    summary = summarize_family(data.subset(summary_rows), settings.confidence, changed[summary_rows],
                               control[summary_rows], offsets, inflate)
    measured = bool(changed.any()) or data.extra_base is not None or data.extra_pr is not None
    code = measured if code_changed is None else code_changed
    if code and not measured:  # the changed items failed on a side: the step is not known, not unchanged
        summary = replace(summary, time_weighted=NO_ESTIMATE)
    lead = summary.time_weighted if headline == "step" else summary.geomean
    shares = step_shares(data, summary_rows)
    verdict = family_verdict(lead, verdicts, changed, shares, settings, resolution, code, measured,
                             bool(summary_rows.any()) or measured)
    return FamilyJudgement(estimates, q, verdicts, summary, verdict, lead, controls, resolution, changed, measuring,
                           shares, detectable_effect(lead, settings) if measured else math.nan, level,
                           offsets is not None, {v: control_first.count(v) for v in VERDICTS})


def _adjust_selected(estimates: list[Estimate], verdicts: list[str], changed: np.ndarray,
                     settings: VerdictSettings) -> tuple[list[Estimate], float]:
    """Widen the intervals of the changed items called improved/regressed for their selection."""
    tested = sum(1 for i, e in enumerate(estimates) if changed[i] and math.isfinite(e.claim_p(0.0)))
    chosen = [i for i, v in enumerate(verdicts) if changed[i] and v in ("improved", "regressed")]
    if not chosen:
        return estimates, math.nan
    out = list(estimates)
    for i in chosen:
        out[i] = selection_adjusted(estimates[i], len(chosen), tested, settings)
    return out, 1 - 2 * len(chosen) * settings.alpha / tested
