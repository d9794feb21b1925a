"""``invoke perf-report --categories tracelens`` on the two bert-small traces TraceLens itself tests with: the op
categories and the kernel summary give TraceLens's numbers, as its own checked-in report sheets have them
(fixtures/traces/tracelens_reference, copied from AMD-AGI/TraceLens); the default categories say how they differ."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.support.cli_support import invoke_in_process

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
REFERENCE = FIXTURES / "tracelens_reference"
ROOT = Path(__file__).resolve().parents[1]


def _report(tmp_path: Path, device: str, *flags: str) -> Path:
    """The user puts one trace in a directory and runs perf-report on it; the CSV directory it wrote."""
    run = tmp_path / device
    run.mkdir()
    shutil.copy(FIXTURES / f"{device}_bert-small-uncased.json.gz", run)
    done = invoke_in_process("-r", str(ROOT), "perf-report", "-b", str(run), "--format", "csv,md", *flags)
    assert done.returncode == 0, done.stderr
    return run / f"{device}_perf_report_csvs"


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_every_category_share_is_tracelenss_within_half_a_point(tmp_path: Path, device: str) -> None:
    ours = pd.read_csv(_report(tmp_path, device, "--categories", "tracelens") / "ops_by_category.csv")
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_ops_summary_by_category.csv")

    shares = ours.set_index("category")["percent"]
    expected = theirs.set_index("op category")["Percentage (%)"]
    assert sorted(shares.index) == sorted(expected.index)
    assert (shares - expected.reindex(shares.index)).abs().max() < 0.5
    calls = ours.set_index("category")["calls"]
    assert calls.to_dict() == theirs.set_index("op category")["Count"].to_dict()


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_kernel_summary_percentages_are_tracelenss_within_a_hundredth_of_a_point(tmp_path: Path,
                                                                               device: str) -> None:
    ours = pd.read_csv(_report(tmp_path, device, "--categories", "tracelens", "--all-kernels")
                       / "kernel_summary.csv")
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_kernel_summary.csv")

    key = ["category", "parent op", "kernel", "stream"]
    ours = ours.set_index(key)
    theirs = theirs.rename(columns={"Parent op category": "category", "Parent cpu_op": "parent op",
                                    "Kernel name": "kernel", "Kernel stream": "stream"}).set_index(key)
    assert sorted(ours.index) == sorted(theirs.index)
    ours = ours.reindex(theirs.index)
    assert (ours["percent"] - theirs["Percent of kernels time (%)"]).abs().max() < 0.01
    assert (ours["percent of total time"] - theirs["Percent of total time (%)"]).abs().max() < 0.01
    assert (ours["count"] == theirs["Kernel duration (µs)_count"]).all()


def test_the_default_categories_differ_from_tracelens_and_each_table_says_how(tmp_path: Path) -> None:
    ours = pd.read_csv(_report(tmp_path, "h100") / "ops_by_category.csv").set_index("category")

    # The flash attention kernels are SDPA here, "other" in TraceLens; the index_select kernels are copy/memory.
    assert {"SDPA", "copy/memory"} <= set(ours.index) and "other" not in ours.index
    markdown = (tmp_path / "h100" / "h100_perf_report.md").read_text()
    assert "_prbench categories: every device event counts" in markdown
    assert "--categories tracelens: TraceLens's" in markdown
    legend = pd.read_csv(tmp_path / "h100" / "h100_perf_report_csvs" / "legend.csv")
    assert set(legend["sheet"]) == {"ops_by_category", "ops_summary", "kernel_summary"}


def test_an_unknown_category_scheme_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "h100"
    run.mkdir()
    shutil.copy(FIXTURES / "h100_bert-small-uncased.json.gz", run)

    done = invoke_in_process("-r", str(ROOT), "perf-report", "-b", str(run), "--categories", "hta")

    assert done.returncode != 0
    assert done.stderr.strip() == "error: --categories hta: expected one of prbench, tracelens"


def test_on_a_two_rank_nccl_job_the_communication_kernels_sit_in_their_own_row_outside_the_shares(
        tmp_path: Path) -> None:
    run = tmp_path / "job"
    shutil.copytree(FIXTURES / "multirank", run)

    done = invoke_in_process("-r", str(ROOT), "perf-report", "-b", str(run), "--format", "csv",
                             "--categories", "tracelens")

    assert done.returncode == 0, done.stderr
    table = pd.read_csv(run / "job_perf_report_csvs" / "ops_by_category.csv").set_index("category")
    comm = table.loc["(communication kernels)"]
    assert comm["kernels"] == 10 and pd.isna(comm["percent"])  # ten NCCL SendRecv kernels per rank
    assert table.index[-1] == "(communication kernels)"
    assert table["percent"].sum() == pytest.approx(100.0)


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_the_gpu_timeline_over_the_span_is_tracelenss(tmp_path: Path, device: str) -> None:
    ours = pd.read_csv(_report(tmp_path, device, "--window", "span") / "gpu_timeline.csv").set_index("type")
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_gpu_timeline.csv").set_index("type")

    assert list(ours.index) == list(theirs.index)
    assert (ours["time ms"] - theirs["time ms"]).abs().max() < 1e-4  # 100 ns: Kineto's µs floats, read as ns
    assert (ours["percent"] - theirs["percent"]).abs().max() < 0.01
