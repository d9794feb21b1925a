"""``invoke compare-kernels``: read two kernel tables (and their round samples) and compare them.

The comparison itself is pure (``analysis.kernels.compare``, the report in ``analysis.report.render``); this module is
the command around it: which files to read, which semantics, where the report goes and what is printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.stats.verdict_settings import FLAG_HELP as STATS_FLAG_HELP
from foundation.errors import UserError
from prbench.commands.cli import resolve_path, task, user_facing
from prbench.commands.flags import FAIL_ON_HELP, verdict_settings_from

if TYPE_CHECKING:  # analysis.report.render imports pandas: only when the command runs
    from analysis.report.render import ReportSettings

SEMANTICS = ("prbench", "seed")


@dataclass(frozen=True)
class KernelFilesResult:
    lines: list[str]  # what the command prints, ``geomean: <value>`` last
    summary: dict[str, Any] = field(default_factory=dict)  # the summary.json content ({} with seed semantics)


def compare_kernel_files(base_csv: Path, pr_csv: Path, samples_base: Path | None = None,
                         samples_pr: Path | None = None, semantics: str = "prbench",
                         settings: ReportSettings | None = None, out_dir: Path | None = None) -> KernelFilesResult:
    """What ``invoke compare-kernels`` does: the lines to print and the verdict ``--fail-on`` reads."""
    if semantics not in SEMANTICS:
        raise UserError(f"--semantics {semantics!r}: expected 'prbench' or 'seed'")
    if semantics == "seed":
        return KernelFilesResult(_seed_lines(base_csv, pr_csv, ignored_samples=bool(samples_base or samples_pr),
                                             out_dir=out_dir))
    return _prbench_lines(base_csv, pr_csv, samples_base, samples_pr, settings, out_dir)


def _seed_lines(base_csv: Path, pr_csv: Path, ignored_samples: bool, out_dir: Path | None) -> list[str]:
    """kernel_perf_simple.py's comparison: single numbers per kernel, for checking against the seed script."""
    from analysis.kernels.compare import read_seed_csv, seed_compare
    from analysis.rendering import write_csv

    result = seed_compare(read_seed_csv(base_csv), read_seed_csv(pr_csv))
    lines = [f"seed semantics (kernel_perf_simple.py): {result.n_ref} ref and {result.n_opt} opt pointwise rows "
             f"after filters, {len(result.merged)} merged rows"]
    if ignored_samples:
        lines.append("note: --samples-* are ignored with --semantics seed (the seed compares single numbers)")
    if out_dir is not None:
        target = write_csv(Path(out_dir) / "seed_compare.csv", result.merged)
        lines.append(f"Saved output to {target}")
    return [*lines, f"geomean: {result.geomean!r}"]


def _prbench_lines(base_csv: Path, pr_csv: Path, samples_base: Path | None, samples_pr: Path | None,
                   settings: ReportSettings | None, out_dir: Path | None) -> KernelFilesResult:
    """The paired comparison with its verdict; with ``out_dir`` also the full report (report.md, CSVs, xlsx)."""
    from analysis.kernels.compare import compare_kernels, read_kernels_csv
    from analysis.report.render import ReportInputs, ReportSettings, render_report
    from analysis.report.verdict_line import kernel_summary_lines, report_verdict, summarize_comparison
    from foundation.formats.paired_rounds import read_round_samples

    settings = settings or ReportSettings()
    inputs = ReportInputs(base_kernels=read_kernels_csv(base_csv), pr_kernels=read_kernels_csv(pr_csv),
                          base_kernel_samples=read_round_samples(samples_base) if samples_base else {},
                          pr_kernel_samples=read_round_samples(samples_pr) if samples_pr else {},
                          settings=settings, title="prbench: kernel comparison")
    if out_dir is not None:
        paths = render_report(inputs, Path(out_dir))
        kc, summary = paths.kernel_comparison, paths.summary
        extra = [f"report: {paths.report_md} ({paths.characters} characters); all pairs in {paths.kernels_csv}"]
    else:
        kc = compare_kernels(inputs.base_kernels, inputs.pr_kernels, inputs.base_kernel_samples,
                             inputs.pr_kernel_samples, settings.stats)
        summary = summarize_comparison(kc, None, [], settings.stats)
        extra = []
    assert kc is not None  # the inputs hold kernel tables, so the report compared them
    lines = [report_verdict(kc, None), *kernel_summary_lines(kc), *extra,
             f"geomean: {kc.summary.geomean.speedup!r}"]
    return KernelFilesResult(lines, summary)


@task(
    help={
        "base": "kernels.csv of the base variant (with --semantics seed: a seed-format CSV or kernels_seed.csv)",
        "pr": "kernels.csv of the PR variant (same format as BASE)",
        "samples_base": "kernel_samples.json of the base variant: samples per timing round ({path: [[ms]...]})",
        "samples_pr": "kernel_samples.json of the PR variant",
        "semantics": "prbench (pair by body hash, intervals over timing rounds) or seed (kernel_perf_simple.py "
                     "exactly)",
        **STATS_FLAG_HELP,
        "out": "Directory for kernels_compare.csv, report.md, report.xlsx, plots (seed: seed_compare.csv)",
        "fail_on": FAIL_ON_HELP,
    }
)
@user_facing
def compare_kernels(ctx, base, pr, samples_base=None, samples_pr=None, semantics="prbench", confidence=None,
                    alpha=None, margin=None, threshold=None, noise=None, min_ms=None, fail_share=None, out=None,
                    fail_on="never"):
    """Compare two kernel CSVs; the last line printed is `geomean: <value>`."""
    from invoke import Exit

    from analysis.report.render import ReportSettings
    from analysis.report.summary import fail_reasons
    from analysis.stats.verdict_settings import check_fail_on
    from foundation.errors import UserError

    fail_on = check_fail_on(fail_on)
    if fail_on != "never" and semantics == "seed":
        raise UserError("--fail-on: the seed semantics give one geomean and no verdict; use --semantics prbench")
    settings = ReportSettings(stats=verdict_settings_from(confidence, alpha, margin, threshold, noise, min_ms,
                                                      fail_share))
    result = compare_kernel_files(
        resolve_path(base), resolve_path(pr),
        samples_base=resolve_path(samples_base) if samples_base else None,
        samples_pr=resolve_path(samples_pr) if samples_pr else None,
        semantics=semantics, settings=settings, out_dir=resolve_path(out) if out else None,
    )
    print("\n".join(result.lines))
    reasons = fail_reasons(result.summary, fail_on)
    if reasons:
        raise Exit(f"--fail-on {fail_on}: " + "; ".join(reasons), code=1)
