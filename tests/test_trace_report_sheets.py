"""The sheets a TraceLens user opens, in perf-report's xlsx, CSV and Markdown alike: on the real bert-small traces
their numbers are TraceLens's own (its checked-in sheets in fixtures/traces/tracelens_reference), on the two-rank
NCCL job the collectives are matched across ranks."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import openpyxl
import pandas as pd
import pytest

from analysis.traces.analyses.collectives import ACROSS_COLUMNS, PER_RANK_COLUMNS, STRAGGLER_COLUMNS
from analysis.traces.analyses.op_shapes import SHORT_KERNELS_COLUMNS, UNIFIED_COLUMNS, UNIQUE_ARGS_COLUMNS
from analysis.traces.reports.perf_report import generate_perf_reports

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
REFERENCE = FIXTURES / "tracelens_reference"


def _report(tmp_path: Path, *files: Path, **options: object) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for f in files:
        shutil.copy(f, run)
    generate_perf_reports(run, formats=["csv", "xlsx", "md"], **options)  # type: ignore[arg-type]
    return run


def _bert(tmp_path: Path, device: str) -> Path:
    return _report(tmp_path, FIXTURES / f"{device}_bert-small-uncased.json.gz", categories="tracelens")


def _shape_key(op: str, dims: str) -> tuple[str, str]:
    """TraceLens writes Python tuples, this project JSON lists: one form to compare."""
    value = ast.literal_eval(dims) if dims.startswith("(") else json.loads(dims)

    def listed(v: object) -> object:
        return [listed(x) for x in v] if isinstance(v, (list, tuple)) else v
    return op, json.dumps(listed(value))


def _in_every_format(run: Path, sheet: str, columns: list[str]) -> pd.DataFrame:
    frame = pd.read_csv(run / "run_perf_report_csvs" / f"{sheet}.csv")
    assert list(frame.columns) == ["rank", *columns]
    workbook = openpyxl.load_workbook(run / "run_perf_report.xlsx", read_only=True)
    assert sheet in workbook.sheetnames
    return frame


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_ops_unique_args_has_tracelenss_rows_calls_and_kernel_times(tmp_path: Path, device: str) -> None:
    run = _bert(tmp_path, device)

    ours = _in_every_format(run, "ops_unique_args", UNIQUE_ARGS_COLUMNS)
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_ops_unique_args.csv")

    ours.index = [_shape_key(o, d) for o, d in zip(ours["op"], ours["input dims"], strict=True)]
    theirs.index = [_shape_key(o, d) for o, d in zip(theirs["name"], theirs["Input Dims"], strict=True)]
    assert sorted(ours.index) == sorted(theirs.index)
    ours = ours.reindex(theirs.index)
    assert (ours["calls"] == theirs["operation_count"]).all()
    assert (ours["kernel time us sum"] - theirs["total_direct_kernel_time_sum"]).abs().max() < 1e-3
    assert (ours["kernel time us median"] - theirs["total_direct_kernel_time_median"]).abs().max() < 1e-3
    assert (ours["percent"] - theirs["Percentage (%)"]).abs().max() < 0.01
    assert "## Ops with unique arguments" in (run / "run_perf_report.md").read_text()


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_the_unified_summary_prices_every_gemm_shape_and_states_tflops_both_ways(tmp_path: Path,
                                                                               device: str) -> None:
    run = _bert(tmp_path, device)

    ours = _in_every_format(run, "unified_perf_summary", UNIFIED_COLUMNS)
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_unified_perf_summary.csv")

    gemms = ours[ours["family"] == "GEMM"].copy()
    gemms.index = [_shape_key(o, d) for o, d in zip(gemms["op"], gemms["input dims"], strict=True)]
    reference = theirs[theirs["op category"] == "GEMM"]
    reference.index = [_shape_key(o, d) for o, d in zip(reference["name"], reference["Input Dims"], strict=True)]
    assert sorted(gemms.index) == sorted(reference.index)
    gemms = gemms.reindex(reference.index)
    assert (gemms["kernel time us sum"] - reference["Kernel Time (µs)_sum"]).abs().max() < 1e-3
    # TraceLens adds the bias (M·N) to 2·M·N·K, a factor 1 + 1/(2K) (A, the second input, is M × K).
    k = pd.Series([json.loads(d)[1][1] for d in gemms["input dims"]], index=gemms.index)
    with_bias = gemms["TFLOP/s mean of calls"] * (1 + 1 / (2 * k))
    assert ((with_bias / reference["TFLOPS/s_mean"]) - 1).abs().max() < 1e-4
    assert (gemms["TFLOP/s"] <= gemms["TFLOP/s mean of calls"] * (1 + 1e-9)).all()  # mean of rates ≥ rate of sums
    assert ours["has model"].any() and not ours["has model"].all()
    markdown = (run / "run_perf_report.md").read_text()
    assert '"TFLOP/s mean of calls" = the mean of each call\'s rate' in markdown


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_the_attention_and_elementwise_work_is_tracelenss(tmp_path: Path, device: str) -> None:
    run = _bert(tmp_path, device)

    ours = pd.read_csv(run / "run_perf_report_csvs" / "unified_perf_summary.csv")
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_unified_perf_summary.csv")

    # TraceLens prices the outer aten::_scaled_dot_product_flash_attention, this project the op that launched the
    # kernel, aten::_flash_attention_forward: the same Q, K, V ([1, 141, 8, 64]), so the same work.
    attention = ours[ours["family"] == "SDPA"].iloc[0]
    reference = theirs[theirs["op category"] == "SDPA_fwd"].iloc[0]
    assert attention["GFLOP per call"] == pytest.approx(reference["GFLOPS"], rel=1e-4)
    assert attention["MB per call"] == pytest.approx(reference["Data Moved (MB)"] * 2**20 / 1e6, rel=1e-5)  # MiB
    for op in ("aten::add", "aten::add_"):
        mine = ours[(ours["op"] == op) & (ours["family"] == "elementwise")].iloc[0]
        priced = theirs[(theirs["name"] == op) & theirs["has_perf_model"]].iloc[0]
        assert mine["GFLOP per call"] == pytest.approx(priced["GFLOPS"], rel=1e-4)
        assert mine["MB per call"] == pytest.approx(priced["Data Moved (MB)"] * 2**20 / 1e6, rel=1e-5)


@pytest.mark.parametrize("device", ["h100", "mi300"])
def test_short_kernels_summary_is_tracelenss(tmp_path: Path, device: str) -> None:
    run = _bert(tmp_path, device)

    ours = _in_every_format(run, "short_kernels_summary", SHORT_KERNELS_COLUMNS)
    theirs = pd.read_csv(REFERENCE / f"{device}_bert-small-uncased_short_kernels_summary.csv")
    histogram = pd.read_csv(run / "run_perf_report_csvs" / "short_kernel_histogram.csv")

    key = ["parent op", "kernel", "count"]
    ours = ours.sort_values(key).reset_index(drop=True)
    theirs = theirs.rename(columns={"Parent cpu_op": "parent op", "Kernel name": "kernel",
                                    "Short Kernel count": "count"}).sort_values(key).reset_index(drop=True)
    assert ours[key].values.tolist() == theirs[key].values.tolist()
    assert (ours["total us"] - theirs["Short Kernel duration (µs) sum"]).abs().max() < 1e-3
    assert (ours["percent of total time"]
            - theirs["Short Kernel duration (µs) percent of total time"]).abs().max() < 0.01
    assert len(histogram) == 100 and histogram["count"].sum() == ours["count"].sum()


def test_a_two_rank_nccl_job_gets_its_collectives_per_rank_and_matched_across_ranks(tmp_path: Path) -> None:
    run = _report(tmp_path, *sorted((FIXTURES / "multirank").glob("*.json.gz")))

    per_rank = _in_every_format(run, "collectives", PER_RANK_COLUMNS[1:])
    csvs = run / "run_perf_report_csvs"
    across = pd.read_csv(csvs / "collectives_across_ranks.csv")
    stragglers = pd.read_csv(csvs / "collective_stragglers.csv")

    # Ten SendRecv kernels per rank (no process-group metadata in these traces: named from the kernel).
    assert per_rank.groupby("rank")["count"].sum().to_dict() == {0: 10, 1: 10}
    assert set(per_rank["collective"]) == {"SendRecv"}
    assert list(across.columns) == ACROSS_COLUMNS and list(stragglers.columns) == STRAGGLER_COLUMNS
    assert across.loc[0, "instances"] == 10 and across.loc[0, "ranks"] == 2
    # Every instance has one rank last: the counts add up, and the straggler (least wait) comes first.
    assert stragglers["times last"].sum() == 10
    assert stragglers["total wait us"].is_monotonic_increasing
    assert stragglers.loc[0, "times last"] >= stragglers.loc[1, "times last"]
    assert "## Collectives" in (run / "run_perf_report.md").read_text()


def test_a_single_gpu_trace_has_no_collective_sheets(tmp_path: Path) -> None:
    run = _bert(tmp_path, "h100")

    assert not (run / "run_perf_report_csvs" / "collectives.csv").exists()
    assert "## Collectives" not in (run / "run_perf_report.md").read_text()


@pytest.mark.parametrize(("sheet", "columns"), [
    ("unified_perf_summary", UNIFIED_COLUMNS), ("ops_unique_args", UNIQUE_ARGS_COLUMNS),
    ("short_kernels_summary", SHORT_KERNELS_COLUMNS),
    ("short_kernel_histogram", ["bin_start us", "bin_end us", "count"]),
    ("collectives", PER_RANK_COLUMNS[1:]), ("collectives_across_ranks", ACROSS_COLUMNS),
    ("collective_stragglers", STRAGGLER_COLUMNS), ("legend", ["sheet", "legend"]),
])
def test_every_column_of_each_new_sheet_is_named_in_its_section_of_the_docs(sheet: str, columns: list[str]) -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "trace-reports.md").read_text()

    start = docs.index(f"**`{sheet}`**")
    section = docs[start:docs.find("\n\n", start)]
    if sheet == "unified_perf_summary":  # its columns are the table below its heading
        section = docs[start:docs.find("\n\n", docs.index("| column |", start))]

    assert [c for c in columns if c not in section] == []
