"""Host-side checks and environment of the kernels capability (``invoke organize`` / ``invoke kernels``).

The stages' command lines are built by ``prbench.stages.command_lines`` (``organize_command``, ``kernels_command``)
and run through its ``run_stage``.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

from foundation.errors import UserError
from foundation.records import check_regular


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


def check_cache_input(cache: Path) -> None:
    """Cheap host-side checks so a bad --cache fails before a stage (and its torch import) starts."""
    if cache.is_dir():
        if not any(cache.rglob("*.py")):
            raise UserError(f"--cache {cache}: no Inductor kernels or compiled graphs found (empty cache)")
        return
    if not cache.exists():
        raise UserError(f"--cache {cache}: no such directory or archive")
    check_regular(cache, "a directory, .tar or .tar.gz of an Inductor cache (--cache)")  # a FIFO never ends
    try:
        with tarfile.open(cache, "r:*") as tar:
            tar.next()
    except (tarfile.TarError, EOFError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"--cache {cache}: cannot read archive ({reason}); expected a .tar or .tar.gz of an "
                        "Inductor cache") from None


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
    from foundation.formats.stage_records import parse_devices

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
