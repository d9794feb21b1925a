"""The report a reviewer pastes into a PR: fits GitHub's limit, says how kernels were paired, shows the in-run
control and the dashboard gates, prints the confidence level actually used, writes summary.json for CI,
re-renders from a run directory, and turns bad inputs into one-line errors."""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis.rendering import sheet_name
from analysis.report.render import (
    COMMENT_LIMIT,
    ReportInputs,
    ReportSettings,
    load_report_inputs,
    render_report,
)
from analysis.stats.verdict_settings import VerdictSettings
from foundation.errors import UserError
from tests.support.cli_support import invoke_in_process
from tests.support.compare_data import kernel_specs, kernels_frame, model_rounds, suite_frame, write_variant

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0, "T5Small": 60.0}


def invoke(*args: str) -> subprocess.CompletedProcess:
    return invoke_in_process(*args)


def test_a_5000_kernel_reports_comment_form_fits_and_the_csv_keeps_every_row(tmp_path: Path) -> None:
    specs = kernel_specs(5000, seed=1, models=tuple(MODELS))
    changed = dict.fromkeys(range(0, 5000, 40), 0.8) | dict.fromkeys(range(3, 5000, 45), 1.25)
    base, base_samples = kernels_frame(specs, seed=2)
    pr, pr_samples = kernels_frame(specs, seed=3, factor=changed)
    base_suite, base_ss = suite_frame(MODELS, seed=4)
    pr_suite, pr_ss = suite_frame(MODELS, seed=5)
    env = {"torch": {"commit": "a" * 40}, "image": {"digest": "sha256:" + "b" * 64}, "device": "AMD MI300X",
           "rocm": "7.0.2"}

    paths = render_report(ReportInputs(base, pr, base_samples, pr_samples, base_suite, pr_suite, base_ss, pr_ss,
                                       base_env=env, pr_env={**env, "torch": {"commit": "c" * 40}},
                                       trace_diff_md="| kernel | delta |\n|---|---|\n" * 3000),
                          tmp_path / "report")

    text = paths.report_md.read_text(encoding="utf-8")
    comment = paths.comment_md.read_text(encoding="utf-8")
    assert len(comment) <= COMMENT_LIMIT and "**The full report**" in comment
    assert len(pd.read_csv(paths.kernels_csv)) == 5000
    assert re.search(r"_\d+ more rows in kernels_compare\.csv_", text)
    assert "Trace diff truncated" in text and (tmp_path / "report" / "trace_diff.md").exists()
    regressed = pd.read_csv(paths.kernels_csv).query("verdict == 'regressed'")
    assert len(regressed) == pytest.approx(len(changed) / 2, rel=0.2)
    # The reviewer sees what changed first: the first data row under "Top regressions" is a regression.
    top = text.split("Top regressions", 1)[1].split("\n| ", 3)[2]
    assert "| regressed |" in top
    for png in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert not Path(png).is_absolute() and (tmp_path / "report" / png).stat().st_size > 1000
    # The kernel forest keeps 30 rows of each kind (~1,500 px tall), not one per identical pair (4,800 rows).
    assert struct.unpack(">II", (tmp_path / "report" / "kernel_forest.png").read_bytes()[16:24])[1] <= 1500
    assert "MI300X" in text and "**differs**" in text and "7.0.2" in text


def test_renumbered_kernels_are_paired_and_the_report_says_how(tmp_path: Path) -> None:
    specs = kernel_specs(30, seed=6)
    base, _ = kernels_frame(specs, seed=7)
    pr, _ = kernels_frame(specs, seed=8, index_shift=3)

    paths = render_report(ReportInputs(base_kernels=base, pr_kernels=pr), tmp_path)

    text = paths.report_md.read_text(encoding="utf-8")
    assert "| `body_hash`+`shape_key` | 30 |" in text
    assert "30 paired kernel(s) have a different name in the PR (renumbered or renamed); matched by " \
           "`body_hash+shape_key` 30" in text
    assert "| only in base | 0 |" in text
    # Renumbering is no change: the verdict says no kernel changed (and calls nothing neutral).
    assert "Time in Inductor kernels **identical**: no generated kernel changed (30 of 30 identical)" in paths.verdict
    assert "neutral" not in paths.verdict
    assert (paths.summary["kernels"]["code_changed"], paths.summary["kernels"]["code_identical"]) == (0, 30)
    # No samples were given: the method notes say there is no replication.
    assert "- per-round samples missing on at least one side" in text  # a caveat
    assert paths.summary["kernels"]["ci_low"] is None and paths.summary["control"]["resolution_pct"] is None


def test_workbook_has_one_sheet_per_table_with_excel_safe_names(tmp_path: Path) -> None:
    from openpyxl import load_workbook

    specs = kernel_specs(20, seed=9, models=tuple(MODELS))
    base, bs = kernels_frame(specs, seed=10)
    pr, ps = kernels_frame(specs, seed=11)
    suite, ss = suite_frame(MODELS, seed=12)

    paths = render_report(ReportInputs(base, pr, bs, ps, suite, suite, ss, ss, lock={"base": {"x": 1}}), tmp_path)

    names = load_workbook(paths.xlsx, read_only=True).sheetnames
    assert names == ["Summary", "Kernels", "Categories", "Only in base", "Only in PR", "Fusion changes",
                     "Kernels by added time", "Models",
                     "Projection", "Compile and memory", "Where the time went", "Environment", "Lock"]
    assert sheet_name("a/very:long*name?that[goes]on and on and on", set()) == "a_very_long_name_that_goes_on a"
    assert len(sheet_name("x" * 40, {"x" * 31})) <= 31


def _run_dir(root: Path, pr_kernels: bool = True, stats: dict | None = None) -> Path:
    """A finished comparison: kernels (kernel 0 twice as fast in the PR), suites, and models timed in paired
    rounds with GPT2 10 % slower in the PR."""
    specs = kernel_specs(50, seed=13, models=tuple(MODELS))
    base, bs = kernels_frame(specs, seed=14)
    pr, ps = kernels_frame(specs, seed=15, factor={0: 0.5})
    suite_b, ssb = suite_frame(MODELS, seed=16)
    suite_p, ssp = suite_frame(MODELS, seed=17, factor={"GPT2": 1.1})
    rounds_b = model_rounds(MODELS, seed=18, round_cv=0.003)
    rounds_p = model_rounds(MODELS, seed=19, round_cv=0.003, factor={"GPT2": 1.1})
    run = root / "runs" / "r1"
    write_variant(run / "base", base, bs, suite_b, ssb, env={"torch": {"commit": "1" * 40}}, model_samples=rounds_b)
    write_variant(run / "pr", pr if pr_kernels else None, ps, suite_p, ssp, env={"torch": {"commit": "2" * 40}},
                  model_samples=rounds_p)
    (run / "lock.json").write_text(json.dumps({"base": {"image": {"digest": "sha256:" + "d" * 64}},
                                               "pr": {"image": {"digest": "sha256:" + "e" * 64}}}))
    settings = {"suite": {"warmup": 7, "iterations": 25}, "rounds": 5, **({"stats": stats} if stats else {})}
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "created": "now", "settings": settings,
                                                   "stages": {}}))
    return run


def test_invoke_report_rerenders_a_run_directory(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, stats={"confidence": 0.9})

    result = invoke("report", "r1", "--runs-dir", str(tmp_path / "runs"))

    assert result.returncode == 0, result.stderr
    text = (run / "report" / "report.md").read_text(encoding="utf-8")
    assert "warm-up 7 iteration(s), then 25 timed" in text
    assert "| base.image.digest | sha256:dddd" in text  # the lock's identity entries are shown
    assert "Projected end-to-end effect per model" in text and "How the share was computed" in text
    assert len(pd.read_csv(run / "report" / "kernels_compare.csv")) == 50
    # The models were timed in paired rounds: they get intervals, GPT2 is regressed, and the gates are shown.
    models = pd.read_csv(run / "report" / "models_compare.csv").set_index("model")
    assert models.loc["GPT2", "verdict"] == "regressed" and models.loc["GPT2", "ci_high"] < 1.0
    assert models["ci_low"].notna().all() and (models["rounds"] == 5).all()
    assert re.search(r"\| `GPT2` \|.*\| regressed \|", text)
    assert "Dashboard checks" in text and "| compile time ratio |" in text
    # The run's own settings (confidence 0.9 in the manifest) are the ones used and printed.
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["settings"]["confidence"] == summary["models"]["confidence"] == 0.9
    assert "90 % CI" in result.stdout.splitlines()[0] and "summary.json" in result.stdout
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stages"]["report"]["status"] == "done"


def test_the_report_opens_with_the_experiment_the_run_recorded(tmp_path: Path) -> None:
    """A compare on rocm7-mi300 with no suite flag: the seed's experiment, as its manifest and env.json say."""
    from foundation.formats.suite_request import SuiteRequest
    from prbench.sides.recipes import load_recipe
    from prbench.sides.variants import Variant

    run = _run_dir(tmp_path)
    recipe = load_recipe("rocm7-mi300", ROOT / "recipes")
    suite = SuiteRequest(models="all", size="full", mode="training", dtype="amp", device="cuda")
    for side in ("base", "pr"):  # what the pipeline writes into each side's env.json
        variant = Variant(side, recipe, pytorch_ref=side[0] * 40, env=dict(recipe.suite.env))
        env = {**variant.describe(), "runner": "docker", "stage_env": variant.stage_environment(run / side)}
        (run / side / "env.json").write_text(json.dumps(env))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["settings"].update(recipe="rocm7-mi300", suite=suite.inputs())
    (run / "manifest.json").write_text(json.dumps(manifest))

    result = invoke("report", "r1", "--runs-dir", str(tmp_path / "runs"))

    assert result.returncode == 0, result.stderr
    lines = (run / "report" / "report.md").read_text(encoding="utf-8").splitlines()
    assert lines[4] == ("**Experiment:** 54 models (all) at full size, training, amp, on cuda (recipe rocm7-mi300); "
                        "Inductor: cudagraphs off, max-autotune-pointwise on, buffer ops on")
    assert lines[2].startswith("**Verdict:**")
    experiment = json.loads((run / "report" / "summary.json").read_text())["experiment"]
    assert experiment["lines"] == [lines[4].removeprefix("**Experiment:** ")]
    assert experiment["base"] == experiment["pr"]
    assert {k: experiment["base"][k] for k in ("model_count", "size", "mode", "dtype", "cudagraphs",
                                               "max_autotune_pointwise", "buffer_ops")} == {
        "model_count": 54, "size": "full", "mode": "training", "dtype": "amp", "cudagraphs": False,
        "max_autotune_pointwise": True, "buffer_ops": True}


def test_the_report_prints_the_confidence_level_actually_used(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    inputs = load_report_inputs(run)
    at_95 = render_report(inputs, tmp_path / "at95")

    inputs.settings = ReportSettings(stats=VerdictSettings(confidence=0.9))
    at_90 = render_report(inputs, tmp_path / "at90")

    text = at_90.report_md.read_text(encoding="utf-8")
    assert re.findall(r"\b95(?:\.0)? ?%", text) == []  # nothing still claims 95 %
    assert at_90.verdict.count("90 % CI") == 2 and "  " not in at_90.verdict  # kernels and models alike
    assert "90 % intervals over" in text and "Every interval in the report's body is at 90 %" in text
    assert "Student-t\n90 % interval" in text  # the method section
    for family in ("kernels", "models"):
        wide, narrow = at_95.summary[family], at_90.summary[family]
        assert (wide["confidence"], narrow["confidence"]) == (0.95, 0.9)
        assert wide["geomean"] == pytest.approx(narrow["geomean"])  # same estimate, narrower interval
        assert wide["ci_low"] < narrow["ci_low"] and narrow["ci_high"] < wide["ci_high"]
    assert "95 % CI" in at_95.verdict and "95 % intervals over" in at_95.report_md.read_text()


def test_a_kind_whose_rounds_stopped_early_is_stated_at_the_strict_level(tmp_path: Path) -> None:
    from analysis.report.sequential import RoundsUsed, write_rounds_used

    run = _run_dir(tmp_path)
    (run / "pair" / "kernels").mkdir(parents=True)
    (run / "pair" / "models").mkdir(parents=True)
    write_rounds_used(run / "pair" / "kernels", RoundsUsed("kernels", 4, "settled: improved", "auto", 10, 0.001,
                                                            0.999))
    write_rounds_used(run / "pair" / "models", RoundsUsed("models", 10, "--max-rounds reached (verdict mixed)",
                                                          "auto", 10, 0.043, 0.957))
    inputs = load_report_inputs(run)
    inputs.kernel_blocks = inputs.model_blocks = None  # the fixture's rounds are in the samples files

    paths = render_report(inputs, tmp_path / "out")

    kernels, models = paths.summary["kernels"], paths.summary["models"]
    assert (kernels["confidence"], models["confidence"]) == (0.999, 0.957)
    text = paths.report_md.read_text(encoding="utf-8")
    # One level in the body (the run's); where a verdict rests on a stricter one, the method says so once.
    assert "99.9 % CI" not in text and "95 % CI" in paths.verdict
    assert "the kernel verdicts are stated at 99.9 % (their rounds stopped early)" in text
    assert "kernels: 4 of at most 10 round(s), settled: improved; stated at alpha 0.001, 99.9 % intervals" in text


def test_the_method_says_whether_each_kind_reached_the_resolution_target(tmp_path: Path) -> None:
    from analysis.report.sequential import RoundsUsed, write_rounds_used

    run = _run_dir(tmp_path)
    for kind in ("kernels", "models"):
        (run / "pair" / kind).mkdir(parents=True)
    write_rounds_used(run / "pair" / "kernels", RoundsUsed("kernels", 4, "settled: improved", "auto", 10, 0.001,
                                                            0.999, 3.0, 1.8))
    write_rounds_used(run / "pair" / "models", RoundsUsed("models", 10, "--max-rounds reached (settled: improved)",
                                                          "auto", 10, 0.043, 0.957, 3.0, 3.1))
    inputs = load_report_inputs(run)
    inputs.kernel_blocks = inputs.model_blocks = None  # the fixture's rounds are in the samples files

    text = render_report(inputs, tmp_path / "out").report_md.read_text(encoding="utf-8")

    assert "kernels: 4 of at most 10 round(s), settled: improved; detectable 1.8 % ≤ 3 % target after 4 round(s)" \
        in text
    assert "models: 10 of at most 10 round(s), --max-rounds reached (settled: improved); 3 % target not reached: " \
           "detectable 3.1 % after 10 round(s)" in text
    assert "With a target, a look\ncould stop only when" in text  # and why that keeps the level


def test_summary_json_has_the_documented_keys(tmp_path: Path) -> None:
    paths = render_report(load_report_inputs(_run_dir(tmp_path)), tmp_path / "report")

    summary = json.loads(paths.summary_json.read_text())
    assert summary == paths.summary and paths.summary_json == tmp_path / "report" / "summary.json"
    assert set(summary) == {"format_version", "verdict", "kernels", "models", "control", "gates", "numerics",
                            "experiment", "kernel_share", "not_timed", "settings"}
    assert summary["format_version"] == 7
    assert summary["not_timed"] == []  # both families were timed
    assert summary["experiment"] is None  # this run laid out by hand recorded no suite request
    assert summary["numerics"]["models"] is None  # these suites recorded no outputs (tests/test_numerics.py)
    family_keys = {"verdict", "headline", "step", "geomean", "ci_low", "ci_high", "confidence", "alpha", "n",
                   "improved", "regressed", "equivalent", "inconclusive", "time_weighted", "rounds", "detectable_pct",
                   "regressed_items"}
    kernel_keys = {"code_changed", "code_identical", "only_base", "only_pr", "paired_by", "control_verdicts",
                   "compiled_otherwise"}
    for family, n, extra in (("kernels", 1, kernel_keys), ("models", 3, set())):
        block = summary[family]
        assert set(block) == family_keys | extra
        assert block["n"] == n and block["rounds"] == 5
        assert sum(block[v] for v in ("improved", "regressed", "equivalent", "inconclusive")) == n
        assert block["ci_low"] <= block["geomean"] <= block["ci_high"]
    assert summary["kernels"]["improved"] == 1 and summary["models"]["regressed"] == 1
    assert summary["kernels"]["compiled_otherwise"] is None  # Triton kernels: no C++ build to differ
    assert (summary["kernels"]["code_changed"], summary["kernels"]["code_identical"]) == (1, 49)
    # How many pairs each key made (the changed kernel by its legacy key), and the kernels left unpaired per side.
    assert summary["kernels"]["paired_by"] == {"body_hash+shape_key": 49, "legacy_key": 1, "ops+shape_key": 0,
                                               "graphs+shape_key": 0, "kernel_name": 0}
    assert (summary["kernels"]["only_base"], summary["kernels"]["only_pr"]) == (0, 0)
    assert summary["kernels"]["headline"] == "step" and summary["models"]["headline"] == "geomean"
    assert [i["name"] for i in summary["models"]["regressed_items"]] == ["GPT2"]
    assert summary["verdict"] == paths.verdict and summary["verdict"].startswith("**Verdict:** Models ")
    control = summary["control"]
    assert set(control) == {"kernels", "models", "passed", "resolution_pct"}
    assert control["kernels"]["kind"] == "identical kernels" and control["models"]["kind"] == "split-half"
    assert {"kind", "geomean", "ci_low", "ci_high", "n", "false_positive_share", "passed", "available",
            "reason"} <= set(control["kernels"])
    assert control["passed"] is True and control["resolution_pct"] > 0
    assert [g["name"] for g in summary["gates"]] == ["geomean latency speedup", "compile time ratio", "pass rate",
                                                      "peak-memory compression ratio"]
    assert all(set(g) == {"name", "value", "ci_low", "ci_high", "limit", "bad_when", "status", "detail"}
               for g in summary["gates"])
    assert set(summary["settings"]) == {"confidence", "alpha", "margin", "threshold", "noise", "min_ms",
                                        "fail_share", "tolerance"}
    assert summary["settings"]["threshold"] == 0.02  # the effective value (the margin), not null


def test_a_kernel_bisect_step_that_timed_no_model_says_so_instead_of_judging_the_models(tmp_path: Path) -> None:
    """A step of `invoke bisect --kernel`: the suites compiled the models, only the kernels were timed (the
    manifest's settings.timed); its base side, taken from a run that timed the models, still holds their samples."""
    run = _run_dir(tmp_path)
    (run / "pr" / "suite" / "paired_samples.json").unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["settings"]["timed"] = ["kernels"]
    (run / "manifest.json").write_text(json.dumps(manifest))

    paths = render_report(load_report_inputs(run), tmp_path / "report")

    text = paths.report_md.read_text(encoding="utf-8")
    summary = json.loads(paths.summary_json.read_text())
    assert paths.verdict.startswith("**Verdict:** Models: not timed in this run (a step of a bisect of a kernel")
    assert "## Models\n\nNot timed in this run: it is a step of a bisect of a kernel" in text
    assert "## Dashboard summary" not in text and paths.models_csv is None  # no verdict from the one-off timings
    assert summary["models"] is None and summary["not_timed"] == ["models"]
    assert summary["kernels"]["improved"] == 1  # the kernels are judged as ever
    assert "Time in Inductor kernels" in paths.verdict


def test_a_failed_control_is_shown_at_the_top_and_qualifies_the_verdict(tmp_path: Path) -> None:
    specs = kernel_specs(24, seed=20)
    base, bs = kernels_frame(specs, seed=21, cv=0.01, round_cv=0.003)
    # The PR side ran 4 % slower in every round: the 4 identical kernels (too few to subtract the offset) look
    # 4 % slower, and so do the 20 changed ones, whose code made no difference.
    pr, ps = kernels_frame(specs, seed=22, cv=0.01, round_cv=0.003, round_shift=[1.04] * 5,
                           changed=frozenset(range(4, 24)))

    paths = render_report(ReportInputs(base, pr, bs, ps), tmp_path)

    text = paths.report_md.read_text(encoding="utf-8")
    top = text.split("## Control and caveats", 1)[1].split("<details>", 1)[0]  # before everything collapsed
    assert re.search(r"\| kernels \| identical kernels \| 4 \|.*\| \*\*failed\*\* \|", top)
    assert re.search(r"\| kernels \| split-half \| 24 \|.*\| passed \|", top)
    assert "In-run control **failed**: kernel claims under" in paths.verdict
    assert "Time in Inductor kernels **inconclusive**" in paths.verdict
    assert paths.summary["kernels"]["regressed"] == 0 and paths.summary["control"]["passed"] is False
    assert paths.summary["control"]["resolution_pct"] == pytest.approx(4.0, abs=1.0)


def test_a_run_missing_one_sides_kernels_names_the_file(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, pr_kernels=False)
    with pytest.raises(UserError, match=re.escape(str(run / "pr" / "kernels.csv"))):
        load_report_inputs(run)


@pytest.mark.parametrize("problem", ["missing", "empty", "header only", "wrong columns"])
def test_bad_kernel_csvs_give_one_line_errors(tmp_path: Path, problem: str) -> None:
    specs = kernel_specs(5, seed=18)
    good, _ = kernels_frame(specs, seed=19)
    good.to_csv(tmp_path / "good.csv", index=False)
    bad = tmp_path / "bad.csv"
    if problem == "empty":
        bad.write_text("")
    elif problem == "header only":
        bad.write_text(",".join(good.columns) + "\n")
    elif problem == "wrong columns":
        good.drop(columns=["body_hash", "median_ms"]).to_csv(bad, index=False)

    result = invoke("compare-kernels", str(tmp_path / "good.csv"), str(bad))

    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    if problem == "wrong columns":
        assert "body_hash" in lines[0] and "median_ms" in lines[0]


def test_a_comparison_renders_with_the_settings_it_was_given_not_those_read_back(tmp_path: Path) -> None:
    """invoke compare hands its validated settings to the report stage; only a re-render reads the manifest."""
    from prbench.runs.run_store import RunStore
    from prbench.stages.report import render_run_report

    _run_dir(tmp_path, stats={"confidence": 0.9})  # what the manifest says
    with RunStore(tmp_path / "runs").open("r1", write=True) as run:
        given = render_run_report(run, ReportSettings(rounds=5, stats=VerdictSettings(confidence=0.8)))
        assert "80 % CI" in given.verdict and given.summary["kernels"]["confidence"] == 0.8
        reread = render_run_report(run)
        assert "90 % CI" in reread.verdict


def _burst_rounds(run: Path, rounds: int) -> None:
    """Model rounds as the paired stage writes them: eight ABBA blocks per model and round, the machine 1.8×
    slower for the first half of every round and for the first visit (base) after it."""
    from foundation.formats.paired_rounds import RoundRecord, Visit, round_file, side_samples, write_round

    records = []
    for number in range(1, rounds + 1):
        visits = []
        for index, (model, ms) in enumerate(MODELS.items()):
            for p in range(8):
                for position, side in enumerate(("base", "pr", "pr", "base")):
                    slow = p < 4 or (p == 4 and position == 0)
                    visits.append(Visit(side, model, index, position, float(p), [ms * (1.8 if slow else 1.0)] * 5,
                                        "", p))
        records.append(RoundRecord("models", number, ["base", "pr"], "", 1.0, {}, visits))
        write_round(round_file(run / "pair" / "models", number), records[-1])
    for side in ("base", "pr"):
        (run / side / "suite" / "paired_samples.json").write_text(json.dumps(side_samples(records, side)))


def test_the_report_compares_the_model_rounds_block_by_block(tmp_path: Path) -> None:
    """Given a run whose model rounds caught a burst of load that hit base's visits once more than PR's, the user
    re-renders the report and sees no model called faster: each round's ratio comes from the blocks in which
    both sides ran together, not from the two sides' pooled medians (which would say 29 % faster)."""
    run = _run_dir(tmp_path)
    _burst_rounds(run, rounds=5)

    result = invoke("report", "r1", "--runs-dir", str(tmp_path / "runs"))

    assert result.returncode == 0, result.stderr
    models = pd.read_csv(run / "report" / "models_compare.csv").set_index("model")
    assert models["speedup"].tolist() == pytest.approx([1.0] * len(MODELS))
    assert (models["verdict"] == "equivalent").all()
    assert models.loc["GPT2", "base_latency_ms"] / models.loc["GPT2", "pr_latency_ms"] == pytest.approx(1.8 / 1.4)


@pytest.mark.parametrize(("passes", "phrase"), [(16, "16 times"), (1, "1 time,")])
def test_the_method_section_says_how_often_a_round_walks_the_blocks_in_whole_sentences(
        tmp_path: Path, passes: int, phrase: str) -> None:
    """A reviewer reading the method paragraph sees how many passes a round made, and no sentence runs into the
    next one (a template tag once swallowed the line break: "result.In each block")."""
    from prbench.runs.run_store import RunStore
    from prbench.stages.report import render_run_report

    _run_dir(tmp_path)
    with RunStore(tmp_path / "runs").open("r1", write=True) as run:
        render_run_report(run, ReportSettings(rounds=5, passes=passes))
    text = (tmp_path / "runs" / "r1" / "report" / "report.md").read_text(encoding="utf-8")
    method = text[text.index("## Method"):]
    assert f"A round walks all blocks {phrase}" in " ".join(method.split())
    assert not re.search(r"[a-z]\.[A-Z]", method)
