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
    steps = "env, compare, round-cost, ir, aa, numerics, busy, replay-fixture, startup, overhead, gpu-tests"
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
