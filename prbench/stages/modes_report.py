"""The report of a run of several modes: ``<run>/report/`` with the matrix over the modes' own reports
(`analysis.report.modes`), as ``invoke compare --modes`` writes it last and ``invoke report`` re-renders it.

Such a run's manifest records the modes under ``settings.modes`` (`foundation.formats.modes.Mode.describe`, in the
order given) and each mode is a run of its own under ``<run>/modes/<dir>/`` (`RunLayout.mode`).
"""

from __future__ import annotations

from typing import Any

from analysis.report.modes import ModeResult, ModesPaths, write_modes_report
from analysis.report.summary import SUMMARY_FILE, read_summary
from foundation.errors import UserError
from foundation.formats.modes import DIR_JOIN
from foundation.formats.run_layout import REPORT_MD
from prbench.runs.run_store import Run, RunStore
from prbench.stages.report import render_run_report

MODES_SETTING = "modes"  # the manifest's settings key that makes a run a run of several modes


def is_modes_run(run: Run) -> bool:
    return isinstance(run.manifest.settings.get(MODES_SETTING), list)


def mode_runs(run: Run) -> RunStore:
    """The runs directory that holds the modes' own runs."""
    return RunStore(run.layout.modes)


def render_modes_report(run: Run, rerender_modes: bool = False, kernels_asked: tuple[str, ...] = ()) -> ModesPaths:
    """Write ``<run>/report/`` from the modes' summaries (each mode's report first rendered anew with
    ``rerender_modes``: ``invoke report``) as the run's ``report`` stage; a mode without a report is one line."""
    modes: list[dict[str, Any]] = run.manifest.settings[MODES_SETTING]
    if kernels_asked:  # kernels are paired within a mode: its own run names them
        raise UserError(f"--kernel: run {run.run_id} holds {len(modes)} modes, each with its own kernels; ask the "
                        f"mode's run: invoke report --runs-dir {run.layout.modes} --run <mode> --kernel ...")
    if rerender_modes:
        for mode in modes:
            with mode_runs(run).open(_dir_name(mode), write=True) as mode_run:
                render_run_report(mode_run)
    results = [_result(run, mode) for mode in modes]
    inputs = {key: rec.input_hash for key, rec in run.manifest.stages.items() if key != "report"}
    settings = run.manifest.settings
    title = f"prbench: {settings.get('pr')} against {settings.get('base')} in {len(modes)} modes"
    with run.stage("report", inputs) as record:
        paths = write_modes_report(results, title, run.root, run.layout.report)
        record.outputs = [run.relative(paths.report_md), run.relative(paths.summary_json)]
        record.summary = {"verdict": paths.verdict}
    return paths


def _dir_name(mode: dict[str, Any]) -> str:
    return DIR_JOIN.join(mode["parts"])


def _result(run: Run, mode: dict[str, Any]) -> ModeResult:
    report = run.layout.mode(_dir_name(mode)).report
    summary_path = report / SUMMARY_FILE
    if not summary_path.is_file():
        raise UserError(f"mode {mode['name']}: no {run.relative(summary_path)} yet (its compare did not finish; "
                        "run the same invoke compare again to resume it)")
    return ModeResult(settings=mode, summary=read_summary(summary_path), report=run.relative(report / REPORT_MD),
                      summary_path=run.relative(summary_path))
