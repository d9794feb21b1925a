"""The comparison report, top to bottom: analyses → the verdict line → tables and plots → summary.json,
report.xlsx → report.md and its comment form (comment.md).

`render_report` takes everything in memory (`analysis.report.inputs.ReportInputs`; `load_report_inputs` reads it
from a run directory) and writes ``out_dir``. Each step lives in its own module:

- ``analysis.report.inputs``: what a report is made from, and reading it from a run;
- ``analysis.report.headline``: the verdict line (models, time in Inductor kernels and the kernels that add it,
  dashboard checks, numerics, control), ``analysis.report.verdict_line``: controls, ``summary.json`` content,
  the xlsx Summary sheet;
- ``analysis.report.sections.environment``: the environment and lock tables;
- ``analysis.report.sections.experiment``: the experiment line (what was measured, with which Inductor settings);
- ``analysis.report.markdown``: report.md (any size) and comment.md (the comment form, under 20,000 characters);
- ``analysis.report.plots``: the PNGs;
- what explains the numbers: ``analysis.kernels.source`` (code diffs, launch configurations) and
  ``analysis.report.sections.kernel_details`` (their collapsed blocks),
  ``analysis.kernels.fusion_changes``, ``analysis.report.sections.time_decomposition``,
  ``analysis.report.sections.resources``;
- ``analysis.rendering``: cell formats, Markdown tables, templates, CSV and xlsx (shared with the trace reports).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.kernels.compare import KernelComparison, compare_kernels
from analysis.kernels.fusion_changes import fusion_changes
from analysis.models.compare import ModelComparison, compare_models
from analysis.rendering import write_csv, write_xlsx
from analysis.report.headline import kernel_contributors
from analysis.report.inputs import ReportInputs, ReportSettings, load_report_inputs
from analysis.report.markdown import COMMENT_LIMIT, Explanations, asked_kernel_texts, render_markdown
from analysis.report.numerics import VERDICT_PREFIX, NumericsView, lead_with_numerics, numerics_sentence, numerics_view
from analysis.report.plots import (
    plot_categories,
    plot_distribution,
    plot_kernel_forest,
    plot_model_forest,
    plot_waterfall,
)
from analysis.report.sections.environment import environment_table, flatten, with_lock_summaries
from analysis.report.sections.experiment import summary_block
from analysis.report.sections.gates import Gate, model_gates
from analysis.report.sections.projection import Projection, kernel_shares, project
from analysis.report.sections.resources import model_resources
from analysis.report.sections.time_decomposition import Decomposition, decompose
from analysis.report.summary import write_summary
from analysis.report.verdict_line import report_verdict, summarize_comparison, summary_frame
from analysis.stats.numeric_tolerance import parse_tolerances
from foundation import atomic_io
from foundation.errors import UserError
from foundation.formats.run_layout import COMMENT_MD, MANIFEST, REPORT_MD, TRACE_DIFF_MD
from foundation.formats.triton_ab import COMPILED_BY as TRITON_COMPILED
from foundation.formats.triton_ab import SETTINGS_KEY as TRITON_AB_KEY
from foundation.formats.triton_ab import TritonAB, from_settings

__all__ = ["COMMENT_LIMIT", "COMMENT_MD", "ReportInputs", "ReportPaths", "ReportSettings", "load_report_inputs",
           "render_report"]

# openpyxl writes ~50k cells/s without lxml: the Kernels sheet keeps the columns a reader sorts by;
# kernels_compare.csv has them all.
XLSX_KERNEL_COLUMNS = ("verdict", "speedup", "ci_low", "ci_high", "change_pct", "q_value", "base_median_ms",
                       "pr_median_ms", "base_spread", "pr_spread", "rounds", "control", "base_calls", "category",
                       "base_name", "pr_name", "matched_by", "body_hash", "shape_key", "in_summary")


@dataclass(frozen=True)
class ReportPaths:
    out_dir: Path
    report_md: Path
    comment_md: Path
    xlsx: Path
    kernels_csv: Path | None
    models_csv: Path | None
    csvs: list[Path]
    plots: list[Path]
    characters: int  # length of report.md
    comment_characters: int  # length of comment.md
    verdict: str
    summary_json: Path
    summary: dict[str, Any]
    kernel_comparison: KernelComparison | None = None  # the analyses behind the files, for callers to print
    model_comparison: ModelComparison | None = None
    projection: Projection | None = None
    kernel_details: list[str] = field(default_factory=list)  # the asked kernels' diffs in full, for a terminal


@dataclass
class _Analyses:
    """What the report says, before any file is written."""

    kc: KernelComparison | None
    mc: ModelComparison | None
    gates: list[Gate]
    proj: Projection | None
    fusion: pd.DataFrame | None = None  # `analysis.kernels.fusion_changes`
    decomposition: Decomposition | None = None
    resources: pd.DataFrame | None = None  # `analysis.report.sections.resources`
    numerics: NumericsView | None = None  # `analysis.models.numerics` (the outputs, not the times)
    contributors: pd.DataFrame | None = None  # `analysis.report.headline.kernel_contributors`


@dataclass
class _Files:
    """What has been written so far, in the order a reader meets it in report.xlsx."""

    csvs: list[Path] = field(default_factory=list)
    sheets: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    plots: dict[str, str] = field(default_factory=dict)  # template slot → file name in out_dir


def render_report(inputs: ReportInputs, out_dir: Path) -> ReportPaths:
    """Compare what ``inputs`` holds (kernels and/or suites) and write the report files into ``out_dir``."""
    out_dir = Path(out_dir)
    found = _analyse(inputs)
    stats = inputs.settings.stats.validate()
    files = _Files(sheets=[("Summary", summary_frame(found.kc, found.mc, found.proj, found.gates))])
    _write_kernel_files(found.kc, out_dir, files)
    _write_table(files, out_dir, "fusion_changes.csv", found.fusion, "Fusion changes")
    _write_table(files, out_dir, "kernel_contributors.csv", found.contributors, "Kernels by added time")
    if found.kc is not None and found.contributors is not None and found.kc.summary.n_summarised:
        files.plots["kernel_forest"] = plot_kernel_forest(found.contributors, found.kc,
                                                          out_dir / "kernel_forest.png").name
    _write_model_files(found.mc, found.proj, out_dir, files)
    if found.mc is not None and found.mc.summary.n_compared:
        files.plots["model_forest"] = plot_model_forest(found.mc, found.proj, out_dir / "model_forest.png").name
    _write_table(files, out_dir, "model_resources.csv", found.resources, "Compile and memory")
    _write_decomposition(found.decomposition, out_dir, files)
    _add_environment_sheets(inputs, files)
    if inputs.trace_diff_md:
        atomic_io.write_text(out_dir / TRACE_DIFF_MD, inputs.trace_diff_md)

    level = stats.confidence
    verdict = report_verdict(found.kc, found.mc, found.gates, found.contributors, level,
                             numerics_sentence(found.numerics), inputs.models_timed)
    verdict = lead_with_numerics(verdict, found.numerics)
    ab = triton_ab(inputs)
    if ab is not None:  # what was compared comes before what was found
        sentence = ab.headline(found.kc.summary.compiled_anew if found.kc is not None else 0)
        verdict = f"{VERDICT_PREFIX}{sentence} {verdict.removeprefix(VERDICT_PREFIX)}"
    summary = summarize_comparison(found.kc, found.mc, found.gates, stats, verdict)
    if ab is not None:
        summary[TRITON_AB_KEY] = ab.to_json()
    if found.numerics is not None:
        summary["numerics"] = found.numerics.summary_block()
    summary["experiment"] = summary_block(*inputs.experiments) if inputs.experiments else None
    summary["kernel_share"] = kernel_shares(found.proj).as_dict() if found.proj is not None else None
    summary["not_timed"] = [] if inputs.models_timed else ["models"]
    summary_json = write_summary(out_dir, summary)
    xlsx = write_xlsx(out_dir / "report.xlsx", files.sheets)
    text = render_markdown(inputs, found.kc, found.mc, found.proj, files.plots, found.gates, verdict,
                           Explanations(found.fusion, found.decomposition, found.resources, found.contributors),
                           found.numerics)
    report_md, comment_md = out_dir / REPORT_MD, out_dir / COMMENT_MD
    atomic_io.write_text(report_md, text.file)
    atomic_io.write_text(comment_md, text.comment)
    return ReportPaths(out_dir=out_dir, report_md=report_md, comment_md=comment_md, xlsx=xlsx,
                       kernels_csv=out_dir / "kernels_compare.csv" if found.kc is not None else None,
                       models_csv=out_dir / "models_compare.csv" if found.mc is not None else None,
                       csvs=files.csvs, plots=[out_dir / p for p in files.plots.values()], characters=len(text.file),
                       comment_characters=len(text.comment),
                       verdict=summary["verdict"], summary_json=summary_json, summary=summary,
                       kernel_comparison=found.kc, model_comparison=found.mc, projection=found.proj,
                       kernel_details=asked_kernel_texts(inputs, found.kc))


def triton_ab(inputs: ReportInputs) -> TritonAB | None:
    """The run's Triton A/B record (`foundation.formats.triton_ab`), None for an A/B of PyTorch."""
    return from_settings(inputs.manifest.get("settings"), f"{MANIFEST}: settings")


def _analyse(inputs: ReportInputs) -> _Analyses:
    """The kernel and model comparisons, the dashboard gates and (with both) the projection of one on the other."""
    has_kernels = inputs.base_kernels is not None and inputs.pr_kernels is not None
    has_suite = inputs.base_suite is not None and inputs.pr_suite is not None
    if not has_kernels and not has_suite:
        raise UserError("report: nothing to compare (need kernels tables or suite tables for both base and PR)")
    level = inputs.settings.stats.validate().confidence  # the one level the report's intervals are shown at
    ab = triton_ab(inputs)
    kc = compare_kernels(inputs.base_kernels, inputs.pr_kernels, inputs.base_kernel_samples,
                         inputs.pr_kernel_samples, inputs.stats_for("kernels"),
                         inputs.kernel_blocks, level, compiled_by=TRITON_COMPILED if ab else None,
                         cpp_build=inputs.cpp_build) if has_kernels else None
    # Models the run did not time are not judged from the suite's one-off timings: the report says they were not timed
    mc = compare_models(inputs.base_suite, inputs.pr_suite, inputs.base_suite_samples, inputs.pr_suite_samples,
                        inputs.stats_for("models"), inputs.base_model_rounds, inputs.pr_model_rounds,
                        inputs.model_blocks, level) if has_suite and inputs.models_timed else None
    stats = mc.settings if mc is not None else inputs.settings.stats.validate()  # what depends on the models
    gates = (model_gates(mc, stats.confidence) if mc is not None
             else [])
    found = _Analyses(kc, mc, gates, _projection(inputs, kc, mc) if kc is not None and mc is not None else None)
    found.numerics = numerics_view(inputs, kc, parse_tolerances(stats.tolerance))
    if kc is not None:
        found.fusion = fusion_changes(kc.only_base, kc.only_pr)
        found.contributors = kernel_contributors(kc, found.fusion)
    if mc is not None:
        found.resources = model_resources(mc, inputs.base_compiles, inputs.pr_compiles, stats.confidence)
        if kc is not None:
            found.decomposition = decompose(kc, mc, inputs.base_launch_cost, inputs.pr_launch_cost,
                                            stats.confidence)
    return found


def _projection(inputs: ReportInputs, kc: KernelComparison, mc: ModelComparison) -> Projection:
    from analysis.kernels.compare import check_kernels_frame

    return project(check_kernels_frame(inputs.base_kernels, "base kernels"),
                   check_kernels_frame(inputs.pr_kernels, "PR kernels"), mc, kc.round_ms,
                   mc.settings.confidence)


def _write_kernel_files(kc: KernelComparison | None, out_dir: Path, files: _Files) -> None:
    if kc is None:
        return
    for name, frame, sheet in (("kernels_compare.csv", kc.table, "Kernels"),
                               ("kernel_categories.csv", kc.categories, "Categories"),
                               ("kernels_only_base.csv", kc.only_base, "Only in base"),
                               ("kernels_only_pr.csv", kc.only_pr, "Only in PR")):
        files.csvs.append(write_csv(out_dir / name, frame))
        files.sheets.append((sheet, frame[[c for c in XLSX_KERNEL_COLUMNS if c in frame.columns]]
                             if sheet == "Kernels" else frame))
    if kc.summary.n_summarised:
        files.plots["distribution"] = plot_distribution(kc, out_dir / "speedup_distribution.png").name
        if len(kc.categories):
            files.plots["categories"] = plot_categories(kc, out_dir / "category_speedups.png").name


def _write_model_files(mc: ModelComparison | None, proj: Projection | None, out_dir: Path, files: _Files) -> None:
    if mc is not None:
        files.csvs.append(write_csv(out_dir / "models_compare.csv", mc.table))
        files.sheets.append(("Models", mc.table))
    if proj is not None:
        files.csvs.append(write_csv(out_dir / "projection.csv", proj.table))
        files.sheets.append(("Projection", proj.table))


def _write_table(files: _Files, out_dir: Path, name: str, frame: pd.DataFrame | None, sheet: str) -> None:
    if frame is not None:
        files.csvs.append(write_csv(out_dir / name, frame))
        files.sheets.append((sheet, frame))


def _write_decomposition(decomposition: Decomposition | None, out_dir: Path, files: _Files) -> None:
    """Where the PR's time went: its table and its waterfall."""
    if decomposition is None:
        return
    _write_table(files, out_dir, "time_decomposition.csv", decomposition.table, "Where the time went")
    if len(decomposition.table):
        files.plots["waterfall"] = plot_waterfall(decomposition, out_dir / "time_waterfall.png").name


def _add_environment_sheets(inputs: ReportInputs, files: _Files) -> None:
    files.sheets.append(("Environment", environment_table(*with_lock_summaries(inputs.base_env, inputs.pr_env,
                                                                               inputs.lock))))
    if inputs.lock:
        files.sheets.append(("Lock", pd.DataFrame(list(flatten(inputs.lock).items()), columns=["key", "value"])))
