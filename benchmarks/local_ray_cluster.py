"""A real Ray cluster on this machine with fake GPUs (the actors then run on the CPU), for ``benchmarks/scale.py``
and the tests (``tests/support/ray_support.py`` hands it on): one head node (`local_cluster`), or a head and a second
node with its own raylet and ports (`two_node_cluster`). Each node is a ``ray start --block`` in its own process group;
a node is named for prbench by ``PRBENCH_NODE_NAME`` in its environment (its actors inherit it:
``prbench.executors.node.node_name``), and can be killed with its whole process tree (its raylet, the workers the
raylet started, what they started), as a machine that goes down. Ray itself is imported only by the processes it
starts: the ``ray`` command line of this interpreter's environment."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180.0  # per node; a busy 2-core machine takes minutes
NODE_STARTS = 3  # a second node's `ray start` may give up on a busy machine; it is tried this many times


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ray_command() -> str:
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray, "the ray command line (pip install -e '.[ray]')"
    return ray


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", **extra}


@dataclass
class Node:
    """One node of a test cluster: its ``ray start --block`` process (the leader of its process group)."""

    name: str
    process: subprocess.Popen

    def tree(self) -> list[int]:
        """The node's processes: ``ray start``, its raylet and the other daemons, the workers, their children."""
        return _descendants(self.process.pid)

    def kill(self) -> None:
        """SIGKILL the node's whole process tree at once, as a machine that loses power: each process is stopped
        first, so none starts another (or is restarted) while the others die."""
        found: list[int] = []
        while True:  # until the tree holds no process not yet stopped (one may fork while we look)
            fresh = [pid for pid in _descendants(self.process.pid) if pid not in found]
            if not fresh:
                break
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            found += fresh
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()


@dataclass
class Cluster:
    address: str
    temp: str  # the cluster's temp dir: every process of the cluster names it (the nodes share it)
    nodes: list[Node]

    def leftovers(self) -> list[int]:
        """The processes of this cluster still alive (none once it is stopped)."""
        return _cluster_processes(self.temp)


@contextlib.contextmanager
def local_cluster(gpus: int) -> Iterator[str]:
    """The address of a running one-node cluster with ``gpus`` fake GPUs; everything it started is stopped after."""
    with _cluster([gpus]) as cluster:
        yield cluster.address


@contextlib.contextmanager
def two_node_cluster(head: str, worker: str, gpus: int = 1) -> Iterator[Cluster]:
    """A head node and a second node on this machine, each with ``gpus`` fake GPUs and named ``head`` and ``worker``
    for prbench; everything both started is stopped after (also a node killed on the way)."""
    with _cluster([gpus, gpus], [head, worker]) as cluster:
        yield cluster


@contextlib.contextmanager
def _cluster(gpus: list[int], names: list[str] | None = None) -> Iterator[Cluster]:
    ray = _ray_command()
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="prbench-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    address = f"127.0.0.1:{port}"
    cluster = Cluster(address, temp, [])
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--disable-usage-stats"]
    try:
        for index, count in enumerate(gpus):
            named = {"PRBENCH_NODE_NAME": names[index]} if names else {}
            if index == 0:
                where = ["--head", "--port", str(port), "--include-dashboard=false", f"--temp-dir={temp}"]
            else:
                # A second raylet on this machine: every port it would take by default is the head's already.
                where = [f"--address={address}", "--node-manager-port", str(_free_port()),
                         "--object-manager-port", str(_free_port()),
                         "--dashboard-agent-listen-port", str(_free_port()),
                         "--dashboard-agent-grpc-port", str(_free_port()),
                         "--metrics-export-port", str(_free_port()),
                         "--runtime-env-agent-port", str(_free_port())]
            log = Path(temp) / f"node-{index}.out"  # what `ray start` said: the reason when it does not come up
            # On a busy machine a second raylet may not register with the head within the 30 s `ray start` waits
            # ("The current node timed out during startup"): what that start left is killed, and it starts again.
            for start in range(1, NODE_STARTS + 1):
                with log.open("wb") as out:
                    process = subprocess.Popen([ray, "start", *where, *common, "--num-gpus", str(count)],
                                               env=_env(**named), stdout=out, stderr=subprocess.STDOUT,
                                               start_new_session=True, preexec_fn=_hear_ctrl_c)
                cluster.nodes.append(Node(names[index] if names else "head", process))
                if _wait_for(address, sum(gpus[:index + 1]), process, log, last=index == 0 or start == NODE_STARTS):
                    break
                cluster.nodes.pop()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        yield cluster
    finally:
        for node in reversed(cluster.nodes):
            _stop(node.process)
        for pid in _cluster_processes(temp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _hear_ctrl_c() -> None:
    """Under a pytest started in the background SIGINT is ignored, and a child inherits that: the head would then
    not hear the Ctrl-C that stops it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(address: str, gpus: int, node: subprocess.Popen, log: Path, last: bool) -> bool:
    """Whether the cluster came up with ``gpus`` GPUs; False when ``node``'s ``ray start`` gave up and may start
    again (not ``last``)."""
    probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
             "print(int(ray.cluster_resources().get('GPU', 0)))")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if node.poll() is not None:
            assert not last, f"ray start exited: {log.read_text(errors='replace')[-2000:]}"
            return False
        try:
            done = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True,
                                  timeout=60)
        except subprocess.TimeoutExpired:
            continue  # a busy machine: the probe's import and join took longer; ask again while there is time
        if done.returncode == 0 and done.stdout.strip().endswith(str(gpus)):
            return True
        time.sleep(1)
    raise AssertionError(f"the Ray cluster at {address} did not come up with {gpus} GPU(s) in {START_TIMEOUT_S:.0f} s")


def _stop(node: subprocess.Popen) -> None:
    """Ctrl-C to the node's group (``ray start --block`` stops what it started: about a second, where SIGTERM
    takes it some 30 s), SIGKILL when it does not end; a node killed already has nothing left to stop."""
    if node.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGINT)
    try:
        node.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait()


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid), whatever process group or session each is in."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its closing parenthesis.
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


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
