"""A user runs `invoke compare --devices 7` on a ROCm (or CUDA) machine: every stage of both sides runs on GPU 7 —
the suite (as one stage, or its shards), launch cost, the profile and the paired rounds — pinned the one way
`foundation.formats.stage_records.visible_devices_env` says (HIP_VISIBLE_DEVICES on rocm, CUDA_VISIBLE_DEVICES on
cuda), and no visible-devices variable of the shell or of ``--env`` renumbers it. Organize reads files only.

Checked on the commands the comparison builds for each stage (no GPU is needed to see where a stage would run).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from foundation.formats.stage_records import VISIBLE_DEVICES, pinned_over, visible_devices_env
from foundation.formats.suite_request import SuiteRequest
from prbench.compare import driver
from prbench.compare.driver import CompareRequest, Comparison
from prbench.executors import DeviceSlot, RunnerSpec, placed
from prbench.runners import StageCommand
from prbench.runners.local import LocalRunner
from prbench.runs.pipeline import PreparedVariant
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from prbench.stages.suite_shards import suite_shards
from stages import suite as suite_stage

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = [("rocm7-mi300", "HIP_VISIBLE_DEVICES"), ("cuda-h100", "CUDA_VISIBLE_DEVICES")]


@dataclass
class RecordingPipeline:
    """Stands in for a side's pipeline: records the command of every stage it is asked to run."""

    commands: dict[str, StageCommand] = field(default_factory=dict)

    def run_stage(self, prepared: PreparedVariant, spec: Any) -> str:
        self.commands[spec.name] = spec.command()
        return f"{spec.name}-hash"


def _side(recipe, tmp_path: Path) -> driver._Side:
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "base" / "work" / "inductor-cache")}
    prepared = PreparedVariant(Variant("base", recipe), tmp_path / "base", env, [])
    return driver._Side(RecordingPipeline(), prepared, RunnerSpec("local", platform=recipe.platform))  # type: ignore[arg-type]


def _request(recipe, tmp_path: Path, **kw: Any) -> CompareRequest:
    return CompareRequest(base="installed", pr="installed", recipe=recipe, runs_dir=tmp_path / "runs",
                          suite=SuiteRequest(device="cuda"), profile=True, **kw)


def _pinned_to(command: StageCommand) -> dict[str, str]:
    return {var: command.env[var] for var in VISIBLE_DEVICES if var in command.env}


@pytest.mark.parametrize(("recipe_name", "variable"), PLATFORMS)
def test_every_stage_of_a_side_runs_on_the_device_given(recipe_name: str, variable: str, tmp_path: Path) -> None:
    recipe = load_recipe(recipe_name, ROOT / "recipes")
    request = _request(recipe, tmp_path, devices=("7",))
    side = _side(recipe, tmp_path)
    pipeline = side.pipeline
    assert isinstance(pipeline, RecordingPipeline)

    suite = driver._suite_spec(side, request, None).command()
    driver._prepare_kernels(side, request)
    Comparison(request, None, [side, side], driver._Rounds(request, Console())).profile(side)  # type: ignore[arg-type]

    stages = {"suite": suite, **pipeline.commands}
    assert sorted(stages) == ["launch_cost", "organize", "profile", "suite"]
    for name in ("suite", "launch_cost", "profile"):
        assert _pinned_to(stages[name]) == {variable: "7"}, name
    assert _pinned_to(stages["organize"]) == {}  # it reads the cache's files; no device

    upstream = driver._suite_spec(side, replace(request, suite=replace(request.suite, source="upstream")),
                                  Path("/opt/prbench/src/pytorch")).command()
    assert upstream.module == "stages.upstream_suite" and _pinned_to(upstream) == {variable: "7"}


@pytest.mark.parametrize(("recipe_name", "variable"), PLATFORMS)
def test_the_paired_rounds_and_the_suite_shards_run_on_the_device_given(recipe_name: str, variable: str,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe(recipe_name, ROOT / "recipes")
    request = _request(recipe, tmp_path, devices=("7",))
    rounds = driver._Rounds(request, Console())
    try:
        executor = rounds.executor()
        assert [slot.device for slot in executor.slots] == ["7"]  # type: ignore[attr-defined]
    finally:
        rounds.close()
    assert driver._device(request) == "7"  # the paired plans' device (their workers' environment)

    # A shard of the suite placed on GPU 7 pins itself there before torch is imported.
    shards = suite_shards("base", tmp_path / "base", "digest", SuiteRequest(models="BertForMaskedLM"), 1,
                          RunnerSpec("local", platform=recipe.platform), {}, [])
    command = placed(shards.task(0).steps[0].command, DeviceSlot("node", "7", frozenset({0})))
    args = suite_stage.build_parser().parse_args(command.args)
    environ = {"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1", "PATH": "/usr/bin"}
    monkeypatch.setattr(os, "environ", environ)
    assert suite_stage.pin_device(args.device, args.platform) == "cuda"
    assert {var: environ[var] for var in VISIBLE_DEVICES if var in environ} == {variable: "7"}


def test_a_pin_replaces_the_shells_and_the_env_flags_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    pin = visible_devices_env("7", "rocm")
    assert pin == {"HIP_VISIBLE_DEVICES": "7"}  # one variable: ROCm would apply CUDA_VISIBLE_DEVICES on top
    # --env CUDA_VISIBLE_DEVICES=3 in the side's environment (the pipeline's merge)
    assert pinned_over({"CUDA_VISIBLE_DEVICES": "3", "A": "1"}, pin) == {"A": "1", "HIP_VISIBLE_DEVICES": "7"}
    assert pinned_over({"CUDA_VISIBLE_DEVICES": "3"}, {"A": "1"}) == {"CUDA_VISIBLE_DEVICES": "3", "A": "1"}
    # the shell the local runner starts the stage from
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0,1")
    env = LocalRunner().environment(StageCommand("stages.launch_cost", [], env=dict(pin)))
    assert env["HIP_VISIBLE_DEVICES"] == "7" and "ROCR_VISIBLE_DEVICES" not in env


def test_a_cpu_comparison_runs_its_stages_as_before(tmp_path: Path) -> None:
    recipe = load_recipe("cpu-local", ROOT / "recipes")
    request = _request(recipe, tmp_path, devices=("cpu", "cpu"))
    side = _side(recipe, tmp_path)
    driver._prepare_kernels(side, request)
    suite = driver._suite_spec(side, request, None).command()
    assert driver._device(request) == "cpu"
    assert [_pinned_to(c) for c in (suite, *side.pipeline.commands.values())] == [{}, {}, {}]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("recipe_name", "variable"), PLATFORMS)
def test_without_devices_the_stages_run_on_the_gpu_the_shell_names(recipe_name: str, variable: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed picks its GPU with CUDA_VISIBLE_DEVICES=3 before running: a compare without --devices keeps it."""
    recipe = load_recipe(recipe_name, ROOT / "recipes")
    for var in VISIBLE_DEVICES:
        monkeypatch.delenv(var, raising=False)
    side = _side(recipe, tmp_path)
    assert _pinned_to(driver._suite_spec(side, _request(recipe, tmp_path), None).command()) == {variable: "0"}

    monkeypatch.setenv(variable, "3,5")
    suite = driver._suite_spec(side, _request(recipe, tmp_path), None).command()
    assert _pinned_to(suite) == {variable: "3"}
