"""``invoke perf-report`` and ``invoke trace-diff`` over real traces: per-rank reports next to the traces,
one-line errors for bad inputs."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import openpyxl
import pandas as pd
import pytest

from analysis.traces import read_trace
from analysis.traces.reports.perf_report import find_trace_groups, generate_perf_reports
from analysis.traces.reports.trace_diff import render_trace_diff_markdown, trace_diff
from foundation.errors import UserError
from tests.support.cli_support import invoke_in_process

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[1]
TIMELINE_ROWS = ["computation_time", "exposed_comm_time", "exposed_memcpy_time", "busy_time", "idle_time",
                 "total_time", "total_comm_time", "total_memcpy_time"]


def _invoke(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return invoke_in_process("-r", str(ROOT), *args, cwd=cwd)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A base directory with two configurations: a 2-rank job and a single H100 trace."""
    shutil.copytree(FIXTURES / "multirank", tmp_path / "job" / "multirank")
    (tmp_path / "job" / "h100").mkdir()
    shutil.copy(FIXTURES / "h100_bert-small-uncased.json.gz", tmp_path / "job" / "h100")
    return tmp_path / "job"


def test_both_ranks_are_read_with_rank_world_size_and_per_rank_columns(runs: Path) -> None:
    done = generate_perf_reports(runs, formats=["csv", "xlsx", "md"])

    csvs = runs / "multirank" / "multirank_perf_report_csvs"
    timeline = pd.read_csv(csvs / "gpu_timeline.csv")
    traces = pd.read_csv(csvs / "traces.csv")
    assert len(done) == 2
    assert traces["rank"].tolist() == [0, 1]
    assert traces["world size"].tolist() == [128, 128]
    assert list(timeline.columns[:5]) == ["type", "time ms", "percent", "time ms std", "percent std"]
    assert {"time ms rank0", "time ms rank1", "percent rank0", "percent rank1"} <= set(timeline.columns)
    busy = timeline.set_index("type").loc["busy_time"]
    assert busy["time ms"] == pytest.approx((busy["time ms rank0"] + busy["time ms rank1"]) / 2)
    assert busy["time ms std"] == pytest.approx(abs(busy["time ms rank0"] - busy["time ms rank1"]) / 2)
    kernels = pd.read_csv(csvs / "top_kernels.csv")
    assert kernels.iloc[0]["category"] == "communication"  # the NCCL SendRecv kernel dominates both ranks
    assert {"total ms rank0", "total ms rank1"} <= set(kernels.columns)
    workbook = openpyxl.load_workbook(runs / "multirank" / "multirank_perf_report.xlsx", read_only=True)
    assert "gpu_timeline" in workbook.sheetnames and all(len(s) <= 31 for s in workbook.sheetnames)
    markdown = (runs / "multirank" / "multirank_perf_report.md").read_text()
    assert "2 ranks (0, 1)" in markdown and "## GPU timeline" in markdown


def test_a_single_trace_csv_timeline_has_exactly_the_tracelens_columns_and_rows(runs: Path) -> None:
    generate_perf_reports(runs, formats=["csv"], filters=["h100"])

    timeline = pd.read_csv(runs / "h100" / "h100_h100_perf_report_csvs" / "gpu_timeline.csv")
    assert list(timeline.columns) == ["type", "time ms", "percent"]
    assert timeline["type"].tolist() == TIMELINE_ROWS
    assert timeline.set_index("type").loc["total_time", "percent"] == pytest.approx(100.0)


def test_rank_comes_from_the_file_name_pattern_when_the_trace_has_no_distributed_info(tmp_path: Path) -> None:
    for rank, fixture in ((1, "mi300_bert-small-uncased.json.gz"), (0, "h100_bert-small-uncased.json.gz")):
        (tmp_path / "cfg").mkdir(exist_ok=True)
        shutil.copy(FIXTURES / fixture, tmp_path / "cfg" / f"trace_worker{rank}.json.gz")

    [(group, _)] = generate_perf_reports(tmp_path, rank_pattern="worker", formats=["csv"])

    traces = pd.read_csv(group.output_base.with_name("cfg_perf_report_csvs") / "traces.csv")
    assert traces["rank"].tolist() == [0, 1]
    assert traces["platform"].tolist() == ["cuda", "rocm"]


def test_dry_run_lists_traces_and_outputs_and_writes_nothing(runs: Path) -> None:
    result = _invoke("perf-report", "-b", str(runs), "-p", "rank-", "-d", "--format", "xlsx,csv")

    assert result.returncode == 0, result.stderr
    assert "sampled_rank-1.json.gz (rank 1)" in result.stdout
    assert "h100_bert-small-uncased.json.gz (rank from the trace)" in result.stdout
    assert "would write" in result.stdout and "multirank_perf_report.xlsx" in result.stdout
    assert not list(runs.rglob("*_perf_report*"))


def test_the_invoke_task_writes_the_report_next_to_the_traces(runs: Path) -> None:
    result = _invoke("perf-report", "-b", str(runs), "-f", "multirank", "-e", "gz", "--format", "md")

    assert result.returncode == 0, result.stderr
    assert (runs / "multirank" / "multirank_multirank_perf_report.md").exists()
    assert not (runs / "h100" / "h100_perf_report.md").exists()


@pytest.mark.parametrize("case", ["corrupt_gzip", "truncated_json", "no_traces", "filter_matches_nothing"])
def test_bad_inputs_end_with_one_line_on_stderr_and_no_traceback(tmp_path: Path, case: str) -> None:
    base = tmp_path / "base"
    (base / "cfg").mkdir(parents=True)
    good = (FIXTURES / "h100_bert-small-uncased.json.gz").read_bytes()
    args = ["perf-report", "-b", str(base)]
    if case == "corrupt_gzip":
        (base / "cfg" / "rank_0.json.gz").write_bytes(good[:20] + b"\x00" * 200 + good[220:])
        expected = "rank_0.json.gz"
    elif case == "truncated_json":
        (base / "cfg" / "rank_0.json").write_bytes(gzip.decompress(good)[:100_000])
        expected = "truncated JSON"
    elif case == "no_traces":
        (base / "cfg" / "notes.txt").write_text("nothing here")
        expected = "no traces"
    else:
        shutil.copy(FIXTURES / "h100_bert-small-uncased.json.gz", base / "cfg" / "rank_0.json.gz")
        args += ["-f", "rank_7"]
        expected = "matches all filters"

    result = _invoke(*args)

    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_output_flag_needs_a_single_configuration(runs: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="exactly one"):
        find_trace_groups(runs, output=tmp_path / "one.xlsx")


def test_trace_diff_of_the_two_vendors_bert_runs() -> None:
    base = read_trace(FIXTURES / "h100_bert-small-uncased.json.gz")
    pr = read_trace(FIXTURES / "mi300_bert-small-uncased.json.gz")

    diff = trace_diff(base, pr)

    cats = diff.categories.set_index("category")
    assert cats.loc["GEMM", "base count"] == cats.loc["GEMM", "pr count"] == 26
    assert cats.loc["attention", "diff ms"] == pytest.approx(cats.loc["attention", "pr ms"]
                                                             - cats.loc["attention", "base ms"])
    statuses = diff.kernels.set_index("name")["status"]
    assert statuses["attn_fwd"] == "only pr"
    assert "both" in set(statuses)  # at::native kernels keep their names across vendors
    markdown = render_trace_diff_markdown(diff, top=5, heading_level=2)
    assert markdown.startswith("## Trace diff") and "### By category" in markdown


def test_the_trace_diff_task_prints_markdown(tmp_path: Path) -> None:
    result = _invoke("trace-diff", str(FIXTURES / "h100_bert-small-uncased.json.gz"),
                     str(FIXTURES / "mi300_bert-small-uncased.json.gz"), "--top", "3")

    assert result.returncode == 0, result.stderr
    assert "| GEMM | 26 | 26 |" in result.stdout


def test_the_report_carries_op_attribution_and_the_roofline_in_every_format(runs: Path) -> None:
    generate_perf_reports(runs, formats=["csv", "xlsx", "md"], filters=["h100"])

    csvs = runs / "h100" / "h100_h100_perf_report_csvs"
    categories = pd.read_csv(csvs / "ops_by_category.csv").set_index("category")
    ops = pd.read_csv(csvs / "ops_summary.csv").set_index("op")
    kernels = pd.read_csv(csvs / "kernel_summary.csv")
    roofline = pd.read_csv(csvs / "roofline.csv")
    assert categories.loc["GEMM", "kernels"] == 26 and categories["percent"].sum() == pytest.approx(100.0)
    assert ops.loc["aten::addmm", "calls"] == 26
    assert set(kernels["parent op"]) >= {"aten::addmm", "aten::_flash_attention_forward"}
    assert (roofline["family"] == "GEMM").any() and roofline["% of peak FLOP/s"].notna().any()
    workbook = openpyxl.load_workbook(runs / "h100" / "h100_h100_perf_report.xlsx", read_only=True)
    assert {"ops_by_category", "ops_summary", "kernel_summary", "roofline"} <= set(workbook.sheetnames)
    markdown = (runs / "h100" / "h100_h100_perf_report.md").read_text()
    assert "0 kernels (0.0 % of kernel time) have no launching op" in markdown
    assert "NVIDIA H100 SXM; peaks from" in markdown
    assert "## Roofline (GEMM, CONV, SDPA, elementwise, normalization, reduction)" in markdown


def test_multi_rank_ops_tables_have_per_rank_columns_and_unlinked_kernels_are_counted(runs: Path) -> None:
    generate_perf_reports(runs, formats=["csv", "md"], filters=["multirank"])

    csvs = runs / "multirank" / "multirank_multirank_perf_report_csvs"
    ops = pd.read_csv(csvs / "ops_summary.csv")
    traces = pd.read_csv(csvs / "traces.csv")
    assert {"kernel time ms rank0", "kernel time ms rank1"} <= set(ops.columns)
    assert traces["kernels without op"].tolist() == [16, 16]
    assert "16 kernels (" in (runs / "multirank" / "multirank_multirank_perf_report.md").read_text()


def test_format_is_a_long_flag_only_so_r_stays_free_and_the_window_flag_reaches_the_report(runs: Path) -> None:
    usage = _invoke("--help", "perf-report")
    result = _invoke("perf-report", "-b", str(runs), "-f", "h100", "--format", "md", "--window", "span")
    bad = _invoke("perf-report", "-b", str(runs), "--window", "middle")

    assert usage.returncode == 0
    assert "--format=STRING" in usage.stdout and "-r STRING" not in usage.stdout
    assert "-w STRING, --window=STRING" in usage.stdout
    assert result.returncode == 0, result.stderr
    assert "Timeline window: span of all GPU events" in (runs / "h100" / "h100_h100_perf_report.md").read_text()
    assert bad.returncode == 2 and "--window middle: expected one of steps, span" in bad.stderr
