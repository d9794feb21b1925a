"""One rendering module for every report: the Markdown table layouts the comparison report and the trace
reports print, the shared template filters, one write_xlsx, and one report stage for `compare` and `report`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from openpyxl import load_workbook

from analysis.rendering import Column, fmt_p, fmt_time, frame_table, markdown_table, write_xlsx
from prbench.runs.run_store import RunStore
from prbench.stages.report import render_run_report


def test_the_report_table_cuts_names_in_the_middle_and_names_the_file_with_the_rest() -> None:
    frame = pd.DataFrame({"name": ["triton_poi_fused_add_0_abcdef", "b|c"], "ms": [0.5, None]})
    columns = [Column("name", "kernel", width=11), Column("ms", "time", fmt_time)]

    assert markdown_table(frame, columns, 1, "k.csv") == (
        "| kernel | time |\n|---|---|\n| trito…bcdef | 500 µs |\n\n_1 more rows in k.csv_\n")
    assert markdown_table(frame, columns, 5, None).splitlines()[-1] == "| b\\|c | – |"
    assert markdown_table(frame.iloc[:0], columns, 5, None) == "_none_\n"


def test_times_show_three_significant_digits_in_their_unit_and_q_values_are_capped() -> None:
    assert [fmt_time(ms) for ms in (3.5e-5, 0.03519, 0.9996, 2.69, 99.99, 8609.0, float("nan"))] == [
        "35.0 ns", "35.2 µs", "1.00 ms", "2.69 ms", "100 ms", "8.61 s", "–"]
    assert [fmt_p(q) for q in (1e-21, 0.0005, 0.04)] == ["< 0.0001", "0.0005", "0.040"]


def test_the_trace_table_aligns_numbers_right_and_cuts_signatures_at_the_end() -> None:
    frame = pd.DataFrame({"name": ["void at::native::elementwise_kernel<128>(int)"], "ms": [1.23456], "n": [3]})

    assert frame_table(frame, max_name=20) == (
        "| name | ms | n |\n| --- | ---: | ---: |\n| void at::native::el… | 1.235 | 3 |")
    assert frame_table(frame.iloc[:0]) == "_(none)_"


def test_every_template_sees_the_same_filters() -> None:
    # trace_diff.md.j2 uses `md`; report.md.j2 uses the number filters: one environment serves both.
    from analysis.rendering import jinja_env

    assert {"md", "x", "time", "pct", "share", "num"} <= set(jinja_env().filters)
    assert jinja_env().filters["md"] is frame_table
    table = pd.DataFrame({"a": [1]})
    assert jinja_env().from_string("{{ 1.5 | x }} {{ 0.25 | time }}\n{{ t | md }}").render(t=table) == (
        "1.500× 250 µs\n| a |\n| ---: |\n| 1 |")


def test_write_xlsx_takes_the_path_first_and_sheets_in_order(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [float("nan"), 1.0]})

    write_xlsx(tmp_path / "a.xlsx", [("Second", frame), ("First", frame)])
    write_xlsx(tmp_path / "b.xlsx", {"x" * 40: frame, "x" * 31: frame})

    assert load_workbook(tmp_path / "a.xlsx").sheetnames == ["Second", "First"]
    assert load_workbook(tmp_path / "b.xlsx").sheetnames == ["x" * 31, "x" * 27 + " (2)"]
    assert pd.read_excel(tmp_path / "a.xlsx")["a"].isna().tolist() == [True, False]


def test_compare_and_report_share_one_report_stage(tmp_path: Path) -> None:
    from test_report import _run_dir

    run_dir = _run_dir(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["stages"] = {"base/suite": {"status": "done", "input_hash": "h1"}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with RunStore(run_dir.parent).open("r1", write=True) as run:
        paths = render_run_report(run)
        record = run.manifest.stages["report"]

    assert paths.report_md.is_file() and record.status == "done"
    assert "report/report.md" in record.outputs and record.summary["verdict"] == paths.verdict
