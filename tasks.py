"""prbench command line: thin invoke tasks over the prbench, stages and analysis packages.

Run ``invoke --list`` for the tasks and ``invoke --help TASK`` for every flag.
"""

from __future__ import annotations

from invoke import task

from prbench.cli import config_value, resolve_path, user_facing


def _runs_dir(ctx, runs_dir: str | None):
    return resolve_path(runs_dir or config_value(ctx, "runs_dir", "runs"))


# --- run store -------------------------------------------------------------------------------------------


@task(help={"run": "Run id under the runs directory (default: the most recent run)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
def status(ctx, run=None, runs_dir=None):
    """Show each stage of a run: status, duration, outputs and errors."""
    from prbench.runstore import RunStore
    from prbench.status_view import print_status

    store = RunStore(_runs_dir(ctx, runs_dir))
    print_status(store.open(run) if run else store.latest())


# --- profiling and traces ---------------------------------------------------------------------------------


@task(
    help={
        "base_dir": "Directory searched recursively for traces (*.json, *.json.gz); one report per directory",
        "pattern": "Rank pattern in file names, followed by the rank number (default: rank_); "
                   "distributedInfo.rank in the trace wins when present",
        "ext": "Only traces with this extension: json or gz (default: both)",
        "filter": "Substring every trace path must contain (repeat -f for several)",
        "dry_run": "List the traces and the report files that would be written, read nothing",
        "all_kernels": "Keep every kernel in the top_kernels table (default: the top --top)",
        "output": "Report path without extension (only with a single configuration directory)",
        "format": "Comma list of xlsx, md, csv (default: xlsx); csv writes <name>_perf_report_csvs/",
        "top": "Rows in the top_kernels table (default: 50)",
    },
    iterable=["filter"],
)
@user_facing
def perf_report(ctx, base_dir, pattern="rank_", ext=None, filter=None, dry_run=False, all_kernels=False,
                output=None, format="xlsx", top=50):
    """Performance report (GPU timeline, categories, top kernels, launch/sync) over a directory of traces."""
    from analysis.traces.perf_report import generate_perf_reports
    from analysis.traces.render import parse_formats

    formats = parse_formats(format)
    done = generate_perf_reports(resolve_path(base_dir), rank_pattern=pattern, ext=ext, filters=filter or [],
                                 output=resolve_path(output) if output else None, formats=formats,
                                 all_kernels=all_kernels, top=int(top), dry_run=dry_run)
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


@task(
    help={
        "base": "Base trace (any format read_trace accepts)",
        "pr": "PR trace to compare against the base",
        "top": "Kernels listed in the Markdown (default: 25)",
        "output": "Write here instead of printing: path without extension (.md/.xlsx/_csvs added)",
        "format": "With --output: comma list of md, xlsx, csv (default: md)",
    }
)
@user_facing
def trace_diff(ctx, base, pr, top=25, output=None, format="md"):
    """Per-category and per-kernel differences between two traces (PR − base)."""
    from pathlib import Path

    from analysis import atomic_io
    from analysis.traces import read_trace
    from analysis.traces.render import parse_formats, write_csv_dir, write_xlsx
    from analysis.traces.trace_diff import render_trace_diff_markdown, trace_diff_sheets
    from analysis.traces.trace_diff import trace_diff as diff_traces

    diff = diff_traces(read_trace(resolve_path(base)), read_trace(resolve_path(pr)))
    markdown = render_trace_diff_markdown(diff, top=int(top))
    if not output:
        print(markdown, end="")
        return
    out = Path(resolve_path(output))
    for fmt in parse_formats(format, default="md"):
        if fmt == "md":
            target = out.with_name(out.name + ".md")
            atomic_io.write_text(target, markdown)
        elif fmt == "xlsx":
            target = write_xlsx(out.with_name(out.name + ".xlsx"), trace_diff_sheets(diff))
        else:
            target = write_csv_dir(out.with_name(out.name + "_csvs"), trace_diff_sheets(diff))
        print(f"wrote {target}")


@task(
    help={
        "suite_csv": "suite.csv of the variant: models with status ok are profiled with its size/mode/dtype",
        "out": "Output directory: <model>.json.gz traces and graphs/<name>.profile.txt",
        "models": "Comma list of models to profile (default: every ok model in --suite-csv)",
        "graphs": "Directory of compiled graph modules (organized/graphs) to run with -p (default: none)",
        "inductor_cache": "TORCHINDUCTOR_CACHE_DIR for the graph runs (the variant's extracted cache)",
        "steps": "Profiled steps per model (default: 3)",
        "warmup": "Warm-up calls before the profiler starts (default: 3)",
        "device": "cpu or cuda (default: cuda when available, else cpu)",
        "timeout": "Seconds before the stage is stopped (default: 3600)",
    }
)
@user_facing
def profile(ctx, suite_csv, out, models=None, graphs=None, inductor_cache=None, steps=3, warmup=3, device=None,
            timeout=3600):
    """Profile the suite models with torch.profiler and run compiled graphs with -p (local runner)."""
    from prbench.runners import StageCommand
    from prbench.runners.local import LocalRunner

    out_dir = resolve_path(out)
    args = ["--suite-csv", str(resolve_path(suite_csv)), "--out", str(out_dir), "--steps", str(int(steps)),
            "--warmup", str(int(warmup))]
    if models:
        args += ["--models", models]
    if graphs:
        args += ["--graphs", str(resolve_path(graphs))]
    if inductor_cache:
        args += ["--inductor-cache", str(resolve_path(inductor_cache))]
    if device:
        args += ["--device", device]
    LocalRunner().run(StageCommand(module="stages.profile", args=args, log_path=out_dir / "profile.log",
                                   timeout_s=float(timeout)))
    print(f"profiles in {out_dir}")
