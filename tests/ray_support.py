"""A real Ray cluster on this machine for the tests: one head node on 127.0.0.1 with fake GPUs (the actors then
run on the CPU), started with ``ray start --head --block`` in its own process group and stopped by that group."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 90.0
# Skips a module without the ray extra. It looks for the package without importing it: importing Ray costs each
# pytest process about half a second when it collects the module, also in the tiers that deselect its tests.
NEEDS_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="needs the ray extra (pip install -e '.[ray]')")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def local_cluster(gpus: int) -> Iterator[str]:
    """The address of a running one-node cluster with ``gpus`` fake GPUs; everything it started is stopped after."""
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray, "the ray command line (pip install -e '.[ray]')"
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="prbench-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([ray, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port),
                             "--num-cpus", "2", "--num-gpus", str(gpus), "--include-dashboard=false",
                             "--disable-usage-stats", f"--temp-dir={temp}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_hear_ctrl_c)
    address = f"127.0.0.1:{port}"
    try:
        _wait_for(address, gpus, head)
        yield address
    finally:
        _stop(head, temp)


def _hear_ctrl_c() -> None:
    """Under a pytest started in the background SIGINT is ignored, and a child inherits that: the head would then
    not hear the Ctrl-C that stops it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(address: str, gpus: int, head: subprocess.Popen) -> None:
    probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
             "print(int(ray.cluster_resources().get('GPU', 0)))")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert head.poll() is None, "ray start --head exited"
        done = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip().endswith(str(gpus)):
            return
        time.sleep(1)
    raise AssertionError(f"the Ray cluster at {address} did not come up in {START_TIMEOUT_S:.0f} s")


def _stop(head: subprocess.Popen, temp: str) -> None:
    """Ctrl-C to the head's group (``ray start --block`` stops what it started: about a second, where SIGTERM
    takes it some 30 s), then whatever is left of the processes that belong to this cluster (workers run in groups
    of their own, with the session dir open)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGINT)
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
    for pid in _cluster_processes(temp):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(temp, ignore_errors=True)


def _cluster_processes(temp: str) -> list[int]:
    """Processes whose command line or open files name the cluster's temp dir (only this cluster's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if temp in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
                continue
            if any(temp in os.readlink(fd) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
