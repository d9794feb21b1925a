"""benchmarks/gpu_check.sh on a machine without a GPU: the script a lent GPU machine runs unattended must do its
bookkeeping right the first time (bounded steps, a summary line per step, one packed archive), so its plumbing is
tried here with a step that needs no GPU to get as far as its one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"

pytestmark = pytest.mark.integration  # the env step imports torch, triton and transformers in a subprocess


def _run(tmp_path: Path, *steps: str, **knobs: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "PYTHON": sys.executable,
           "RECIPE": "cpu-local", "BUDGET": "300", **knobs}
    return subprocess.run(["bash", str(SCRIPT), *steps], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_step_that_needs_a_gpu_is_logged_with_its_exit_status_and_its_outputs_are_packed(tmp_path: Path) -> None:
    done = _run(tmp_path, "replay-fixture")

    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "--- replay-fixture: rc=2 in " in summary  # perf-report -r: "node replay needs a GPU"
    log = (tmp_path / "work" / "replay-fixture.log").read_text()
    assert "error: node replay needs a GPU" in log and "Traceback" not in log
    with tarfile.open(tmp_path / "out" / "gpu-check.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"./replay-h100/replay-h100_perf_report_replay_set.json", "./replay-fixture.log",
            "./summary.txt"} <= names
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu-check.tar.gz", "summary.txt"]


def test_an_unknown_step_stops_with_the_list_of_steps(tmp_path: Path) -> None:
    done = _run(tmp_path, "comapre")

    assert done.returncode == 2
    steps = "env, compare, round-cost, aa, numerics, ir, rocm, busy, replay-fixture, startup, overhead, gpu-tests"
    assert f"unknown step comapre (expected {steps})" in done.stdout


def test_a_failed_compare_skips_only_the_steps_that_read_its_run(tmp_path: Path) -> None:
    """A compare refused at the door (a model name the suite does not know) leaves no run: the steps that read it
    say so in one line each, and the next independent step still runs and is packed."""
    done = _run(tmp_path, "compare", "round-cost", "ir", "replay-fixture", MODELS="NoSuchModel")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    compare = next(line for line in lines if line.startswith("--- compare: "))
    assert compare.startswith("--- compare: rc=2 in ") and "error: --models: " in compare and "NoSuchModel" in compare
    assert "--- round-cost: skipped (no compare run in this call and no RUN_DIR)" in lines
    assert "--- ir: skipped (no compare run in this call and no RUN_DIR)" in lines
    assert any(line.startswith("--- replay-fixture: rc=2 in ") for line in lines)
    assert "--- busy: skipped (no nvidia-smi utilization samples)" in lines
    with tarfile.open(tmp_path / "out" / "gpu-check.tar.gz") as archive:
        assert {"./compare.log", "./replay-fixture.log", "./summary.txt"} <= set(archive.getnames())


# The seed's experiment as invoke compare's and aa_noise.py's flags spell it (the GPU recipes' [suite]).
SEED_EXPERIMENT = ("--mode training --dtype amp --inductor-config triton.cudagraphs=false "
                   "--env TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE=1")


def _recording_python(tmp_path: Path) -> tuple[Path, Path]:
    """A PYTHON that writes each command line it is given to a file, then runs the real interpreter."""
    calls, wrapper = tmp_path / "python-calls.txt", tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "$*" >>{calls}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, calls


def test_by_default_the_check_runs_the_seeds_experiment_in_the_order_of_what_matters_most(tmp_path: Path) -> None:
    """Without steps named, the compare, its A/A and the numerical A/B all run the seed's experiment (trained in
    AMP, cudagraphs off, pointwise autotuning), in the issue's priority order; each command gets past the flag
    checks (an unknown model is the first thing refused) and a CPU says in one line that it is not ROCm."""
    python, calls = _recording_python(tmp_path)
    done = _run(tmp_path, PYTHON=str(python), MODELS="NoSuchModel", NUMERICS_MODELS="NoSuchModel")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert "mode training, dtype amp, inductor config triton.cudagraphs=false, " \
        "env TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE=1" in lines[0]
    steps = [line.split(":")[0].removeprefix("--- ") for line in lines if line.startswith("--- ")]
    assert steps == ["compare", "round-cost", "aa", "numerics", "ir", "rocm", "busy"]
    for name in ("compare", "aa", "numerics"):
        line = next(line for line in lines if line.startswith(f"--- {name}: "))
        assert "error: --models: unknown model 'NoSuchModel'" in line, line
    assert "--- rocm: skipped: not ROCm" in lines
    commands = calls.read_text().splitlines()
    compares = [c for c in commands if c.startswith("-m invoke compare ")]
    assert len(compares) == 2 and all(SEED_EXPERIMENT in c for c in compares), compares
    assert "--size full" in compares[0] and "--run gpu-compare" in compares[0]
    aa = next(c for c in commands if c.startswith("benchmarks/aa_noise.py --measure "))
    assert SEED_EXPERIMENT in aa and "--size full" in aa


def test_the_experiment_stays_overridable_knob_by_knob(tmp_path: Path) -> None:
    python, calls = _recording_python(tmp_path)
    done = _run(tmp_path, "compare", PYTHON=str(python), MODELS="NoSuchModel", MODE="inference", DTYPE="bfloat16",
                INDUCTOR_CONFIG="", SUITE_ENV="")

    assert done.returncode == 0, done.stdout + done.stderr
    compare = next(c for c in calls.read_text().splitlines() if c.startswith("-m invoke compare "))
    assert "--mode inference --dtype bfloat16 --run gpu-compare" in compare
    assert "--inductor-config" not in compare and "--env" not in compare
