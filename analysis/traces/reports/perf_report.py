"""Performance report over a directory of (multi-rank) traces, after TraceLens' ``generate_perf_report``.

Traces (``*.json`` / ``*.json.gz``) are found recursively under a base directory and grouped by the directory
that holds them: one directory is one configuration, its files are the ranks. Each configuration gets one
report written next to its traces (``<dir>/<dirname>_perf_report.{xlsx,md}`` and ``..._perf_report_csvs/``)
with per-rank columns plus their mean and standard deviation. Sheets:

gpu_timeline, ops_by_category, ops_summary, kernel_summary (kernels with their parent op), unified_perf_summary and
ops_unique_args (per op and recorded arguments, :mod:`analysis.traces.analyses.op_shapes`), roofline (every family
:mod:`analysis.traces.analyses.roofline` prices, against the device's peak), kernel_categories, top_kernels, steps,
launch_overhead, sync_calls, short_kernel_histogram, short_kernels_summary, collectives (multi-rank directories,
:mod:`analysis.traces.analyses.collectives`), traces, legend (one line per table on its definitions). The timeline's
window follows ``window`` (see :func:`analysis.traces.analyses.timeline.measured_window`); every report says which rule
it used and how many kernels have no launching op (they stay in every table). The rank of a file comes from its
``distributedInfo`` (as HTA does), else from ``<pattern><N>`` in the file name (the ``-p`` flag), else from its position
in the sorted list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.rendering import render_template, write_csv_dir, write_xlsx
from analysis.traces.analyses.breakdown import category_table, kernel_table, kernels_per_step, short_kernel_histogram
from analysis.traces.analyses.collectives import collective_sheets
from analysis.traces.analyses.launch import LaunchAnalysis, analyze_launches, sync_table
from analysis.traces.analyses.op_shapes import ops_unique_args, short_kernels_summary, unified_perf_summary
from analysis.traces.analyses.ops import (
    CATEGORY_SCHEMES,
    LEGENDS,
    OUTSIDE_TOTALS,
    attribute,
    kernel_summary,
    ops_by_category,
    ops_summary,
    unlinked_sentence,
)
from analysis.traces.analyses.replay import ReplaySet, ReplayShape, trace_shapes
from analysis.traces.analyses.roofline import device_peaks, device_sentence, roofline_table
from analysis.traces.analyses.timeline import WINDOW_RULES, Timeline, Window, gpu_timeline, measured_window
from analysis.traces.model import TraceData
from analysis.traces.readers.by_content import read_trace
from analysis.traces.reports.replay_report import build_replay_set, replay_paths, write_replay_set
from foundation.errors import UserError

REPORT_SUFFIX = "_perf_report"
TRACE_SUFFIXES = {"json": (".json",), "gz": (".json.gz",), None: (".json", ".json.gz")}


@dataclass(frozen=True)
class TraceFile:
    path: Path
    rank_hint: int | None  # from the file name, before the trace is read


@dataclass
class TraceGroup:
    """One configuration directory and the rank traces in it."""

    directory: Path
    files: list[TraceFile]
    output_base: Path  # report path without extension

    def outputs(self, formats: list[str]) -> list[Path]:
        suffix = {"xlsx": ".xlsx", "md": ".md", "csv": "_csvs"}
        return [self.output_base.with_name(self.output_base.name + suffix[f]) for f in formats]


@dataclass
class RankResult:
    rank: int
    trace: TraceData
    timeline: Timeline
    kernels: pd.DataFrame
    categories: pd.DataFrame
    steps: pd.DataFrame
    launch: LaunchAnalysis
    sync: pd.DataFrame
    short_histogram: pd.DataFrame
    window: Window
    ops_categories: pd.DataFrame
    ops: pd.DataFrame
    kernel_parents: pd.DataFrame
    roofline: pd.DataFrame
    notes: list[str]  # the window rule, the unlinked kernels, the device and its peaks
    unlinked: int
    unique_args: pd.DataFrame = field(default_factory=pd.DataFrame)
    unified: pd.DataFrame = field(default_factory=pd.DataFrame)
    short_kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    replay_shapes: list[ReplayShape] = field(default_factory=list)  # GEMM/CONV shapes for node replay (-r)
    family_ms: dict[str, float] = field(default_factory=dict)  # GEMM/CONV kernel time of the trace


@dataclass
class PerfReport:
    title: str
    ranks: list[int]
    categories: str = "prbench"  # the category scheme of the ops tables (see analysis.traces.analyses.ops)
    sheets: dict[str, pd.DataFrame] = field(default_factory=dict)
    verdicts: list[tuple[int, str, str]] = field(default_factory=list)
    notes: list[tuple[int, list[str]]] = field(default_factory=list)


# --- finding traces ---------------------------------------------------------------------------------------


def _rank_from_name(name: str, pattern: str) -> int | None:
    m = re.search(re.escape(pattern) + r"(\d+)", name)
    return int(m.group(1)) if m else None


def find_trace_groups(base: Path, rank_pattern: str = "rank_", ext: str | None = None,
                      filters: list[str] | None = None, output: Path | None = None) -> list[TraceGroup]:
    base = Path(base)
    if not base.exists():
        raise UserError(f"-b {base}: no such directory")
    if not base.is_dir():
        raise UserError(f"-b {base}: not a directory")
    if ext not in TRACE_SUFFIXES:
        raise UserError(f"-e {ext}: expected json or gz")
    suffixes = TRACE_SUFFIXES[ext]
    candidates = sorted(p for p in base.rglob("*") if p.is_file() and p.name.endswith(suffixes)
                        and REPORT_SUFFIX not in p.name)
    if ext == "json":  # ".json" must not also pick up ".json.gz" (it does not), nor vice versa
        candidates = [p for p in candidates if not p.name.endswith(".json.gz")]
    if not candidates:
        raise UserError(f"-b {base}: no traces ({', '.join('*' + s for s in suffixes)}) under this directory")
    filters = list(filters or [])
    selected = [p for p in candidates if all(f in str(p.relative_to(base)) for f in filters)]
    if not selected:
        raise UserError(f"-f {' '.join(filters)}: no trace under {base} matches all filters "
                        f"({len(candidates)} traces found)")
    by_dir: dict[Path, list[TraceFile]] = {}
    for p in selected:
        by_dir.setdefault(p.parent, []).append(TraceFile(p, _rank_from_name(p.name, rank_pattern)))
    groups = []
    tag = "_".join(re.sub(r"[^\w.-]+", "-", f).strip("-") for f in filters if f)
    for directory, files in sorted(by_dir.items()):
        files.sort(key=lambda f: (f.rank_hint is None, f.rank_hint if f.rank_hint is not None else 0, f.path.name))
        name = directory.name or "traces"
        stem = f"{name}_{tag}{REPORT_SUFFIX}" if tag else f"{name}{REPORT_SUFFIX}"
        groups.append(TraceGroup(directory, files, directory / stem))
    if output is not None:
        if len(groups) > 1:
            raise UserError(f"-o {output}: {len(groups)} configuration directories found; -o needs exactly one")
        out = Path(output)
        groups[0].output_base = out.with_name(re.sub(r"\.(xlsx|md)$", "", out.name))
    return groups


# --- analysis ---------------------------------------------------------------------------------------------


def analyze_rank(trace: TraceData, rank: int, window_rule: str = "steps", categories: str = "prbench") -> RankResult:
    window = measured_window(trace, window_rule)
    timeline = gpu_timeline(trace, window)
    kernels = kernel_table(trace)
    attr = attribute(trace)
    tables_attr = attr if categories == "prbench" else attribute(trace, categories)
    peaks = device_peaks(trace.device_names)
    fallback = " (asked for GPU steps; the trace has none)" if window_rule == "steps" and window.rule == "span" else ""
    notes = [f"Timeline window: {window.describe()}{fallback}.", unlinked_sentence(trace, attr),
             device_sentence(trace, peaks)]
    if trace.skipped.count:
        notes.append(trace.skipped.sentence())
    replay_shapes, family_ms = trace_shapes(trace, attr)
    return RankResult(
        rank=rank, trace=trace, timeline=timeline, kernels=kernels, categories=category_table(trace, kernels),
        steps=kernels_per_step(trace), launch=analyze_launches(trace, timeline), sync=sync_table(trace),
        short_histogram=short_kernel_histogram(trace), window=window,
        ops_categories=ops_by_category(trace, tables_attr), ops=ops_summary(trace, tables_attr),
        kernel_parents=kernel_summary(trace, tables_attr),
        roofline=roofline_table(trace, attr, peaks), notes=notes, unlinked=attr.unlinked,
        unique_args=ops_unique_args(trace, tables_attr), unified=unified_perf_summary(trace, tables_attr, peaks),
        short_kernels=short_kernels_summary(trace, tables_attr, timeline.total_time),
        replay_shapes=replay_shapes, family_ms=family_ms)


def load_group(group: TraceGroup, window_rule: str = "steps", lenient: bool = False,
               categories: str = "prbench") -> list[RankResult]:
    results = []
    seen: dict[int, Path] = {}
    for position, f in enumerate(group.files):
        trace = read_trace(f.path, lenient=lenient)
        rank = trace.rank if trace.rank is not None and trace.rank >= 0 else f.rank_hint
        rank = position if rank is None else rank
        if rank in seen:
            raise UserError(f"{f.path}: rank {rank} again (also {seen[rank]}); pass -f to select one run")
        seen[rank] = f.path
        results.append(analyze_rank(trace, rank, window_rule, categories))
    return sorted(results, key=lambda r: r.rank)


def _mean_std(frame: pd.DataFrame, cols: list[str]) -> tuple[pd.Series, pd.Series]:
    values = frame[cols]
    std = values.std(axis=1, ddof=0) if len(cols) > 1 else pd.Series(0.0, index=frame.index)
    return values.mean(axis=1), std


def timeline_sheet(results: list[RankResult]) -> pd.DataFrame:
    frames = {r.rank: r.timeline.to_frame().set_index("type") for r in results}
    if len(frames) == 1:
        return next(iter(frames.values())).reset_index()
    out = pd.DataFrame(index=next(iter(frames.values())).index)
    for rank, df in frames.items():
        out[f"time ms rank{rank}"] = df["time ms"]
        out[f"percent rank{rank}"] = df["percent"]
    t_cols = [f"time ms rank{r}" for r in frames]
    p_cols = [f"percent rank{r}" for r in frames]
    out.insert(0, "time ms", out[t_cols].mean(axis=1))
    out.insert(1, "percent", out[p_cols].mean(axis=1))
    out.insert(2, "time ms std", _mean_std(out, t_cols)[1])
    out.insert(3, "percent std", _mean_std(out, p_cols)[1])
    return out.reset_index()


def _merge_ranks(results: list[RankResult], attr: str, key: list[str], value: str, count: str) -> pd.DataFrame:
    """Outer-join one table per rank on ``key``; add mean/std of ``value`` and mean of ``count``."""
    merged: pd.DataFrame | None = None
    for r in results:
        df = getattr(r, attr)[[*key, count, value]].rename(
            columns={value: f"{value} rank{r.rank}", count: f"{count} rank{r.rank}"})
        merged = df if merged is None else merged.merge(df, on=key, how="outer")
    assert merged is not None
    v_cols = [f"{value} rank{r.rank}" for r in results]
    c_cols = [f"{count} rank{r.rank}" for r in results]
    merged[v_cols + c_cols] = merged[v_cols + c_cols].fillna(0)
    mean, std = _mean_std(merged, v_cols)
    out = merged[key].copy()
    out[count] = merged[c_cols].mean(axis=1)
    out[value] = mean
    out[f"{value} std"] = std
    out = pd.concat([out, merged[v_cols]], axis=1)
    # Rows shown outside the totals (kernels TraceLens leaves out) sort last and have no percent.
    outside = out[key[0]].isin(OUTSIDE_TOTALS)
    total = out.loc[~outside, value].sum()
    out = pd.concat([out[~outside].sort_values([value, key[0]], ascending=[False, True], kind="stable"),
                     out[outside]]).reset_index(drop=True)
    outside = out[key[0]].isin(OUTSIDE_TOTALS)
    percent = (100.0 * out[value] / total if total else pd.Series(0.0, index=out.index)).where(~outside)
    out.insert(len(key) + 3, "percent", percent)
    out.insert(len(key) + 4, "cumulative percent", percent.cumsum().where(~outside))
    return out


def categories_sheet(results: list[RankResult]) -> pd.DataFrame:
    if len(results) == 1:
        return results[0].categories
    return _merge_ranks(results, "categories", ["category"], "time ms", "count")


def kernels_sheet(results: list[RankResult], top: int | None) -> pd.DataFrame:
    if len(results) == 1:
        df = results[0].kernels
    else:
        df = _merge_ranks(results, "kernels", ["name", "category"], "total ms", "count")
        df.insert(5, "mean us", 1e3 * df["total ms"] / df["count"].where(df["count"] > 0))
    return df if top is None else df.head(top)


def ops_categories_sheet(results: list[RankResult]) -> pd.DataFrame:
    if len(results) == 1:
        return results[0].ops_categories
    return _merge_ranks(results, "ops_categories", ["category"], "kernel time ms", "kernels")


def ops_sheet(results: list[RankResult]) -> pd.DataFrame:
    if len(results) == 1:
        return results[0].ops
    return _merge_ranks(results, "ops", ["op", "category"], "kernel time ms", "kernels")


def _stack(results: list[RankResult], attr: str) -> pd.DataFrame:
    frames = [getattr(r, attr).assign(rank=r.rank) for r in results if not getattr(r, attr).empty]
    if not frames:
        return pd.DataFrame(columns=["rank", *getattr(results[0], attr).columns])
    df = pd.concat(frames, ignore_index=True)
    return df[["rank", *[c for c in df.columns if c != "rank"]]]


def _top_per_rank(df: pd.DataFrame, top: int | None) -> pd.DataFrame:
    return df if top is None else df.groupby("rank", sort=False).head(top).reset_index(drop=True)


def launch_sheet(results: list[RankResult]) -> pd.DataFrame:
    rows = []
    for r in results:
        la = r.launch
        rows.append({
            "rank": r.rank, "verdict": la.verdict.label,
            "launch delay mean us": la.launch_delay.mean_us, "launch delay median us": la.launch_delay.median_us,
            "launch delay p90 us": la.launch_delay.p90_us, "launch delay max us": la.launch_delay.max_us,
            "launches": la.launch_delay.count, "gaps": la.gaps.count, "gap total ms": la.gaps.total_ms,
            "gap median us": la.gaps.median_us, "host wait ms": la.host_wait_ms,
            "sync calls": la.sync.count, "sync ms": la.sync.total_ms,
            "kernels < 10 us": la.short_kernels, "kernels": la.kernels, "reason": la.verdict.reason,
        })
    return pd.DataFrame(rows)


def histogram_sheet(results: list[RankResult]) -> pd.DataFrame:
    out = results[0].short_histogram[["bin_start us", "bin_end us"]].copy()
    cols = []
    for r in results:
        col = "count" if len(results) == 1 else f"count rank{r.rank}"
        out[col] = r.short_histogram["count"].to_numpy()
        cols.append(col)
    if len(results) > 1:
        out.insert(2, "count", out[cols].mean(axis=1))
    return out


def traces_sheet(results: list[RankResult], base: Path | None = None) -> pd.DataFrame:
    rows = []
    for r in results:
        t = r.trace
        shown = t.path.relative_to(base) if base is not None and t.path.is_relative_to(base) else t.path
        rows.append({"rank": r.rank, "world size": t.world_size, "file": str(shown), "format": t.source,
                     "platform": t.platform, "device": ", ".join(sorted(set(t.device_names))),
                     "device events": t.n_events, "kernel names": len(r.kernels), "window": r.window.rule,
                     "kernels without op": r.unlinked})
    return pd.DataFrame(rows)


def legend_sheet(categories: str, sheets: list[str]) -> pd.DataFrame:
    """One line per table saying which definitions it follows (the Markdown prints it under the table)."""
    legends = LEGENDS[categories]
    return pd.DataFrame([{"sheet": name, "legend": legends[name]} for name in sheets if name in legends],
                        columns=["sheet", "legend"])


def build_report(results: list[RankResult], title: str, top: int | None = 50, base: Path | None = None,
                 categories: str = "prbench") -> PerfReport:
    if not results:
        raise UserError(f"{title}: no traces to report")
    report = PerfReport(title=title, ranks=[r.rank for r in results], categories=categories)
    report.sheets = {
        "gpu_timeline": timeline_sheet(results),
        "ops_by_category": ops_categories_sheet(results),
        "ops_summary": ops_sheet(results),
        "kernel_summary": _top_per_rank(_stack(results, "kernel_parents"), top),
        "unified_perf_summary": _stack(results, "unified"),
        "ops_unique_args": _stack(results, "unique_args"),
        "roofline": _stack(results, "roofline"),
        "kernel_categories": categories_sheet(results),
        "top_kernels": kernels_sheet(results, top),
        "steps": _stack(results, "steps"),
        "launch_overhead": launch_sheet(results),
        "sync_calls": _stack(results, "sync"),
        "short_kernel_histogram": histogram_sheet(results),
        "short_kernels_summary": _stack(results, "short_kernels"),
        **collective_sheets([(r.rank, r.trace) for r in results]),
        "traces": traces_sheet(results, base),
    }
    report.sheets["legend"] = legend_sheet(categories, list(report.sheets))
    report.verdicts = [(r.rank, r.launch.verdict.label, r.launch.verdict.reason) for r in results]
    report.notes = [(r.rank, r.notes) for r in results]
    return report


def render_markdown(report: PerfReport, top_md: int = 25) -> str:
    sheets = dict(report.sheets)
    per_rank = re.compile(r" rank\d+$")
    # Markdown stays readable: per-rank columns live in the xlsx/csv outputs, the summary shows mean and std.
    compact = {name: df[[c for c in df.columns if not per_rank.search(str(c))]] for name, df in sheets.items()}
    return render_template("perf_report.md.j2", report=report, sheets=compact, top_md=top_md,
                           multi_rank=len(report.ranks) > 1, legends=LEGENDS[report.categories])


def write_report(report: PerfReport, output_base: Path, formats: list[str]) -> list[Path]:
    written = []
    for fmt in formats:
        if fmt == "xlsx":
            written.append(write_xlsx(output_base.with_name(output_base.name + ".xlsx"), report.sheets))
        elif fmt == "md":
            from foundation import atomic_io

            path = output_base.with_name(output_base.name + ".md")
            atomic_io.write_text(path, render_markdown(report))
            written.append(path)
        elif fmt == "csv":
            written.append(write_csv_dir(output_base.with_name(output_base.name + "_csvs"), report.sheets))
    return written


def replay_set_for(results: list[RankResult], base: Path | None = None) -> ReplaySet:
    """The node replay set of one configuration (every rank's GEMM/CONV shapes, 99 % of each family's time)."""
    shown = [str(r.trace.path.relative_to(base)) if base is not None and r.trace.path.is_relative_to(base)
             else str(r.trace.path) for r in results]
    devices = sorted({d for r in results for d in r.trace.device_names})
    platforms = sorted({r.trace.platform for r in results})
    return build_replay_set([(r.replay_shapes, r.family_ms) for r in results], shown, devices,
                            ", ".join(platforms))


def generate_perf_reports(base: Path, rank_pattern: str = "rank_", ext: str | None = None,
                          filters: list[str] | None = None, output: Path | None = None,
                          formats: list[str] | None = None, all_kernels: bool = False, top: int = 50,
                          dry_run: bool = False, window_rule: str = "steps",
                          replay: bool = False, categories: str = "prbench",
                          lenient: bool = False) -> list[tuple[TraceGroup, list[Path]]]:
    """Find the trace groups and write one report per group; with ``dry_run`` only plan (nothing is read).

    ``window_rule``: ``steps`` (GPU-side ProfilerStep windows when the trace has them, else the span) or
    ``span`` (always the span of all GPU events). ``replay``: also write each group's node replay set and its
    vendor command lines (``<report>_replay_set.json``, ``<report>_replay_commands.sh``). ``categories``: the
    ops tables' scheme (:data:`analysis.traces.analyses.ops.CATEGORY_SCHEMES`). ``lenient``: leave out (and count)
    events with a missing or malformed ts/dur instead of failing."""
    if window_rule not in WINDOW_RULES:
        raise UserError(f"--window {window_rule}: expected one of {', '.join(WINDOW_RULES)}")
    if categories not in CATEGORY_SCHEMES:
        raise UserError(f"--categories {categories}: expected one of {', '.join(CATEGORY_SCHEMES)}")
    formats = formats or ["xlsx"]
    groups = find_trace_groups(base, rank_pattern, ext, filters, output)
    if dry_run:
        return [(group, group.outputs(formats) + (_replay_outputs(group) if replay else [])) for group in groups]
    # Every trace is read (and every report built) before the first file is written: a bad trace in the last
    # configuration must not leave the reports of the first ones behind as if the run had worked.
    reports = []
    for group in groups:
        results = load_group(group, window_rule, lenient, categories)
        title = str(group.directory.relative_to(base)) if group.directory != base else group.directory.name
        report = build_report(results, title or group.directory.name, None if all_kernels else top, base,
                              categories)
        reports.append((group, report, replay_set_for(results, base) if replay else None))
    done = []
    for group, report, replay_set in reports:
        written = write_report(report, group.output_base, formats)
        if replay_set is not None:
            written += write_replay_set(replay_set, group.output_base)
        done.append((group, written))
    return done


def _replay_outputs(group: TraceGroup) -> list[Path]:
    paths = replay_paths(group.output_base)
    return [paths["set"], paths["commands"]]
