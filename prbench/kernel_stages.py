"""Host-side helpers for the kernels capability: build the ``organize`` / ``kernels`` StageCommands and run them.

The pipeline calls ``organize_command`` for a run's variant directories (a comparison times its kernels in paired
rounds, ``prbench.paired_plan``); the invoke tasks use both, through ``run_stage``; a failed stage's own
``error:`` line becomes the one-line message.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

from analysis.errors import UserError
from prbench.runners import StageCommand, StageFailed


def kernel_stage_env(cache_dir: Path | None = None, tmp_dir: Path | None = None,
                     omp_threads: int | None = 1) -> dict[str, str]:
    """TMPDIR and TORCHINDUCTOR_CACHE_DIR go together (Inductor's C++ headers live under TMPDIR); one thread."""
    env: dict[str, str] = {}
    if cache_dir is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    if tmp_dir is not None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp_dir)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    return env


def organize_command(cache: Path, out: Path, *, rep: int = 100, warmup: int = 10, extract_to: Path | None = None,
                     graph_models: Path | None = None, env: dict[str, str] | None = None,
                     log_path: Path | None = None) -> StageCommand:
    args = ["--cache", str(cache), "--out", str(out), "--rep", str(rep), "--warmup", str(warmup)]
    for flag, value in (("--extract-to", extract_to), ("--graph-models", graph_models)):
        if value is not None:
            args += [flag, str(value)]
    return StageCommand(module="stages.organize", args=args, env=dict(env or {}), log_path=log_path)


def kernels_command(organized: Path, out: Path | None = None, *, devices: str = "cpu", warmup: int = 10,
                    iterations: int = 30, timeout_s: float = 300.0, cache_dir: Path | None = None,
                    work_dir: Path | None = None, filter_regex: str | None = None, platform: str = "auto",
                    env: dict[str, str] | None = None, log_path: Path | None = None) -> StageCommand:
    args = ["--dir", str(organized), "--devices", devices, "--warmup", str(warmup), "--iterations", str(iterations),
            "--timeout", str(timeout_s), "--platform", platform]
    for flag, value in (("--out", out), ("--cache-dir", cache_dir), ("--work-dir", work_dir),
                        ("--filter", filter_regex)):
        if value is not None:
            args += [flag, str(value)]
    return StageCommand(module="stages.kernels", args=args, env=dict(env or {}), log_path=log_path)


def check_cache_input(cache: Path) -> None:
    """Cheap host-side checks so a bad --cache fails before a stage (and its torch import) starts."""
    if cache.is_dir():
        if not any(cache.rglob("*.py")):
            raise UserError(f"--cache {cache}: no Inductor kernels or compiled graphs found (empty cache)")
        return
    if not cache.exists():
        raise UserError(f"--cache {cache}: no such directory or archive")
    try:
        with tarfile.open(cache, "r:*") as tar:
            tar.next()
    except (tarfile.TarError, EOFError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"--cache {cache}: cannot read archive ({reason}); expected a .tar or .tar.gz of an "
                        "Inductor cache") from None


def run_stage(command: StageCommand, runner: object | None = None, stream: bool = True) -> None:
    """Run a stage locally (a failure is a StageFailed carrying the stage's own one-line message).

    When the stage refuses its input with its own one-line error, the log this run started (and the directories
    made for it) are removed again: a user mistake must not leave an ``organize.log`` in an ``--out`` that holds
    nothing else. A crash keeps its log, since the message points there.
    """
    from prbench.runners.local import LocalRunner

    runner = runner or LocalRunner(stream_output=stream)
    created = _paths_to_create(command.log_path)
    try:
        runner.run(command)  # type: ignore[attr-defined]
    except StageFailed as exc:
        if command.log_path is not None and str(command.log_path) not in str(exc):
            _remove_created(created)
        raise


def _paths_to_create(log_path: Path | None) -> list[Path]:
    """The log file and every missing directory above it, deepest first (what running the stage will create)."""
    if log_path is None:
        return []
    missing = [log_path] if not log_path.exists() else []
    parent = log_path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing


def _remove_created(paths: list[Path]) -> None:
    for path in paths:
        try:
            if path.is_dir():
                path.rmdir()  # only if empty: the stage may have written there after all
            else:
                path.unlink(missing_ok=True)
        except OSError:
            return


def default_devices(requested: str | None, env: Sequence[str] | None = None) -> str:
    """``--devices`` default: what CUDA/HIP_VISIBLE_DEVICES names, else the CPU."""
    if requested:
        return requested
    for var in env or ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(var, "").strip()
        if value and value != "-1":
            return value
    return "cpu"


def check_devices(spec: str, dev: Path = Path("/dev")) -> str:
    """``--devices``: GPU indices only where this machine has GPUs (their device nodes), else a one-line error."""
    from stages.kernels import parse_devices

    gpus = [d for d in parse_devices(spec) if d != "cpu"]
    if not gpus:
        return spec
    nvidia = sorted(p.name for p in dev.glob("nvidia[0-9]*"))
    if not nvidia and not (dev / "kfd").exists():
        raise UserError(f"--devices {spec}: this machine has no GPU (no {dev}/nvidia* or {dev}/kfd); "
                        "use --devices cpu")
    missing = [d for d in gpus if nvidia and f"nvidia{d}" not in nvidia]
    if missing:
        raise UserError(f"--devices {spec}: no GPU {missing[0]} here (found {', '.join(nvidia)})")
    return spec
