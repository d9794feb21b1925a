"""``invoke compare``: plan both variants, run their stages (resumable), then compare and report.

Stages per variant: suite → organize → kernels. The report stage reads only the run directory, so
``invoke report RUN`` re-renders it later without re-running anything.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from analysis import atomic_io
from analysis.errors import UserError
from analysis.kernel_results import merge_rounds
from prbench import __version__
from prbench.kernel_stages import kernels_command, organize_command
from prbench.pipeline import Pipeline, PreparedVariant, StageSpec
from prbench.recipes import Recipe
from prbench.runners import StageCommand
from prbench.runners.local import LocalRunner
from prbench.runstore import Run, RunStore
from prbench.suite_stage import (
    SuiteSettings,
    cache_archive,
    clear_outputs,
    stage_command,
    stage_inputs,
    suite_outputs,
    upstream_tree,
)
from prbench.suite_stage import summarize as summarize_suite
from prbench.variant_plan import ComparePlan, VariantPlan, local_lock, plan_docker, plan_local
from prbench.variants import Variant
from stages.suite import GRAPH_MODELS

STAGES = ("suite", "organize", "kernels", "profile", "report")


@dataclass(frozen=True)
class KernelSettings:
    warmup: int = 10
    iterations: int = 30
    timeout_s: float = 300.0
    rounds: int = 4  # alternating base/PR timing rounds, pooled per side


@dataclass(frozen=True)
class CompareSettings:
    threshold: float = 0.05
    alpha: float = 0.05
    min_ms: float = 0.0


@dataclass
class CompareRequest:
    base: str
    pr: str
    recipe: Recipe
    runs_dir: Path
    run_id: str | None = None
    pytorch_src: Path | None = None
    # The PyTorch tree the upstream suite runs from, as the environment sees it (default for docker recipes:
    # the image's tree); only with suite.source == "upstream".
    upstream_src: Path | None = None
    suite: SuiteSettings = field(default_factory=SuiteSettings)
    kernels: KernelSettings = field(default_factory=KernelSettings)
    compare: CompareSettings = field(default_factory=CompareSettings)
    env: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)
    force: tuple[str, ...] = ()
    python: str = sys.executable
    profile: bool = False  # torch.profiler traces of the suite models, diffed in the report


def validate_force(force: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    unknown = [s for s in force if s not in STAGES]
    if unknown:
        raise UserError(f"--force {unknown[0]}: unknown stage (stages: {', '.join(STAGES)})")
    return tuple(force)


def plan(request: CompareRequest) -> ComparePlan:
    if request.recipe.is_docker:
        return plan_docker(request.base, request.pr, request.recipe, request.pytorch_src)
    return plan_local(request.base, request.pr, request.pytorch_src, request.python)


def run_compare(request: CompareRequest, console: Console | None = None) -> tuple[Run, Any]:
    """Run (or resume) a comparison; return the run and the report's paths."""
    console = console or Console()
    request.suite.validate()
    tree = upstream_tree(request.suite, request.recipe, request.upstream_src)
    compare_plan = plan(request)  # every ref and patch is checked before anything is written
    run = RunStore(request.runs_dir).create_or_open(request.run_id, _settings(request, compare_plan, tree),
                                                    __version__)
    console.print(f"run [bold]{run.run_id}[/] in {run.root}")
    locks: dict[str, Any] = {}
    sides: list[_Side] = []
    for plan_side in (compare_plan.base, compare_plan.pr):
        console.print(f"[bold]{plan_side.name}[/]: {plan_side.how}")
        runner, locks[plan_side.name] = _environment(plan_side, request, compare_plan, run)
        pipeline = Pipeline(run, runner, console=console, force=request.force)
        local_overlay = plan_side.overlay if not request.recipe.is_docker else None
        side = _Side(pipeline, pipeline.prepare(_variant(plan_side, request), local_overlay, request.python))
        _prepare_kernels(side, request, tree)
        sides.append(side)
    _time_kernels(sides, request)
    if request.profile:
        for side in sides:
            _profile(side, request)
    atomic_io.write_json(run.path("lock.json"), locks)
    paths = _report(run)
    return run, paths


def _environment(side: VariantPlan, request: CompareRequest, compare_plan: ComparePlan, run: Run) -> tuple[Any, Any]:
    """The runner for one side and its lock: the local Python, or the image built for the side."""
    if not request.recipe.is_docker:
        return LocalRunner(python=request.python), local_lock(request.python, side)
    from prbench.images import docker_client, plan_build
    from prbench.lock import build_and_lock, read_lock
    from prbench.runners.docker import DockerRunner

    overlay_path = None
    if side.overlay is not None:
        overlay_path = run.path(side.name, "overlay.patch")
        atomic_io.write_text(overlay_path, side.overlay.patch_text)
    build_plan = plan_build(request.recipe, pytorch_src=request.pytorch_src, pytorch_ref=side.pytorch_ref,
                            overlay=overlay_path, merge_base=compare_plan.merge_base)
    client = docker_client()
    outcome = build_and_lock(build_plan, client, request.runs_dir / "images",
                             lock_path=run.path(side.name, "lock.json"))
    runner = DockerRunner(outcome.result.image_id, request.recipe.platform, writable=[run.root], client=client)
    return runner, read_lock(outcome.lock_path)


def _variant(side: VariantPlan, request: CompareRequest) -> Variant:
    return Variant(
        name=side.name,
        recipe=request.recipe,
        pytorch_ref=side.pytorch_ref,
        overlay_sha256=side.overlay.sha256 if side.overlay else None,
        env=dict(request.env),
        inductor_config=dict(request.inductor_config),
    )


@dataclass
class _Side:
    pipeline: Pipeline
    prepared: PreparedVariant
    suite_hash: str = ""
    organize_hash: str = ""


def _prepare_kernels(side: _Side, request: CompareRequest, upstream_src: Path | None) -> None:
    """suite → organize for one side."""
    pipeline, prepared = side.pipeline, side.prepared
    directory = prepared.directory
    organized = directory / "organized"
    side.suite_hash = pipeline.run_stage(prepared, StageSpec(
        name="suite",
        inputs=stage_inputs(request.suite, upstream_src),
        outputs=suite_outputs(directory),
        # stages.upstream_suite when request.suite.source == "upstream", else stages.suite
        command=lambda: stage_command(directory, request.suite, upstream_src),
        summarize=lambda: summarize_suite(directory),
        reset=lambda: clear_outputs(directory),
    ))
    side.organize_hash = pipeline.run_stage(prepared, StageSpec(
        name="organize",
        inputs={"suite": side.suite_hash},
        outputs=[organized / "index.csv"],
        command=lambda: organize_command(cache_archive(directory), organized,
                                         extract_to=directory / "work" / "extracted-cache",
                                         graph_models=directory / "suite" / GRAPH_MODELS),
        summarize=lambda: {"kernels": _count_rows(organized / "index.csv")},
        reset=lambda: shutil.rmtree(organized, ignore_errors=True),
    ))


def _time_kernels(sides: list[_Side], request: CompareRequest) -> None:
    """Kernel timing in rounds that alternate between the sides (AB, BA, AB, ...), then pooled per side.

    Timing base and PR at different moments lets the machine's drift (clock, thermals, neighbours) pose as a
    change; alternating the order cancels a linear drift, and fresh worker processes per round put the
    between-process spread into the samples the statistical test sees.
    """
    round_hashes: dict[str, list[str]] = {s.prepared.variant.name: [] for s in sides}
    for number in range(1, request.kernels.rounds + 1):
        for side in sides if number % 2 else reversed(sides):
            digest = side.pipeline.run_stage(side.prepared, _round_spec(side, number, request))
            round_hashes[side.prepared.variant.name].append(digest)
    for side in sides:
        directory = side.prepared.directory
        rounds = [_round_dir(side, n) for n in range(1, request.kernels.rounds + 1)]
        side.pipeline.run_stage(side.prepared, StageSpec(
            name="kernels",
            inputs={"rounds": round_hashes[side.prepared.variant.name]},
            outputs=[directory / "kernels.csv", directory / "kernel_samples.json", directory / "kernels_seed.csv"],
            host=lambda rounds=rounds, directory=directory: merge_rounds(rounds, directory),
            summarize=lambda directory=directory: {"rows": _count_rows(directory / "kernels.csv")},
        ))


def _round_dir(side: _Side, number: int) -> Path:
    return side.prepared.directory / "kernel-rounds" / str(number)


def _round_spec(side: _Side, number: int, request: CompareRequest) -> StageSpec:
    prepared = side.prepared
    out = _round_dir(side, number)
    settings = {k: v for k, v in asdict(request.kernels).items() if k != "rounds"}
    return StageSpec(
        name=f"kernels-{number}",
        inputs={"organize": side.organize_hash, "round": number, **settings},
        outputs=[out / "kernels.csv", out / "kernel_samples.json"],
        command=lambda: kernels_command(
            prepared.directory / "organized", out,
            devices="cpu" if request.recipe.platform == "cpu" else "0",
            warmup=request.kernels.warmup, iterations=request.kernels.iterations,
            timeout_s=request.kernels.timeout_s, cache_dir=Path(prepared.env["TORCHINDUCTOR_CACHE_DIR"]),
            work_dir=prepared.directory / "work" / "kernels", platform=request.recipe.platform,
        ),
        reset=lambda: shutil.rmtree(out, ignore_errors=True),
    )


def _profile(side: _Side, request: CompareRequest) -> None:
    prepared = side.prepared
    directory = prepared.directory
    profiles = directory / "profiles"
    side.pipeline.run_stage(prepared, StageSpec(
        name="profile",
        inputs={"suite": side.suite_hash},
        outputs=[profiles / "profile_index.csv"],
        command=lambda: StageCommand(module="stages.profile", args=[
            "--suite-csv", str(directory / "suite" / "suite.csv"), "--out", str(profiles),
            "--graphs", str(directory / "organized" / "graphs"),
            "--inductor-cache", prepared.env["TORCHINDUCTOR_CACHE_DIR"],
            "--device", request.suite.device, "--times", "3", "--repeat", "3",
        ]),
        reset=lambda: shutil.rmtree(profiles, ignore_errors=True),
    ))


def _report(run: Run) -> Any:
    from analysis.report import load_report_inputs, render_report
    from analysis.traces.trace_diff import profile_dirs_markdown

    inputs = {key: rec.input_hash for key, rec in run.manifest.stages.items() if key != "report"}
    out_dir = run.path("report")
    with run.stage("report", inputs) as record:
        report_inputs = load_report_inputs(run.root)
        profiled = profile_dirs_markdown(run.path("base", "profiles"), run.path("pr", "profiles"))
        report_inputs.trace_diff_md = profiled or report_inputs.trace_diff_md
        paths = render_report(report_inputs, out_dir)
        record.outputs = [run.relative(paths.report_md), run.relative(paths.kernels_csv), run.relative(paths.xlsx)]
        record.summary = {"verdict": paths.verdict}
    return paths


def _settings(request: CompareRequest, compare_plan: ComparePlan, upstream_src: Path | None) -> dict[str, Any]:
    return {
        "recipe": request.recipe.name,
        "base": request.base,
        "pr": request.pr,
        "installed_commit": compare_plan.installed_commit,
        "merge_base": compare_plan.merge_base,
        "suite": stage_inputs(request.suite, upstream_src),
        "kernels": asdict(request.kernels),
        "compare": asdict(request.compare),
    }


def _count_rows(csv_path: Path) -> int:
    with open(csv_path, encoding="utf-8") as fh:
        return max(sum(1 for _ in fh) - 1, 0)
