"""Upstream mode of the suite: run PyTorch's own ``benchmarks/dynamo`` HF harness and ingest its CSV.

Where an environment has a PyTorch source tree (the Docker images build one), the seed workflow runs
``benchmarks/dynamo/huggingface.py --performance ...`` per model, or ``runner.py --suites huggingface ...``
as its run_hf.sh does. This module builds those command lines exactly, runs them with the variant's stage
environment (same caches, same knobs), ingests the performance CSV into our ``suite.csv`` schema
(``analysis.dynamo_csv``) and archives the Inductor cache like the builtin stage.

Caveat for the environment: importing ``huggingface.py`` evaluates ``AutoConfig.from_pretrained`` for five
EXTRA_MODELS (t5-small, distilgpt2, ...), so the image needs those configs in its HF cache (then
``HF_HUB_OFFLINE=1``) or Hub access; the builtin suite (``stages.suite``) never needs either.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from analysis.dynamo_csv import DynamoCsvError, Row, ingest_dynamo_csv
from analysis.errors import UserError

HF_SCRIPT = Path("benchmarks/dynamo/huggingface.py")
RUNNER_SCRIPT = Path("benchmarks/dynamo/runner.py")
COMPILER = "inductor_no_cudagraphs"  # the seed's choice: Inductor without CUDA graphs
DTYPE_FLAGS = {"float32": "--float32", "bfloat16": "--bfloat16", "float16": "--float16", "amp": "--amp"}
MODES = ("inference", "training")
FORMS = ("huggingface", "runner")


@dataclass(frozen=True)
class UpstreamCommand:
    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UpstreamPlan:
    commands: list[UpstreamCommand]
    output_csv: Path  # the performance CSV the commands write
    mode: str
    dtype: str


def _check(mode: str, dtype: str) -> None:
    if mode not in MODES:
        raise UserError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    if dtype not in DTYPE_FLAGS:
        raise UserError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPE_FLAGS)}")


def huggingface_argv(model: str, *, mode: str, dtype: str, device: str, output_csv: Path,
                     python: str = "python") -> list[str]:
    """One model through ``huggingface.py --performance`` (appends its row to ``output_csv``)."""
    _check(mode, dtype)
    return [
        python, str(HF_SCRIPT), "--performance", f"--{mode}", DTYPE_FLAGS[dtype], "--inductor",
        "--disable-cudagraphs", "-d", device, f"--output={output_csv}", "--only", model,
    ]


def runner_csv_name(mode: str, dtype: str, device: str) -> str:
    """runner.py's ``{compiler}_{suite}_{dtype}_{mode}_{device}_{testing}.csv``."""
    return f"{COMPILER}_huggingface_{dtype}_{mode}_{device}_performance.csv"


def runner_argv(*, mode: str, dtype: str, device: str, output_dir: Path, python: str = "python") -> list[str]:
    """The whole HF suite through ``runner.py`` (performance and accuracy passes), as run_hf.sh does."""
    _check(mode, dtype)
    return [
        python, str(RUNNER_SCRIPT), "--suites", "huggingface", f"--{mode}", "--compilers", COMPILER,
        "--dtypes", dtype, "--devices", device, "--no-gh-comment", "--output-dir", str(output_dir),
    ]


def plan_upstream_suite(
    pytorch_src: Path,
    work_dir: Path,
    *,
    models: list[str],
    mode: str,
    dtype: str,
    device: str = "cuda",
    form: str = "huggingface",
    env: dict[str, str] | None = None,
    python: str = "python",
) -> UpstreamPlan:
    """The commands for one variant; ``work_dir`` receives the upstream CSV (and runner.py's logs)."""
    if not (pytorch_src / HF_SCRIPT).is_file():
        raise UserError(f"--pytorch-src {pytorch_src}: no {HF_SCRIPT} there (a PyTorch source tree is needed)")
    if form not in FORMS:
        raise UserError(f"upstream form {form!r}: expected one of {', '.join(FORMS)}")
    env = dict(env or {})
    if form == "runner":
        output_dir = work_dir / "upstream"
        argv = runner_argv(mode=mode, dtype=dtype, device=device, output_dir=output_dir, python=python)
        csv_path = output_dir / runner_csv_name(mode, dtype, device)
        return UpstreamPlan([UpstreamCommand(argv, pytorch_src, env)], csv_path, mode, dtype)
    if not models:
        raise UserError("--models: the huggingface.py form runs named models; give at least one")
    output_csv = work_dir / "upstream" / f"{COMPILER}_huggingface_{dtype}_{mode}_{device}_performance.csv"
    commands = [
        UpstreamCommand(huggingface_argv(m, mode=mode, dtype=dtype, device=device, output_csv=output_csv,
                                         python=python), pytorch_src, env)
        for m in models
    ]
    return UpstreamPlan(commands, output_csv, mode, dtype)


Executor = Callable[[UpstreamCommand], int]


def _subprocess_executor(command: UpstreamCommand) -> int:
    return subprocess.run(command.argv, cwd=command.cwd, env=command.env or None, check=False).returncode


def run_upstream_suite(
    plan: UpstreamPlan,
    suite_csv: Path,
    *,
    cache_dir: Path | None = None,
    cache_archive: Path | None = None,
    execute: Executor = _subprocess_executor,
) -> list[Row]:
    """Run the plan's commands, ingest the CSV into ``suite_csv`` and archive the cache.

    A command's non-zero exit is not fatal: the upstream harness writes a failure row for a failing model
    (speedup 0), which becomes a ``fail`` row here, as in the builtin stage.
    """
    plan.output_csv.parent.mkdir(parents=True, exist_ok=True)
    for command in plan.commands:
        execute(command)
    try:
        rows = ingest_dynamo_csv(plan.output_csv, suite_csv, mode=plan.mode, dtype=plan.dtype, size="full")
    except DynamoCsvError as exc:
        raise UserError(str(exc)) from None
    if cache_dir is not None and cache_archive is not None:
        from stages.suite import archive_cache

        archive_cache(cache_dir, cache_archive)
    return rows
