"""prbench command line: thin invoke tasks over the prbench, stages and analysis packages.

Run ``invoke --list`` for the tasks and ``invoke --help TASK`` for every flag.
"""

from __future__ import annotations

from typing import Any

from invoke import task

from analysis.formats.hip_modules import ROCM_MODELS_PER_PROCESS, ROCM_MODULES_PER_WORKER
from analysis.stats.numeric_tolerance import FLAG_HELP as NUMERIC_TOLERANCE_HELP
from analysis.stats.verdict_settings import FLAG_HELP as STATS_FLAG_HELP
from prbench.cli import LongOnlyFlags, config_value, holds_run, holds_runs_under, resolve_path, user_facing


def _runs_dir(ctx, runs_dir: str | None):
    return resolve_path(runs_dir or config_value(ctx, "runs_dir", "runs"))


def _recipe(ctx, recipe: str | None):
    from prbench.recipes import load_recipe

    recipes_dir = resolve_path(config_value(ctx, "recipes_dir", "recipes"))
    return load_recipe(recipe or config_value(ctx, "recipe", "cpu-local"), recipes_dir)


def _suite_settings(ctx, recipe, models, size, mode, dtype, warmup, iterations, cpu_backend="cpp",
                    source="builtin", use_runner=False):
    """Suite flags; for those not given the recipe's ``[suite]``, then invoke.yaml's ``prbench.suite``."""
    from analysis.flag_values import call_count
    from analysis.formats.suite_request import SuiteRequest
    from prbench.compare.suite_stage import device_for

    def pick(value, key, default):
        if value is not None:
            return value
        from_recipe = getattr(recipe.suite, key, None)  # [suite] has models, size, mode and dtype
        return from_recipe if from_recipe is not None else config_value(ctx, f"suite.{key}", default)

    return SuiteRequest(
        models=pick(models, "models", "tiny-default"),
        size=pick(size, "size", "tiny"),
        mode=pick(mode, "mode", "inference"),
        dtype=pick(dtype, "dtype", "float32"),
        warmup=call_count("--warmup", pick(warmup, "warmup", 10), minimum=0),
        iterations=call_count("--iterations", pick(iterations, "iterations", 30), minimum=1),
        device=device_for(recipe.platform),
        cpu_backend=cpu_backend,
        source=source,
        use_runner=bool(use_runner),
    )


def _stage_env(recipe, env):
    """The variant's extra environment: the recipe's ``[suite.env]`` under the ``--env`` flags."""
    from prbench.runs.variants import parse_assignments

    return {**recipe.suite.env, **parse_assignments(env or [], "--env")}


def _upstream_src(upstream_src):
    """Taken as given: for a docker recipe it is a path inside the image, not on this machine."""
    from pathlib import Path

    return Path(upstream_src) if upstream_src else None


def _python_flag(python: str | None) -> str:
    """--python: an interpreter that exists and may be run (whether its torch imports is checked when planning)."""
    import os
    import shutil
    import sys

    from analysis.errors import UserError

    if not python:
        return sys.executable
    found = shutil.which(python) or (python if os.path.isfile(python) else None)
    if found is None:
        raise UserError(f"--python {python}: no such interpreter")
    if not os.access(found, os.X_OK):
        raise UserError(f"--python {python}: not executable")
    return found


def _inductor_config_flag(items):
    """--inductor-config KEY=VALUE: known torch._inductor.config settings with values of their type."""
    from prbench.inductor_options import check_inductor_config
    from prbench.runs.variants import parse_assignments, parse_config_values

    values = parse_config_values(parse_assignments(items or [], "--inductor-config"))
    check_inductor_config(values, "--inductor-config")
    return values


def _verdict_settings(confidence, alpha, margin, threshold, noise, min_ms, fail_share=None, tolerance=None):
    """The statistical flags as one validated VerdictSettings (a bad value fails here, before any stage).

    The flags arrive as text (None when not given) so that a typo is our one-line error, not a traceback.
    """
    from analysis.flag_values import real_number
    from analysis.stats.verdict_settings import VerdictSettings

    given = {"confidence": confidence, "alpha": alpha, "margin": margin, "threshold": threshold, "noise": noise,
             "min_ms": min_ms, "fail_share": fail_share}
    values: dict[str, Any] = {key: real_number("--" + key.replace("_", "-"), value)
                              for key, value in given.items() if value is not None}
    if tolerance is not None:  # the numerical A/B's per-dtype tolerances (text, checked by validate)
        values["tolerance"] = tolerance
    return VerdictSettings(**values).validate()


_SUITE_HELP = {
    "models": "Models: A,B,... (names of huggingface_models_list.txt, e.g. BertForMaskedLM,T5Small,Llama-3.2-1B) "
              "or a group: all, tiny-default, harness-gpu, harness-cpu (docs/models.md; default: the recipe's "
              "[suite], else invoke.yaml)",
    "size": "Model size: tiny (hidden 64, CPU/CI), small (hidden 256, CPU) or full (the list's published sizes)",
    "mode": "inference or training (training = zero grad, forward, loss, backward, optimizer step)",
    "dtype": "float32, bfloat16, float16 or amp",
    "warmup": "Warm-up calls per side before timing (at least 3, at most 1,000,000; default 10)",
    "iterations": "Timed calls per side, eager and compiled interleaved (at least 10, at most 1,000,000; default 30)",
    "recipe": "Recipe name under recipes/ or a path to a .toml file (default from invoke.yaml)",
    "run": "Run id to create or resume (default: a new id from the time)",
    "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)",
    "env": "KEY=VALUE environment variable for the stages (repeatable; over the recipe's [suite.env])",
    "inductor_config": "KEY=VALUE torch._inductor.config override, e.g. cpp.simdlen=256 (repeatable)",
    "suite_source": "builtin (our HF models, eager vs torch.compile; default) or upstream (PyTorch's own "
                    "benchmarks/dynamo/huggingface.py --performance per model, its CSV ingested; --size, "
                    "--warmup and --iterations do not apply)",
    "use_runner": "With --suite-source upstream and --models all: run the whole suite through PyTorch's "
                  "benchmarks/dynamo/runner.py in one go, as the seed's run_hf.sh does (default: huggingface.py "
                  "--performance per model)",
    "upstream_src": "With --suite-source upstream: the PyTorch source tree as the environment sees it; "
                    "required for a local recipe (a path here), default for docker recipes: the image's tree "
                    "(/opt/prbench/src/pytorch)",
}


# --- run store -------------------------------------------------------------------------------------------


@task(help={"run": "Run id under the runs directory (default: the most recent run)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
def status(ctx, run=None, runs_dir=None):
    """Show each stage of a run: status, duration, outputs and errors."""
    from prbench.runs.run_store import RunStore
    from prbench.runs.status_command import print_status

    store = RunStore(_runs_dir(ctx, runs_dir))
    print_status(store.open(run) if run else store.latest())


# --- profiling and traces ---------------------------------------------------------------------------------


@task(
    klass=LongOnlyFlags,
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
    from analysis.flag_values import whole_number
    from analysis.traces.render import parse_formats

    top_rows = whole_number("--top", 50 if top is None else top, minimum=1)
    formats = parse_formats(format)
    from analysis.traces.perf_report import generate_perf_reports  # pandas and numpy: only once the flags are good

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
        from prbench.compare.node_replay_command import run_node_replay

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
    from analysis.flag_values import whole_number

    top_rows = whole_number("--top", 25 if top is None else top, minimum=1)
    # The readers bring pandas and numpy: only once the flags are good.
    from analysis.traces import read_trace
    from analysis.traces.render import parse_formats
    from analysis.traces.trace_diff import render_trace_diff_markdown, write_trace_diff
    from analysis.traces.trace_diff import trace_diff as diff_traces

    diff = diff_traces(read_trace(resolve_path(base), lenient=bool(lenient)),
                       read_trace(resolve_path(pr), lenient=bool(lenient)))
    markdown = render_trace_diff_markdown(diff, top=top_rows)
    if not output:
        print(markdown, end="")
        return
    for target in write_trace_diff(diff, markdown, resolve_path(output), parse_formats(format, default="md")):
        print(f"wrote {target}")


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
    from analysis.errors import UserError
    from analysis.flag_values import call_count, timeout_seconds
    from prbench.runs.stage_commands import ProfileSettings, profile_command, run_stage

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


# --- containers and locks ---------------------------------------------------------------------------------

_BUILD_HELP = {
    "pytorch_src": "Local PyTorch clone that has the commit (default: the recipe's source if it is a local path)",
    "triton_src": "Local Triton clone that has the commit (default: the recipe's source if it is a local path)",
    "pull": "Pull the base image by digest when it is not present (never by tag; default: never pull)",
    "no_cache": "Rebuild every layer instead of reusing Docker's layer cache",
    "runs_dir": "Directory that holds runs; build logs and locks go to <runs_dir>/images/ (default: runs)",
    "store": "Store the build takes every input from: source archives, wheels, downloads, saved bases (default: "
             "$PRBENCH_STORE, else ~/.cache/prbench/store)",
}
_TRITON_REF_HELP = ("Triton commit or ref in the Triton clone to build instead of the recipe's commit or the one "
                    "PyTorch pins (recorded in the lock as pin_source --triton-ref)")
_SAVE_BASE_HELP = ("Also docker save the base image into the store and list it in the lock, so a rebuild on a "
                   "machine without it loads it from the store")


def _images_dir(ctx, runs_dir):
    return _runs_dir(ctx, runs_dir) / "images"


def _optional_path(value):
    return resolve_path(value) if value else None


@task(help={
    "recipe": "Recipe name under recipes/ or a path to a .toml file (default from invoke.yaml)",
    "pytorch_ref": "PyTorch commit or ref to build instead of the recipe's commit",
    "triton_ref": _TRITON_REF_HELP,
    "overlay": "Python-only diff applied on top of the built torch, in its own layer",
    "merge_base": "PyTorch merge-base commit to record in the lock (a PR's base)",
    "max_jobs": "Parallel compile jobs (default: the recipe's build.max_jobs, else the build's default)",
    "lock": "Where to write lock.json (default: <runs_dir>/images/<recipe>-<hash>/lock.json)",
    "force": "Build even when an image with the same inputs is present",
    "save_base": _SAVE_BASE_HELP,
    **_BUILD_HELP,
})
@user_facing
def build(ctx, recipe=None, pytorch_src=None, triton_src=None, pytorch_ref=None, triton_ref=None, overlay=None,
          merge_base=None, max_jobs=None, pull=False, no_cache=False, lock=None, force=False, runs_dir=None,
          store=None, save_base=False):
    """Build the Docker image of a recipe, or a venv recipe's venv (nothing to do when present), and write its
    lock."""
    from analysis.errors import UserError
    from analysis.flag_values import whole_number
    from prbench.docker_engine import docker_client
    from prbench.images.build import plan_build
    from prbench.images.content_store import Store
    from prbench.images.image_lock import build_and_lock
    from prbench.recipes import load_recipe

    jobs = whole_number("--max-jobs", max_jobs, minimum=1) if max_jobs is not None else None

    recipes_dir = resolve_path(config_value(ctx, "recipes_dir", "recipes"))
    loaded = load_recipe(recipe or config_value(ctx, "recipe", "cpu-local"), recipes_dir)
    if loaded.is_venv:
        docker_only = {"--pytorch-src": pytorch_src, "--triton-src": triton_src, "--pytorch-ref": pytorch_ref,
                       "--triton-ref": triton_ref, "--overlay": overlay, "--merge-base": merge_base,
                       "--max-jobs": max_jobs, "--pull": pull, "--no-cache": no_cache, "--force": force,
                       "--save-base": save_base}
        given = [flag for flag, value in docker_only.items() if value]
        if given:
            raise UserError(f"{given[0]}: recipe {loaded.name} is a venv of pinned wheels; {given[0]} is for Docker "
                            "images")
        _build_venv(ctx, loaded, runs_dir, store, lock)
        return
    plan = plan_build(loaded, pytorch_src=_optional_path(pytorch_src), triton_src=_optional_path(triton_src),
                      pytorch_ref=pytorch_ref, triton_ref=triton_ref, overlay=_optional_path(overlay),
                      merge_base=merge_base, max_jobs=jobs)
    outcome = build_and_lock(plan, docker_client(), _images_dir(ctx, runs_dir), lock_path=_optional_path(lock),
                             store=Store.at(_optional_path(store)), save_base=save_base, pull=pull,
                             nocache=no_cache, force=force)
    print(f"image {outcome.result.tag} ({outcome.result.image_id[:19]}); lock {outcome.lock_path}")


def _build_venv(ctx, recipe, runs_dir, store, lock):
    """``invoke build`` of a venv recipe: its venv with the recipe's own wheels, for this Python."""
    import sys

    from prbench.images import venv
    from prbench.images.content_store import Store

    the_store = Store.at(_optional_path(store))
    outcome = venv.build_and_lock(venv.plan(venv.pinned(recipe, the_store, sys.executable), sys.executable),
                                  the_store, _runs_dir(ctx, runs_dir) / venv.VENVS_DIR, lock_path=_optional_path(lock))
    print(f"venv {outcome.directory} ({outcome.python}); lock {outcome.lock_path}")


@task(help={
    "lock": "lock.json to rebuild from (its base digest, commits or wheel pins, Triton pin, patches and store items "
            "are used as recorded; the sources come from the store, so the clones may be gone)",
    "lock_out": "Where to write the rebuilt image's lock (default: <runs_dir>/images/<recipe>-<hash>/lock.json)",
    **_BUILD_HELP,
})
@user_facing
def rebuild(ctx, lock, pytorch_src=None, triton_src=None, pull=False, no_cache=False, lock_out=None,
            runs_dir=None, store=None):
    """Rebuild an image exactly from a lock file (a run's lock.json: both images) and the store."""
    import tempfile
    from pathlib import Path

    from analysis.errors import UserError
    from prbench.docker_engine import docker_client
    from prbench.images.content_store import Store
    from prbench.images.image_lock import build_and_lock, plan_from_lock, read_locks

    locks = read_locks(resolve_path(lock))
    if lock_out and len(locks) > 1:
        raise UserError(f"--lock-out: {lock} holds the locks of two images (base and pr); leave --lock-out out "
                        "and each rebuilt lock goes next to its build log")
    from prbench.images import venv

    the_store = Store.at(_optional_path(store))
    client = None if all(venv.is_venv_lock(locked) for _, locked in locks) else docker_client()
    for side, locked in locks:
        prefix = f"{side}: " if side else ""
        if venv.is_venv_lock(locked):  # a venv side: recreated from the store's wheels, no Docker
            venv_plan, venv_drift = venv.plan_from_lock(locked)
            for field in venv_drift:
                print(f"warning: {prefix}{field} differs from the lock (prbench itself changed since)")
            made = venv.build_and_lock(venv_plan, the_store, _runs_dir(ctx, runs_dir) / venv.VENVS_DIR,
                                       lock_path=_optional_path(lock_out))
            print(f"{prefix}venv {made.directory} ({made.python}); lock {made.lock_path}")
            continue
        with tempfile.TemporaryDirectory(prefix="prbench-rebuild-") as tmp:
            plan, drift = plan_from_lock(locked, pytorch_src=_optional_path(pytorch_src),
                                         triton_src=_optional_path(triton_src), overlay_dir=Path(tmp))
            for field in drift:
                print(f"warning: {prefix}{field} differs from the lock (prbench itself changed since); "
                      "the rebuild may differ")
            outcome = build_and_lock(plan, client, _images_dir(ctx, runs_dir), lock_path=_optional_path(lock_out),
                                     store=the_store, pull=pull, nocache=no_cache)
        print(f"{prefix}image {outcome.result.tag} ({outcome.result.image_id[:19]}); lock {outcome.lock_path}")


@task(help={
    "lock": "lock.json to check against (a run's lock.json: both of its images)",
    "image": "Image to check (default: the tag recorded in the lock)",
})
@user_facing
def verify(ctx, lock, image=None):
    """Compare a built image with a lock field by field; exit 1 when anything differs."""
    from invoke import Exit

    from analysis.errors import UserError
    from prbench.docker_engine import docker_client
    from prbench.images.image_lock import read_locks
    from prbench.images.image_lock import verify as verify_image

    locks = read_locks(resolve_path(lock))
    if image and len(locks) > 1:
        raise UserError(f"--image: {lock} holds the locks of two images (base and pr); verify them by their tags")
    from prbench.images import venv

    client = None if all(venv.is_venv_lock(locked) for _, locked in locks) else docker_client()
    differing = 0
    for side, locked in locks:
        prefix = f"{side}: " if side else ""
        if venv.is_venv_lock(locked) and image:
            raise UserError(f"--image: {lock} is the lock of a venv (it names its directory); leave --image out")
        differences, notes = venv.verify(locked) if venv.is_venv_lock(locked) else verify_image(client, locked,
                                                                                                  image)
        for note in notes:
            print(f"note: {prefix}{note}")
        for difference in differences:
            print(f"differs: {prefix}{difference.line('venv' if venv.is_venv_lock(locked) else 'image')}")
        differing += len(differences)
    if differing:
        raise Exit(f"verify: {differing} field(s) differ from {lock}", code=1)
    what = "environment" if all(venv.is_venv_lock(locked) for _, locked in locks) else "image"
    print(f"verify: the {what}{'s match' if len(locks) > 1 else ' matches'} {lock}")


@task(help={
    "recipe": "Recipe name under recipes/ or a path to a .toml file (default from invoke.yaml)",
    "pytorch_src": _BUILD_HELP["pytorch_src"],
    "triton_src": _BUILD_HELP["triton_src"],
    "triton_ref": _TRITON_REF_HELP,
    "base": "Base side as compare takes it: a git ref in --pytorch-src or 'installed' (default: the recipe's commit)",
    "pr": "PR side as compare takes it: a git ref in --pytorch-src, a patch file or 'installed'",
    "triton_pr": "A Triton A/B as compare takes it: the PR side's Triton commit or ref in --triton-src, or a patch "
                 "file that must apply to the base's Triton",
    "triton_base": "With --triton-pr: the base side's Triton commit or ref (default: the recipe's or the pinned one)",
    "store": _BUILD_HELP["store"],
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

    from analysis.formats.stage_records import parse_devices
    from prbench.compare.doctor import DoctorInputs, run_doctor, summary
    from prbench.images.build import check_triton_flags

    loaded = _recipe(ctx, recipe)
    check_triton_flags(loaded, _optional_path(triton_src), triton_ref, triton_pr, triton_base)
    inputs = DoctorInputs(recipe=loaded, runs_dir=_runs_dir(ctx, runs_dir),
                          pytorch_src=_optional_path(pytorch_src), triton_src=_optional_path(triton_src),
                          triton_ref=triton_ref, triton_pr=triton_pr, triton_base=triton_base, base=base, pr=pr,
                          store=_optional_path(store), pull=bool(pull),
                          python=_python_flag(python),
                          devices=tuple(parse_devices(devices)) if devices else (),
                          suite=_suite_settings(ctx, loaded, None, None, None, None, None, None),
                          env=_stage_env(loaded, None))
    results = run_doctor(inputs, emit=lambda result: print(result.line(), flush=True))
    line = summary(inputs.recipe, results)
    if any(result.status == "fail" for result in results):
        raise Exit(line, code=1)
    print(line)


@task(
    name="store",
    help={
        "action": "list (every item), verify (hash every item again), export (into --file), import (from --file), "
                  "fetch (the wheels --recipe's image or venvs install, for its base image's Python or this one, and "
                  "a source build's downloads: later builds run offline)",
        "file": "The tar that export writes and import reads (one file holding the objects and their index)",
        "lock": "export only the items this lock.json lists (an image's lock or a run's lock.json)",
        "store": "Store directory (default: $PRBENCH_STORE, else ~/.cache/prbench/store)",
        "recipe": "fetch only: the Docker or venv recipe (name in recipes/ or a .toml path) whose wheels to fetch",
        "pytorch_src": "fetch only, recipes built from source: the PyTorch clone; its build's downloads (AOTriton "
                       "on ROCm) and the Triton build's (LLVM, ...) are fetched too",
        "triton_src": "fetch only, recipes built from source: the Triton clone holding each side's Triton commit",
        "triton_ref": "fetch only: " + _TRITON_REF_HELP,
        "base": "fetch only: a base side's PyTorch ref in --pytorch-src (default: the recipe's commit)",
        "pr": "fetch only: a PR side's PyTorch ref in --pytorch-src (a patch file builds the base's commit)",
    },
)
@user_facing
def store_task(ctx, action, file=None, lock=None, store=None, recipe=None, pytorch_src=None, triton_src=None,
               triton_ref=None, base=None, pr=None):
    """The content-addressed store of build inputs: list, verify, fetch a recipe's wheels, or move it to another
    machine as one tar."""
    from pathlib import Path

    from prbench.images.store_command import SourceSides, run_store_action

    refs = tuple(ref for ref in (base, pr) if ref and not Path(ref).is_file())
    sides = SourceSides(pytorch_src=_optional_path(pytorch_src), triton_src=_optional_path(triton_src), refs=refs,
                        triton_ref=triton_ref)
    run_store_action(action, store_dir=store, file=_optional_path(file), lock=_optional_path(lock),
                     recipe=_recipe(ctx, recipe) if recipe else None, sides=sides)


_COMPARE_TRITON_SRC_HELP = ("Local Triton clone holding the Triton commit each side builds (docker recipes built "
                            "from source: the recipe's triton.commit, or the one PyTorch pins at the side's commit; "
                            "default: the recipe's source if it is a local path)")
_FAIL_ON_HELP = ("Exit 1 when the verdict is: regression (a family's headline regressed beyond --threshold, a "
                 "kernel or model holding at least --fail-share of the step regressed beyond it, a dashboard "
                 "check failed, or the outputs failed the numerical A/B), inconclusive (that, or anything not "
                 "shown to be fine), numerics (only the outputs failed the numerical A/B), never (default)")
_TOLERANCE_HELP = NUMERIC_TOLERANCE_HELP


# --- compare (the main job) -------------------------------------------------------------------------------


@task(
    help={
        "base": "Base side: 'installed' (the installed torch as is; a wheel recipe's pinned wheel), a git ref in "
                "--pytorch-src, or with a wheel recipe a wheel pin like torch==2.13.0+cpu",
        "pr": "PR side: a git ref in --pytorch-src, a Python-only patch file, 'installed', or with a wheel recipe a "
              "wheel pin like torch==2.14.0.dev20261101+cpu (pip downloads it into the store)",
        "pytorch_src": "PyTorch git clone where --base/--pr refs are resolved (GitPython)",
        "triton_src": _COMPARE_TRITON_SRC_HELP,
        "triton_ref": _TRITON_REF_HELP + "; both sides; docker recipes built from source only",
        "triton_pr": "A Triton A/B: the Triton commit or ref in --triton-src the PR side builds, or a patch file "
                     "on the base's Triton, with PyTorch the same on both sides (--pr left out; the images share "
                     "PyTorch's layers); docker recipes built from source only",
        "triton_base": "With --triton-pr: the base side's Triton commit or ref (default: the recipe's or the one "
                       "PyTorch pins)",
        **_SUITE_HELP,
        "kernel_warmup": "Warm-up calls per kernel before timing, 0 to 1,000,000 (default 10)",
        "kernel_iterations": "Timed calls per kernel, 1 to 1,000,000 (default 30)",
        "kernel_timeout": "Seconds one kernel may take before it is recorded as failed, above 0 and at most 86400 "
                          "(a day; default 300)",
        "rounds": "Paired timing rounds for kernels and models: fresh base and PR workers side by side, "
                  "alternating item by item; the round is the unit of the statistics: auto (default): from 3 "
                  "rounds on, stop each kind as soon as its verdicts are settled (no false claims or lost coverage "
                  "from stopping; see the report's method), at most --max-rounds; or a fixed number (at least 3)",
        "max_rounds": "Adaptive rounds: at most this many rounds of each kind (default 10 on the CPU, 5 on a GPU)",
        "budget": "Adaptive rounds: start no round after this long since the compare began, e.g. 20m, 90s, "
                  "1.5h (the first 3 rounds always run)",
        "resolution": "Adaptive rounds: a kind stops only once its verdicts are settled and its resolution "
                      "(the report's smallest change told apart from none, 80 % power, whatever --threshold) is at "
                      "most this, e.g. 2% or 1.5%; within --max-rounds and --budget, and the report says whether "
                      "it was reached (default: stop once settled)",
        "passes": "A-B-B-A blocks per kernel job and model in each round, spread over the round; more passes "
                  "average out visit-to-visit noise (default 16 on the CPU, 2 on a GPU)",
        "models_per_process": "Models kept compiled in one worker per side and round (0 = all; lower it when "
                              f"a GPU cannot hold every model twice; default {ROCM_MODELS_PER_PROCESS} on ROCm, "
                              "whose processes run out of HIP modules, else 0)",
        "modules_per_worker": "Kernel modules one kernel worker loads in a round before a fresh worker takes "
                              "over; a job that fails with HIP error 209 is run once more in a fresh worker "
                              f"(0 = no limit; default {ROCM_MODULES_PER_WORKER} on ROCm, else 0)",
        **STATS_FLAG_HELP,
        "fail_on": _FAIL_ON_HELP,
        "tolerance": _TOLERANCE_HELP,  # numerical A/B (issue 42)
        "force": "Stage to redo even if done: suite, organize, kernels, profile or report (repeatable)",
        "python": "Python interpreter whose torch the local runner uses, or (venv recipes) that the venvs are made "
                  "of (default: this one)",
        "profile": "Also profile each side's models (torch.profiler, compiled graphs with -p); diffed in the report",
        "store": _BUILD_HELP["store"] + "; docker and venv recipes only",
        "save_base": _SAVE_BASE_HELP + "; docker recipes only",
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
@holds_run(_runs_dir)
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
    from analysis.errors import UserError
    from analysis.flag_values import call_count, timeout_seconds, whole_number
    from analysis.stats.sequential import check_rounds_flags
    from analysis.stats.verdict_settings import check_fail_on

    # Every statistical and measurement setting is checked before anything heavy is imported or run.
    stats = _verdict_settings(confidence, alpha, margin, threshold, noise, min_ms, fail_share, tolerance)
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
    python = _python_flag(python)
    inductor_values = _inductor_config_flag(inductor_config)
    from prbench.executors import check_executor

    executor = check_executor(executor, ray_address)
    checked_shard_size = whole_number("--shard-size", shard_size, minimum=0)
    checked_suite_shards = None if suite_shard_size is None else whole_number("--suite-shard-size", suite_shard_size,
                                                                              minimum=0)
    device_list = _compare_devices(devices, executor)

    from rich.console import Console

    from prbench.compare.driver import CompareRequest, KernelSettings, run_compare, validate_force

    loaded = _recipe(ctx, recipe)
    request = CompareRequest(
        base=base, pr=pr, recipe=loaded, runs_dir=_runs_dir(ctx, runs_dir), run_id=run,
        pytorch_src=resolve_path(pytorch_src) if pytorch_src else None,
        triton_src=_optional_path(triton_src), triton_ref=triton_ref, triton_base=triton_base, triton_pr=triton_pr,
        upstream_src=_upstream_src(upstream_src),
        suite=_suite_settings(ctx, loaded, models, size, mode, dtype, warmup, iterations, source=suite_source,
                              use_runner=use_runner),
        kernels=KernelSettings(warmup=kernel_warmup_calls, iterations=kernel_timed_calls, timeout_s=kernel_timeout_s),
        rounds=round_flags.rounds, auto_rounds=round_flags.auto, max_rounds=round_flags.max_rounds,
        budget_s=round_flags.budget_s, resolution_pct=round_flags.resolution_pct,
        passes=checked_passes, models_per_process=per_process, modules_per_worker=per_worker, stats=stats,
        env=_stage_env(loaded, env),
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
    _exit_on(paths.summary, fail_on)


@task(
    help={
        "pytorch_src": "PyTorch git clone holding --good and --bad (a Triton range: --pytorch-ref's; default the "
                       "recipe's source if it is a local path)",
        "triton_src": _COMPARE_TRITON_SRC_HELP + "; every step's",
        "triton_ref": _TRITON_REF_HELP + "; every step, both sides",
        "good": "The last commit known good (every step is compared against it)",
        "bad": "The first commit known bad (a later commit on the first-parent line of --good)",
        "triton_good": "A Triton range instead: the last Triton commit known good in --triton-src (every step is a "
                       "Triton A/B against it, PyTorch fixed); with a Docker recipe built from source",
        "triton_bad": "With --triton-good: the first Triton commit known bad (on the first-parent line after it)",
        "pytorch_ref": "With --triton-good/--triton-bad: the PyTorch commit or ref every step builds on both sides "
                       "(default: the recipe's pytorch.commit)",
        "model": "The model that regressed (the steps compile only it); with --kernel: the model to compile",
        "kernel": "The kernel that regressed, by its name on the good side (or with --from-run either side's)",
        "from_run": "A finished compare run whose kernels_compare.csv names --kernel: its identity and the models "
                    "that launch it come from there",
        "bisect": "Bisect id: <runs>/<id>/ holds bisect.md and bisect.json (default from the endpoints and the "
                  "target); each step is a run of its own beside it; the same command again resumes",
        "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)",
        "recipe": "Recipe of every step (default from invoke.yaml: cpu-local, the installed torch + overlays)",
        "docker_recipe": "With a local recipe: the Docker recipe that builds the commits an overlay cannot make "
                         "(compiled code changed; without it they are skipped)",
        "rounds": "Paired timing rounds of a step, at least 3 (default 3)",
        "max_rounds": "An inconclusive step is resumed with twice the rounds up to this many, then it is "
                      "undecided and stepped around (default: twice --rounds)",
        "passes": "A-B-B-A blocks per item in every round (default 2)",
        **{k: _SUITE_HELP[k] for k in ("size", "mode", "dtype", "warmup", "iterations")},
        "kernel_warmup": "Warm-up calls per kernel before timing, 0 to 1,000,000 (default 10)",
        "kernel_iterations": "Timed calls per kernel, 1 to 1,000,000 (default 30)",
        **STATS_FLAG_HELP,
        "python": "Python interpreter whose torch the local runner uses (default: this one)",
    },
)
@user_facing
def bisect(ctx, pytorch_src=None, good=None, bad=None, model=None, kernel=None, from_run=None, bisect=None,
           recipe=None, docker_recipe=None, rounds="3", max_rounds=None, passes="2", size=None, mode=None,
           dtype=None, warmup=None, iterations=None, kernel_warmup="10", kernel_iterations="30", runs_dir=None,
           confidence=None, alpha=None, margin=None, threshold=None, noise=None, min_ms=None, fail_share=None,
           python=None,
           triton_src=None, triton_ref=None, triton_good=None, triton_bad=None, pytorch_ref=None):
    """Find the commit between --good and --bad that made a model or kernel slower: a paired compare per step
    (or, with --triton-good/--triton-bad, the Triton commit, PyTorch fixed)."""
    from analysis.errors import UserError
    from analysis.flag_values import call_count, whole_number
    from analysis.stats.verdict_settings import check_rounds
    from prbench.review.bisect_command import check_range_flags

    stats = _verdict_settings(confidence, alpha, margin, threshold, noise, min_ms, fail_share)
    triton_range = check_range_flags(good, bad, triton_good, triton_bad, pytorch_ref, triton_ref)
    for flag, value in () if triton_range else (("--pytorch-src", pytorch_src), ("--good", good), ("--bad", bad)):
        if not value:
            raise UserError(f"{flag}: required")
    step_rounds = check_rounds(rounds)
    most = 2 * step_rounds if max_rounds is None else whole_number("--max-rounds", max_rounds, minimum=step_rounds)
    checked = {"passes": whole_number("--passes", passes, minimum=1),
               "warmup": call_count("--kernel-warmup", kernel_warmup, minimum=0),
               "iterations": call_count("--kernel-iterations", kernel_iterations, minimum=1)}
    from rich.console import Console

    from prbench.compare.driver import CompareRequest, KernelSettings
    from prbench.gitrefs import open_repo
    from prbench.review.bisect_command import BisectRequest, check_target_flags, run_bisect

    check_target_flags(model, kernel, from_run)
    if pytorch_src:
        open_repo(resolve_path(pytorch_src))
    loaded = _recipe(ctx, recipe)
    fixed = pytorch_ref or "installed"  # a Triton range's PyTorch, on both sides of every step
    compare = CompareRequest(
        base=fixed if triton_range else good, pr=fixed if triton_range else bad, recipe=loaded,
        runs_dir=_runs_dir(ctx, runs_dir),
        triton_src=_optional_path(triton_src), triton_ref=triton_ref,
        suite=_suite_settings(ctx, loaded, None, size, mode, dtype, warmup, iterations),
        kernels=KernelSettings(warmup=checked["warmup"], iterations=checked["iterations"]),
        rounds=step_rounds, passes=checked["passes"], stats=stats, python=_python_flag(python),
        env=_stage_env(loaded, None))
    request = BisectRequest(pytorch_src=resolve_path(pytorch_src) if pytorch_src else None,
                            good=triton_good if triton_range else good, bad=triton_bad if triton_range else bad,
                            compare=compare, model=model, kernel=kernel, from_run=from_run, max_rounds=most,
                            bisect_id=bisect, docker_recipe=_recipe(ctx, docker_recipe) if docker_recipe else None,
                            triton=triton_range)
    console = Console()
    result = run_bisect(request, console)
    console.print(f"\n[bold]{result.headline}[/]", markup=True, highlight=False)
    console.print(f"report: {result.directory / 'bisect.md'} (bisect.json beside it)", markup=False)


@task(help={})
@user_facing
def modes(ctx):
    """The modes `invoke compare --modes` runs: named presets of suite, Inductor and environment settings, joined
    with + (training+amp+no-cudagraphs)."""
    from analysis.formats.modes import presets_table

    print("\n".join(presets_table()))
    print("\nCompose with + (presets that set one setting differently conflict); a setting no preset names keeps the "
          "compare's default. Example: invoke compare --pr=PATCH --modes inference,training+amp")


def _modes_flag(modes, mode, dtype):
    """--modes: the modes (analysis.formats.modes), or None; --mode and --dtype are what a mode sets."""
    from analysis.errors import UserError
    from analysis.formats.modes import parse_modes

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
    _modes_out(paths, the_run.layout.modes, fail_on, say)


def _modes_out(paths, modes_dir, fail_on: str, say) -> None:
    """Where a run of several modes left its report; exit 1 when --fail-on holds for any mode."""
    from invoke import Exit

    from analysis.report.modes import modes_fail_reasons

    say(f"report: {paths.report_md} (each mode's own: {modes_dir}/<mode>/report/)")
    say(f"summary: {paths.summary_json}")
    reasons = modes_fail_reasons(list(paths.results), fail_on)
    if reasons:
        raise Exit(f"--fail-on {fail_on}: " + "; ".join(reasons), code=1)


def _compare_devices(devices: str | None, executor: str) -> tuple[str, ...]:
    """--devices: the local pool's devices (checked against this machine's GPUs); Ray places shards itself."""
    from analysis.errors import UserError
    from analysis.formats.stage_records import parse_devices
    from prbench.compare.kernel_stages import check_devices

    if devices is None:
        return ()
    if executor != "local":
        raise UserError(f"--devices: only with --executor local (--executor {executor} places shards itself)")
    return tuple(parse_devices(check_devices(devices)))


def _exit_on(summary, fail_on: str) -> None:
    """--fail-on: exit 1 with the reasons, read from the same summary.json CI users read."""
    from invoke import Exit

    from analysis.report.summary import fail_reasons

    reasons = fail_reasons(summary, fail_on)
    if reasons:
        raise Exit(f"--fail-on {fail_on}: " + "; ".join(reasons), code=1)


# --- compare and report ----------------------------------------------------------------------------------


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
        "fail_on": _FAIL_ON_HELP,
    }
)
@user_facing
def compare_kernels(ctx, base, pr, samples_base=None, samples_pr=None, semantics="prbench", confidence=None,
                    alpha=None, margin=None, threshold=None, noise=None, min_ms=None, fail_share=None, out=None,
                    fail_on="never"):
    """Compare two kernel CSVs; the last line printed is `geomean: <value>`."""
    from invoke import Exit

    from analysis.errors import UserError
    from analysis.report.render import ReportSettings
    from analysis.report.summary import fail_reasons
    from analysis.stats.verdict_settings import check_fail_on
    from prbench.compare.kernel_compare_command import compare_kernel_files

    fail_on = check_fail_on(fail_on)
    if fail_on != "never" and semantics == "seed":
        raise UserError("--fail-on: the seed semantics give one geomean and no verdict; use --semantics prbench")
    settings = ReportSettings(stats=_verdict_settings(confidence, alpha, margin, threshold, noise, min_ms,
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


@task(
    help={
        "run": "Run id under the runs directory (its base/ and pr/ are compared)",
        "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)",
        "fail_on": _FAIL_ON_HELP,
        "kernel": "A kernel (base or PR name, repeatable) whose code diff and launch configuration the report adds "
                  "in a collapsed block and this command prints in full",
    },
    iterable=["kernel"],
)
@user_facing
@holds_run(_runs_dir)
def report(ctx, run, runs_dir=None, fail_on="never", kernel=None):
    """Re-render <run>/report/ (report.md, CSVs, report.xlsx, plots) from the run's files; nothing is re-run."""
    from analysis.stats.verdict_settings import check_fail_on
    from prbench.runs.modes_report import is_modes_run, render_modes_report
    from prbench.runs.report_command import render_run_report
    from prbench.runs.run_store import RunStore

    fail_on = check_fail_on(fail_on)
    with RunStore(_runs_dir(ctx, runs_dir)).open(run, write=True) as target:
        if is_modes_run(target):  # each mode's report rendered anew, then the matrix over them
            modes_paths = render_modes_report(target, rerender_modes=True, kernels_asked=tuple(kernel or ()))
            print(modes_paths.verdict)
            _modes_out(modes_paths, target.layout.modes, fail_on, print)
            return
        paths = render_run_report(target, kernels_asked=tuple(kernel or ()))
    for text in paths.kernel_details:
        print(text)
    print(paths.verdict)
    print(f"report: {paths.report_md} ({paths.characters} characters; CSVs, report.xlsx and plots beside it)")
    print(f"comment form: {paths.comment_md} ({paths.comment_characters} characters; what `invoke publish` posts)")
    print(f"summary: {paths.summary_json}")
    _exit_on(paths.summary, fail_on)


@task(help={"run": "Run id of a finished comparison under the runs directory",
            "kernel": "The kernel (base or PR name) whose base/PR pair the folder holds",
            "out": "The folder to write (must not exist, or be empty)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
@holds_run(_runs_dir)
def repro(ctx, run, kernel, out, runs_dir=None):
    """Write one kernel pair of a run as a folder that times base vs PR and checks outputs with torch alone."""
    from prbench.review.repro_command import write_repro
    from prbench.runs.run_store import RunStore

    with RunStore(_runs_dir(ctx, runs_dir)).open(run, write=True) as target:
        folder = write_repro(target.root, kernel, resolve_path(out))
    print(f"repro: {folder} (run it: cd {folder} && python run.py)")


@task(help={"run": "Run id of a finished comparison under the runs directory",
            "target": "GPU target to compile for, no GPU needed: cuda:<capability> (cuda:90) or hip:<arch> "
                      "(hip:gfx942)",
            "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)"})
@user_facing
@holds_run(_runs_dir)
def ir(ctx, run, target, runs_dir=None):
    """Compile a run's changed Triton kernel pairs for a target into <side>/ir/; then `invoke report` shows them."""
    from prbench.review.ir_command import write_run_ir
    from prbench.runs.run_store import RunStore

    with RunStore(_runs_dir(ctx, runs_dir)).open(run, write=True) as opened:
        pairs = write_run_ir(opened.root, target)
    print(f"ir: {len(pairs)} changed Triton pairs compiled for {target} into base/ir/ and pr/ir/; "
          f"render them with: invoke report --run {run}")


@task(
    help={
        "repo": "The pull request's GitHub repository, OWNER/NAME",
        "pr": "The pull request's number",
        "run": "Run id under the runs directory (default: the most recent run)",
        "runs_dir": "Directory that holds runs (default from invoke.yaml: runs)",
        "api_url": "GitHub REST API root (default from invoke.yaml: https://api.github.com; GitHub Enterprise: "
                   "https://HOST/api/v3)",
        "attach_release": "Also upload the run's report archive and plots as assets of this existing release tag "
                          "(replacing same-named ones) and link them from the comment",
        "key": "Which prbench comment on the PR to update (default: report); another key posts a separate one, "
               "e.g. one per recipe",
        "dry_run": "Print every request (method, URL, body) and send nothing; needs no token (the archive is still "
                   "written into the run)",
    }
)
@user_facing
@holds_run(_runs_dir)
def publish(ctx, repo=None, pr=None, run=None, runs_dir=None, api_url=None, attach_release=None, key="report",
            dry_run=False):
    """Post <run>/report/report.md to a pull request as one comment that later runs update in place.

    The token comes from $GITHUB_TOKEN (or $GH_TOKEN) and is never written anywhere; the run's report files are
    archived into <run>/report.tar.gz.
    """
    from prbench.publish.publish_command import check_publish_flags, publish_run
    from prbench.runs.run_store import RunStore

    target = check_publish_flags(repo, pr, api_url or config_value(ctx, "publish.api_url"), key, attach_release)
    store = RunStore(_runs_dir(ctx, runs_dir))
    with store.open(run or store.latest().run_id, write=True) as opened:
        publish_run(opened, target, dry_run=dry_run)


# --- suite -----------------------------------------------------------------------------------------------


@task(
    help={
        **_SUITE_HELP,
        "overlay": "Python-only PyTorch diff to run on top of the installed torch (a shadow package)",
        "force": "Redo the suite even when it finished with the same inputs",
        "cpu_backend": "Inductor CPU codegen: cpp (default) or triton (Triton interpreter; correctness only)",
    },
    iterable=["env", "inductor_config"],
)
@user_facing
@holds_run(_runs_dir)
def suite(ctx, models=None, size=None, mode=None, dtype=None, warmup=None, iterations=None, recipe=None, run=None,
          runs_dir=None, overlay=None, env=None, inductor_config=None, force=False, cpu_backend="cpp",
          suite_source="builtin", use_runner=False, upstream_src=None):
    """Time the HF suite (builtin: eager vs torch.compile; or upstream's harness) into <run>/base/suite/suite.csv."""
    from rich.console import Console

    from prbench.compare.suite_stage import print_suite_summary, run_suite_stage

    inductor_values = _inductor_config_flag(inductor_config)
    loaded = _recipe(ctx, recipe)
    settings = _suite_settings(ctx, loaded, models, size, mode, dtype, warmup, iterations, cpu_backend,
                               source=suite_source, use_runner=use_runner)
    console = Console()
    outcome = run_suite_stage(
        settings=settings, recipe=loaded, runs_dir=_runs_dir(ctx, runs_dir), run_id=run,
        overlay_path=resolve_path(overlay) if overlay else None,
        env=_stage_env(loaded, env),
        inductor_config=inductor_values,
        force=force, console=console, upstream_src=_upstream_src(upstream_src),
    )
    print_suite_summary(outcome, console)


# --- kernels ---------------------------------------------------------------------------------------------


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
    from analysis.flag_values import call_count
    from prbench.compare.kernel_stages import check_cache_input
    from prbench.runs.stage_commands import organize_command, run_stage

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
    from analysis.errors import UserError
    from analysis.flag_values import call_count, regular_expression, timeout_seconds, whole_number
    from prbench.compare.kernel_stages import check_devices, default_devices, kernel_stage_env
    from prbench.runs.stage_commands import kernels_command, run_stage

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
    from analysis.formats.run_layout import INDEX_CSV

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
    from analysis.formats.stage_records import parse_devices
    from prbench.compare.kernel_shards import KernelRequest, executor_platform, time_kernels
    from prbench.compare.kernel_stages import kernel_stage_env
    from prbench.executors import open_executor

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
