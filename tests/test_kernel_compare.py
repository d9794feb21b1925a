"""Kernel comparison: the seed's number reproduced exactly, pairing that survives renumbering, and verdicts that
come from paired timing rounds: real changes are found with an interval, noise and busy rounds are not called
changes, one round gives no verdict, and a machine bias on identical code fails the in-run control."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.kernels.compare import compare_kernels, pair_kernels
from analysis.stats.verdict_settings import VerdictSettings
from foundation.errors import UserError
from foundation.formats.paired_rounds import read_round_samples
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str) -> subprocess.CompletedProcess:
    return invoke_in_process(*args)


# --- the seed's kernel_perf_simple.py --------------------------------------------------------------------

SEED_HEADER = ["relative_dir", "filename", "kernel_name", "ms_per_call", "gb_per_s"]
# Chosen so every rule of the seed matters: duplicates on both sides (cartesian join), a missing time, a
# reduction kernel (dropped), ref times at/below 0.008 ms and zero (dropped on ref only), names on one side only.
SEED_REF = [
    ("pointwise", "a.py", "triton_poi_fused_add_0_x1024_r", "0.0500", "10"),
    ("pointwise", "b.py", "triton_poi_fused_mul_1_x2048_r", "0.1200", "10"),
    ("pointwise", "b2.py", "triton_poi_fused_mul_1_x2048_r", "0.1000", "10"),
    ("pointwise", "c.py", "triton_poi_fused_relu_2_x64_r", "0.0080", "10"),
    ("pointwise", "d.py", "triton_poi_fused_tanh_3_x64_r", "0", "10"),
    ("pointwise", "e.py", "triton_poi_fused_gelu_4_x4096_r", "", "10"),
    ("reduction", "f.py", "triton_red_fused_sum_5_x8_r512", "0.3000", "10"),
    ("pointwise", "g.py", "triton_poi_fused_exp_6_x128_r", "0.0300", "10"),
    ("pointwise", "h.py", "triton_poi_fused_only_ref_7_x1_r", "0.0400", "10"),
]
SEED_OPT = [
    ("pointwise", "a.py", "triton_poi_fused_add_0_x1024_r", "0.0400", "10"),
    ("pointwise", "b.py", "triton_poi_fused_mul_1_x2048_r", "0.1100", "10"),
    ("pointwise", "b3.py", "triton_poi_fused_mul_1_x2048_r", "0.1300", "10"),
    ("pointwise", "b4.py", "triton_poi_fused_mul_1_x2048_r", "0.0900", "10"),
    ("pointwise", "c.py", "triton_poi_fused_relu_2_x64_r", "0.0070", "10"),
    ("pointwise", "d.py", "triton_poi_fused_tanh_3_x64_r", "0.0100", "10"),
    ("reduction", "f.py", "triton_red_fused_sum_5_x8_r512", "0.1000", "10"),
    ("pointwise", "g.py", "triton_poi_fused_exp_6_x128_r", "", "10"),
    ("pointwise", "g2.py", "triton_poi_fused_exp_6_x128_r", "0.0250", "10"),
    ("pointwise", "i.py", "triton_poi_fused_only_opt_8_x1_r", "0.0400", "10"),
]


def write_seed_csv(path: Path, rows: list[tuple[str, ...]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SEED_HEADER)
        writer.writerows(rows)
    return path


def seed_geomean_by_hand(ref_path: Path, opt_path: Path) -> tuple[float, int]:
    """The seed's algorithm re-done with the csv module and plain loops (no pandas), as an independent check."""
    def rows(path: Path) -> list[tuple[str, float]]:
        out = []
        with path.open() as f:
            for row in csv.DictReader(f):
                if row["kernel_name"] and row["ms_per_call"] and row["kernel_name"].startswith("triton_poi_"):
                    out.append((row["kernel_name"], float(row["ms_per_call"])))
        return out

    ref = [(k, ms) for k, ms in rows(ref_path) if ms > 0 and ms > 0.008]
    opt = rows(opt_path)
    ratios = [r_ms / o_ms for r_name, r_ms in ref for o_name, o_ms in opt if r_name == o_name]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), len(ratios)


def test_seed_semantics_reproduce_kernel_perf_simple_through_invoke(tmp_path: Path) -> None:
    ref = write_seed_csv(tmp_path / "ref.csv", SEED_REF)
    opt = write_seed_csv(tmp_path / "opt.csv", SEED_OPT)
    expected, n_rows = seed_geomean_by_hand(ref, opt)
    assert n_rows == 8  # add 1 + mul 2×3 + exp 1: the duplicates really produce a cartesian product

    result = invoke("compare-kernels", str(ref), str(opt), "--semantics", "seed", "--out", str(tmp_path / "out"))

    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("geomean: ")
    assert float(last.removeprefix("geomean: ")) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    saved = pd.read_csv(tmp_path / "out" / "seed_compare.csv")
    assert list(saved.columns) == ["kernel_name", "ms_per_call_ref", "ms_per_call_opt", "latency_ratio"]
    assert len(saved) == n_rows


def test_seed_semantics_need_the_seed_columns(tmp_path: Path) -> None:
    specs = kernel_specs(3, seed=1)
    frame, _ = kernels_frame(specs, seed=2)
    frame.to_csv(tmp_path / "kernels.csv", index=False)
    result = invoke("compare-kernels", str(tmp_path / "kernels.csv"), str(tmp_path / "kernels.csv"),
                    "--semantics", "seed")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ms_per_call" in lines[0] and "kernels.csv" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


# --- pairing ---------------------------------------------------------------------------------------------


def test_renumbered_kernels_pair_by_body_and_shape() -> None:
    specs = kernel_specs(40, seed=3)
    base, _ = kernels_frame(specs, seed=4)
    pr, _ = kernels_frame(specs, seed=5, index_shift=7)  # every generated name changes
    assert not set(base["kernel_name"]) & set(pr["kernel_name"])

    pairing = pair_kernels(base, pr)

    assert pairing.summary.by_method == {"body_hash+shape_key": 40, "legacy_key": 0, "ops+shape_key": 0,
                                         "graphs+shape_key": 0, "kernel_name": 0}
    assert pairing.summary.only_base == pairing.summary.only_pr == 0
    paired_stems = {(base.at[b, "body_hash"], pr.at[p, "body_hash"]) for b, p in
                    zip(pairing.pairs["base_row"], pairing.pairs["pr_row"], strict=True)}
    assert all(a == b for a, b in paired_stems)


def test_fallback_keys_and_unpaired_kernels_are_reported() -> None:
    specs = kernel_specs(10, seed=6)
    base, _ = kernels_frame(specs, seed=7)
    pr, _ = kernels_frame(specs, seed=8)
    # Kernels 0-2: the PR's body hash changed (a codegen change) but the seed's legacy key still matches.
    pr.loc[0:2, "body_hash"] = "changed"
    # Kernels 3-4: neither hash, legacy key nor shapes match, the generated name does.
    pr.loc[3:4, ["body_hash", "legacy_key", "shape_key"]] = ["other", "other_key", "x999"]
    # Kernel 5 vanished in the PR and the PR gained a new kernel of other shapes (of the same shapes in the same
    # graphs it would be kernel 5 renamed in place).
    pr.loc[5, ["body_hash", "legacy_key", "kernel_name", "shape_key"]] = ["new", "new_key", "triton_poi_new_99", "x7"]

    s = pair_kernels(base, pr).summary

    assert s.by_method == {"body_hash+shape_key": 4, "legacy_key": 3, "ops+shape_key": 0,
                           "graphs+shape_key": 0, "kernel_name": 2}
    assert (s.only_base, s.only_pr) == (1, 1)


def test_duplicate_keys_pair_one_to_one_in_a_fixed_order() -> None:
    specs = kernel_specs(1, seed=9)
    one, _ = kernels_frame(specs, seed=10)
    base = pd.concat([one] * 3, ignore_index=True)
    base["path"] = ["c.py", "a.py", "b.py"]
    pr = pd.concat([one] * 2, ignore_index=True)
    pr["path"] = ["y.py", "x.py"]

    first = pair_kernels(base, pr)
    again = pair_kernels(base.iloc[::-1].reset_index(drop=True), pr.iloc[::-1].reset_index(drop=True))

    assert len(first.pairs) == 2 and first.summary.only_base == 1  # never 3×2 = 6 rows
    assert first.summary.duplicate_keys == 1

    def as_paths(result, b, p):
        return sorted((b.at[r, "path"], p.at[q, "path"]) for r, q in
                      zip(result.pairs["base_row"], result.pairs["pr_row"], strict=True))

    assert as_paths(first, base, pr) == [("a.py", "x.py"), ("b.py", "y.py")]
    assert as_paths(again, base.iloc[::-1].reset_index(drop=True), pr.iloc[::-1].reset_index(drop=True)) == \
        as_paths(first, base, pr)


# --- statistics ---


def by_name(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_index("base_name")


def test_same_variant_twice_says_no_kernel_changed_and_its_control_holds_one() -> None:
    specs = kernel_specs(300, seed=11)
    base, base_samples = kernels_frame(specs, seed=12, cv=0.03)
    pr, pr_samples = kernels_frame(specs, seed=13, cv=0.03)

    result = compare_kernels(base, pr, base_samples, pr_samples)

    s = result.summary
    assert s.rounds == 5 and set(result.table["rounds"]) == {5}
    # Nothing changed, so nothing is called neutral: there is no effect to measure.
    assert s.verdict == "identical" and (s.code_changed, s.code_identical, s.n_changed) == (0, 300, 0)
    assert s.time_weighted.speedup == 1.0 and not s.geomean.has_interval
    identical, split_half = result.controls
    assert identical.summary.contains(1.0), identical.summary
    assert identical.summary.half_width_pct < 1.0  # 300 kernels × 5 rounds pin the machine's offset down
    # Each identical kernel judged against the others: not even the 5 % a raw test would give.
    assert s.control_verdicts["improved"] + s.control_verdicts["regressed"] == 0
    assert s.n_summarised == 300 and sum(s.control_verdicts.values()) == 300
    assert (identical.kind, identical.n, split_half.kind) == ("identical kernels", 300, "split-half")
    assert all(c.available and c.passed(result.settings) for c in result.controls)
    assert result.resolution == 0.0 and result.notes == []


def test_a_kernel_slower_in_every_round_is_regressed_with_an_interval_excluding_one() -> None:
    specs = kernel_specs(60, seed=14)
    factor = {0: 0.7, 1: 0.75, 2: 1.4, 3: 1.2}
    base, base_samples = kernels_frame(specs, seed=15, cv=0.01, round_cv=0.003)
    pr, pr_samples = kernels_frame(specs, seed=16, cv=0.01, round_cv=0.003, factor=factor)
    noisy_path = base.at[10, "path"]  # one kernel whose base rounds wander ±40 % (another tenant, say)
    base_samples[noisy_path] = [list(np.array(r) * f) for r, f in
                                zip(base_samples[noisy_path], [0.6, 1.2, 1.0, 1.4, 0.8], strict=True)]

    result = compare_kernels(base, pr, base_samples, pr_samples)

    table, names = by_name(result.table), base["kernel_name"]
    slower = table.loc[names[3]]
    assert slower["verdict"] == "regressed"
    assert slower["ci_high"] < 1.0 and slower["ci_low"] <= 1 / 1.2 <= slower["ci_high"]
    assert slower["speedup"] == pytest.approx(1 / 1.2, rel=0.02)
    assert slower["change_pct"] == pytest.approx(20.0, abs=2.0) and slower["q_value"] < 0.05
    assert table.loc[names[2], "verdict"] == "regressed"
    assert table.loc[names[0], "verdict"] == table.loc[names[1], "verdict"] == "improved"
    assert table.loc[names[0], "ci_low"] > 1.0
    # A changed kernel has a new body: it pairs by the seed's key and is not part of the identical-code control.
    assert set(table.loc[names[:4], "matched_by"]) == {"legacy_key"} and not table.loc[names[:4], "control"].any()
    assert result.controls[0].n == 56
    # The wandering kernel is flagged noisy and, with an interval this wide, not called anything.
    assert table.loc[names[10], "noisy"] and table.loc[names[10], "verdict"] == "inconclusive"
    assert table["noisy"].sum() == 1
    unchanged = table.loc[[n for n in names[4:] if n != names[10]], "verdict"]
    assert (unchanged == "equivalent").all(), unchanged.value_counts()
    # Reviewers read the table top down: regressions first, the largest first, then improvements.
    assert list(result.table["base_name"][:4]) == [names[2], names[3], names[0], names[1]]


def test_the_same_data_given_as_one_round_is_inconclusive_with_a_note(tmp_path: Path) -> None:
    specs = kernel_specs(30, seed=17)
    base, base_samples = kernels_frame(specs, seed=18, cv=0.01, round_cv=0.003)
    pr, pr_samples = kernels_frame(specs, seed=19, cv=0.01, round_cv=0.003, factor={0: 1.2})
    # An older kernel_samples.json: one flat list per kernel (all samples pooled, no rounds).
    for side, samples in (("base", base_samples), ("pr", pr_samples)):
        flat = {path: [ms for rnd in rounds for ms in rnd] for path, rounds in samples.items()}
        (tmp_path / f"{side}.json").write_text(json.dumps(flat))
    in_rounds = compare_kernels(base, pr, base_samples, pr_samples)

    pooled = compare_kernels(base, pr, read_round_samples(tmp_path / "base.json"),
                             read_round_samples(tmp_path / "pr.json"))
    no_samples = compare_kernels(base, pr)

    first = base.at[0, "kernel_name"]
    assert by_name(in_rounds.table).loc[first, "verdict"] == "regressed"  # the same timings, in 5 rounds
    for result in (pooled, no_samples):
        table = by_name(result.table)
        assert set(table["verdict"]) == {"inconclusive"}
        assert table.loc[first, "speedup"] == pytest.approx(1 / 1.2, rel=0.02)  # the point estimate stays
        assert table["ci_low"].isna().all() and table["q_value"].isna().all()
        assert result.summary.verdict == "inconclusive" and not result.summary.geomean.has_interval
        assert result.summary.rounds == 1
    assert any("one timing round per side" in note for note in pooled.notes)
    assert any("per-round samples missing" in note for note in no_samples.notes)


def test_a_busy_round_that_slows_both_sides_cancels_because_rounds_are_paired() -> None:
    specs = kernel_specs(100, seed=30)
    busy = [1.0, 1.25, 0.9, 1.0, 1.15]  # the machine's state in each round, shared by base and PR
    base, base_samples = kernels_frame(specs, seed=31, cv=0.01, round_cv=0.003, round_shift=busy)
    pr, pr_samples = kernels_frame(specs, seed=32, cv=0.01, round_cv=0.003, round_shift=busy)

    paired = compare_kernels(base, pr, base_samples, pr_samples)
    # The same samples with the PR's rounds out of order, as if they had not been measured together.
    shuffled = {path: [rounds[i] for i in (1, 2, 3, 4, 0)] for path, rounds in pr_samples.items()}
    unaligned = compare_kernels(base, pr, base_samples, shuffled)

    assert paired.controls[0].summary.half_width_pct < 0.5 and paired.controls[0].summary.contains(1.0)
    assert set(paired.table["verdict"]) == {"equivalent"}
    assert unaligned.controls[0].summary.half_width_pct > 10


def test_a_busy_round_on_one_side_is_measured_by_the_identical_kernels_and_taken_out_of_the_changed_ones() -> None:
    specs = kernel_specs(100, seed=30)
    busy = [1.0, 1.10, 0.98, 1.06, 1.0]  # the PR's processes were slowed in some rounds, every kernel alike
    base, base_samples = kernels_frame(specs, seed=31, cv=0.01, round_cv=0.003)
    pr, pr_samples = kernels_frame(specs, seed=32, cv=0.01, round_cv=0.003, round_shift=busy,
                                   changed=frozenset(range(10)))

    result = compare_kernels(base, pr, base_samples, pr_samples)

    s, identical = result.summary, result.controls[0]
    # The 90 identical kernels look ~2.7 % slower on average; only 5 rounds were replicated and they disagree, so
    # their interval is wide ...
    assert identical.summary.speedup == pytest.approx(0.974, abs=0.005)
    assert identical.summary.contains(1.0) and identical.summary.half_width_pct > 4.0
    # ... but the 10 kernels with new code (and no real change) are measured against them round by round: the
    # busy rounds cancel, and they are shown to be unchanged.
    assert s.offsets_used and s.code_changed == 10
    assert s.geomean.contains(1.0) and s.geomean.half_width_pct < 1.0
    assert s.verdicts["equivalent"] == 10 and s.verdict == "equivalent"


def test_a_machine_bias_on_identical_code_is_subtracted_so_a_real_change_is_neither_hidden_nor_inflated() -> None:
    specs = kernel_specs(100, seed=30)
    base, base_samples = kernels_frame(specs, seed=31, cv=0.01, round_cv=0.003)
    # The PR side ran 4 % faster in every round (a faster clock, say); kernels 5-9 really are 5 % slower, which
    # the clock would make look like 1 %: "equivalent" without the control.
    pr, pr_samples = kernels_frame(specs, seed=32, cv=0.01, round_cv=0.003, round_shift=[1 / 1.04] * 5,
                                   factor=dict.fromkeys(range(5, 10), 1.05))

    result = compare_kernels(base, pr, base_samples, pr_samples)

    identical = result.controls[0]
    assert identical.kind == "identical kernels" and identical.n == 95  # kernels 5-9 have a new body
    assert identical.summary.ci_low > 1.03  # the offset, measured ...
    assert identical.offset_corrected and identical.passed(result.settings)  # ... and taken out of every estimate
    table = by_name(result.table)
    changed = table.loc[base.loc[5:9, "kernel_name"]]
    assert (changed["verdict"] == "regressed").all()
    assert changed["speedup"].to_numpy() == pytest.approx([1 / 1.05] * 5, rel=0.01)
    assert (table.loc[table["control"], "verdict"] != "improved").all()  # not 95 false improvements
    assert result.summary.verdict == "regressed"


def test_a_failed_control_without_enough_identical_kernels_refuses_equivalence_as_well_as_change() -> None:
    specs = kernel_specs(24, seed=30)
    base, base_samples = kernels_frame(specs, seed=31, cv=0.01, round_cv=0.003)
    # Four identical kernels (too few to subtract their offset) that the machine made 6 % faster on the PR side,
    # and 20 changed kernels, truly 1 % slower: within the margin, yet not to be called "equivalent" when the
    # control shows the run cannot tell 1 % from 6 %.
    pr, pr_samples = kernels_frame(specs, seed=32, cv=0.01, round_cv=0.003, round_shift=[1 / 1.06] * 5,
                                   factor=dict.fromkeys(range(4, 24), 1.01 * 1.06))

    result = compare_kernels(base, pr, base_samples, pr_samples)

    identical = result.controls[0]
    assert identical.n == 4 and not result.summary.offsets_used
    assert not identical.passed(result.settings) and result.resolution > 0.05
    assert result.summary.verdicts["equivalent"] == 0 and result.summary.verdicts["regressed"] == 0
    assert result.summary.verdict == "inconclusive"


def test_time_weighted_speedup_weights_by_launches_per_step() -> None:
    specs = kernel_specs(2, seed=19)
    base, _ = kernels_frame(specs, seed=20, cv=0.0)
    base["median_ms"] = [1.0, 2.0]
    base["calls"] = [3, 1]
    pr = base.copy()
    pr["median_ms"] = [0.5, 2.5]
    pr["body_hash"] += "-new"  # the PR changed both kernels' code

    s = compare_kernels(base, pr).summary

    assert s.time_weighted.speedup == pytest.approx((1.0 * 3 + 2.0 * 1) / (0.5 * 3 + 2.5 * 1))
    assert s.geomean.speedup == pytest.approx(math.sqrt(2.0 * 0.8))
    assert "calls" in s.weighted_by


def test_time_weighted_speedup_has_its_own_interval_over_rounds() -> None:
    specs = kernel_specs(2, seed=19)
    base, base_samples = kernels_frame(specs, seed=20, cv=0.01, round_cv=0.003)
    base["calls"] = [1, 1]
    base_samples = dict(zip(base["path"], ([[1.0]] * 5, [[10.0]] * 5), strict=True))
    pr = base.copy()
    pr["body_hash"] += "-new"
    noise = [1.0, 1.01, 0.99, 1.02, 0.98]
    pr_samples = dict(zip(pr["path"], ([[0.5 * n] for n in noise], [[10.0 * n] for n in noise]), strict=True))

    s = compare_kernels(base, pr, base_samples, pr_samples).summary

    # Per round: geomean sqrt(2 × 1) / n, time-weighted 11 / 10.5 / n; the geomean is not the workload.
    assert s.geomean.speedup == pytest.approx(math.sqrt(2.0), rel=0.01)
    assert s.time_weighted.speedup == pytest.approx(11.0 / 10.5, rel=0.01)
    assert s.time_weighted.contains(11.0 / 10.5) and s.time_weighted.ci_high < s.geomean.ci_low


def test_min_ms_filter_and_failed_kernels_leave_the_summary() -> None:
    specs = kernel_specs(6, seed=21)
    base, _ = kernels_frame(specs, seed=22, cv=0.0)
    base["median_ms"] = [0.001, 0.002, 1.0, 1.0, 1.0, 1.0]
    pr = base.copy()
    pr.loc[5, ["status", "median_ms"]] = ["fail", float("nan")]

    result = compare_kernels(base, pr, settings=VerdictSettings(min_ms=0.01))

    assert result.summary.n_summarised == 3
    assert result.summary.n_below_min == 2 and result.summary.n_failed == 1
    assert by_name(result.table).loc[base.at[5, "kernel_name"], "verdict"] == "failed"
    assert len(result.table) == 6  # everything is still listed
    assert any("--min-ms" in note for note in result.notes) and any("failed" in note for note in result.notes)


def test_invoke_compare_kernels_reads_round_samples_and_uses_the_confidence_asked_for(tmp_path: Path) -> None:
    specs = kernel_specs(40, seed=24)
    base, base_samples = kernels_frame(specs, seed=25, round_cv=0.03)
    pr, pr_samples = kernels_frame(specs, seed=26, round_cv=0.03, factor={0: 1.5})
    for side, frame, samples in (("base", base, base_samples), ("pr", pr, pr_samples)):
        frame.to_csv(tmp_path / f"{side}.csv", index=False)
        (tmp_path / f"{side}.json").write_text(json.dumps(samples))
    at_90 = compare_kernels(base, pr, base_samples, pr_samples, VerdictSettings(confidence=0.9)).summary
    at_95 = compare_kernels(base, pr, base_samples, pr_samples).summary

    result = invoke("compare-kernels", str(tmp_path / "base.csv"), str(tmp_path / "pr.csv"),
                    "--samples-base", str(tmp_path / "base.json"), "--samples-pr", str(tmp_path / "pr.json"),
                    "--confidence", "0.9")

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "regressed 1," in out and "control (identical kernels): 0 of 39 flagged" in out
    assert "90 % Student-t interval" in out and "90 % CI" in out
    shown = re.search(r"geomean of the changed pairs \S+ \(CI ([\d.]+)×–([\d.]+)×\)", out)
    assert shown, out
    low, high = float(shown[1]), float(shown[2])
    assert (low, high) == pytest.approx((at_90.geomean.ci_low, at_90.geomean.ci_high), abs=6e-4)
    assert at_95.geomean.ci_low < at_90.geomean.ci_low - 2e-3  # the two levels really differ at this precision
    assert float(out.strip().splitlines()[-1].removeprefix("geomean: ")) == pytest.approx(at_90.geomean.speedup)


# --- malformed timing cells: one line naming the file, the line and the column ---


@pytest.mark.parametrize(("cell", "found"), [("inf", "'inf'"), ("nan", "'nan'"), ("-0.5", "'-0.5'"),
                                             ("fast", "'fast'")])
def test_a_kernels_csv_with_a_non_finite_negative_or_text_time_names_its_line(tmp_path: Path, cell: str,
                                                                               found: str) -> None:
    from analysis.kernels.compare import read_kernels_csv
    from analysis.kernels.results import KERNEL_COLUMNS

    good = dict.fromkeys(KERNEL_COLUMNS, "")
    good.update(kernel_name="k0", path="pointwise/k0.py", calls="1", n="3", median_ms="0.5", status="ok")
    bad = {**good, "kernel_name": "k1", "path": "pointwise/k1.py", "median_ms": cell}
    path = tmp_path / "kernels.csv"
    pd.DataFrame([good, bad], columns=list(KERNEL_COLUMNS)).to_csv(path, index=False)

    with pytest.raises(UserError) as err:
        read_kernels_csv(path)

    assert str(err.value) == (f"{path}: line 3, column median_ms: expected a finite number ≥ 0 (or an empty cell), "
                              f"found {found}")


def test_a_failure_row_with_empty_timing_cells_is_read() -> None:
    from analysis.kernels.compare import check_kernels_frame
    from analysis.kernels.results import KERNEL_COLUMNS

    row = dict.fromkeys(KERNEL_COLUMNS, "")
    row.update(kernel_name="k0", path="pointwise/k0.py", calls="1", n="0", status="fail", error="round 1: boom")

    frame = check_kernels_frame(pd.DataFrame([row]), "base kernels")

    assert frame["median_ms"].isna().all() and frame["n"].tolist() == [0]


H100_RUN = Path(__file__).parent / "fixtures" / "gpu_h100"


def test_a_pr_that_loops_persistent_reductions_pairs_each_with_its_looped_twin() -> None:
    """Given the H100 run of a PR that turns Inductor's persistent reductions off, every `triton_per_*` kernel of
    the base became a `triton_red_*` kernel with another body: they pair as the same fused ops on the same shapes
    (before, all six ended up "only in base" / "only in PR" and the verdict saw the five unchanged kernels only),
    and only the unchanged pointwise kernels are the run's identical-code control."""
    from analysis.kernels.compare import read_kernels_csv

    base = read_kernels_csv(H100_RUN / "base" / "kernels.csv")
    pr = read_kernels_csv(H100_RUN / "pr" / "kernels.csv")
    samples = [read_round_samples(H100_RUN / side / "kernel_samples.json") for side in ("base", "pr")]

    result = compare_kernels(base, pr, *samples)

    table = result.table
    names = dict(zip(table["base_name"], table["pr_name"], strict=True))
    loops = {b: p for b, p in names.items() if b.startswith("triton_per_")}
    assert len(loops) == 6 and all(p == "triton_red_" + b.removeprefix("triton_per_") for b, p in loops.items())
    looped = table["base_name"].isin(loops)
    assert set(table.loc[looped, "matched_by"]) == {"ops+shape_key"} and not table.loc[looped, "control"].any()
    assert set(table.loc[~looped, "matched_by"]) == {"body_hash+shape_key"} and table.loc[~looped, "control"].all()
    assert (result.pairing.only_base, result.pairing.only_pr) == (0, 0)


def test_same_code_in_two_models_pairs_by_graphs_before_file_order() -> None:
    """The same kernel text compiled in two models' graphs (two files, `.<hash>`-suffixed by which organize met
    first): each base file pairs with the PR file of its own graphs, whatever the file order says."""
    def side(rows: list[tuple[str, str]]) -> pd.DataFrame:
        return pd.DataFrame([{"category": "cpp", "kernel_name": "cpp_fused_add_native_layer_norm_view_1",
                              "body_hash": "same", "shape_key": "x0_64_x1_64", "legacy_key": "k_x64_r64", "path": path,
                              "graphs": graphs} for path, graphs in rows])

    base = side([("cpp/k_1.cpp", "BartForCausalLM/6_inference_aaaa"),
                 ("cpp/k_1.db21611c.cpp", "BertForMaskedLM/0_inference_bbbb;AlbertForMaskedLM/5_inference_cccc")])
    pr = side([("cpp/k_1.cpp", "AlbertForMaskedLM/5_inference_dddd;BertForMaskedLM/0_inference_eeee"),
               ("cpp/k_1.f1de2c9e.cpp", "BartForCausalLM/6_inference_ffff")])  # after k_1.cpp: file order crosses

    pairs = pair_kernels(base, pr).pairs

    assert sorted(zip(base.loc[pairs["base_row"], "graphs"].str[:4], pr.loc[pairs["pr_row"], "graphs"].str[:4],
                      strict=True)) == [("Bart", "Bart"), ("Bert", "Albe")]
