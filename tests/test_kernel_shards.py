"""``invoke kernels`` through an executor: the plan's kernel jobs cut into shards, each on one device, merged into the
files one stage run writes; finished shards are kept.

The index here names C++ kernels whose graph modules are not there, so the stage fails each kernel with the reason
without starting a worker: what is under test is the cut, the placement and the merge, not the timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.kernels.results import merge_result_files
from foundation.errors import UserError
from foundation.formats.kernel_index import IndexRow, write_index
from prbench.compare.kernel_shards import KernelRequest, executor_platform, kernel_shards, time_kernels
from prbench.executors.local_pool import LocalPool
from prbench.runners import CODE_ROOT
from prbench.stages.command_lines import kernels_command, run_stage

RESULTS = ("kernels.csv", "kernels_seed.csv", "kernel_samples.json")


def organized_with_missing_graphs(directory: Path, kernels: int = 5) -> Path:
    """An index of C++ kernels, two per graph, whose graph modules are missing (three jobs for five kernels)."""
    rows = [IndexRow("pointwise", f"cpp_fused_k{i}", f"h{i}", "s", f"cpp_fused_k_x{i}_r0",
                     f"pointwise/cpp_fused_k{i}.cpp", 1, f"M/graph{i // 2}", "cpp", "x") for i in range(kernels)]
    directory.mkdir(parents=True)
    write_index(directory / "index.csv", rows)
    return directory


def request_for(organized: Path, out: Path) -> KernelRequest:
    return KernelRequest(organized=organized, out=out, warmup=1, iterations=3, timeout_s=30.0, cache_dir=None,
                         filter_regex=None, env={})


def one_stage(organized: Path, out: Path) -> dict[str, str]:
    run_stage(kernels_command(organized, out, warmup=1, iterations=3, timeout_s=30.0), stream=False)
    return {name: (out / name).read_text() for name in RESULTS}


def test_the_jobs_are_cut_in_plan_order(tmp_path: Path) -> None:
    organized = organized_with_missing_graphs(tmp_path / "organized")
    shards = kernel_shards(request_for(organized, tmp_path / "out"), shard_size=2)
    assert shards.shards == ((0, 1), (2,))
    assert "--jobs" in shards.task(1).steps[0].command.args
    assert shards.task(1).steps[0].command.args[-1] == "2"
    assert executor_platform(organized) == "cpu"  # C++ kernels only: CPU devices


@pytest.mark.integration
def test_two_cpu_devices_give_the_files_of_one_stage_and_a_second_run_redoes_nothing(tmp_path: Path) -> None:
    organized = organized_with_missing_graphs(tmp_path / "organized")
    expected = one_stage(organized, tmp_path / "one")
    lines: list[str] = []
    rows = time_kernels(request_for(organized, tmp_path / "spread"), 1, LocalPool(["cpu", "cpu"], say=lines.append),
                        lines.append)

    assert rows == 5
    assert {name: (tmp_path / "spread" / name).read_text() for name in RESULTS} == expected
    assert sum("[kernels] " in line and " on " in line and "CPU" in line for line in lines) == 3
    shards = kernel_shards(request_for(organized, tmp_path / "spread"), 1)
    per_shard = [len((shards.shard_dir(i) / "kernels.csv").read_text().splitlines()) - 1 for i in range(3)]
    assert per_shard == [2, 2, 1]  # each shard timed only its own job's kernels
    again: list[str] = []
    time_kernels(request_for(organized, tmp_path / "spread"), 1, LocalPool(["cpu", "cpu"]), again.append)
    assert again == ["[kernels] 3 of 3 shards done earlier, kept"]


@pytest.mark.integration
def test_a_shard_the_merge_lacks_is_one_line(tmp_path: Path) -> None:
    organized = organized_with_missing_graphs(tmp_path / "organized")
    one_stage(organized, tmp_path / "one")
    with pytest.raises(UserError, match=r"no shard has a row for pointwise/cpp_fused_k5\.cpp"):
        merge_result_files([tmp_path / "one"], tmp_path / "merged",
                           [f"pointwise/cpp_fused_k{i}.cpp" for i in range(6)])


@pytest.mark.integration
def test_jobs_beyond_the_plan_are_refused_in_one_line(tmp_path: Path) -> None:
    organized = organized_with_missing_graphs(tmp_path / "organized")
    done = subprocess.run([sys.executable, "-m", "stages.kernels", "--dir", str(organized), "--out",
                           str(tmp_path / "out"), "--jobs", "2-7"], cwd=CODE_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(CODE_ROOT)}, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --jobs: job 3 is beyond the plan's 3 jobs (0-2)"


@pytest.mark.integration
def test_invoke_kernels_in_shards_on_two_cpu_devices(tmp_path: Path) -> None:
    organized = organized_with_missing_graphs(tmp_path / "organized")
    expected = one_stage(organized, tmp_path / "one")
    done = subprocess.run([sys.executable, "-m", "invoke", "kernels", "--dir", str(organized), "--out",
                           str(tmp_path / "out"), "--devices", "cpu,cpu", "--shard-size", "1", "--warmup", "1",
                           "--iterations", "3", "--timeout", "30"], cwd=CODE_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(CODE_ROOT)}, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"kernels: 5 kernels -> {tmp_path / 'out' / 'kernels.csv'}" in done.stdout
    assert {name: (tmp_path / "out" / name).read_text() for name in RESULTS} == expected


@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.xdist_group("ray-executor")  # one worker: the group's tests share one Ray cluster (tests/conftest.py)
def test_the_kernel_shards_spread_over_the_ray_actors_and_give_the_files_of_one_stage(ray_cluster: str,
                                                                                     tmp_path: Path) -> None:
    from prbench.executors.ray_cluster import RayExecutor

    organized = organized_with_missing_graphs(tmp_path / "organized", kernels=8)
    expected = one_stage(organized, tmp_path / "one")
    lines: list[str] = []
    executor = RayExecutor(ray_cluster, platform="cpu", say=lines.append)
    try:
        time_kernels(request_for(organized, tmp_path / "ray"), 1, executor, lines.append)
    finally:
        executor.close()
    assert {name: (tmp_path / "ray" / name).read_text() for name in RESULTS} == expected
    places = {line.split(" on ", 1)[1].split(":")[0] for line in lines
              if line.startswith("[kernels] ") and " on " in line}
    assert len(places) == 2  # both actors (their CPU devices) took shards
