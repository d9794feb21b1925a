"""``invoke bisect``: the task, its flags and their checks at the door; the search and its steps are
`prbench.compare.bisect`, imported when the task runs (it brings pandas and the compare driver: about 0.8 s that
every other ``invoke`` command, ``--list`` included, would pay at start)."""

from __future__ import annotations

from analysis.stats.verdict_settings import FLAG_HELP as STATS_FLAG_HELP
from prbench.commands.cli import resolve_path, task, user_facing
from prbench.commands.flags import (
    COMPARE_TRITON_SRC_HELP,
    SUITE_HELP,
    TRITON_REF_HELP,
    optional_path,
    python_from,
    recipe_from,
    runs_dir_from,
    stage_env_from,
    suite_settings_from,
    verdict_settings_from,
)


@task(
    help={
        "pytorch_src": "PyTorch git clone holding --good and --bad (a Triton range: --pytorch-ref's; default the "
                       "recipe's source if it is a local path)",
        "triton_src": COMPARE_TRITON_SRC_HELP + "; every step's",
        "triton_ref": TRITON_REF_HELP + "; every step, both sides",
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
        **{k: SUITE_HELP[k] for k in ("size", "mode", "dtype", "warmup", "iterations")},
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
    from analysis.stats.verdict_settings import check_rounds
    from foundation.errors import UserError
    from foundation.flag_values import call_count, whole_number
    from prbench.compare.bisect import BisectRequest, check_range_flags, check_target_flags, run_bisect

    stats = verdict_settings_from(confidence, alpha, margin, threshold, noise, min_ms, fail_share)
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
    from prbench.sides import pins

    check_target_flags(model, kernel, from_run)
    if pytorch_src:
        pins.open_repo(resolve_path(pytorch_src))
    loaded = recipe_from(ctx, recipe)
    fixed = pytorch_ref or "installed"  # a Triton range's PyTorch, on both sides of every step
    compare = CompareRequest(
        base=fixed if triton_range else good, pr=fixed if triton_range else bad, recipe=loaded,
        runs_dir=runs_dir_from(ctx, runs_dir),
        triton_src=optional_path(triton_src), triton_ref=triton_ref,
        suite=suite_settings_from(ctx, loaded, None, size, mode, dtype, warmup, iterations),
        kernels=KernelSettings(warmup=checked["warmup"], iterations=checked["iterations"]),
        rounds=step_rounds, passes=checked["passes"], stats=stats, python=python_from(python),
        env=stage_env_from(loaded, None))
    request = BisectRequest(pytorch_src=resolve_path(pytorch_src) if pytorch_src else None,
                            good=triton_good if triton_range else good, bad=triton_bad if triton_range else bad,
                            compare=compare, model=model, kernel=kernel, from_run=from_run, max_rounds=most,
                            bisect_id=bisect, docker_recipe=recipe_from(ctx, docker_recipe) if docker_recipe else None,
                            triton=triton_range)
    console = Console()
    result = run_bisect(request, console)
    console.print(f"\n[bold]{result.headline}[/]", markup=True, highlight=False)
    console.print(f"report: {result.directory / 'bisect.md'} (bisect.json beside it)", markup=False)
