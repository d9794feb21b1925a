"""``invoke perf-report`` and ``invoke trace-diff``.
"""

from __future__ import annotations

from prbench.commands.cli import holds_runs_under, resolve_path, task, user_facing


@task(
    long_only=["format", "categories", "lenient"],  # -r is node replay in the seed's generate_perf_report.py
    help={
        "base_dir": "Directory searched recursively for traces (*.json, *.json.gz); one report per directory",
        "pattern": "Rank pattern in file names, followed by the rank number (default: rank_); "
                   "distributedInfo.rank in the trace wins when present",
        "ext": "Only traces with this extension: json or gz (default: both)",
        "filter": "Substring every trace path must contain (repeat -f for several)",
        "dry_run": "List the traces and the report files that would be written, read nothing",
        "all_kernels": "Keep every kernel in the top_kernels and kernel_summary tables (default: the top --top)",
        "output": "Report path without extension (only with a single configuration directory)",
        "format": "Comma list of xlsx, md, csv (default: xlsx); csv writes <name>_perf_report_csvs/",
        "top": "Rows in the top_kernels and kernel_summary tables (default: 50)",
        "window": "Timeline window: steps (the GPU-side ProfilerStep windows when the trace has them, else the "
                  "span of all GPU events; default) or span (always the span)",
        "replay": "Node replay (as the seed's -r): write the GEMM/CONV shapes making 99 % of their time "
                  "(<name>_perf_report_replay_set.json) and hipblaslt-bench/MIOpenDriver/cutlass_profiler "
                  "command lines, then time each shape with torch on this machine's GPU (and the tools found "
                  "on PATH) against its in-trace time (<name>_perf_report_replay.md/.csv); needs a GPU",
        "categories": "Op categories of the ops tables: prbench (default) or tracelens (TraceLens's categories and "
                      "linked-kernel rule, so its numbers match a TraceLens report)",
        "lenient": "Leave out events with a missing or malformed ts/dur (counted in the report) instead of failing",
    },
    iterable=["filter"],
)
@user_facing
@holds_runs_under("output", "base_dir", unless="dry_run")
def perf_report(ctx, base_dir, pattern="rank_", ext=None, filter=None, dry_run=False, all_kernels=False,
                output=None, format="xlsx", top=None, window="steps", replay=False, categories="prbench",
                lenient=False):
    """Performance report (GPU timeline, ops by category, kernels with their parent op, roofline, top kernels,
    launch/sync) over a directory of traces; -r also replays its top GEMM/CONV shapes."""
    from analysis.traces.reports.format_flag import parse_formats
    from foundation.flag_values import whole_number

    top_rows = whole_number("--top", 50 if top is None else top, minimum=1)
    formats = parse_formats(format)
    from analysis.traces.reports.perf_report import (
        generate_perf_reports,  # pandas and numpy: only once the flags are good
    )

    done = generate_perf_reports(resolve_path(base_dir), rank_pattern=pattern, ext=ext, filters=filter or [],
                                 output=resolve_path(output) if output else None, formats=formats,
                                 all_kernels=all_kernels, top=top_rows, dry_run=dry_run, window_rule=window,
                                 replay=bool(replay), categories=categories, lenient=bool(lenient))
    for group, outputs in done:
        if dry_run:
            print(f"{group.directory}: {len(group.files)} trace(s)")
            for f in group.files:
                hint = f"rank {f.rank_hint}" if f.rank_hint is not None else "rank from the trace"
                print(f"  read {f.path.name} ({hint})")
            for out in outputs:
                print(f"  would write {out}")
        else:
            for out in outputs:
                print(f"wrote {out}")
    if replay and not dry_run:
        from prbench.commands.node_replay import run_node_replay

        for group, _ in done:
            written = run_node_replay(group.output_base)
            if not written:
                print(f"{group.directory}: no GEMM or CONV op with recorded shapes; nothing to replay")
            for out in written:
                print(f"wrote {out}")


@task(
    help={
        "base": "Base trace (any format read_trace accepts)",
        "pr": "PR trace to compare against the base",
        "top": "Kernels listed in the Markdown (default: 25)",
        "output": "Write here instead of printing: path without extension (.md/.xlsx/_csvs added)",
        "format": "With --output: comma list of md, xlsx, csv (default: md)",
        "lenient": "Leave out events with a missing or malformed ts/dur (counted in the diff) instead of failing",
    }
)
@user_facing
@holds_runs_under("output")
def trace_diff(ctx, base, pr, top=None, output=None, format="md", lenient=False):
    """Per-category and per-kernel differences between two traces (PR − base)."""
    from foundation.flag_values import whole_number

    top_rows = whole_number("--top", 25 if top is None else top, minimum=1)
    # The readers bring pandas and numpy: only once the flags are good.
    from analysis.traces import read_trace
    from analysis.traces.reports.format_flag import parse_formats
    from analysis.traces.reports.trace_diff import render_trace_diff_markdown, write_trace_diff
    from analysis.traces.reports.trace_diff import trace_diff as diff_traces

    diff = diff_traces(read_trace(resolve_path(base), lenient=bool(lenient)),
                       read_trace(resolve_path(pr), lenient=bool(lenient)))
    markdown = render_trace_diff_markdown(diff, top=top_rows)
    if not output:
        print(markdown, end="")
        return
    for target in write_trace_diff(diff, markdown, resolve_path(output), parse_formats(format, default="md")):
        print(f"wrote {target}")
