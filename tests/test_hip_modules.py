"""ROCm's HIP module table: one process that loads thousands of kernel modules fails every later load with error 209
(``hipErrorNoBinaryForGpu``). On ROCm the suite compiles each model in its own process, a model worker holds one
model, a kernel worker is replaced every N modules, and a job that meets error 209 runs once more in a fresh worker.

The table is simulated by the stand-in worker (``tests.support.fake_paired_worker``): a ``hip`` kernel loads a module at
its first call, and past ``FAKE_HIP_TABLE`` modules in one process that load fails with the text Triton's HIP driver
raises; a ``no-binary`` kernel fails with the static launcher's error 209 in every process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from foundation.formats.stage_records import Job, Plan, SidePlan, read_plan, write_plan
from foundation.formats.suite_request import SuiteRequest
from foundation.hip_modules import (
    ROCM_MODELS_PER_PROCESS,
    ROCM_MODULES_PER_WORKER,
    is_error_209,
    models_per_process,
    modules_per_worker,
)
from prbench.executors import RunnerSpec
from prbench.runners import CODE_ROOT
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant
from prbench.stages.suite_shards import spread_shard_size, suite_shards
from stages.kernels import run_jobs
from stages.paired import run_round
from stages.support.worker_process import Worker
from tests.support.fake_paired_worker import STATIC_LAUNCHER_209, TRITON_HIP_209

ROOT = Path(__file__).resolve().parents[1]
FAKE = "tests.support.fake_paired_worker"
TABLE = {"FAKE_HIP_TABLE": "2"}  # a process holds 2 kernel modules; the third load fails with error 209


# --- the rule ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    f"RuntimeError: {TRITON_HIP_209}",
    "InductorError: RuntimeError: CUDA driver error: 209",
    "RuntimeError: CUDA driver error code: 209",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "torch.AcceleratorError: HIP error: hipErrorNoBinaryForGpu",
    "error 209 while loading the winner kernel",
])
def test_every_way_the_stack_words_error_209_is_recognized(text: str) -> None:
    assert is_error_209(text)


@pytest.mark.parametrize("text", [
    "",
    "Triton Error [HIP]:  Code: 1, Messsage: invalid argument",
    "worker exited with code 209 while running it; worker restarted",
    "timeout: no result after 209 s running it; worker restarted",
    "RuntimeError: CUDA driver error: 2090",
    "HIP out of memory. Tried to allocate 209.00 MiB",
])
def test_other_failures_are_not_error_209(text: str) -> None:
    assert not is_error_209(text)


def test_only_rocm_cuts_the_work_of_one_process() -> None:
    assert (modules_per_worker("rocm"), models_per_process("rocm")) == (ROCM_MODULES_PER_WORKER,
                                                                      ROCM_MODELS_PER_PROCESS)
    assert ROCM_MODULES_PER_WORKER > 0 and ROCM_MODELS_PER_PROCESS == 1
    for platform in ("cpu", "cuda"):
        assert (modules_per_worker(platform), models_per_process(platform)) == (0, 0)


# --- the suite -------------------------------------------------------------------------------


def test_on_rocm_the_suite_compiles_each_model_in_its_own_process(tmp_path: Path) -> None:
    models = "BertForMaskedLM,DistilBertForMaskedLM,GPT2ForSequenceClassification"
    size = spread_shard_size(None, "local", 1, "rocm")
    settings = SuiteRequest(models=models, warmup=3, iterations=10, device="cuda")
    variant = Variant(name="base", recipe=load_recipe("cpu-local", CODE_ROOT / "recipes"))
    shards = suite_shards("base", tmp_path / "base", "d1", settings, size,
                          RunnerSpec("local", platform="rocm", python=sys.executable),
                          variant.stage_environment(tmp_path / "base"), [])

    commands = [shards.task(i).steps[0].command for i in range(len(shards.shards))]
    assert [c.args[c.args.index("--models") + 1] for c in commands] == models.split(",")
    assert len({c.env["TORCHINDUCTOR_CACHE_DIR"] for c in commands}) == 3  # as three suites of one model each
    assert spread_shard_size(None, "local", 1, "cpu") == 0  # the CPU quick start: one suite stage, as before
    assert spread_shard_size(0, "local", 1, "rocm") == 0  # --suite-shard-size 0: the user's word wins


# --- the paired kernel rounds -------------------------------------------------------------------------------------


def kernel(name: str, behave: str) -> dict[str, Any]:
    return {"path": f"/organized/{name}.py", "kernels": {name: f"pointwise/{name}.py"}, "behave": behave,
            "iterations": 3, "timeout_s": 30.0}


def kernel_round_plan(tmp_path: Path, names: dict[str, str], modules_per_worker: int, passes: int = 1) -> Plan:
    """Base and PR time the same kernels; every fresh worker first loads its group's modules (a prepare)."""
    blocks = [{"base": kernel(n, b), "pr": kernel(n, b)} for n, b in names.items()]
    loads = [{**kernel(n, b), "kind": "load"} for n, b in names.items()]
    sides = {side: SidePlan(env={"PYTHONPATH": str(ROOT), **TABLE}, log=str(tmp_path / f"{side}.log"),
                            prepare=loads) for side in ("base", "pr")}
    plan = Plan(kind="kernels", worker=FAKE, device="cpu", sides=sides, blocks=blocks, passes=passes,
                modules_per_worker=modules_per_worker)
    write_plan(tmp_path / "plan.json", plan)
    return read_plan(tmp_path / "plan.json")  # as the stage reads it


@pytest.mark.integration
def test_a_simulated_error_209_recycles_the_worker_the_retry_passes_and_a_second_209_is_the_jobs_error(
        tmp_path: Path) -> None:
    names = {"k0": "hip", "k1": "hip", "k2": "hip", "bad": "no-binary", "k3": "hip"}
    lines: list[str] = []

    record = run_round(kernel_round_plan(tmp_path, names, modules_per_worker=0, passes=2), 1, ["base", "pr"],
                       say=lines.append)

    by_item: dict[tuple[str, str], list[Any]] = {}
    for visit in record.visits:
        by_item.setdefault((visit.side, visit.item), []).append(visit)
    for side in ("base", "pr"):
        # k2 was the third module of its worker: error 209, then timed in a fresh worker (k1 and k3 in pass 2 too).
        # Two visits per side per block and pass (A B B A), all of them timed.
        for name in ("k0", "k1", "k2", "k3"):
            assert [(v.error, v.samples) for v in by_item[(side, f"pointwise/{name}.py")]] == [("", [1.0] * 3)] * 4
        bad = by_item[(side, "pointwise/bad.py")]
        assert [v.pass_index for v in bad] == [0, 0, 1, 1]
        assert all(STATIC_LAUNCHER_209 in v.error and not v.samples for v in bad)  # recorded with its error
        assert record.workers[side]["starts"] == 6  # k2, bad twice, then k1 and k3 in pass 2: fresh workers
    assert "pair: base k2.py: error 209; timed again in a fresh worker" in lines
    assert sum("pair: base bad.py: error 209" in line for line in lines) == 1  # retried once, then skipped
    assert any(line.startswith("[pair] 10/10 k3.py: ok") for line in lines)  # the rest of the round ran


@pytest.mark.integration
def test_kernel_workers_are_replaced_every_n_modules_and_load_only_their_groups(tmp_path: Path) -> None:
    names = {f"k{i}": "hip" for i in range(5)}

    record = run_round(kernel_round_plan(tmp_path, names, modules_per_worker=2), 1, ["base", "pr"],
                       say=lambda _: None)

    assert not [v for v in record.visits if v.error]  # 2 modules per worker: the table never fills
    assert record.workers["base"]["starts"] == record.workers["pr"]["starts"] == 3
    loads: dict[str, list[str]] = {}
    for line in (tmp_path / "base.log").read_text().splitlines():
        if line.startswith("load "):
            loads.setdefault(line.split()[3], []).append(line.split()[1])
    assert list(loads.values()) == [["k0", "k1"], ["k2", "k3"], ["k4"]]


# --- invoke kernels -----------------------------------------------------------------------------------------------


def kernel_job(job_id: int, behave: str) -> Job:
    """A job of ``stages.kernels``: the stand-in worker reads what it does from the file's name."""
    return Job(job_id, "triton", f"/organized/k{job_id}/{behave}.py", {f"k{job_id}": f"pointwise/k{job_id}.py"}, 0, 3,
               30.0)


def fake_worker(tmp_path: Path) -> Worker:
    return Worker("worker0[cpu]", FAKE, {**os.environ, "PYTHONPATH": str(ROOT), **TABLE}, tmp_path / "worker0.log")


@pytest.mark.integration
def test_invoke_kernels_replaces_its_worker_every_n_modules_and_after_error_209(tmp_path: Path) -> None:
    jobs = [kernel_job(0, "hip"), kernel_job(1, "hip"), kernel_job(2, "no-binary"), kernel_job(3, "hip"),
            kernel_job(4, "hip"), kernel_job(5, "hip")]
    lines: list[str] = []
    worker = fake_worker(tmp_path)

    outcomes = run_jobs(jobs, [worker], progress=lines.append, modules_per_worker=2)

    assert {path: o.samples for path, o in outcomes.items() if not o.error} == {
        f"pointwise/k{i}.py": [1.0] * 3 for i in (0, 1, 3, 4, 5)}
    assert STATIC_LAUNCHER_209 in outcomes["pointwise/k2.py"].error
    assert "kernels: worker0[cpu] no-binary.py: error 209; run again in a fresh worker" in lines
    # k0 k1 | k2 (209) | k2 again (209) | k3 k4 | k5: a worker per 2 modules, and one for the retry
    assert worker.starts == 5

    unlimited = fake_worker(tmp_path)
    outcomes = run_jobs([kernel_job(i, "hip") for i in range(4)], [unlimited], progress=lambda _: None)
    assert not [o for o in outcomes.values() if o.error]  # k2 met error 209, passed in a fresh worker
    assert unlimited.starts == 2
