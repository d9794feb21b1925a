"""The one real ``invoke compare`` on the embedded default that several test modules read: the README's example PR
on ElectraForCausalLM with short timings. ``tests/conftest.py`` runs it once per session (fixture
``electra_compare``); a test that redoes a stage works on a copy (``copy_run``), so every reader sees the results
the compare left."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cpu-prefer-256bit-vectors.patch"
RUN_ID = "e2e"
# One tiny model, three rounds (an interval, and the first side alternating between rounds), two passes (the
# alternation between passes): the least that shows every claim made on this run.
ELECTRA_FLAGS = ("--base=installed", f"--pr={EXAMPLE}", "--models", "ElectraForCausalLM", "--iterations", "10",
                 "--warmup", "3", "--kernel-iterations", "10", "--rounds", "3", "--passes", "2")


def invoke(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """``invoke ARGS`` in a process of its own, as the user types it, from the project root."""
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def run_electra_compare(runs: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """The compare into ``runs``: the run directory and the finished process."""
    proc = invoke("compare", *ELECTRA_FLAGS, "--runs-dir", str(runs), "--run", RUN_ID)
    return runs / RUN_ID, proc


def copy_run(run: Path, runs: Path) -> Path:
    """A copy of ``run`` under ``runs`` with the same id; the run's stages resume from it as from the original
    (a stage's inputs name no path of the run directory)."""
    copy = runs / run.name
    shutil.copytree(run, copy, symlinks=True)
    return copy
