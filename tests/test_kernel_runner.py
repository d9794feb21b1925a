"""The kernel runner times every kernel it can and turns each broken one into a failure row, never a lost run."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.formats.kernel_index import IndexRow, write_index
from foundation.formats.stage_records import parse_devices, plan_jobs, worker_env
from stages.kernels import DeviceEventTimer, Outcome, summarize

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "kernels"

# Kernel modules that misbehave the three ways a generated kernel can: crash the process, hang, not parse.
SEGFAULT = "import ctypes\n\ndef get_args():\n    return ()\n\ndef call(args):\n    ctypes.string_at(0)\n"
# A hang that waits (a deadlock) rather than spins: the timeout is what is tested, and a spinning loop would take a
# core from the tests running beside this one for the whole timeout.
HANG = "import time\n\ndef get_args():\n    return ()\n\ndef call(args):\n    while True:\n        time.sleep(1)\n"
SYNTAX = "def get_args(:\n    return ()\n"


def row(path: str, name: str, category: str = "pointwise", backend: str = "triton") -> IndexRow:
    return IndexRow(category, name, "0" * 16, "x1", f"{name}_x1_r0", path, 1, "0_inference", backend, path)


def organized_dir(root: Path, broken: dict[str, str]) -> Path:
    (root / "pointwise").mkdir(parents=True)
    shutil.copy(FIXTURES / "triton213/triton_poi_fused_add_relu_sin_0.py",
                root / "pointwise/triton_poi_fused_add_relu_sin_0.py")
    rows = [row("pointwise/triton_poi_fused_add_relu_sin_0.py", "triton_poi_fused_add_relu_sin_0")]
    for name, text in broken.items():
        (root / "pointwise" / f"{name}.py").write_text(text)
        rows.append(row(f"pointwise/{name}.py", name))
    (root / "pointwise" / "stale.best_config").write_text("{}")
    write_index(root / "index.csv", rows)
    return root


def run_stage(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "stages.kernels", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def read_rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as handle:
        return {r["kernel_name"]: r for r in csv.DictReader(handle)}


@pytest.mark.integration
def test_segfault_hang_and_syntax_error_each_cost_one_row(tmp_path: Path) -> None:
    broken = {"triton_poi_segfault_1": SEGFAULT, "triton_poi_hang_2": HANG, "triton_poi_syntax_3": SYNTAX}
    organized = organized_dir(tmp_path / "organized", broken)
    # 20 s per job: the good kernel's job (its module's import of Triton, one call in the interpreter) takes about
    # 2 s on an idle machine, a busy two-core machine stretches it several times; the hang costs the whole 20 s.
    result = run_stage("--dir", str(organized), "--timeout", "20", "--devices", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_rows(tmp_path / "kernels.csv")
    assert rows["triton_poi_fused_add_relu_sin_0"]["status"] == "ok"
    assert float(rows["triton_poi_fused_add_relu_sin_0"]["median_ms"]) > 0
    assert rows["triton_poi_segfault_1"]["status"] == "fail"
    assert "SIGSEGV" in rows["triton_poi_segfault_1"]["error"]
    assert rows["triton_poi_hang_2"]["status"] == "fail" and "timeout" in rows["triton_poi_hang_2"]["error"]
    assert rows["triton_poi_syntax_3"]["error"].startswith("SyntaxError")
    samples = json.loads((tmp_path / "kernel_samples.json").read_text())
    assert list(samples) == ["pointwise/triton_poi_fused_add_relu_sin_0.py"]
    (one_round,) = samples["pointwise/triton_poi_fused_add_relu_sin_0.py"]  # the round format: this run is round 1
    assert len(one_round) == 1  # the interpreter's single call
    with open(tmp_path / "kernels_seed.csv", newline="") as handle:
        seed = list(csv.DictReader(handle))
    assert list(seed[0]) == ["relative_dir", "filename", "kernel_name", "ms_per_call", "gb_per_s"]
    assert not (organized / "pointwise" / "stale.best_config").exists()


@pytest.mark.integration
def test_two_workers_share_the_kernels(tmp_path: Path) -> None:
    organized = organized_dir(tmp_path / "organized", {"triton_poi_syntax_3": SYNTAX})
    result = run_stage("--dir", str(organized), "--devices", "cpu,cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {line.split()[2] for line in result.stdout.splitlines() if line.startswith("[kernels] ")}
    assert workers == {"worker0[cpu]", "worker1[cpu]"}


@pytest.mark.integration
def test_missing_index_is_one_line_error(tmp_path: Path) -> None:
    result = run_stage("--dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: --dir {tmp_path}: no index.csv (run organize first)"]


@pytest.mark.integration
def test_invoke_kernels_bad_dir_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "invoke", "kernels", "--dir", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode != 0 and len(output.splitlines()) == 1 and "Traceback" not in output


@pytest.mark.integration
def test_real_triton_kernel_runs_in_the_interpreter_and_matches_eager() -> None:
    code = f"""
import os, importlib.util
os.environ["TRITON_INTERPRET"] = "1"
import torch
from stages.support import triton_cpu
triton_cpu.install()
checks = []
def load(name):
    spec = importlib.util.spec_from_file_location(name, "{FIXTURES}/triton213/" + name + ".py")
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); return module
m = load("triton_poi_fused_add_relu_sin_0"); a = m.get_args(); m.call(a)
checks.append(torch.allclose(a[2], torch.relu(a[0]) + a[1].sin(), atol=1e-5))
m = load("triton_poi_fused_add_t_0"); a = m.get_args(); m.call(a)
checks.append(torch.allclose(a[2], a[0].t() + a[1], atol=1e-5))
m = load("triton_per_fused__softmax_0"); a = m.get_args(); m.call(a)
checks.append(torch.allclose(a[0], torch.softmax(a[1], -1), atol=1e-5))  # in_out_ptr0 is written
print(checks)
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.stdout.strip().splitlines()[-1] == "[True, True, True]", result.stderr[-2000:]


class FakeEvent:
    def __init__(self, log: list[str], clock: list[float]) -> None:
        self.log, self.clock, self.at = log, clock, 0.0

    def record(self) -> None:
        self.log.append("record")
        self.at = self.clock[0]

    def elapsed_time(self, end: FakeEvent) -> float:
        self.log.append("elapsed")
        return end.at - self.at


def test_device_event_timer_flushes_l2_outside_the_events_and_syncs_before_reading() -> None:
    log: list[str] = []
    clock = [0.0]

    def kernel() -> None:
        log.append("call")
        clock[0] += 2.5

    timer = DeviceEventTimer(lambda: FakeEvent(log, clock), lambda: log.append("sync"), lambda: log.append("flush"))
    samples = timer.time(kernel, warmup=2, iterations=3)
    assert samples == [2.5, 2.5, 2.5]
    assert log[:3] == ["call", "call", "sync"]
    assert log[3:15] == ["flush", "record", "call", "record"] * 3
    assert log[15:] == ["sync", "elapsed", "elapsed", "elapsed"]


def test_workers_are_pinned_to_their_device(tmp_path: Path) -> None:
    base = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "0,1"}
    cuda = worker_env("2", "cuda", base, tmp_path, None)
    rocm = worker_env("1", "rocm", base, tmp_path, None)
    cpu = worker_env("cpu", "cpu", base, tmp_path, tmp_path / "cache")
    assert cuda["CUDA_VISIBLE_DEVICES"] == "2" and "HIP_VISIBLE_DEVICES" not in cuda
    assert rocm["HIP_VISIBLE_DEVICES"] == "1" and "CUDA_VISIBLE_DEVICES" not in rocm
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["OMP_NUM_THREADS"] == "1"
    assert cpu["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache")
    assert cuda["TRITON_CACHE_DIR"] == str(tmp_path / "triton")  # private per worker: equal autotuning
    assert parse_devices("0,1") == ["0", "1"]


def test_cpp_kernels_are_timed_per_graph_and_triton_per_file(tmp_path: Path) -> None:
    rows = [row("cpp/cpp_fused_a_0.cpp", "cpp_fused_a_0", "cpp", "cpp"),
            row("cpp/cpp_fused_b_1.cpp", "cpp_fused_b_1", "cpp", "cpp"),
            row("pointwise/triton_poi_x_0.py", "triton_poi_x_0")]
    jobs = plan_jobs(rows, tmp_path, warmup=10, iterations=30, timeout_s=60, interpreter_iterations=None)
    assert [(j.kind, sorted(j.kernels)) for j in jobs] == [
        ("triton", ["triton_poi_x_0"]), ("graph", ["cpp_fused_a_0", "cpp_fused_b_1"])]
    assert jobs[1].path == str(tmp_path / "graphs" / "0_inference.py") and jobs[1].timeout_s == 120


def test_summary_statistics_and_bandwidth() -> None:
    result = summarize(row("p/k.py", "k"), Outcome(samples=[1.0, 2.0, 3.0, 10.0]), gb=0.002)
    assert (result.n, result.median_ms, result.min_ms, result.status) == (4, 2.5, 1.0, "ok")
    assert result.mean_ms == pytest.approx(4.0) and result.gb_per_s == pytest.approx(0.8)
    failed = summarize(row("p/k.py", "k"), Outcome(error="worker crashed (SIGSEGV)"), gb=None)
    assert (failed.status, failed.median_ms, failed.error) == ("fail", None, "worker crashed (SIGSEGV)")


@pytest.mark.xdist_group("torch-in-process")  # torch in the test process: one worker imports it
def test_every_visit_times_the_same_input_values(tmp_path: Path) -> None:
    """Kernel time can depend on the values: base and PR, and every visit of each, get the same seeded draw."""
    import torch

    from stages.kernels import load_module, seeded_args

    module_file = tmp_path / "graph.py"
    module_file.write_text("import torch\n\ndef get_args():\n    return [torch.randn(8), torch.randn(3, 3)]\n")
    module = load_module(str(module_file), "seeded_args_probe")
    first = seeded_args(module)
    torch.randn(100)  # whatever ran in between does not change the next draw
    second = seeded_args(module)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.integration
def test_a_bad_filter_regex_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    organized = organized_dir(tmp_path / "organized", {})

    result = run_stage("--dir", str(organized), "--filter", "triton_(poi")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --filter 'triton_(poi': not a valid regular expression (missing ), unterminated subpattern at "
        "position 7)"]
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "kernels.csv").exists()


@pytest.mark.integration
def test_a_damaged_index_names_its_line(tmp_path: Path) -> None:
    organized = organized_dir(tmp_path / "organized", {})
    index = organized / "index.csv"
    lines = index.read_text().splitlines()
    index.write_text("\n".join([*lines[:1], lines[1].replace(",1,0_inference,", ",many,0_inference,")]) + "\n")

    result = run_stage("--dir", str(organized))

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {index}: not an organized index: line 2, column calls: expected a number, found 'many'"]
