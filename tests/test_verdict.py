"""The statistics behind every verdict, pinned so that a plausible bug breaks a test.

Each test states the mistake it guards against: a geomean that became a median, an interval whose level
ignores ``confidence``, a summary that treats kernels rather than rounds as the replicated unit, an
"unchanged" that only means "not significant", a control that cannot fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.report.summary import effect_words, fail_reasons
from analysis.stats.verdict import (
    PAIRED,
    SINGLE,
    UNPAIRED,
    Estimate,
    FamilyData,
    adjust_p,
    block_matrix,
    classify,
    estimate,
    judge_family,
    robust_spread,
    round_medians,
    split_half_control,
    summarize_family,
)
from analysis.stats.verdict_settings import VerdictSettings, check_rounds
from foundation.errors import UserError
from foundation.formats.paired_rounds import PairedBlocks, RoundRecord, Visit, side_samples

SETTINGS = VerdictSettings()


def family(base: list[list[float]], pr: list[list[float]]) -> FamilyData:
    b, p = np.array(base, dtype=float), np.array(pr, dtype=float)
    return FamilyData(b, p, np.ones(len(b)))


def test_the_geomean_is_the_mean_of_log_ratios_not_their_median() -> None:
    # Three kernels, two rounds; per-kernel speedups 1, 1, 8 in both rounds: geomean 2, median 1.
    base = [[1.0, 1.0], [1.0, 1.0], [8.0, 8.0]]
    pr = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    summary = summarize_family(family(base, pr), 0.95)
    assert summary.geomean.speedup == pytest.approx(2.0)
    assert summary.time_weighted.speedup == pytest.approx(10.0 / 3.0)  # Σ base / Σ PR


def test_the_interval_has_the_level_the_settings_ask_for() -> None:
    from scipy import stats as scipy_stats  # the reference; imported here, not at collection (about 1.2 s)

    ratios = np.log([1.10, 0.95, 1.02, 1.04, 0.99])
    base = np.exp(ratios)
    pr = np.ones(5)
    wide, narrow = estimate(base, pr, 0.95), estimate(base, pr, 0.50)
    se = ratios.std(ddof=1) / math.sqrt(5)
    for est, level in ((wide, 0.95), (narrow, 0.50)):
        half = (math.log(est.ci_high) - math.log(est.ci_low)) / 2
        assert half == pytest.approx(scipy_stats.t.ppf(0.5 + level / 2, 4) * se)
    assert wide.design == PAIRED and wide.rounds == 5
    assert wide.speedup == pytest.approx(math.exp(ratios.mean()))


def test_a_busy_round_shared_by_every_kernel_widens_the_summary_instead_of_posing_as_a_change() -> None:
    # A/A: 200 identical kernels, tight within each round, but each round of base had its own machine state
    # (+10 %, -10 %, +5 %, -5 %, 0 % for every kernel at once). Resampling kernels alone would see 200 kernels
    # that all agree on ~1.0 and give a hair-thin interval; the round is what was replicated.
    rng = np.random.default_rng(0)
    shifts = np.array([1.10, 0.90, 1.05, 0.95, 1.00])
    true = rng.uniform(0.01, 1.0, 200)
    base = true[:, None] * shifts[None, :] * rng.lognormal(0, 0.001, (200, 5))
    pr = true[:, None] * rng.lognormal(0, 0.001, (200, 5))
    summary = summarize_family(FamilyData(base, pr, np.ones(200)), 0.95).geomean
    assert summary.contains(1.0)
    assert summary.half_width_pct > 5.0  # the round-to-round swing, not the 0.1 % within-round noise
    kernel_only = np.exp(np.std(np.log(base / pr).mean(axis=1)) / math.sqrt(200) * 2)
    assert kernel_only - 1 < 0.001  # what treating kernels as the unit would have claimed


def test_a_real_shift_in_every_round_is_found_with_few_rounds() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0.01, 1.0, (50, 1)) * rng.lognormal(0, 0.01, (50, 5))
    pr = base / 1.2 * rng.lognormal(0, 0.01, (50, 5))
    judged = judge_family(FamilyData(base, pr, np.ones(50)), SETTINGS, np.ones(50, dtype=bool))
    assert judged.verdict == "improved"
    assert judged.summary.geomean.ci_low > 1.15
    assert judged.counts()["improved"] == 50


def interval(speedup: float, low: float, high: float, rounds: int = 10) -> Estimate:
    """An estimate whose 95 % t interval over ``rounds`` rounds is [low, high] (its standard error follows)."""
    from scipy.special import stdtrit

    se = (math.log(high) - math.log(low)) / 2 / float(stdtrit(rounds - 1, 0.975))
    return Estimate(speedup, low, high, math.nan, rounds, PAIRED, se, rounds - 1)


@pytest.mark.parametrize(
    ("speedup", "low", "high", "verdict"),
    [
        (1.003, 0.991, 1.012, "equivalent"),  # the whole interval inside ±2 %
        (1.015, 1.011, 1.019, "equivalent"),  # a change, but shown to be inside the margin: no practical change
        (1.010, 0.970, 1.050, "inconclusive"),  # not significant, yet could be 5 %: NOT "unchanged"
        (0.800, 0.780, 0.820, "regressed"),
        (1.250, 1.200, 1.300, "improved"),
        (1.015, 1.005, 1.030, "inconclusive"),  # a change, below the 2 % threshold, not inside the margin
        (1.023, 1.007, 1.039, "inconclusive"),  # 2.3 %, but it may be 0.7 %: "beyond 2 %" is not shown
        (0.960, 0.940, 0.979, "regressed"),  # shown beyond −2 %
    ],
)
def test_verdicts_are_three_way_with_the_threshold_claim_tested_as_a_claim(speedup: float, low: float, high: float,
                                                                         verdict: str) -> None:
    est = interval(speedup, low, high)
    assert classify(est, est.claim_p(SETTINGS.effect_floor), SETTINGS) == verdict


def test_the_claim_test_is_one_sided_against_the_threshold_not_against_zero() -> None:
    # 2.3 % with a tight interval: the claim "beyond 2 %" is tested, so its p is that of (2.3 % − 2 %) / se.
    est = interval(1.023, 1.021, 1.025)
    assert est.claim_p(0.02) < 0.05 < interval(1.023, 1.007, 1.039).claim_p(0.02)
    assert est.claim_p(0.03) > 0.5  # not shown beyond 3 %
    assert interval(1 / 1.023, 1 / 1.025, 1 / 1.021).claim_p(0.02) == pytest.approx(est.claim_p(0.02))


def test_a_change_shown_beyond_a_threshold_below_the_margin_is_a_change_not_equivalent() -> None:
    # --threshold 0.01 with the 2 % margin: 1.2-1.8 % faster, shown beyond 1 %.
    settings = VerdictSettings(threshold=0.01)
    est = interval(1.015, 1.012, 1.018)
    assert est.claim_p(0.01) < 0.01
    assert classify(est, est.claim_p(0.01), settings) == "improved"


def test_a_wider_margin_makes_more_things_equivalent_and_a_failed_control_refuses_small_effects() -> None:
    est = interval(1.08, 1.06, 1.10)
    assert classify(est, est.claim_p(0.02), SETTINGS) == "improved"
    assert classify(est, est.claim_p(0.12), VerdictSettings(margin=0.12)) == "equivalent"
    # 8 % is beyond the 7 % a failed control produced, but not shown to be: the claim is tested against 7 %.
    assert classify(est, est.claim_p(0.07), SETTINGS, resolution=0.07) == "inconclusive"
    assert classify(est, est.claim_p(0.05), SETTINGS, resolution=0.05) == "improved"
    # Equivalence is refused too: the interval widened by what the control produced no longer fits the margin.
    small = interval(1.002, 0.995, 1.009)
    assert classify(small, small.claim_p(0.02), SETTINGS) == "equivalent"
    assert classify(small, small.claim_p(0.03), SETTINGS, resolution=0.03) == "inconclusive"


def test_benjamini_hochberg_adjusts_across_the_family_and_keeps_untested_items_untested() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.5, np.nan])
    q = adjust_p(p)
    assert q[:4] == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.5])  # sorted 0.01 0.03 0.04 0.5, step-up
    assert math.isnan(q[4])


@pytest.mark.parametrize("seed", range(5))
def test_the_adjustment_is_scipys_benjamini_hochberg_with_ties_zeros_and_ones(seed: int) -> None:
    from scipy.stats import false_discovery_control

    rng = np.random.default_rng(seed)
    p = np.round(rng.uniform(0, 1, 40) ** 3, 2)  # rounded: ties, zeros and ones
    p[rng.integers(0, 40, 3)] = np.nan
    tested = np.isfinite(p)
    q = adjust_p(p)
    assert q[tested] == pytest.approx(false_discovery_control(p[tested], method="bh"), abs=1e-15)
    assert np.isnan(q[~tested]).all()


def test_a_hundred_kernels_with_no_change_do_not_yield_five_false_regressions() -> None:
    rng = np.random.default_rng(7)
    true = rng.uniform(0.01, 1.0, (100, 1))
    base, pr = true * rng.lognormal(0, 0.03, (100, 5)), true * rng.lognormal(0, 0.03, (100, 5))
    raw = [estimate(b, p, 0.95).p_value for b, p in zip(base, pr, strict=True)]
    judged = judge_family(FamilyData(base, pr, np.ones(100)), SETTINGS, np.ones(100, dtype=bool))
    assert sum(x < 0.05 for x in raw) >= 3  # unadjusted tests do produce false positives here
    assert judged.counts()["improved"] + judged.counts()["regressed"] == 0


def test_one_round_per_side_gives_a_point_and_no_verdict() -> None:
    est = estimate(np.array([1.0]), np.array([0.5]), 0.95)
    assert est.design == SINGLE and est.speedup == pytest.approx(2.0) and not est.has_interval
    assert classify(est, math.nan, SETTINGS) == "inconclusive"


def test_sides_with_different_round_counts_are_compared_unpaired() -> None:
    est = estimate(np.array([1.0, 1.02, 0.98]), np.array([0.5, 0.51, 0.49, 0.5]), 0.95)
    assert est.design == UNPAIRED and est.ci_low > 1.8


def test_a_failed_visit_leaves_its_round_out_of_the_pair() -> None:
    medians = round_medians([[1.0, 1.1, 0.9], [], [float("nan")], [2.0, 2.0]])
    assert medians[0] == pytest.approx(1.0) and np.isnan(medians[1]) and np.isnan(medians[2])
    est = estimate(np.array([1.0, np.nan, 1.1, 1.0]), np.array([1.0, 1.0, 1.0, 1.05]), 0.95)
    assert est.rounds == 3


def test_the_noise_flag_is_robust_to_one_preempted_round() -> None:
    steady = np.array([1.00, 1.01, 0.99, 1.00, 1.02])
    preempted = np.array([1.00, 1.01, 0.99, 1.00, 3.00])
    assert robust_spread(preempted) == pytest.approx(robust_spread(steady), rel=0.5)
    assert robust_spread(preempted) < 0.05
    assert np.std(preempted) / np.mean(preempted) > 0.3  # what std/mean would have said


def test_the_identical_kernel_control_fails_when_identical_code_is_flagged() -> None:
    # 20 identical kernels, 3 of which the machine made look 10 % slower in every round.
    rng = np.random.default_rng(3)
    base = rng.uniform(0.1, 1.0, (20, 1)) * rng.lognormal(0, 0.002, (20, 5))
    pr = base * rng.lognormal(0, 0.002, (20, 5))
    pr[:3] *= 1.10
    changed = np.ones(20, dtype=bool)
    judged = judge_family(FamilyData(base, pr, np.ones(20)), SETTINGS, changed, control_rows=changed)
    control = judged.controls[0]
    assert control.kind == "identical kernels" and control.flagged == 3
    assert not control.passed(SETTINGS)
    assert judged.resolution == pytest.approx(0.10, abs=0.01)
    assert judged.counts()["regressed"] == 0  # refused: the control produced effects this large itself


def test_a_control_that_sees_nothing_passes_and_does_not_refuse() -> None:
    rng = np.random.default_rng(4)
    base = rng.uniform(0.1, 1.0, (20, 1)) * rng.lognormal(0, 0.002, (20, 5))
    pr = base * rng.lognormal(0, 0.002, (20, 5))
    pr[5:10] *= 1.3  # changed kernels, not in the control
    control_rows = np.arange(20) < 5
    judged = judge_family(FamilyData(base, pr, np.ones(20)), SETTINGS, np.ones(20, dtype=bool), control_rows)
    assert all(c.passed(SETTINGS) for c in judged.controls)
    assert judged.resolution == 0.0 and judged.counts()["regressed"] == 5


def test_split_half_compares_even_with_odd_rounds_and_needs_four() -> None:
    drifting = np.array([[1.0, 1.3, 1.0, 1.3, 1.0, 1.3]] * 10) * np.linspace(1, 1.001, 10)[:, None]
    control = split_half_control(drifting, SETTINGS)
    assert control.available and not control.passed(SETTINGS)
    assert control.summary.speedup == pytest.approx(1 / 1.3, rel=1e-3)
    assert not split_half_control(drifting[:, :3], SETTINGS).available


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [("alpha", 5.0, "--alpha"), ("confidence", 95.0, "--confidence"), ("margin", -0.1, "--margin"),
     ("threshold", 2.0, "--threshold"), ("noise", 0.0, "--noise"), ("min_ms", -1.0, "--min-ms")],
)
def test_bad_settings_are_one_line_errors_naming_the_flag(field: str, value: float, flag: str) -> None:
    with pytest.raises(UserError, match=f"^{flag} "):
        VerdictSettings(**{field: value}).validate()


def test_rounds_below_three_are_refused() -> None:
    assert check_rounds("5") == 5
    with pytest.raises(UserError, match=r"^--rounds 2: at least 3"):
        check_rounds(2)


def test_fail_on_reads_the_summary() -> None:
    summary = {"kernels": {"verdict": "inconclusive"}, "models": {"verdict": "equivalent"},
               "gates": [{"name": "compile time ratio", "status": "pass"}], "control": {"passed": True}}
    assert fail_reasons(summary, "regression") == []
    assert fail_reasons(summary, "inconclusive") == ["kernels: inconclusive"]
    summary["gates"][0]["status"] = "fail"
    assert fail_reasons(summary, "regression") == ["gate compile time ratio: fail"]
    assert fail_reasons(summary, "never") == []


# --- paired blocks: a round's log ratio from the blocks in which both sides were timed together ---------------


def _round_with_burst(number: int) -> RoundRecord:
    """Eight ABBA blocks of one model; the machine is 1.8× slower during blocks 0–3 and for the first visit of
    block 4 (a base visit), then back to normal: base saw 9 slow visits of 16, PR 8."""
    visits = []
    for block in range(8):
        order = ("base", "pr", "pr", "base")
        for position, side in enumerate(order):
            slow = block < 4 or (block == 4 and position == 0)
            visits.append(Visit(side, "M", 0, position, float(block), [1.8 if slow else 1.0] * 10, "", block))
    return RoundRecord("models", number, ["base", "pr"], "", 1.0, {}, visits)


def test_a_burst_that_hits_one_side_more_often_does_not_become_a_change() -> None:
    """Pooled per side, the burst decides each side's median (base 1.8 ms, PR 1.4 ms: "29 % faster"); block by
    block, base and PR agree in seven blocks of eight, so the round's log ratio is 0."""
    records = [_round_with_burst(n) for n in (1, 2, 3)]
    base = round_medians(side_samples(records, "base")["M"])
    pr = round_medians(side_samples(records, "pr")["M"])
    assert base[0] / pr[0] == pytest.approx(1.8 / 1.4)  # what pooling alone would conclude

    blocks = PairedBlocks.from_records(records)
    assert blocks is not None
    assert blocks.round_log_ratios("M", "M") == [0.0, 0.0, 0.0]
    data = FamilyData(np.array([base]), np.array([pr]), np.ones(1),
                      block_matrix(blocks, [("M", "M")], np.array([base])))
    judged = judge_family(data, SETTINGS, np.array([True]))
    assert judged.estimates[0].speedup == pytest.approx(1.0)
    assert judged.summary.geomean.speedup == pytest.approx(1.0)
    # The step too: an item's PR time in a round is its base time over the round's block ratio.
    assert judged.summary.time_weighted.speedup == pytest.approx(1.0)


def test_blocks_pair_only_rounds_that_timed_both_sides_together_and_only_matching_rounds() -> None:
    together = [_round_with_burst(n) for n in (1, 2, 3)]
    apart = [RoundRecord("models", 1, ["base"], "", 1.0, {}, together[0].visits[:1]),
             RoundRecord("models", 1, ["pr"], "", 1.0, {}, together[0].visits[1:2])]
    assert PairedBlocks.from_records(apart) is None  # docker recipes: each side in its own image, apart
    blocks = PairedBlocks.from_records(together)
    assert blocks is not None
    assert block_matrix(blocks, [("M", "M")], np.ones((1, 5))) is None  # five round medians, three rounds
    assert math.isnan(blocks.round_log_ratios("M", "other")[0])  # never timed in the same block


def test_an_inconclusive_summary_says_whether_it_found_a_change_too_small_to_call_or_could_not_resolve_one() -> None:
    beyond_one = interval(1.03, 1.01, 1.05)
    assert effect_words("models", beyond_one, SETTINGS, 0.0) == (
        "models inconclusive (1.030×, 95 % CI 1.010×–1.050×): a change, but not shown to exceed ±2 %")
    wide = interval(1.01, 0.97, 1.05)
    assert effect_words("models", wide, SETTINGS, 0.0).endswith(": this run cannot resolve effects below 4.0 %")
    # A failed control refused the change: that is what the line says, not "a change".
    assert effect_words("models", beyond_one, SETTINGS, 0.06).endswith(
        ": this run cannot resolve effects below 6.0 %")


def test_the_verdict_line_counts_percent_slower_as_the_tables_do() -> None:
    # 0.80×: the PR takes 25 % longer, which is what change_pct shows (+25 %), not "20 % slower".
    assert effect_words("the step", interval(0.80, 0.78, 0.82), SETTINGS, 0.0).startswith("the step 25.0 % slower")
    assert effect_words("the step", interval(1.25, 1.2, 1.3), SETTINGS, 0.0).startswith("the step 20.0 % faster")


def test_the_split_half_cancels_a_drift_over_the_round_and_the_start_order() -> None:
    """One side's blocks of an item in one round: the machine slows 1 % a pass and the side is 2 % slower when it
    starts the block (base starts when block + round + pass is even). Halves A B B A: both effects cancel."""
    def ms(p: int, rnd: int) -> float:
        return (1 + 0.01 * p) * (1.02 if (0 + rnd + p) % 2 == 0 else 1.0)

    blocks = PairedBlocks([1, 2], {("base", "M"): {rnd: {(p, 0): [ms(p, rnd)] for p in range(8)} for rnd in (1, 2)}})

    halves = blocks.round_half_log_ratios("base", "M")

    assert halves == pytest.approx([0.0, 0.0], abs=2e-3)
    # Half B two passes later (A A B B) would have read the drift as a 2 % difference between the halves.
    aabb = math.log(np.median([ms(p, 1) for p in (0, 1, 4, 5)]) / np.median([ms(p, 1) for p in (2, 3, 6, 7)]))
    assert aabb < -0.015
    # Fewer than four blocks: no split.
    short = PairedBlocks([1], {("base", "M"): {1: {(p, 0): [1.0] for p in range(3)}}})
    assert math.isnan(short.round_half_log_ratios("base", "M")[0])


# README command 1's ten identical C++ pairs as measured (8 rounds, each timed from base's module; per round the
# median over its blocks of log(base / PR), in %, rounded to 0.001 %; the base medians in µs). Four are 0.12–1.4
# µs kernels whose times sit on the 10 ns timer's step: their block medians tie, so their ratio is exactly 0 in
# most rounds.
README_IDENTICAL = {  # name: (base µs, per-round log ratio in %)
    "cpp_fused__to_copy_ne_0": (0.12, [0.0, -0.415, 0.0, 0.0, 0.0, -7.174, 0.83, 0.623]),
    "cpp_fused__unsafe_view_relu_3": (0.57, [1.147, 0.853, 3.269, 0.981, -0.883, 0.04, 0.082, -1.724]),
    "cpp_fused_add_mul_pow_tanh_view_2": (40.51, [0.368, 0.333, 0.884, 0.952, -0.097, 0.728, 0.493, -1.204]),
    "cpp_fused__scaled_dot_product_..._2": (4.32, [0.232, -0.232, 0.162, 0.243, -0.232, -0.693, -0.249, -0.393]),
    "cpp_fused_gelu_view_2": (19.46, [-1.636, -0.104, 0.27, 0.785, -0.31, 1.767, -0.324, 0.929]),
    "cpp_fused__scaled_dot_product_..._zeros_10": (0.16, [0.0, 0.0, -0.467, 0.0, 0.0, 0.0, 0.0, 0.0]),
    "cpp_fused_add_mean_mul_pow_rsqrt_8": (1.43, [0.0, -0.035, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    "cpp_fused__scaled_dot_product_..._5": (9.03, [0.643, 0.359, 0.439, -0.108, -0.277, -0.827, -0.465, 0.002]),
    "cpp_fused__scaled_dot_product_..._1": (9.89, [0.306, -0.248, 0.454, 0.023, 0.236, -0.023, -0.326, -0.098]),
    "cpp_fused_add_arange_cat_cumsum_..._1": (0.21, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.475]),
}
ON_THE_STEP = ["cpp_fused__to_copy_ne_0", "cpp_fused__scaled_dot_product_..._zeros_10",
               "cpp_fused_add_mean_mul_pow_rsqrt_8", "cpp_fused_add_arange_cat_cumsum_..._1"]


def test_identical_kernels_on_the_timers_step_are_left_out_of_the_control() -> None:
    from analysis.stats.verdict import on_timer_step

    names = list(README_IDENTICAL)
    base_us = np.array([README_IDENTICAL[n][0] for n in names])
    logs = np.array([README_IDENTICAL[n][1] for n in names]) / 100
    # Plus one changed kernel 10 % slower, as the run had: the family's effect, estimated against the control.
    base = np.vstack([base_us[:, None].repeat(8, axis=1), np.full((1, 8), 20.0)])
    blocks = np.vstack([logs, np.full((1, 8), math.log(1 / 1.1))])
    data = FamilyData(base, base / np.exp(blocks), np.ones(11), blocks=blocks)
    identical = np.array([True] * 10 + [False])

    tied = on_timer_step(data)
    assert [names[i] for i in np.flatnonzero(tied)] == ON_THE_STEP  # 4, 7, 7 and 7 of 8 rounds exactly 0
    judged = judge_family(data, SETTINGS, np.ones(11, dtype=bool), control_rows=identical)
    control = judged.controls[0]
    assert (control.kind, control.n, control.on_timer_step) == ("identical kernels", 6, 4)
    assert list(judged.control) == [not t for t in tied[:10]] + [False]
    # The control's offset per round is the median of the six that measure below the step, not of all ten (whose
    # median the ties pull to 0 in five of the eight rounds).
    measuring = logs[~tied[:10]]
    assert control.summary.speedup == pytest.approx(math.exp(measuring.mean(axis=0).mean()))
    changed = judged.estimates[10]
    assert changed.speedup == pytest.approx(math.exp((math.log(1 / 1.1) - np.median(measuring, axis=0)).mean()))
    # Still identical code: they count at their base time on both sides, never as changed.
    assert not judged.changed[:10].any()


def test_a_kernel_tied_in_fewer_than_half_its_rounds_stays_in_the_control() -> None:
    from analysis.stats.verdict import on_timer_step

    logs = np.array([[0.0, 0.0, 0.0, 0.002, -0.001, 0.003, 0.001, -0.002],   # tied in 3 of 8
                     [0.0, 0.0, 0.0, 0.0, 0.001, 0.003, 0.001, -0.002]])      # tied in 4 of 8
    base = np.ones((2, 8))
    assert list(on_timer_step(FamilyData(base, base / np.exp(logs), np.ones(2), blocks=logs))) == [False, True]
    # Unpaired rounds have no per-round ratio to tie.
    assert not on_timer_step(FamilyData(base, np.ones((2, 5)), np.ones(2))).any()
