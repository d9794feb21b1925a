"""Model-level comparison: per-model verdicts from paired rounds, both dashboards' geomeans and gates, and the
Amdahl projection from kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.models.compare import compare_models, hud_geomean, runner_geomean
from analysis.report.sections.gates import GEOMEAN_LIMIT, model_gates
from analysis.report.sections.projection import ALL_MODELS, project
from analysis.report.sections.resources import model_resources
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame


def test_hud_and_runner_geomeans_follow_their_own_rules() -> None:
    suite, _ = suite_frame({"A": 10.0, "B": 10.0, "C": 10.0, "D": 10.0}, seed=1)
    suite["speedup"] = [0.5, 2.0, 3.0, 0.0]
    suite.loc[2, "status"] = "fail"  # C failed: neither dashboard counts its speedup

    # HUD: passing and speedup != 0 → A, B; no clipping.
    assert hud_geomean(suite) == pytest.approx(math.sqrt(0.5 * 2.0))
    # runner.py: failures → 0, keep > 0 → A, B, then clip below at 1.
    assert runner_geomean(suite) == pytest.approx(math.sqrt(1.0 * 2.0))


MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0, "T5Small": 60.0, "Albert": 20.0}


def test_models_timed_in_paired_rounds_get_intervals_and_a_model_10_percent_slower_is_regressed() -> None:
    base, base_samples = suite_frame(MODELS, seed=2)
    pr, pr_samples = suite_frame(MODELS, seed=3, factor={"GPT2": 1.1})
    # The suite's own single timing of GPT2 happens to show nothing; the paired rounds decide.
    pr.loc[pr["name"] == "GPT2", "abs_latency"] = float(base.loc[base["name"] == "GPT2", "abs_latency"].iloc[0])
    paired_base = model_rounds(MODELS, seed=4, round_cv=0.003)
    paired_pr = model_rounds(MODELS, seed=5, round_cv=0.003, factor={"GPT2": 1.1})

    result = compare_models(base, pr, base_samples, pr_samples, paired_base=paired_base, paired_pr=paired_pr)

    rows = result.table.set_index("model")
    gpt2 = rows.loc["GPT2"]
    assert gpt2["verdict"] == "regressed" and gpt2["rounds"] == 5
    assert gpt2["speedup"] == pytest.approx(1 / 1.1, rel=0.01)
    assert gpt2["ci_low"] <= 1 / 1.1 <= gpt2["ci_high"] < 1.0 and gpt2["q_value"] < 0.05
    assert gpt2["pr_latency_ms"] == pytest.approx(33.0, rel=0.02)  # from the rounds, not suite.csv
    assert gpt2["compile_change_pct"] == pytest.approx(10.0)
    assert (rows.drop(index="GPT2")["verdict"] == "equivalent").all()
    assert rows.loc["T5Small", "peak_change_pct"] == pytest.approx(0.0)
    s = result.summary
    assert s.paired and s.rounds == 5 and s.n_compared == 4
    assert s.verdicts == {"improved": 0, "regressed": 1, "equivalent": 3, "inconclusive": 0}
    assert s.geomean.has_interval and s.geomean.speedup == pytest.approx(1.1 ** -0.25, rel=0.005)
    assert s.pr.hud_geomean < s.base.hud_geomean  # the suites' own speedups vs eager, for the dashboards
    assert result.notes == []


def test_the_same_suites_without_paired_rounds_give_points_and_a_note() -> None:
    base, base_samples = suite_frame(MODELS, seed=2)
    pr, pr_samples = suite_frame(MODELS, seed=3, factor={"GPT2": 1.1})

    result = compare_models(base, pr, base_samples, pr_samples)

    rows = result.table.set_index("model")
    assert set(rows["verdict"]) == {"inconclusive"}
    assert rows.loc["GPT2", "speedup"] == pytest.approx(1 / 1.1, rel=0.02)  # the point estimate stays
    assert rows["ci_low"].isna().all() and rows["q_value"].isna().all()
    assert not result.summary.paired and not result.summary.geomean.has_interval
    assert result.summary.verdict == "inconclusive"
    assert any("not timed in paired rounds" in note for note in result.notes)


def test_a_busy_round_on_one_side_makes_the_models_inconclusive_not_regressed() -> None:
    base, _ = suite_frame(MODELS, seed=2)
    paired_base = model_rounds(MODELS, seed=4, round_cv=0.003)
    paired_pr = model_rounds(MODELS, seed=5, round_cv=0.003, round_shift=[1.0, 1.12, 1.0, 1.06, 1.0])

    s = compare_models(base, base, paired_base=paired_base, paired_pr=paired_pr).summary

    assert s.geomean.speedup == pytest.approx(1 / 1.035, abs=0.01)
    assert s.geomean.contains(1.0) and s.verdict == "inconclusive"


def test_failures_and_models_on_one_side_are_kept_apart() -> None:
    base, _ = suite_frame({"A": 10.0, "B": 20.0, "OnlyBase": 5.0}, seed=4)
    pr, _ = suite_frame({"A": 10.0, "B": 20.0, "OnlyPR": 5.0}, seed=5)
    pr.loc[pr["name"] == "B", ["status", "abs_latency", "speedup"]] = ["fail", 0.0, 0.0]
    timed = {"A": 10.0, "B": 20.0}

    result = compare_models(base, pr, paired_base=model_rounds(timed, seed=6, round_cv=0.003),
                            paired_pr=model_rounds(timed, seed=7, round_cv=0.003))

    assert result.summary.only_base == ["OnlyBase"] and result.summary.only_pr == ["OnlyPR"]
    rows = result.table.set_index("model")
    assert rows.loc["B", "verdict"] == "failed" and math.isnan(rows.loc["B", "speedup"])
    assert rows.loc["A", "verdict"] == "equivalent"
    assert result.summary.n_compared == 1 and result.summary.failed == 1
    assert sum(result.summary.verdicts.values()) == 1  # the failed model is in no verdict count


def test_dashboard_gates_read_their_intervals() -> None:
    base, _ = suite_frame(MODELS, seed=7)
    pr, _ = suite_frame(MODELS, seed=8)
    pr["compilation_latency"] = base["compilation_latency"] * [1.30, 1.32, 1.28, 1.31]  # every model compiles slower
    pr.loc[pr["name"] == "Albert", "status"] = "fail"  # passes on base, fails on the PR
    slower = dict.fromkeys(MODELS, 1.10)

    result = compare_models(base, pr, paired_base=model_rounds(MODELS, seed=9, round_cv=0.003),
                            paired_pr=model_rounds(MODELS, seed=10, round_cv=0.003, factor=slower))
    gates = {g.name: g for g in model_gates(result, 0.95)}

    latency = gates["geomean latency speedup"]
    assert latency.status == "fail" and latency.ci_high < GEOMEAN_LIMIT  # the whole interval is past 0.95
    # The dashboard's figure: mean PR cold compile over mean base cold compile, interval over the models compared.
    compile_gate = gates["compile time ratio"]
    compared = base["name"] != "Albert"  # Albert failed on the PR: not compared
    expected = pr.loc[compared, "compilation_latency"].sum() / base.loc[compared, "compilation_latency"].sum()
    assert compile_gate.status == "fail" and compile_gate.value == pytest.approx(expected)
    assert compile_gate.ci_low > 1.15 and "worst model GPT2 1.32×" in compile_gate.detail
    assert gates["pass rate"].status == "fail" and "newly failing: Albert" in gates["pass rate"].detail
    assert gates["peak-memory compression ratio"].status == "pass"


def test_the_compile_gate_is_the_dashboards_mean_of_cold_compiles_not_one_models_warm_recompile() -> None:
    models = {f"M{i}": 10.0 for i in range(10)}
    base, _ = suite_frame(models, seed=7)
    pr, _ = suite_frame(models, seed=8)
    pr["compilation_latency"] = base["compilation_latency"] * 0.93  # the PR compiles every model a little faster
    result = compare_models(base, pr)
    rng = np.random.default_rng(3)
    pr_compiles = {m: list(4.0 * rng.lognormal(0, 0.03, 10)) for m in models}
    pr_compiles["M3"] = [2 * t for t in pr_compiles["M3"]]  # one model's warm recompile in the rounds: twice as long

    gate = model_gates(result, 0.95)[1]
    resources = model_resources(result, {m: list(4.0 * rng.lognormal(0, 0.03, 10)) for m in models}, pr_compiles)

    assert gate.status == "pass" and gate.value == pytest.approx(0.93) and gate.ci_high < 1.15
    assert "mean cold compile" in gate.detail and "over 10 model(s)" in gate.detail
    # The warm recompile is shown where a reader looks for one model's spread, not in the dashboard's figure.
    m3 = resources.set_index("model").loc["M3"]
    assert m3["compile_verdict"].startswith("slower to compile")


def test_projection_is_amdahl_on_the_kernel_share() -> None:
    base_suite, _ = suite_frame({"Solo": 10.0}, seed=6)
    pr_suite, _ = suite_frame({"Solo": 10.0}, seed=7)
    base_suite["abs_latency"], pr_suite["abs_latency"] = 10.0, 8.0
    specs = kernel_specs(2, seed=8, models=("Solo",))
    base_k, _ = kernels_frame(specs, seed=9, cv=0.0)
    base_k["median_ms"], base_k["calls"] = [1.0, 1.0], [3, 1]  # 4 ms of kernels per step
    pr_k = base_k.copy()
    pr_k["median_ms"] = [0.5, 0.5]  # 2 ms per step: kernels twice as fast

    row = project(base_k, pr_k, compare_models(base_suite, pr_suite)).table.set_index("model").loc["Solo"]

    assert row["share"] == pytest.approx(0.4)
    assert row["kernel_speedup"] == pytest.approx(2.0)
    assert row["projected_speedup"] == pytest.approx(1 / (0.6 + 0.4 / 2))
    assert row["measured_speedup"] == pytest.approx(10.0 / 8.0)


def test_the_projection_quotes_the_paired_rounds_not_the_suites_single_latency() -> None:
    """The suite's one-shot latencies say the PR is 1.25× faster; the paired rounds (what the model table and the
    time decomposition report) say it is unchanged: the projection's "measured" is the paired figure too."""
    models = {"Bert": 10.0, "GPT2": 20.0}
    base_suite, _ = suite_frame(models, seed=13)
    pr_suite, _ = suite_frame(models, seed=14)
    base_suite["abs_latency"], pr_suite["abs_latency"] = [10.0, 20.0], [8.0, 16.0]
    kernels, _ = kernels_frame(kernel_specs(2, seed=15, models=("Bert", "GPT2")), seed=16, cv=0.0)
    compared = compare_models(base_suite, pr_suite, paired_base=model_rounds(models, seed=17, round_cv=0.002),
                              paired_pr=model_rounds(models, seed=18, round_cv=0.002))

    table = project(kernels, kernels, compared).table.set_index("model")

    by_model = compared.table.set_index("model")
    for name in models:
        assert table.loc[name, "measured_speedup"] == pytest.approx(by_model.loc[name, "speedup"])
        assert table.loc[name, "measured_speedup"] == pytest.approx(1.0, abs=0.02)
        assert table.loc[name, "base_latency_ms"] == pytest.approx(by_model.loc[name, "base_latency_ms"])
    assert table.loc[ALL_MODELS, "measured_speedup"] == pytest.approx(compared.summary.total_latency.speedup)


def test_projection_attributes_kernels_to_models_by_the_graphs_column() -> None:
    suite, _ = suite_frame({"Bert": 10.0, "GPT2": 10.0}, seed=10)
    suite["abs_latency"] = 10.0
    specs = kernel_specs(3, seed=11, models=("Bert", "GPT2", "Bert"))
    kernels, _ = kernels_frame(specs, seed=12, cv=0.0)
    kernels["median_ms"], kernels["calls"] = [1.0, 2.0, 4.0], [1, 1, 1]
    kernels.loc[2, "graphs"] = "Bert/graph_1;GPT2:graph_0"  # shared: half of its launches go to each model
    kernels.loc[1, "graphs"] = "GPT2/graph_0"

    table = project(kernels, kernels, compare_models(suite, suite)).table.set_index("model")

    assert table.loc["Bert", "base_kernel_ms"] == pytest.approx(1.0 + 2.0)
    assert table.loc["GPT2", "base_kernel_ms"] == pytest.approx(2.0 + 2.0)
    assert table.loc[ALL_MODELS, "share"] == pytest.approx(7.0 / 20.0)
    assert table.loc[ALL_MODELS, "projected_speedup"] == pytest.approx(1.0)
