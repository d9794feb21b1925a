"""The one real ``invoke compare`` on the embedded default that several test modules read: the README's example PR
on ElectraForCausalLM with short timings. ``tests/conftest.py`` runs it once per session (fixture
``electra_compare``); a test that redoes a stage works on a copy (``copy_run``), so every reader sees the results
the compare left. A test that compares another PR on the same base side (the same recipe, torch and suite flags)
starts its run with this run's base side (``seed_base``) and shows that its compare skipped the side's work
(``skipped_base_stages``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from prbench import __version__
from prbench.runs.run_store import RunStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cpu-prefer-256bit-vectors.patch"
RUN_ID = "e2e"
# One tiny model, three rounds (an interval, and the first side alternating between rounds), two passes (the
# alternation between passes): the least that shows every claim made on this run.
SUITE_FLAGS = ("--models", "ElectraForCausalLM", "--iterations", "10", "--warmup", "3", "--kernel-iterations", "10",
               "--rounds", "3", "--passes", "2")
ELECTRA_FLAGS = ("--base=installed", f"--pr={EXAMPLE}", *SUITE_FLAGS)
# The base side's work before its rounds: what a run seeded with this run's base side no longer does.
BASE_STAGES = ("base/suite", "base/organize", "base/launch_cost")


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


def seed_base(electra: Path, runs: Path, run_id: str) -> Path:
    """The run ``run_id`` under ``runs``, started with the base side of the compare ``electra`` (its directory and
    its finished stages), as a bisect's steps start with their good commit: a compare into it skips the stages it
    gives the same inputs and redoes the others."""
    taken = RunStore(runs).seed_side(run_id, "base", RunStore(electra.parent).open(electra.name), __version__)
    assert set(BASE_STAGES) <= set(taken), f"{electra} did not finish its base side: {taken}"
    return runs / run_id


def skipped_base_stages(run: Path, electra: Path, output: str) -> list[str]:
    """Those of `BASE_STAGES` that the compare into ``run`` (seeded by `seed_base`, printing ``output``) did not
    run: it said it skipped them, and the manifest still holds the record ``electra`` made."""
    ours, theirs = (RunStore(r.parent).open(r.name).manifest.stages for r in (run, electra))
    return [key for key in BASE_STAGES if f"{key}: done earlier with the same inputs, skipped" in output
            and key in ours and ours[key].finished == theirs[key].finished]


def executor_independent(run: Path) -> dict[str, Any]:
    """What a run of this compare must give whichever executor ran its rounds (the local pool, a Ray cluster,
    one that lost a node): the kernel pairs, the run's files, the sampled kernels, the summary's keys and each
    kind's counts, rounds and confidence."""
    import pandas as pd

    pairs = pd.read_csv(run / "report" / "kernels_compare.csv")
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()
                   and p.parts[len(run.parts)] in ("base", "pr", "pair", "report")
                   and "work" not in p.parts and "logs" not in p.parts and "shards" not in p.parts)
    summary = json.loads((run / "report" / "summary.json").read_text())
    return {"pairs": sorted(zip(pairs["base_path"], pairs["pr_path"], strict=True)),
            "files": files,
            "samples": {side: sorted(json.loads((run / side / "kernel_samples.json").read_text()))
                        for side in ("base", "pr")},
            "summary": {key: sorted(summary[key]) if isinstance(summary[key], dict) else None for key in summary},
            "kernels": {key: summary["kernels"][key] for key in ("n", "rounds", "confidence")},
            "models": {key: summary["models"][key] for key in ("n", "rounds", "confidence")}}
