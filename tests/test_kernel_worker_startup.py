"""``benchmarks/kernel_worker_startup.py``: where a paired kernel round's worker spends its start-up, phase by phase.

On the CPU it runs real Inductor Triton kernel files through the Triton interpreter: the phases and visits are the
GPU's, without device time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "kernel_worker_startup.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import runner_overhead  # noqa: E402


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton"), "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.integration
def test_the_startup_of_a_worker_on_two_real_kernels_is_timed_phase_by_phase(tmp_path: Path) -> None:
    """Given an organized directory of two real Triton kernels, the user sees each phase a round's worker goes
    through, each kernel visited twice, and the costliest calls of the loads and of the first visit."""
    runner_overhead.build_organized(tmp_path / "organized", 2)

    done = _run("--organized", str(tmp_path / "organized"), "--device", "cpu", "--json", str(tmp_path / "r.json"),
                tmp_path=tmp_path)

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert list(result["phases_s"]) == ["import torch", "timer", "load 2 modules (cProfile on)",
                                        "first visit of the first kernel (cProfile on)",
                                        "visit 1 of every kernel but the first", "visit 2 of every kernel"]
    assert [(v["visit"], Path(v["path"]).name) for v in result["visits"]] == [
        (1, "triton_poi_fused_add_relu_sin_0_copy0.py"), (1, "triton_poi_fused_add_t_0_copy1.py"),
        (2, "triton_poi_fused_add_relu_sin_0_copy0.py"), (2, "triton_poi_fused_add_t_0_copy1.py")]
    assert all(v["kernel_ms"] > 0 and not v["errors"] for v in result["visits"])
    assert "load, costliest calls (cumulative):" in done.stdout and "stages/kernels.py" in result["load_profile"]
    assert "first visit, costliest calls (cumulative):" in done.stdout
    assert "cpu, torch " in done.stdout and "timed calls" in done.stdout


@pytest.mark.integration
def test_a_folder_without_an_index_is_one_line(tmp_path: Path) -> None:
    done = _run("--organized", str(tmp_path), "--device", "cpu", tmp_path=tmp_path)

    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(f"--organized {tmp_path}: no index.csv (not an organized "
                                                         "directory)")
    assert "Traceback" not in done.stderr
