"""The stages one at a time (``invoke suite``, ``organize``, ``kernels``, ``profile``) and ``invoke report``.
"""

from __future__ import annotations

from prbench.commands.cli import config_value, holds_run, holds_runs_under, resolve_path, task, user_facing
from prbench.commands.flags import (
    FAIL_ON_HELP,
    SUITE_HELP,
    exit_on_verdict,
    inductor_config_from,
    modes_outcome,
    recipe_from,
    runs_dir_from,
    stage_env_from,
    suite_settings_from,
    upstream_src_from,
)


@task(
    help={
        "suite_csv": "suite.csv of the variant: models with status ok are profiled with its size/mode/dtype",
        "out": "Output directory: <model>.json.gz traces and graphs/<name>.profile.txt",
        "models": "Comma list of models to profile (default: every ok model in --suite-csv)",
        "graphs": "Directory of compiled graph modules (organized/graphs) to run with -p (default: none)",
        "inductor_cache": "TORCHINDUCTOR_CACHE_DIR for the graph runs (the variant's extracted cache)",
        "steps": "Profiled steps per model, 1 to 1,000,000 (default: 3)",
        "warmup": "Warm-up calls before the profiler starts, 0 to 1,000,000 (default: 3)",
        "device": "cpu or cuda (default: cuda when available, else cpu)",
        "timeout": "Seconds before the stage is stopped, above 0 and at most 86400 (a day; default: 3600)",
    }
)
@user_facing
@holds_runs_under("out")
def profile(ctx, suite_csv, out, models=None, graphs=None, inductor_cache=None, steps=None, warmup=None,
            device=None, timeout=None):
    """Profile the suite models with torch.profiler and run compiled graphs with -p (local runner)."""
    from foundation.errors import UserError
    from foundation.flag_values import call_count, timeout_seconds
    from prbench.stages.command_lines import ProfileSettings, profile_command, run_stage

    step_count = call_count("--steps", 3 if steps is None else steps, minimum=1)
    warmup_calls = call_count("--warmup", 3 if warmup is None else warmup, minimum=0)
    timeout_s = timeout_seconds("--timeout", 3600 if timeout is None else timeout)
    if device not in (None, "cpu", "cuda"):
        raise UserError(f"--device {device!r}: expected cpu or cuda")
    out_dir = resolve_path(out)
    settings = ProfileSettings(steps=step_count, warmup=warmup_calls, device=device, models=models or "",
                               timeout_s=timeout_s)
    run_stage(profile_command(resolve_path(suite_csv), out_dir, settings,
                              graphs=resolve_path(graphs) if graphs else None,
                              inductor_cache=resolve_path(inductor_cache) if inductor_cache else None,
                              log_path=out_dir / "profile.log"))
    print(f"profiles in {out_dir}")


@task(
    help={
        "run": "Run id under the runs directory (its base/ and pr/ are compared)",
        "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)",
        "fail_on": FAIL_ON_HELP,
        "kernel": "A kernel (base or PR name, repeatable) whose code diff and launch configuration the report adds "
                  "in a collapsed block and this command prints in full",
    },
    iterable=["kernel"],
)
@user_facing
@holds_run(runs_dir_from)
def report(ctx, run, runs_dir=None, fail_on="never", kernel=None):
    """Re-render <run>/report/ (report.md, CSVs, report.xlsx, plots) from the run's files; nothing is re-run."""
    from analysis.stats.verdict_settings import check_fail_on
    from prbench.runs.run_store import RunStore
    from prbench.stages.modes_report import is_modes_run, render_modes_report
    from prbench.stages.report import render_run_report

    fail_on = check_fail_on(fail_on)
    with RunStore(runs_dir_from(ctx, runs_dir)).open(run, write=True) as target:
        if is_modes_run(target):  # each mode's report rendered anew, then the matrix over them
            modes_paths = render_modes_report(target, rerender_modes=True, kernels_asked=tuple(kernel or ()))
            print(modes_paths.verdict)
            modes_outcome(modes_paths, target.layout.modes, fail_on, print)
            return
        paths = render_run_report(target, kernels_asked=tuple(kernel or ()))
    for text in paths.kernel_details:
        print(text)
    print(paths.verdict)
    print(f"report: {paths.report_md} ({paths.characters} characters; CSVs, report.xlsx and plots beside it)")
    print(f"comment form: {paths.comment_md} ({paths.comment_characters} characters; what `invoke publish` posts)")
    print(f"summary: {paths.summary_json}")
    exit_on_verdict(paths.summary, fail_on)


@task(
    help={
        **SUITE_HELP,
        "overlay": "Python-only PyTorch diff to run on top of the installed torch (a shadow package)",
        "force": "Redo the suite even when it finished with the same inputs",
        "cpu_backend": "Inductor CPU codegen: cpp (default) or triton (Triton interpreter; correctness only)",
    },
    iterable=["env", "inductor_config"],
)
@user_facing
@holds_run(runs_dir_from)
def suite(ctx, models=None, size=None, mode=None, dtype=None, warmup=None, iterations=None, recipe=None, run=None,
          runs_dir=None, overlay=None, env=None, inductor_config=None, force=False, cpu_backend="cpp",
          suite_source="builtin", use_runner=False, upstream_src=None):
    """Time the HF suite (builtin: eager vs torch.compile; or upstream's harness) into <run>/base/suite/suite.csv."""
    from rich.console import Console

    from prbench.stages.suite import print_suite_summary, run_suite_stage

    inductor_values = inductor_config_from(inductor_config)
    loaded = recipe_from(ctx, recipe)
    settings = suite_settings_from(ctx, loaded, models, size, mode, dtype, warmup, iterations, cpu_backend,
                               source=suite_source, use_runner=use_runner)
    console = Console()
    outcome = run_suite_stage(
        settings=settings, recipe=loaded, runs_dir=runs_dir_from(ctx, runs_dir), run_id=run,
        overlay_path=resolve_path(overlay) if overlay else None,
        env=stage_env_from(loaded, env),
        inductor_config=inductor_values,
        force=force, console=console, upstream_src=upstream_src_from(upstream_src),
    )
    print_suite_summary(outcome, console)


@task(
    help={
        "cache": "Inductor cache directory, or a .tar/.tar.gz of one (e.g. <variant>/inductor-cache.tar.gz)",
        "out": "Output directory: <category>/<kernel>.py, graphs/, index.csv",
        "rep": "rep= written into each Triton kernel's benchmark line, 1 to 1,000,000 (default: 100)",
        "warmup": "warmup= written into each Triton kernel's benchmark line, 0 to 1,000,000 (default: 10)",
        "extract_to": "Keep an extracted archive in this directory (pass it to `invoke kernels --cache-dir`)",
    }
)
@user_facing
@holds_runs_under("out", "extract_to")
def organize(ctx, cache, out, rep="100", warmup="10", extract_to=None):
    """Extract every kernel of an Inductor cache into <out>/<category>/ and write <out>/index.csv."""
    from foundation.flag_values import call_count
    from prbench.stages.command_lines import organize_command, run_stage
    from prbench.stages.kernels import check_cache_input

    reps, warmup_calls = call_count("--rep", rep, minimum=1), call_count("--warmup", warmup, minimum=0)
    cache_path, out_path = resolve_path(cache), resolve_path(out)
    check_cache_input(cache_path)
    run_stage(organize_command(cache_path, out_path, rep=reps, warmup=warmup_calls,
                               extract_to=resolve_path(extract_to) if extract_to else None,
                               log_path=out_path / "organize.log"), stream=False)
    print(f"organize: {out_path / 'index.csv'}")


@task(
    help={
        "dir": "Organized kernels directory (the output of `invoke organize`, with index.csv)",
        "out": "Where kernels.csv, kernel_samples.json and kernels_seed.csv go (default: the parent of --dir)",
        "devices": "'cpu' or GPU indices '0,1,...', one worker each (default: *_VISIBLE_DEVICES, else cpu)",
        "warmup": "Untimed calls per kernel, 0 to 1,000,000 (default from invoke.yaml suite.warmup)",
        "iterations": "Timed calls per kernel, 1 to 1,000,000 (default from invoke.yaml suite.iterations)",
        "timeout": "Seconds per kernel before its worker is killed and restarted, above 0 and at most 86400 (a "
                   "day; default: 300)",
        "cache_dir": "TORCHINDUCTOR_CACHE_DIR of the compile, so C++ graphs are not recompiled",
        "filter": "Only kernels whose organized path matches this regular expression",
        "executor": "local (default: one stage, one worker per --devices entry) or ray (shards of kernel jobs, one "
                    "actor per GPU of a Ray cluster; --dir and --out on a file system every node shares)",
        "ray_address": "With --executor ray: auto (default), ray://HOST:PORT or HOST:PORT",
        "shard_size": "Kernel jobs (a Triton kernel, or a graph's C++ kernels) per shard through the executor; a "
                      "finished shard is never redone (default 0: one stage with --executor local, 64 with ray)",
    }
)
@user_facing
@holds_runs_under("out", "dir")
def kernels(ctx, dir, out=None, devices=None, warmup=None, iterations=None, timeout="300", cache_dir=None,
            filter=None, executor="local", ray_address=None, shard_size=None):
    """Time every organized kernel in crash-isolated workers (kernels.csv, kernel_samples.json, kernels_seed.csv)."""
    from foundation.errors import UserError
    from foundation.flag_values import call_count, regular_expression, timeout_seconds, whole_number
    from prbench.stages.command_lines import kernels_command, run_stage
    from prbench.stages.kernels import check_devices, default_devices, kernel_stage_env

    warmup_calls = call_count("--warmup", warmup if warmup is not None else config_value(ctx, "suite.warmup", 10),
                              minimum=0)
    timed_calls = call_count("--iterations",
                             iterations if iterations is not None else config_value(ctx, "suite.iterations", 30),
                             minimum=1)
    timeout_s = timeout_seconds("--timeout", timeout)
    if filter is not None:
        regular_expression("--filter", filter)
    from prbench.executors import check_executor

    executor = check_executor(executor, ray_address)
    jobs_per_shard = whole_number("--shard-size", shard_size if shard_size is not None
                                  else (KERNEL_SHARD_SIZE if executor == "ray" else 0), minimum=0)
    if executor == "ray" and devices is not None:
        raise UserError("--devices: only with --executor local (--executor ray places shards itself)")
    device_spec = check_devices(default_devices(devices))
    organized = resolve_path(dir)
    from foundation.formats.run_layout import INDEX_CSV

    if not (organized / INDEX_CSV).is_file():
        raise UserError(f"--dir {organized}: no index.csv (run `invoke organize` first)")
    out_path = resolve_path(out) if out else organized.parent
    cache_path = resolve_path(cache_dir) if cache_dir else None
    if executor == "ray" or jobs_per_shard:
        _kernels_over_executor(organized, out_path, device_spec, warmup_calls, timed_calls, timeout_s, cache_path,
                               filter, executor, ray_address, jobs_per_shard)
        return
    command = kernels_command(
        organized, out_path, devices=device_spec, warmup=warmup_calls, iterations=timed_calls,
        timeout_s=timeout_s, cache_dir=cache_path, filter_regex=filter,
        env=kernel_stage_env(cache_path), log_path=out_path / "kernels.log",
    )
    run_stage(command)
    print(f"kernels: {out_path / 'kernels.csv'}")


KERNEL_SHARD_SIZE = 64  # jobs per shard of `invoke kernels --executor ray` unless --shard-size says


def _kernels_over_executor(organized, out_path, device_spec, warmup_calls, timed_calls, timeout_s, cache_path,
                           filter_regex, executor_name, ray_address, shard_size):
    """`invoke kernels` in shards of kernel jobs through the executor (``prbench.compare.kernel_shards``)."""
    from foundation.formats.stage_records import parse_devices
    from prbench.compare.kernel_shards import KernelRequest, executor_platform, time_kernels
    from prbench.executors import open_executor
    from prbench.stages.kernels import kernel_stage_env

    request = KernelRequest(organized=organized, out=out_path, warmup=warmup_calls, iterations=timed_calls,
                            timeout_s=timeout_s, cache_dir=cache_path, filter_regex=filter_regex,
                            env=kernel_stage_env(cache_path))
    executor = open_executor(executor_name, devices=parse_devices(device_spec), platform=executor_platform(organized),
                             ray_address=ray_address)
    try:
        rows = time_kernels(request, shard_size, executor)
    finally:
        executor.close()
    print(f"kernels: {rows} kernels -> {out_path / 'kernels.csv'}")
