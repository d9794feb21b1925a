"""A Ray actor that dies while its shard runs in a container leaves that container running: nothing waits for it any
more. On a real Ray cluster on this machine (two fake GPUs) and the real Docker engine: the actor running a docker
shard is killed (SIGKILL); the driver has the dead actor's container removed on its node before the shard runs
again, so the retry has the device to itself, and when the executor closes nothing of the run is left. A driver told
to end (SIGTERM, a cancelled CI job) stops the cluster's work as on Ctrl-C, though Ray's own handler would just exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prbench.executors import RunnerSpec, ShardOutcome, ShardTask, StageStep
from prbench.runners import OWNER_LABEL, RUN_LABEL, SHARD_LABEL, SIDE_LABEL, StageCommand
from tests.support.ray_support import NEEDS_RAY

pytestmark = [pytest.mark.integration, pytest.mark.ray, pytest.mark.docker, pytest.mark.xdist_group("ray-executor"),
              NEEDS_RAY]

BASE_IMAGE = "prbench-test/bookworm:base"
KEY = "kernels round 1 shard 1/1"
ROOT = Path(__file__).resolve().parents[1]


def docker_shard(run: Path) -> ShardTask:
    """The slow stand-in stage (``tests.support.slow_stage``) in a container of the base image, as a one-step shard."""
    files = {name: run / name for name in ("marker", "beat", "out")}
    spec = RunnerSpec("docker", platform="cpu", image=BASE_IMAGE, writable=(run,), run=run)
    args = [arg for name, path in files.items() for arg in (f"--{name}", str(path))]
    command = StageCommand("tests.support.slow_stage", args, labels={SHARD_LABEL: KEY, SIDE_LABEL: "base"})
    return ShardTask(KEY, (StageStep(spec, command),), (files["out"],))


def test_a_dead_actors_container_is_removed_before_its_shard_runs_again_and_none_is_left(ray_cluster: str,
                                                                                        tmp_path: Path) -> None:
    from prbench.executors.ray_cluster import RayExecutor
    from tests.support.docker_support import require_engine

    client = require_engine()
    run = tmp_path / "run"
    run.mkdir()
    of_the_run = {"label": f"{RUN_LABEL}={run.resolve()}"}
    killed: dict[str, str] = {}

    def kill_the_actor_mid_shard() -> None:
        deadline = time.monotonic() + 120
        while not (run / "marker").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        (container,) = client.containers.list(filters=of_the_run)
        killed.update(container=container.id, shard=container.labels[SHARD_LABEL])
        owner_pid = int(container.labels[OWNER_LABEL].rsplit(":", 1)[1])  # the actor that started it
        os.kill(owner_pid, signal.SIGKILL)

    lines: list[str] = []
    outcomes: list[ShardOutcome] = []
    executor = RayExecutor(ray_cluster, platform="cpu", say=lines.append)
    threading.Thread(target=kill_the_actor_mid_shard, daemon=True).start()
    try:
        executor.run([docker_shard(run)], outcomes.append)
    finally:
        executor.close()

    assert killed["shard"] == KEY
    assert [o.attempts for o in outcomes] == [2]  # lost once with its actor, then run again
    assert (run / "out").read_text() == "alone"  # the first attempt's container no longer beat when it started
    assert any("removed the containers of the dead actor" in line and killed["container"][:12] in line
               for line in lines), lines
    assert client.containers.list(all=True, filters=of_the_run) == []


def test_a_driver_told_to_end_stops_the_cluster_work_and_leaves_no_container(ray_cluster: str,
                                                                              tmp_path: Path) -> None:
    from prbench.runs.run_lock import RunLock
    from tests.support.docker_support import require_engine

    client = require_engine()
    files = {name: tmp_path / name for name in ("marker", "beat", "out")}
    host = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "termination_host.py"), "hold",
                             "--runs", str(tmp_path / "runs"), *(f"--{name}={path}" for name, path in files.items()),
                             f"--image={BASE_IMAGE}", f"--ray={ray_cluster}"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    run = tmp_path / "runs" / "held"
    of_the_run = {"label": f"{RUN_LABEL}={run}"}
    try:
        deadline = time.monotonic() + 120
        while not files["marker"].exists():
            assert host.poll() is None, host.communicate()
            assert time.monotonic() < deadline, "the shard did not start"
            time.sleep(0.2)
        assert len(client.containers.list(filters=of_the_run)) == 1  # the shard runs in a container of the run

        host.send_signal(signal.SIGTERM)
        stdout, stderr = host.communicate(timeout=120)
    finally:
        if host.poll() is None:
            host.kill()
            host.communicate()

    assert host.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("terminated (SIGTERM): ")
    assert "Traceback" not in stdout + stderr
    assert "stopping the shards running on the cluster" in stdout
    assert client.containers.list(all=True, filters=of_the_run) == []
    with RunLock(run):  # released
        pass
