"""The report stage of a run: ``<run>/report/`` rendered from the run's files, the one way both ``invoke compare``
(its last stage) and ``invoke report`` (a re-render, nothing re-run) write it.

Starting the stage moves an earlier report to ``report.stale/`` (``Run.stage``); a render that fails removes what
it had written, so a failure never leaves a report that looks current.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from foundation.formats.run_layout import TRACE_DIFF_MD
from prbench.runs.run_store import Run

if TYPE_CHECKING:  # analysis.report.render imports pandas and matplotlib: only when a report is rendered
    from analysis.report.inputs import ReportSettings
    from analysis.report.render import ReportInputs, ReportPaths


def render_run_report(run: Run, settings: ReportSettings | None = None,
                      kernels_asked: tuple[str, ...] = ()) -> ReportPaths:
    """Render ``<run>/report/`` from the run's files as its ``report`` stage, with ``settings`` when the caller
    has them (``invoke compare``: the flags it validated), else with the settings the manifest recorded;
    ``kernels_asked``: kernels whose code diff the report adds (and `ReportPaths.kernel_details` holds in full)."""
    from analysis.report.inputs import check_kernels_asked
    from analysis.report.render import render_report

    out_dir = run.layout.report
    check_kernels_asked(run.root, kernels_asked)  # a mistyped name must not cost the run its current report
    with run.stage("report", _stage_inputs(run)) as record:
        try:
            inputs = _load(run, settings)
            inputs.kernels_asked = kernels_asked
            paths = render_report(inputs, out_dir)
        except BaseException:
            shutil.rmtree(out_dir, ignore_errors=True)
            raise
        record.outputs = [run.relative(p) for p in (paths.report_md, paths.comment_md, paths.summary_json, paths.xlsx,
                                                    *paths.csvs,
                                                    *paths.plots) if p is not None]
        record.summary = {"verdict": paths.verdict, "characters": paths.characters,
                          "comment_characters": paths.comment_characters}
    return paths


def _stage_inputs(run: Run) -> dict[str, Any]:
    """The report is made from every other stage's results: their input hashes name what it was rendered from."""
    return {key: rec.input_hash for key, rec in run.manifest.stages.items() if key != "report"}


def _load(run: Run, settings: ReportSettings | None) -> ReportInputs:
    """The run's ReportInputs, with the trace diff of the profiles both sides have (if any)."""
    from analysis.report.inputs import load_report_inputs
    from analysis.traces.reports.trace_diff import profile_dirs_markdown

    inputs = load_report_inputs(run.root, settings)
    profiled = profile_dirs_markdown(run.layout.variant("base").profiles, run.layout.variant("pr").profiles)
    inputs.trace_diff_md = profiled or inputs.trace_diff_md or _carried_trace_diff(run)
    return inputs


def _carried_trace_diff(run: Run) -> str | None:
    """A trace diff the previous report had (now in report.stale/) is carried over when no profiles give one:
    it is an input of the report, not one of its results."""
    previous = run.layout.stale_report / TRACE_DIFF_MD
    return previous.read_text(encoding="utf-8") if previous.is_file() else None
