"""Kernel comparison: the seed's number reproduced exactly, pairing that survives renumbering, and statistics
that flag real changes but not noise (an A/A comparison)."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from compare_data import kernel_specs, kernels_frame

from analysis.kernel_compare import CompareSettings, compare_kernels, geomean_ci, pair_kernels

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


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

    assert pairing.summary.by_method == {"body_hash+shape_key": 40, "legacy_key": 0, "kernel_name": 0}
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
    # Kernels 3-4: neither hash nor legacy key match, the generated name does.
    pr.loc[3:4, ["body_hash", "legacy_key"]] = ["other", "other_key"]
    # Kernel 5 vanished in the PR and the PR gained a new kernel.
    pr.loc[5, ["body_hash", "legacy_key", "kernel_name"]] = ["new", "new_key", "triton_poi_new_99"]

    s = pair_kernels(base, pr).summary

    assert s.by_method == {"body_hash+shape_key": 4, "legacy_key": 3, "kernel_name": 2}
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


# --- statistics ------------------------------------------------------------------------------------------


def test_same_variant_twice_gives_a_ci_around_one_and_few_flags() -> None:
    specs = kernel_specs(300, seed=11)
    base, base_samples = kernels_frame(specs, seed=12, cv=0.03)
    pr, pr_samples = kernels_frame(specs, seed=13, cv=0.03)

    result = compare_kernels(base, pr, base_samples, pr_samples)

    s = result.summary
    assert s.ci.contains(1.0), s.ci
    assert s.ci.high - s.ci.low < 0.02
    flagged = s.verdicts["improved"] + s.verdicts["regressed"]
    assert flagged / s.n_summarised <= 0.02
    assert s.n_tested == 300


def test_real_changes_are_flagged_and_noise_is_called_noise() -> None:
    specs = kernel_specs(60, seed=14)
    factor = {0: 0.7, 1: 0.75, 2: 1.4, 3: 1.3}
    base, base_samples = kernels_frame(specs, seed=15, cv=0.02)
    pr, pr_samples = kernels_frame(specs, seed=16, cv=0.02, factor=factor)
    noisy_path = base.at[10, "path"]
    base_samples[noisy_path] = (np.array(base_samples[noisy_path]) * np.linspace(0.6, 1.4, 20)).tolist()

    table = compare_kernels(base, pr, base_samples, pr_samples).table.set_index("base_name")

    names = base["kernel_name"]
    assert table.loc[names[0], "verdict"] == "improved" and table.loc[names[1], "verdict"] == "improved"
    assert table.loc[names[2], "verdict"] == "regressed" and table.loc[names[3], "verdict"] == "regressed"
    assert table.loc[names[10], "verdict"] == "noisy"
    assert table.loc[names[0], "speedup"] == pytest.approx(1 / 0.7, rel=0.05)
    assert table.loc[names[2], "p_value"] < 0.05
    assert (table.loc[names[20:], "verdict"] == "unchanged").mean() > 0.95


def test_without_samples_the_threshold_decides_and_the_notes_say_so() -> None:
    specs = kernel_specs(20, seed=17)
    base, _ = kernels_frame(specs, seed=18, cv=0.0)
    pr, _ = kernels_frame(specs, seed=18, cv=0.0, factor={0: 0.96, 1: 0.9, 2: 1.2})

    result = compare_kernels(base, pr, settings=CompareSettings(threshold=0.05))

    verdicts = result.table.set_index("base_name")["verdict"]
    assert verdicts[base.at[0, "kernel_name"]] == "unchanged"  # 4 % faster: below the 5 % threshold
    assert verdicts[base.at[1, "kernel_name"]] == "improved"
    assert verdicts[base.at[2, "kernel_name"]] == "regressed"
    assert set(result.table["test"]) == {"threshold only (no samples)"}
    assert any("threshold only" in note for note in result.notes)


def test_time_weighted_speedup_weights_by_launches_per_step() -> None:
    specs = kernel_specs(2, seed=19)
    base, _ = kernels_frame(specs, seed=20, cv=0.0)
    base["median_ms"] = [1.0, 2.0]
    base["calls"] = [3, 1]
    pr = base.copy()
    pr["median_ms"] = [0.5, 2.5]

    s = compare_kernels(base, pr).summary

    assert s.time_weighted == pytest.approx((1.0 * 3 + 2.0 * 1) / (0.5 * 3 + 2.5 * 1))
    assert s.ci.geomean == pytest.approx(math.sqrt(2.0 * 0.8))
    assert "calls" in s.weighted_by


def test_min_ms_filter_and_failed_kernels_leave_the_summary() -> None:
    specs = kernel_specs(6, seed=21)
    base, _ = kernels_frame(specs, seed=22, cv=0.0)
    base["median_ms"] = [0.001, 0.002, 1.0, 1.0, 1.0, 1.0]
    pr = base.copy()
    pr.loc[5, ["status", "median_ms"]] = ["fail", float("nan")]

    result = compare_kernels(base, pr, settings=CompareSettings(min_ms=0.01))

    assert result.summary.n_summarised == 3
    assert result.summary.n_below_min == 2 and result.summary.n_failed == 1
    assert len(result.table) == 6  # everything is still listed


def test_geomean_ci_is_reproducible_and_handles_tiny_inputs() -> None:
    rng = np.random.default_rng(23)
    speedups = np.exp(rng.normal(0.1, 0.05, 50))
    a, b = geomean_ci(speedups, CompareSettings()), geomean_ci(speedups, CompareSettings())
    assert (a.low, a.high) == (b.low, b.high)
    assert a.low < a.geomean < a.high and a.low > 1.0
    two = geomean_ci(np.array([1.1, 1.2]), CompareSettings())
    assert two.geomean == pytest.approx(math.sqrt(1.1 * 1.2)) and math.isnan(two.low)
    assert "at least 3" in two.method
    assert math.isnan(geomean_ci(np.array([]), CompareSettings()).geomean)


def test_aa_noise_script_reads_two_kernel_csvs(tmp_path: Path) -> None:
    specs = kernel_specs(200, seed=24)
    for side, seed in (("a", 25), ("b", 26)):
        frame, samples = kernels_frame(specs, seed=seed, cv=0.03)
        frame.to_csv(tmp_path / f"{side}.csv", index=False)
        (tmp_path / f"{side}.json").write_text(json.dumps(samples))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import aa_noise
    finally:
        sys.path.pop(0)

    code = aa_noise.main(["--base-csv", str(tmp_path / "a.csv"), "--pr-csv", str(tmp_path / "b.csv"),
                          "--samples-base", str(tmp_path / "a.json"), "--samples-pr", str(tmp_path / "b.json"),
                          "--max-flagged-share", "0.05", "--json", str(tmp_path / "aa.json")])

    numbers = json.loads((tmp_path / "aa.json").read_text())
    assert code == 0
    assert numbers["ci_contains_one"] and numbers["deviation_pct"] < 1.0
    assert numbers["n_pairs"] == 200 and numbers["flagged_share"] <= 0.05


@pytest.mark.parametrize(
    ("speedup", "p_value", "cv", "verdict"),
    [
        (0.65, 1e-6, 0.12, "regressed"),  # a 35 % slowdown stands out of a 12 % spread
        (1.40, 1e-6, 0.12, "improved"),
        (0.93, 1e-6, 0.12, "noisy"),  # past the 5 % threshold but inside the spread
        (1.00, 0.80, 0.30, "noisy"),  # noise cannot vouch for "unchanged"
        (1.01, 0.80, 0.02, "unchanged"),
        (0.90, 0.20, 0.02, "unchanged"),  # large but not significant
        (0.90, 1e-6, 0.02, "regressed"),
    ],
)
def test_a_reviewer_reads_a_change_only_where_it_stands_out_of_the_noise(speedup, p_value, cv, verdict):
    from analysis.kernel_compare import CompareSettings, classify

    assert classify(speedup, p_value, True, cv, cv / 2, CompareSettings()) == verdict
