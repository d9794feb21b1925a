"""``invoke compare``, ``invoke doctor`` and ``invoke modes``: the tasks (the compare itself is
``prbench.compare.driver``).
"""

from __future__ import annotations

from analysis.stats.numeric_tolerance import FLAG_HELP as NUMERIC_TOLERANCE_HELP
from analysis.stats.verdict_settings import FLAG_HELP as STATS_FLAG_HELP
from foundation.hip_modules import ROCM_MODELS_PER_PROCESS, ROCM_MODULES_PER_WORKER
from prbench.commands.cli import holds_run, resolve_path, task, user_facing
from prbench.commands.flags import (
    BUILD_HELP,
    COMPARE_TRITON_SRC_HELP,
    FAIL_ON_HELP,
    SAVE_BASE_HELP,
    SUITE_HELP,
    TRITON_BASE_HELP,
    TRITON_PR_HELP,
    TRITON_REF_HELP,
    exit_on_verdict,
    inductor_config_from,
    modes_outcome,
    optional_path,
    python_from,
    recipe_from,
    runs_dir_from,
    stage_env_from,
    suite_settings_from,
    upstream_src_from,
    verdict_settings_from,
)


@task(help={
    "recipe": "Recipe name under recipes/ or a path to a .toml file (default from invoke.yaml)",
    "pytorch_src": BUILD_HELP["pytorch_src"],
    "triton_src": BUILD_HELP["triton_src"],
    "triton_ref": TRITON_REF_HELP,
    "base": "Base side as compare takes it: a git ref in --pytorch-src or 'installed' (default: the recipe's commit)",
    "pr": "PR side as compare takes it: a git ref in --pytorch-src, a patch file or 'installed'",
    "triton_pr": TRITON_PR_HELP,
    "triton_base": TRITON_BASE_HELP,
    "store": BUILD_HELP["store"],
    "devices": "GPU indices the comparison will use, e.g. 0,1: each must exist and no other process may hold it",
    "pull": "The build may pull a missing base image by digest (as build --pull): a warning, not a failure",
    "runs_dir": "Directory that holds runs (its free disk is checked; default: runs)",
    "python": "Local recipes: the interpreter whose torch compare would use; venv recipes: the one the venvs are "
              "made of (default: this one)",
})
@user_facing
def doctor(ctx, recipe=None, pytorch_src=None, triton_src=None, base=None, pr=None, store=None, devices=None,
           pull=False, runs_dir=None, python=None, triton_ref=None, triton_pr=None, triton_base=None):
    """Check in seconds, before hours of build, that a recipe can build and run here: one line per check; exit 1
    when any fails."""
    from invoke import Exit

    from foundation.formats.stage_records import parse_devices
    from prbench.compare.doctor import DoctorInputs, run_doctor, summary
    from prbench.sides.pins import check_triton_flags

    loaded = recipe_from(ctx, recipe)
    check_triton_flags(loaded, optional_path(triton_src), triton_ref, triton_pr, triton_base)
    inputs = DoctorInputs(recipe=loaded, runs_dir=runs_dir_from(ctx, runs_dir),
                          pytorch_src=optional_path(pytorch_src), triton_src=optional_path(triton_src),
                          triton_ref=triton_ref, triton_pr=triton_pr, triton_base=triton_base, base=base, pr=pr,
                          store=optional_path(store), pull=bool(pull),
                          python=python_from(python),
                          devices=tuple(parse_devices(devices)) if devices else (),
                          suite=suite_settings_from(ctx, loaded, None, None, None, None, None, None),
                          env=stage_env_from(loaded, None))
    results = run_doctor(inputs, emit=lambda result: print(result.line(), flush=True))
    line = summary(inputs.recipe, results)
    if any(result.status == "fail" for result in results):
        raise Exit(line, code=1)
    print(line)


_TOLERANCE_HELP = NUMERIC_TOLERANCE_HELP


@task(
    help={
        "base": "Base side: 'installed' (the installed torch as is; a wheel recipe's pinned wheel), a git ref in "
                "--pytorch-src, or with a wheel recipe a wheel pin like torch==2.13.0+cpu",
        "pr": "PR side: a git ref in --pytorch-src, a Python-only patch file, 'installed', or with a wheel recipe a "
              "wheel pin like torch==2.14.0.dev20261101+cpu (pip downloads it into the store)",
        "pytorch_src": "PyTorch git clone where --base/--pr refs are resolved (GitPython)",
        "triton_src": COMPARE_TRITON_SRC_HELP,
        "triton_ref": TRITON_REF_HELP + "; both sides; docker recipes built from source only",
        "triton_pr": TRITON_PR_HELP + "; docker recipes built from source (the images share PyTorch's layers), "
                     "or a local recipe: a Python-only patch as an overlay on the installed Triton",
        "triton_base": TRITON_BASE_HELP,
        **SUITE_HELP,
        "kernel_warmup": "Warm-up calls per kernel before timing, 0 to 1,000,000 (default 10)",
        "kernel_iterations": "Timed calls per kernel, 1 to 1,000,000 (default 30)",
        "kernel_timeout": "Seconds one kernel may take before it is recorded as failed, above 0 and at most 86400 "
                          "(a day; default 300)",
        "rounds": "Paired timing rounds for kernels and models: fresh base and PR workers side by side, "
                  "alternating item by item; the round is the unit of the statistics: auto (default): from 3 "
                  "rounds on, stop each kind once its verdicts are settled (no false claims or lost coverage "
                  "from stopping; see the report's method) and its --resolution reached, at most --max-rounds; "
                  "or a fixed number (at least 3)",
        "max_rounds": "Adaptive rounds: at most this many rounds of each kind (default on the CPU: kernels 24, "
                      "models 10; on a GPU 5)",
        "budget": "Adaptive rounds: start no round after this long since the compare began, e.g. 20m, 90s, "
                  "1.5h (the first 3 rounds always run)",
        "resolution": "Adaptive rounds: a kind stops only once its verdicts are settled and its resolution "
                      "(the report's smallest change told apart from none, 80 % power, whatever --threshold) is at "
                      "most this, e.g. 2% or 1.5% for both kinds, or none to stop once settled; within "
                      "--max-rounds and --budget, and the report says whether it was reached (default on the CPU: "
                      "kernels 2%, models 3%; on a GPU none)",
        "passes": "A-B-B-A blocks per kernel job and model in each round, spread over the round; more passes "
                  "average out visit-to-visit noise (default 16 on the CPU, 2 on a GPU)",
        "models_per_process": "Models kept compiled in one worker per side and round (0 = all; lower it when "
                              f"a GPU cannot hold every model twice; default {ROCM_MODELS_PER_PROCESS} on ROCm, "
                              "whose processes run out of HIP modules, else 0)",
        "modules_per_worker": "Kernel modules one kernel worker loads in a round before a fresh worker takes "
                              "over; a job that fails with HIP error 209 is run once more in a fresh worker "
                              f"(0 = no limit; default {ROCM_MODULES_PER_WORKER} on ROCm, else 0)",
        **STATS_FLAG_HELP,
        "fail_on": FAIL_ON_HELP,
        "tolerance": _TOLERANCE_HELP,  # numerical A/B (issue 42)
        "force": "Stage to redo even if done: suite, organize, kernels, profile or report (repeatable)",
        "python": "Python interpreter whose torch the local runner uses, or (venv recipes) that the venvs are made "
                  "of (default: this one)",
        "profile": "Also profile each side's models (torch.profiler, compiled graphs with -p); diffed in the report",
        "store": BUILD_HELP["store"] + "; docker and venv recipes only",
        "save_base": SAVE_BASE_HELP + "; docker recipes only",
        "executor": "Where the suite's and the timing rounds' shards run: local (this machine's --devices, "
                    "default) or ray (one actor per GPU of a Ray cluster; needs the extra: pip install -e "
                    "\".[ray]\"); with several devices each side's suite is compiled in shards of models",
        "ray_address": "With --executor ray: auto (the cluster this machine joined; default), ray://HOST:PORT "
                       "(Ray Client) or HOST:PORT (the head); nodes must see the run directory (one shared file "
                       "system: suite shards and round records are written there) and the code at the same paths",
        "devices": "With --executor local: the devices shards run on at once, one each: cpu (default on a CPU "
                   "recipe), cpu,cpu (two CPU devices sharing the CPUs), or GPU indices 0,1,... as this machine "
                   "numbers them (default 0); a side's stages that are not cut in shards (the suite on one device, "
                   "launch cost, profile) run on the first",
        "shard_size": "Blocks (kernel jobs or models, each with its partner) per shard of a timing round; a "
                      "shard runs base and PR on one device, and a finished shard is never redone (default 0: a "
                      "round is one shard)",
        "suite_shard_size": "Models per shard of the suite's compile stage, each shard on any device with its own "
                            "Inductor cache, merged per side afterwards (default: 1 with --executor ray or several "
                            "--devices, else 0: one suite stage per side)",
        "modes": "Modes to compare, each a run of its own inside this one (<run>/modes/<mode>/), e.g. "
                 "inference,training+amp+no-cudagraphs (presets joined by +: invoke modes); the report gives one "
                 "verdict per mode, worst first, and --fail-on applies to every mode; not with --mode or --dtype",
    },
    iterable=["env", "inductor_config", "force"],
)
@user_facing
@holds_run(runs_dir_from)
def compare(ctx, base="installed", pr=None, pytorch_src=None, models=None, size=None, mode=None, dtype=None,
            warmup=None, iterations=None, recipe=None, run=None, runs_dir=None, env=None, inductor_config=None,
            kernel_warmup="10", kernel_iterations="30", kernel_timeout="300", rounds=None, max_rounds=None,
            budget=None, passes=None,
            models_per_process=None, modules_per_worker=None, confidence=None, alpha=None, margin=None,
            threshold=None, noise=None,
            min_ms=None, fail_share=None, fail_on="never", force=None, python=None, profile=False,
            suite_source="builtin", use_runner=False,
            upstream_src=None, store=None, save_base=False, executor="local", ray_address=None, devices=None,
            shard_size="0", suite_shard_size=None, tolerance=None,
            triton_src=None, triton_ref=None, modes=None, resolution=None, triton_base=None, triton_pr=None):
    """Compare a PR against its base: suite, kernels and a PR-ready report under <run>/report/."""
    from analysis.report.sequential import check_rounds_flags
    from analysis.stats.verdict_settings import check_fail_on
    from foundation.errors import UserError
    from foundation.flag_values import call_count, timeout_seconds, whole_number

    # Every statistical and measurement setting is checked before anything heavy is imported or run.
    stats = verdict_settings_from(confidence, alpha, margin, threshold, noise, min_ms, fail_share, tolerance)
    round_flags = check_rounds_flags(rounds, max_rounds, budget, resolution)
    fail_on = check_fail_on(fail_on)
    if not pr and triton_pr:
        pr = base  # a Triton A/B: the same PyTorch on both sides
    if not pr:
        raise UserError("--pr: required (a git ref in --pytorch-src, a Python-only patch file, or 'installed'; or "
                        "--triton-pr for a Triton A/B)")
    mode_list = _modes_flag(modes, mode, dtype)
    per_process = None if models_per_process is None else whole_number("--models-per-process", models_per_process,
                                                                       minimum=0)
    per_worker = None if modules_per_worker is None else whole_number("--modules-per-worker", modules_per_worker,
                                                                      minimum=0)
    checked_passes = None if passes is None else whole_number("--passes", passes, minimum=1)
    kernel_warmup_calls = call_count("--kernel-warmup", kernel_warmup, minimum=0)
    kernel_timed_calls = call_count("--kernel-iterations", kernel_iterations, minimum=1)
    kernel_timeout_s = timeout_seconds("--kernel-timeout", kernel_timeout)
    python = python_from(python)
    inductor_values = inductor_config_from(inductor_config)
    from prbench.executors import check_executor

    executor = check_executor(executor, ray_address)
    checked_shard_size = whole_number("--shard-size", shard_size, minimum=0)
    checked_suite_shards = None if suite_shard_size is None else whole_number("--suite-shard-size", suite_shard_size,
                                                                              minimum=0)
    device_list = _compare_devices(devices, executor)

    from rich.console import Console

    from prbench.compare.driver import CompareRequest, KernelSettings, run_compare, validate_force

    loaded = recipe_from(ctx, recipe)
    request = CompareRequest(
        base=base, pr=pr, recipe=loaded, runs_dir=runs_dir_from(ctx, runs_dir), run_id=run,
        pytorch_src=resolve_path(pytorch_src) if pytorch_src else None,
        triton_src=optional_path(triton_src), triton_ref=triton_ref, triton_base=triton_base, triton_pr=triton_pr,
        upstream_src=upstream_src_from(upstream_src),
        suite=suite_settings_from(ctx, loaded, models, size, mode, dtype, warmup, iterations, source=suite_source,
                              use_runner=use_runner),
        kernels=KernelSettings(warmup=kernel_warmup_calls, iterations=kernel_timed_calls, timeout_s=kernel_timeout_s),
        rounds=round_flags.rounds, auto_rounds=round_flags.auto, max_rounds=round_flags.max_rounds,
        budget_s=round_flags.budget_s, resolution_pct=round_flags.resolution_pct,
        passes=checked_passes, models_per_process=per_process, modules_per_worker=per_worker, stats=stats,
        env=stage_env_from(loaded, env),
        inductor_config=inductor_values,
        force=validate_force(force or []),
        python=python,
        profile=bool(profile),
        store=resolve_path(store) if store else None,
        save_base=bool(save_base),
        executor=executor, ray_address=ray_address, devices=device_list, shard_size=checked_shard_size,
        suite_shard_size=checked_suite_shards,
    )
    console = Console()
    if mode_list:
        _compare_modes(request, mode_list, console, fail_on)
        return
    the_run, paths = run_compare(request, console)
    console.print(f"\n[bold]{paths.verdict}[/]")
    console.print(f"report: {paths.report_md}")
    console.print(f"        {paths.characters} characters; CSVs, report.xlsx and plots in {paths.out_dir}")
    console.print(f"summary: {paths.summary_json}")
    console.print(f"status: invoke status --run {the_run.run_id}")
    exit_on_verdict(paths.summary, fail_on)


@task(help={})
@user_facing
def modes(ctx):
    """The modes `invoke compare --modes` runs: named presets of suite, Inductor and environment settings, joined
    with + (training+amp+no-cudagraphs)."""
    from foundation.formats.modes import presets_table

    print("\n".join(presets_table()))
    print("\nCompose with + (presets that set one setting differently conflict); a setting no preset names keeps the "
          "compare's default. Example: invoke compare --pr=PATCH --modes inference,training+amp")


def _modes_flag(modes, mode, dtype):
    """--modes: the modes (foundation.formats.modes), or None; --mode and --dtype are what a mode sets."""
    from foundation.errors import UserError
    from foundation.formats.modes import parse_modes

    if modes is None:
        return None
    given = [flag for flag, value in (("--mode", mode), ("--dtype", dtype)) if value is not None]
    if given:
        raise UserError(f"--modes: not with {' or '.join(given)} (each mode sets them; see invoke modes)")
    return parse_modes(modes)


def _compare_modes(request, mode_list, console, fail_on: str) -> None:
    """Every mode of --modes in turn, then the matrix; --fail-on over all of them."""
    from prbench.compare.modes_run import run_modes

    the_run, paths = run_modes(request, mode_list, console)
    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    console.print(f"\n{paths.verdict}", style="bold", markup=False, highlight=False, soft_wrap=True)
    say(f"status: invoke status --run {the_run.run_id}")
    modes_outcome(paths, the_run.layout.modes, fail_on, say)


def _compare_devices(devices: str | None, executor: str) -> tuple[str, ...]:
    """--devices: the local pool's devices (checked against this machine's GPUs); Ray places shards itself."""
    from foundation.errors import UserError
    from foundation.formats.stage_records import parse_devices
    from prbench.stages.kernels import check_devices

    if devices is None:
        return ()
    if executor != "local":
        raise UserError(f"--devices: only with --executor local (--executor {executor} places shards itself)")
    return tuple(parse_devices(check_devices(devices)))
