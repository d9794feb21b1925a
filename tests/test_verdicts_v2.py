"""The verdict never hides a regression: four kernel tables whose truth is known, each compared the way a CI user
compares two tables (``invoke compare-kernels BASE.csv PR.csv --samples-base … --samples-pr … --out DIR
--fail-on regression``), with 10 timing rounds and about 3 % noise per sample.

Before verdicts v2 the first three were called "kernels neutral within ±2 %" (or their changed kernels
"equivalent") and the fourth "neutral", although nothing had been measured.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame

ROUNDS = 10


def compare_tables(tmp_path: Path, specs, *, factor=None, changed=frozenset(), pr_shift=None, seeds=(1, 2)):
    """Write both sides' kernels.csv and kernel_samples.json, run the command, return (result, summary, report)."""
    base, base_samples = kernels_frame(specs, seed=seeds[0], cv=0.03, rounds=ROUNDS)
    pr, pr_samples = kernels_frame(specs, seed=seeds[1], cv=0.03, rounds=ROUNDS, factor=factor, changed=changed,
                                   round_shift=[pr_shift] * ROUNDS if pr_shift else None)
    for side, frame, samples in (("base", base, base_samples), ("pr", pr, pr_samples)):
        frame.to_csv(tmp_path / f"{side}.csv", index=False)
        (tmp_path / f"{side}.json").write_text(json.dumps(samples))
    out = tmp_path / "report"
    result = invoke_in_process("compare-kernels", str(tmp_path / "base.csv"), str(tmp_path / "pr.csv"),
                               "--samples-base", str(tmp_path / "base.json"), "--samples-pr",
                               str(tmp_path / "pr.json"), "--out", str(out), "--fail-on", "regression")
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads((out / "summary.json").read_text()), (out / "report.md").read_text()


def test_ten_regressed_kernels_among_ninety_identical_ones_are_named_and_fail_the_check(tmp_path: Path) -> None:
    specs = kernel_specs(100, seed=3)

    result, summary, report = compare_tables(tmp_path, specs, factor=dict.fromkeys(range(10), 1.15))

    kernels = summary["kernels"]
    assert (kernels["code_changed"], kernels["code_identical"]) == (10, 90)
    assert kernels["verdict"] == "regressed" and kernels["regressed"] >= 8
    assert "Time in Inductor kernels **regressed**: " in summary["verdict"] and "neutral" not in summary["verdict"]
    # The kernel named first is the one that adds the most time, not merely the largest ratio.
    heaviest = max(kernels["regressed_items"], key=lambda i: i["step_share"] * (1 / i["speedup"] - 1))
    assert f"most of the added time: `{heaviest['name']}` +" in summary["verdict"]
    assert result.returncode == 1 and "--fail-on regression: kernels: regressed (triton_" in result.stderr
    assert report.startswith("# prbench: kernel comparison\n\n" + summary["verdict"])


def test_a_few_heavy_kernels_a_little_slower_make_the_step_slower(tmp_path: Path) -> None:
    specs = kernel_specs(100, seed=4)
    light = sum(s.true_ms for s in specs[5:])
    # Five kernels hold ~95 % of the step; the PR makes them 5.3 % slower; the other 95 are identical.
    specs = [dataclasses.replace(s, true_ms=19 * light / 5, calls=1) if i < 5 else dataclasses.replace(s, calls=1)
             for i, s in enumerate(specs)]

    result, summary, _ = compare_tables(tmp_path, specs, factor=dict.fromkeys(range(5), 1.053))

    step = summary["kernels"]["step"]
    assert step["speedup"] == pytest.approx(1 / (0.95 * 1.053 + 0.05), rel=0.01)  # the step is ~5 % slower
    assert step["ci_high"] < 1 / 1.02
    assert summary["kernels"]["verdict"] == "regressed"
    assert re.search(r"Time in Inductor kernels \*\*regressed\*\*: [^;]*; [45]\.\d % slower; ", summary["verdict"])
    assert result.returncode == 1


def test_an_offset_between_the_sides_processes_does_not_make_changed_kernels_equivalent(tmp_path: Path) -> None:
    specs = kernel_specs(100, seed=5)

    # Everything on the PR side ran 5 % faster (its workers had the faster core); ten changed kernels are truly
    # 5.3 % slower, which the offset alone would show as 1.003×: "equivalent".
    result, summary, report = compare_tables(tmp_path, specs, factor=dict.fromkeys(range(10), 1.053),
                                             pr_shift=1 / 1.05)

    control = summary["control"]["kernels"]
    assert control["geomean"] == pytest.approx(1.05, rel=0.01) and control["offset_corrected"]
    assert summary["kernels"]["equivalent"] == 0  # none of the changed kernels
    assert summary["kernels"]["regressed"] >= 8 and result.returncode == 1
    assert "offset it measured between the sides is subtracted" in report


def test_a_pr_that_changed_no_generated_code_says_so_and_calls_nothing_neutral(tmp_path: Path) -> None:
    specs = kernel_specs(39, seed=6)

    result, summary, _ = compare_tables(tmp_path, specs)

    assert summary["kernels"]["verdict"] == "identical" and summary["kernels"]["code_changed"] == 0
    assert "no generated kernel changed (39 of 39 identical)" in summary["verdict"]
    assert "neutral" not in summary["verdict"] and result.returncode == 0
    assert summary["control"]["kernels"]["passed"] is True


def test_changed_code_with_no_effect_is_equivalent_and_passes_the_check(tmp_path: Path) -> None:
    specs = kernel_specs(100, seed=7)

    result, summary, _ = compare_tables(tmp_path, specs, changed=frozenset(range(20)))

    kernels = summary["kernels"]
    assert kernels["verdict"] == "equivalent" and kernels["improved"] == kernels["regressed"] == 0
    assert kernels["step"]["ci_low"] <= 1.0 <= kernels["step"]["ci_high"]
    assert "neutral within ±2 %" in summary["verdict"] and result.returncode == 0


def test_changed_kernels_that_failed_on_a_side_leave_the_verdict_inconclusive_not_identical() -> None:
    from analysis.kernels.compare import compare_kernels

    specs = kernel_specs(20, seed=8)
    base, base_samples = kernels_frame(specs, seed=1, rounds=ROUNDS)
    pr, pr_samples = kernels_frame(specs, seed=2, rounds=ROUNDS, changed=frozenset(range(3)))
    pr.loc[0:2, ["status", "median_ms"]] = ["fail", float("nan")]  # the three changed kernels failed on the PR

    result = compare_kernels(base, pr, base_samples, pr_samples)

    assert result.summary.code_changed == 3 and result.summary.verdict == "inconclusive"
    assert not result.summary.time_weighted.has_interval  # the step is not known, rather than "unchanged"
    # Every kernel failed on one side: nothing was measured, whatever the code.
    everything = pr.assign(status="fail", median_ms=float("nan"))
    assert compare_kernels(base, everything.assign(body_hash=base["body_hash"])).summary.verdict == "inconclusive"
