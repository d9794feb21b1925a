"""The pipeline: a stage runs once, is skipped when nothing changed, and is redone when asked or when inputs change."""

from __future__ import annotations

import difflib
import importlib.util
import io
import json
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from foundation.errors import UserError
from foundation.formats.run_layout import MANIFEST
from foundation.io_errors import NoSpaceLeft
from prbench.runners import StageCommand, StageFailed
from prbench.runners.local import LocalRunner
from prbench.runs.pipeline import Pipeline, PreparedVariant, StageSpec
from prbench.runs.run_store import Run, RunStore, StageStatus
from prbench.sides.overlay import PythonOverlay
from prbench.sides.recipes import load_recipe
from prbench.sides.variants import Variant

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
STAGE = "prbench_test_fake_suite"

# A stand-in for stages.suite: writes its CSV (or not, or fails) and counts how often it ran.
STAGE_SOURCE = textwrap.dedent('''
    import argparse, json, os, sys
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--mode", default="ok")
    a = p.parse_args()
    counter = os.path.join(os.path.dirname(os.path.dirname(a.out)), "times_run")
    with open(counter, "a") as f:
        f.write("x")
    print("running the fake suite", flush=True)
    if a.mode == "fail":
        sys.exit("the model crashed")
    if a.mode == "partial":
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        open(a.out, "w").write("{}")
        sys.exit("died after writing its output")
    if a.mode == "nospace":
        tmp = os.path.join(os.environ["TMPDIR"], "cc1.s")
        print("BertForMaskedLM: CppCompileError: C++ compile error", flush=True)
        print(f"{tmp}: fatal error: error writing to {tmp}: No space left on device", flush=True)
        print("compilation terminated.", flush=True)
        sys.exit(1)
    if a.mode == "ok":
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        keep = ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR", "OMP_NUM_THREADS", "PYTHONPATH", "TORCHINDUCTOR_BENCHMARK_KERNEL")
        with open(a.out, "w") as f:
            json.dump({k: os.environ.get(k) for k in keep}, f)
''')


@pytest.fixture
def code(tmp_path: Path) -> Path:
    directory = tmp_path / "code"
    directory.mkdir()
    (directory / f"{STAGE}.py").write_text(STAGE_SOURCE)
    return directory


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")


def pipeline(run: Run, force: tuple[str, ...] = ()) -> tuple[Pipeline, io.StringIO]:
    out = io.StringIO()
    return Pipeline(run, LocalRunner(stream_output=False), Console(file=out, width=200), force=force), out


def variant(**kwargs) -> Variant:
    return Variant(name="base", recipe=load_recipe("cpu-local", RECIPES_DIR), **kwargs)


def suite_spec(prepared: PreparedVariant, code: Path, inputs: dict | None = None, mode: str = "ok",
               resets: list[str] | None = None) -> StageSpec:
    out = prepared.directory / "suite" / "suite.json"
    return StageSpec(
        reset=lambda: resets.append("reset") if resets is not None else None,
        name="suite",
        inputs=inputs if inputs is not None else {"models": ["bert"]},
        outputs=[out],
        command=lambda: StageCommand(module=STAGE, args=["--out", str(out), "--mode", mode], python_path=[code]),
        summarize=lambda: {"models": 1},
    )


def times_run(prepared: PreparedVariant) -> int:
    counter = prepared.directory / "times_run"
    return len(counter.read_text()) if counter.exists() else 0


@pytest.mark.integration
def test_a_stage_runs_once_and_is_skipped_the_second_time(run: Run, code: Path) -> None:
    pipe, console = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)

    first = pipe.run_stage(prepared, suite_spec(prepared, code))
    second = pipe.run_stage(prepared, suite_spec(prepared, code))

    assert times_run(prepared) == 1
    assert first == second
    assert "base/suite: done earlier with the same inputs, skipped" in console.getvalue()


@pytest.mark.integration
def test_a_finished_stage_is_recorded_with_outputs_relative_to_the_run(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)

    digest = pipe.run_stage(prepared, suite_spec(prepared, code))

    record = json.loads((run.root / MANIFEST).read_text())["stages"]["base/suite"]
    assert record["status"] == StageStatus.DONE
    assert record["input_hash"] == digest
    assert record["outputs"] == ["base/suite/suite.json"]
    assert record["summary"] == {"models": 1}
    assert "running the fake suite" in (run.root / "base" / "logs" / "suite.log").read_text()


@pytest.mark.integration
def test_a_later_invocation_resumes_and_skips_finished_work(tmp_path: Path, run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)
    pipe.run_stage(prepared, suite_spec(prepared, code))

    reopened = RunStore(tmp_path / "runs").create_or_open("r1", {}, "0.1.0")
    pipe2, console = pipeline(reopened)
    pipe2.run_stage(pipe2.prepare(variant(), overlay=None, python=sys.executable), suite_spec(prepared, code))

    assert times_run(prepared) == 1
    assert "skipped" in console.getvalue()


@pytest.mark.integration
def test_force_redoes_a_finished_stage(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)
    pipe.run_stage(prepared, suite_spec(prepared, code))

    forced, _ = pipeline(run, force=("suite",))
    forced.run_stage(prepared, suite_spec(prepared, code))

    assert times_run(prepared) == 2


@pytest.mark.integration
def test_changed_inputs_redo_the_stage(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)
    first = pipe.run_stage(prepared, suite_spec(prepared, code, inputs={"models": ["bert"]}))

    second = pipe.run_stage(prepared, suite_spec(prepared, code, inputs={"models": ["bert", "gpt2"]}))
    # Another variant setting (here an Inductor config) changes every stage's inputs too.
    other = pipe.prepare(variant(inductor_config={"max_fusion_size": 1}), overlay=None, python=sys.executable)
    third = pipe.run_stage(other, suite_spec(other, code, inputs={"models": ["bert", "gpt2"]}))

    assert times_run(prepared) == 3
    assert len({first, second, third}) == 3


@pytest.mark.integration
def test_a_deleted_output_redoes_the_stage(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)
    pipe.run_stage(prepared, suite_spec(prepared, code))
    (prepared.directory / "suite" / "suite.json").unlink()

    pipe.run_stage(prepared, suite_spec(prepared, code))

    assert times_run(prepared) == 2
    assert (prepared.directory / "suite" / "suite.json").exists()


@pytest.mark.integration
def test_a_failing_stage_is_recorded_and_retried_next_time(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)

    with pytest.raises(StageFailed, match=r"log: .*base/logs/suite.log"):
        pipe.run_stage(prepared, suite_spec(prepared, code, mode="fail"))
    record = RunStore(run.root.parent).open("r1").record("base/suite")
    assert record is not None and record.status == StageStatus.FAILED

    pipe.run_stage(prepared, suite_spec(prepared, code))
    assert times_run(prepared) == 2


@pytest.mark.integration
def test_a_stage_that_skips_its_output_fails_naming_it(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)

    with pytest.raises(UserError, match=r"^stage base/suite finished but did not write base/suite/suite.json$"):
        pipe.run_stage(prepared, suite_spec(prepared, code, mode="silent"))

    record = RunStore(run.root.parent).open("r1").record("base/suite")
    assert record is not None and record.status == StageStatus.FAILED


@pytest.mark.integration
def test_prepare_writes_env_json_and_the_stage_sees_that_environment(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)

    prepared = pipe.prepare(variant(env={"MY_KNOB": "7"}), overlay=None, python=sys.executable)
    pipe.run_stage(prepared, suite_spec(prepared, code))

    env_json = json.loads((run.root / "base" / "env.json").read_text())
    work = run.root / "base" / "work"
    assert env_json["name"] == "base" and env_json["recipe"] == "cpu-local" and env_json["runner"] == "local"
    assert env_json["overlay_files"] == []
    assert env_json["stage_env"]["MY_KNOB"] == "7"
    assert env_json["stage_env"]["TORCHINDUCTOR_CACHE_DIR"] == str(work / "inductor-cache")
    for d in ("inductor-cache", "triton-cache", "tmp"):
        assert (work / d).is_dir()
    seen = json.loads((prepared.directory / "suite" / "suite.json").read_text())
    assert seen["TORCHINDUCTOR_CACHE_DIR"] == str(work / "inductor-cache")
    assert seen["TMPDIR"] == str(work / "tmp")
    assert seen["OMP_NUM_THREADS"] == "1"
    assert seen["TORCHINDUCTOR_BENCHMARK_KERNEL"] == "1"


@pytest.mark.integration
def test_prepare_with_an_overlay_puts_the_shadow_first_on_the_stage_path(run: Run, code: Path) -> None:
    installed = Path(importlib.util.find_spec("torch").submodule_search_locations[0])
    old = (installed / "_inductor" / "config.py").read_text()
    patch = "".join(difflib.unified_diff(
        old.splitlines(True), old.replace("max_fusion_size = 64\n", "max_fusion_size = 1\n").splitlines(True),
        "a/torch/_inductor/config.py", "b/torch/_inductor/config.py"))
    overlay = PythonOverlay.from_text(patch, origin="pr.diff", flag="--overlay pr.diff")
    pipe, _ = pipeline(run)

    prepared = pipe.prepare(variant(), overlay=overlay, python=sys.executable)
    pipe.run_stage(prepared, suite_spec(prepared, code))

    shadow = run.root / "base" / "work" / "overlay"
    assert prepared.python_path == [shadow]
    assert (run.root / "base" / "overlay.patch").read_text() == patch
    assert json.loads((run.root / "base" / "env.json").read_text())["overlay_files"] == ["torch/_inductor/config.py"]
    seen = json.loads((prepared.directory / "suite" / "suite.json").read_text())
    assert seen["PYTHONPATH"].split(":")[:2] == [str(shadow), str(code)]


@pytest.mark.integration
def test_reset_clears_stale_work_only_when_the_old_attempt_cannot_be_resumed(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)
    resets: list[str] = []

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # an attempt the user interrupts...
        pipe.run_stage(prepared, replace(suite_spec(prepared, code, resets=resets), host=ctrl_c))
    assert resets == ["reset"]  # (a first attempt starts clean)
    pipe.run_stage(prepared, suite_spec(prepared, code, resets=resets))
    assert resets == ["reset"]  # ...is resumed with the same inputs: what it wrote is kept
    pipe.run_stage(prepared, suite_spec(prepared, code, resets=resets))
    assert resets == ["reset"]  # skipped: nothing to reset

    pipe.run_stage(prepared, suite_spec(prepared, code, inputs={"models": ["gpt2"]}, resets=resets))
    assert resets == ["reset", "reset"]  # other inputs: the old results are stale
    forced, _ = pipeline(run, force=("suite",))
    forced.run_stage(prepared, suite_spec(prepared, code, inputs={"models": ["gpt2"]}, resets=resets))
    assert resets == ["reset", "reset", "reset"]


@pytest.mark.integration
def test_a_stage_that_fails_after_writing_leaves_no_output_but_keeps_its_log(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)
    resets: list[str] = []
    out = prepared.directory / "suite" / "suite.json"

    with pytest.raises(StageFailed):  # the stage writes its output, then dies
        pipe.run_stage(prepared, suite_spec(prepared, code, mode="partial", resets=resets))

    assert not out.exists()  # nothing that a later step or `invoke report` could take for a result
    assert resets == ["reset", "reset"]  # a first attempt starts clean, and a failed one is cleaned up
    assert "running the fake suite" in (prepared.directory / "logs" / "suite.log").read_text()
    record = run.record("base/suite")
    assert record is not None and record.status == StageStatus.FAILED
    pipe.run_stage(prepared, suite_spec(prepared, code, resets=resets))  # the next attempt starts over
    assert out.exists() and times_run(prepared) == 2


@pytest.mark.integration
def test_a_stage_that_failed_on_a_full_disk_says_so_in_one_line(run: Run, code: Path) -> None:
    pipe, _ = pipeline(run)
    prepared = pipe.prepare(variant(), overlay=None, python=sys.executable)

    # The suite's compile on a full disk: a CppCompileError whose text holds the compiler's message, then exit 1.
    with pytest.raises(NoSpaceLeft) as info:
        pipe.run_stage(prepared, suite_spec(prepared, code, mode="nospace"))

    message = str(info.value)
    tmp = prepared.directory / "work" / "tmp" / "cc1.s"
    assert message.startswith(f"no space left on device writing {tmp}: free space or use --runs-dir elsewhere")
    assert "log: " in message and "\n" not in message


@pytest.mark.integration
def test_a_joint_stage_belongs_to_the_run_logs_there_and_is_forced_by_its_kind(run: Run, code: Path) -> None:
    pipe, console = pipeline(run)
    out = run.path("pair", "kernels", "round-001.json")
    runner = LocalRunner(stream_output=False)
    spec = StageSpec(name="kernels-round-1", inputs={"upstream": {"base": "a", "pr": "b"}, "round": 1},
                     outputs=[out], commands=lambda: [(runner, StageCommand(
                         module=STAGE, args=["--out", str(out)], python_path=[code]))])

    first = pipe.run_joint_stage(spec)
    pipe.run_joint_stage(spec)

    record = run.record("pair/kernels-round-1")
    assert record is not None and record.status == StageStatus.DONE and record.outputs == [
        "pair/kernels/round-001.json"]
    assert "running the fake suite" in run.path("pair", "logs", "kernels-round-1.log").read_text()
    assert "pair/kernels-round-1: done earlier with the same inputs, skipped" in console.getvalue()
    forced, _ = pipeline(run, force=("kernels",))
    assert forced.run_joint_stage(spec) == first
    assert len((run.path("pair", "times_run")).read_text()) == 2
