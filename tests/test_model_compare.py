"""Model-level comparison: per-model deltas, both dashboards' geomeans, and the Amdahl projection from kernels."""

from __future__ import annotations

import math

import pytest
from compare_data import kernel_specs, kernels_frame, suite_frame

from analysis.model_compare import compare_models, hud_geomean, runner_geomean
from analysis.projection import ALL_MODELS, project


def test_hud_and_runner_geomeans_follow_their_own_rules() -> None:
    suite, _ = suite_frame({"A": 10.0, "B": 10.0, "C": 10.0, "D": 10.0}, seed=1)
    suite["speedup"] = [0.5, 2.0, 3.0, 0.0]
    suite.loc[2, "status"] = "fail"  # C failed: neither dashboard counts its speedup

    # HUD: passing and speedup != 0 → A, B; no clipping.
    assert hud_geomean(suite) == pytest.approx(math.sqrt(0.5 * 2.0))
    # runner.py: failures → 0, keep > 0 → A, B, then clip below at 1.
    assert runner_geomean(suite) == pytest.approx(math.sqrt(1.0 * 2.0))


def test_a_faster_model_is_flagged_with_its_deltas() -> None:
    models = {"BertForMaskedLM": 40.0, "GPT2": 30.0, "T5Small": 60.0}
    base, base_samples = suite_frame(models, seed=2)
    pr, pr_samples = suite_frame(models, seed=3, factor={"GPT2": 0.8})

    result = compare_models(base, pr, base_samples, pr_samples)

    rows = result.table.set_index("model")
    assert rows.loc["GPT2", "verdict"] == "improved"
    assert rows.loc["GPT2", "speedup"] == pytest.approx(1 / 0.8, rel=0.02)
    assert rows.loc["GPT2", "p_value"] < 0.001
    assert rows.loc["GPT2", "compile_change_pct"] == pytest.approx(-20.0)
    assert rows.loc["BertForMaskedLM", "verdict"] == "unchanged"
    assert rows.loc["T5Small", "peak_change_pct"] == pytest.approx(0.0)
    assert result.summary.pr.hud_geomean > result.summary.base.hud_geomean
    assert result.summary.n_compared == 3


def test_failures_and_models_on_one_side_are_kept_apart() -> None:
    base, _ = suite_frame({"A": 10.0, "B": 20.0, "OnlyBase": 5.0}, seed=4)
    pr, _ = suite_frame({"A": 10.0, "B": 20.0, "OnlyPR": 5.0}, seed=5)
    pr.loc[pr["name"] == "B", ["status", "abs_latency", "speedup"]] = ["fail", 0.0, 0.0]

    result = compare_models(base, pr)

    assert result.summary.only_base == ["OnlyBase"] and result.summary.only_pr == ["OnlyPR"]
    assert result.table.set_index("model").loc["B", "verdict"] == "failed"
    assert result.summary.n_compared == 1
    assert any("threshold only" in note for note in result.notes)


def test_projection_is_amdahl_on_the_kernel_share() -> None:
    base_suite, _ = suite_frame({"Solo": 10.0}, seed=6)
    pr_suite, _ = suite_frame({"Solo": 10.0}, seed=7)
    base_suite["abs_latency"], pr_suite["abs_latency"] = 10.0, 8.0
    specs = kernel_specs(2, seed=8, models=("Solo",))
    base_k, _ = kernels_frame(specs, seed=9, cv=0.0)
    base_k["median_ms"], base_k["calls"] = [1.0, 1.0], [3, 1]  # 4 ms of kernels per step
    pr_k = base_k.copy()
    pr_k["median_ms"] = [0.5, 0.5]  # 2 ms per step: kernels twice as fast

    row = project(base_k, pr_k, base_suite, pr_suite).table.set_index("model").loc["Solo"]

    assert row["share"] == pytest.approx(0.4)
    assert row["kernel_speedup"] == pytest.approx(2.0)
    assert row["projected_speedup"] == pytest.approx(1 / (0.6 + 0.4 / 2))
    assert row["measured_speedup"] == pytest.approx(10.0 / 8.0)


def test_projection_attributes_kernels_to_models_by_the_graphs_column() -> None:
    suite, _ = suite_frame({"Bert": 10.0, "GPT2": 10.0}, seed=10)
    suite["abs_latency"] = 10.0
    specs = kernel_specs(3, seed=11, models=("Bert", "GPT2", "Bert"))
    kernels, _ = kernels_frame(specs, seed=12, cv=0.0)
    kernels["median_ms"], kernels["calls"] = [1.0, 2.0, 4.0], [1, 1, 1]
    kernels.loc[2, "graphs"] = "Bert/graph_1;GPT2:graph_0"  # shared: half of its launches go to each model
    kernels.loc[1, "graphs"] = "GPT2/graph_0"

    table = project(kernels, kernels, suite, suite).table.set_index("model")

    assert table.loc["Bert", "base_kernel_ms"] == pytest.approx(1.0 + 2.0)
    assert table.loc["GPT2", "base_kernel_ms"] == pytest.approx(2.0 + 2.0)
    assert table.loc[ALL_MODELS, "share"] == pytest.approx(7.0 / 20.0)
    assert table.loc[ALL_MODELS, "projected_speedup"] == pytest.approx(1.0)
