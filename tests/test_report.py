"""The report a reviewer pastes into a PR: fits GitHub's limit, says how kernels were paired, re-renders from a
run directory, and turns bad inputs into one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from compare_data import kernel_specs, kernels_frame, suite_frame, write_variant

from analysis.errors import UserError
from analysis.report import MAX_MARKDOWN_CHARS, ReportInputs, load_report_inputs, render_report, sheet_name

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"BertForMaskedLM": 40.0, "GPT2": 30.0, "T5Small": 60.0}


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_5000_kernel_report_fits_github_and_the_csv_keeps_every_row(tmp_path: Path) -> None:
    specs = kernel_specs(5000, seed=1, models=tuple(MODELS))
    changed = {i: 0.8 for i in range(0, 5000, 40)} | {i: 1.25 for i in range(3, 5000, 45)}
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
    assert len(text) < MAX_MARKDOWN_CHARS
    assert len(pd.read_csv(paths.kernels_csv)) == 5000
    assert re.search(r"_\d+ more rows in kernels_compare\.csv_", text)
    assert "Trace diff truncated" in text and (tmp_path / "report" / "trace_diff.md").exists()
    regressed = pd.read_csv(paths.kernels_csv).query("verdict == 'regressed'")
    assert len(regressed) == pytest.approx(len(changed) / 2, rel=0.2)
    # The reviewer sees what changed first: the first data row under "Top regressions" is a regression.
    top = text.split("### Top regressions", 1)[1].split("\n| ", 3)[2]
    assert "| regressed |" in top
    for png in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert not Path(png).is_absolute() and (tmp_path / "report" / png).stat().st_size > 1000
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
    assert "threshold only" in text  # no samples were given, and the method notes say what that means


def test_workbook_has_one_sheet_per_table_with_excel_safe_names(tmp_path: Path) -> None:
    from openpyxl import load_workbook

    specs = kernel_specs(20, seed=9, models=tuple(MODELS))
    base, bs = kernels_frame(specs, seed=10)
    pr, ps = kernels_frame(specs, seed=11)
    suite, ss = suite_frame(MODELS, seed=12)

    paths = render_report(ReportInputs(base, pr, bs, ps, suite, suite, ss, ss, lock={"base": {"x": 1}}), tmp_path)

    names = load_workbook(paths.xlsx, read_only=True).sheetnames
    assert names == ["Summary", "Kernels", "Categories", "Only in base", "Only in PR", "Models", "Projection",
                     "Environment", "Lock"]
    assert sheet_name("a/very:long*name?that[goes]on and on and on", set()) == "a_very_long_name_that_goes_on a"
    assert len(sheet_name("x" * 40, {"x" * 31})) <= 31


def _run_dir(root: Path, pr_kernels: bool = True) -> Path:
    specs = kernel_specs(50, seed=13, models=tuple(MODELS))
    base, bs = kernels_frame(specs, seed=14)
    pr, ps = kernels_frame(specs, seed=15, factor={0: 0.5})
    suite_b, ssb = suite_frame(MODELS, seed=16)
    suite_p, ssp = suite_frame(MODELS, seed=17)
    run = root / "runs" / "r1"
    write_variant(run / "base", base, bs, suite_b, ssb, env={"torch": {"commit": "1" * 40}})
    write_variant(run / "pr", pr if pr_kernels else None, ps, suite_p, ssp, env={"torch": {"commit": "2" * 40}})
    (run / "lock.json").write_text(json.dumps({"base": {"image": {"digest": "sha256:" + "d" * 64}},
                                               "pr": {"image": {"digest": "sha256:" + "e" * 64}}}))
    (run / "manifest.json").write_text(json.dumps({"run_id": "r1", "created": "now", "settings": {
        "suite": {"warmup": 7, "iterations": 25}}, "stages": {}}))
    return run


def test_invoke_report_rerenders_a_run_directory(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)

    result = invoke("report", "r1", "--runs-dir", str(tmp_path / "runs"))

    assert result.returncode == 0, result.stderr
    text = (run / "report" / "report.md").read_text(encoding="utf-8")
    assert "warm-up 7 iteration(s), then 25 timed" in text
    assert "| base.image.digest | sha256:dddd" in text  # the lock's identity entries are shown
    assert "## Projected end-to-end effect" in text and "How the share was computed" in text
    assert len(pd.read_csv(run / "report" / "kernels_compare.csv")) == 50
    assert (run / "report" / "models_compare.csv").exists()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stages"]["report"]["status"] == "done"


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
