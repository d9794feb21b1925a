"""The report stage of a run: ``<run>/report/`` rendered from the run's files (``invoke compare``, ``invoke report``).

Starting the stage moves an earlier report to ``report.stale/`` (``Run.stage``); a render that fails removes what
it had written, so a failure never leaves a report that looks current.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prbench.runstore import REPORT_DIR, STALE_REPORT_DIR, Run

if TYPE_CHECKING:  # analysis.report imports pandas and matplotlib: only when a report is rendered
    from analysis.report import ReportInputs, ReportPaths


def render_run_report(run: Run, stage_inputs: dict[str, Any], load: Callable[[], ReportInputs]) -> ReportPaths:
    """Render ``<run>/report/`` from ``load()`` (the run's ReportInputs) as its ``report`` stage."""
    from analysis.report import render_report

    out_dir = run.path(REPORT_DIR)
    with run.stage("report", stage_inputs) as record:
        try:
            inputs = load()
            if not inputs.trace_diff_md:
                inputs.trace_diff_md = _carried_trace_diff(run)
            paths = render_report(inputs, out_dir)
        except BaseException:
            shutil.rmtree(out_dir, ignore_errors=True)
            raise
        record.outputs = [run.relative(p) for p in (paths.report_md, paths.summary_json, paths.xlsx, *paths.csvs,
                                                    *paths.plots) if p is not None]
        record.summary = {"verdict": paths.verdict, "characters": paths.characters}
    return paths


def _carried_trace_diff(run: Run) -> str | None:
    """A trace diff the previous report had (now in report.stale/) is carried over when no profiles give one:
    it is an input of the report, not one of its results."""
    previous = run.path(STALE_REPORT_DIR, "trace_diff.md")
    return previous.read_text(encoding="utf-8") if previous.is_file() else None
