"""One local stage process, as the benchmarks that time stages run it: its environment (a TMPDIR and Inductor
cache of its own, the shared header directory as given) and its wall and CPU seconds."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stages.support.environment import HEADER_DIR_ENV  # noqa: E402


def stage_env(work: Path, header_dir: str, **extra: str) -> dict[str, str]:
    """The environment of a stage working under ``work``; ``header_dir`` "" leaves the header under TMPDIR."""
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
                TORCHINDUCTOR_VEC_ISA_OK=os.environ.get("TORCHINDUCTOR_VEC_ISA_OK", "1"),
                TORCHINDUCTOR_CACHE_DIR=str(work / "inductor-cache"), TMPDIR=str(work / "tmp"),
                **{HEADER_DIR_ENV: header_dir}, **extra)


def suite_args(out: Path, models: str) -> list[str]:
    """The suite stage's arguments: ``models`` (comma-separated), a short timing."""
    return ["--out", str(out), "--models", models, "--warmup", "3", "--iterations", "10"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process and its children (``RUSAGE_CHILDREN``; stdin closed: a model worker
    finds no job); a failure ends the benchmark with the process's last line of stderr (of stdout when stderr is
    empty, as pytest's summary is)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"]
        sys.exit(f"{' '.join(argv[:4])} failed: {last[-1]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
