"""Helpers the command families share: run and recipe lookups, the suite's and the verdict's flags.
"""

from __future__ import annotations

from typing import Any

from prbench.commands.cli import config_value, resolve_path


def runs_dir_from(ctx, runs_dir: str | None):
    return resolve_path(runs_dir or config_value(ctx, "runs_dir", "runs"))


def recipe_from(ctx, recipe: str | None):
    from prbench.sides.recipes import load_recipe

    recipes_dir = resolve_path(config_value(ctx, "recipes_dir", "recipes"))
    return load_recipe(recipe or config_value(ctx, "recipe", "cpu-local"), recipes_dir)


def suite_settings_from(ctx, recipe, models, size, mode, dtype, warmup, iterations, cpu_backend="cpp",
                    source="builtin", use_runner=False):
    """Suite flags; for those not given the recipe's ``[suite]``, then invoke.yaml's ``prbench.suite``."""
    from foundation.flag_values import call_count
    from foundation.formats.suite_request import SuiteRequest
    from prbench.stages.suite import device_for

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


def stage_env_from(recipe, env):
    """The variant's extra environment: the recipe's ``[suite.env]`` under the ``--env`` flags."""
    from prbench.sides.variants import parse_assignments

    return {**recipe.suite.env, **parse_assignments(env or [], "--env")}


def upstream_src_from(upstream_src):
    """Taken as given: for a docker recipe it is a path inside the image, not on this machine."""
    from pathlib import Path

    return Path(upstream_src) if upstream_src else None


def python_from(python: str | None) -> str:
    """--python: an interpreter that exists and may be run (whether its torch imports is checked when planning)."""
    import os
    import shutil
    import sys

    from foundation.errors import UserError

    if not python:
        return sys.executable
    found = shutil.which(python) or (python if os.path.isfile(python) else None)
    if found is None:
        raise UserError(f"--python {python}: no such interpreter")
    if not os.access(found, os.X_OK):
        raise UserError(f"--python {python}: not executable")
    return found


def inductor_config_from(items):
    """--inductor-config KEY=VALUE: known torch._inductor.config settings with values of their type."""
    from prbench.inductor_options import check_inductor_config
    from prbench.sides.variants import parse_assignments, parse_config_values

    values = parse_config_values(parse_assignments(items or [], "--inductor-config"))
    check_inductor_config(values, "--inductor-config")
    return values


def verdict_settings_from(confidence, alpha, margin, threshold, noise, min_ms, fail_share=None, tolerance=None):
    """The statistical flags as one validated VerdictSettings (a bad value fails here, before any stage).

    The flags arrive as text (None when not given) so that a typo is our one-line error, not a traceback.
    """
    from analysis.stats.verdict_settings import VerdictSettings
    from foundation.flag_values import real_number

    given = {"confidence": confidence, "alpha": alpha, "margin": margin, "threshold": threshold, "noise": noise,
             "min_ms": min_ms, "fail_share": fail_share}
    values: dict[str, Any] = {key: real_number("--" + key.replace("_", "-"), value)
                              for key, value in given.items() if value is not None}
    if tolerance is not None:  # the numerical A/B's per-dtype tolerances (text, checked by validate)
        values["tolerance"] = tolerance
    return VerdictSettings(**values).validate()


SUITE_HELP = {
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


BUILD_HELP = {
    "pytorch_src": "Local PyTorch clone that has the commit (default: the recipe's source if it is a local path)",
    "triton_src": "Local Triton clone that has the commit (default: the recipe's source if it is a local path)",
    "pull": "Pull the base image by digest when it is not present (never by tag; default: never pull)",
    "no_cache": "Rebuild every layer instead of reusing Docker's layer cache",
    "runs_dir": "Directory that holds runs; build logs and locks go to <runs_dir>/images/ (default: runs)",
    "store": "Store the build takes every input from: source archives, wheels, downloads, saved bases (default: "
             "$PRBENCH_STORE, else ~/.cache/prbench/store)",
}


TRITON_REF_HELP = ("Triton commit or ref in the Triton clone to build instead of the recipe's commit or the one "
                    "PyTorch pins (recorded in the lock as pin_source --triton-ref)")


TRITON_PR_HELP = ("A Triton A/B: the PR side's Triton commit or ref in --triton-src, or a patch file that must apply "
                  "to the base's Triton, with PyTorch the same on both sides (--pr left out)")


TRITON_BASE_HELP = ("With --triton-pr: the base side's Triton commit or ref (default: the recipe's or the one PyTorch "
                    "pins)")


SAVE_BASE_HELP = ("Also docker save the base image into the store and list it in the lock, so a rebuild on a "
                   "machine without it loads it from the store")


def optional_path(value):
    return resolve_path(value) if value else None


COMPARE_TRITON_SRC_HELP = ("Local Triton clone holding the Triton commit each side builds (docker recipes built "
                            "from source: the recipe's triton.commit, or the one PyTorch pins at the side's commit; "
                            "default: the recipe's source if it is a local path)")


FAIL_ON_HELP = ("Exit 1 when the verdict is: regression (a family's headline regressed beyond --threshold, a "
                 "kernel or model holding at least --fail-share of the step regressed beyond it, a dashboard "
                 "check failed, or the outputs failed the numerical A/B), inconclusive (that, or anything not "
                 "shown to be fine), numerics (only the outputs failed the numerical A/B), never (default)")


def modes_outcome(paths, modes_dir, fail_on: str, say) -> None:
    """Where a run of several modes left its report; exit 1 when --fail-on holds for any mode."""
    from invoke import Exit

    from analysis.report.modes import modes_fail_reasons

    say(f"report: {paths.report_md} (each mode's own: {modes_dir}/<mode>/report/)")
    say(f"summary: {paths.summary_json}")
    reasons = modes_fail_reasons(list(paths.results), fail_on)
    if reasons:
        raise Exit(f"--fail-on {fail_on}: " + "; ".join(reasons), code=1)


def exit_on_verdict(summary, fail_on: str) -> None:
    """--fail-on: exit 1 with the reasons, read from the same summary.json CI users read."""
    from invoke import Exit

    from analysis.report.summary import fail_reasons

    reasons = fail_reasons(summary, fail_on)
    if reasons:
        raise Exit(f"--fail-on {fail_on}: " + "; ".join(reasons), code=1)
