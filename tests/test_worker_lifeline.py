"""A kernel worker never outlives its command: `invoke kernels` stopped with TERM, INT or KILL while a worker is busy
(in a kernel that runs a child process, as a g++ compile does) leaves no process of its tree alive 5 s later.

The worker is in a session of its own (so that a timeout kills its children with it), which also puts it out of
reach of the signals its stage gets; what ends it is the lifeline pipe from its stage (`stages.worker_process`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.kernels.index import IndexRow, write_index

ROOT = Path(__file__).resolve().parents[1]

# A kernel busy in a child process that would run for a minute: what a worker compiling with g++ looks like.
BUSY = ("import subprocess\n\ndef get_args():\n    return ()\n\n"
        "def call(args):\n    subprocess.run(['sleep', '60'])\n")


def _organized(root: Path) -> Path:
    (root / "pointwise").mkdir(parents=True)
    (root / "pointwise" / "triton_poi_busy_0.py").write_text(BUSY)
    write_index(root / "index.csv", [IndexRow("pointwise", "triton_poi_busy_0", "0" * 16, "x1", "triton_poi_busy_x1_r0",
                                              "pointwise/triton_poi_busy_0.py", 1, "0_inference", "triton",
                                              "pointwise/triton_poi_busy_0.py")])
    return root


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc (ppid is the 4th field of /proc/PID/stat, after the command)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.integration
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_interrupting_invoke_kernels_leaves_no_worker_behind(tmp_path: Path, stop: signal.Signals) -> None:
    organized = _organized(tmp_path / "organized")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    host = subprocess.Popen([sys.executable, "-m", "invoke", "-r", str(ROOT), "kernels", "-d", str(organized),
                             "--devices", "cpu", "--timeout", "120"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        tree: set[int] = set()
        while time.monotonic() < deadline:  # until the worker is inside the kernel's child process
            tree = _descendants(host.pid)
            if any(_command(p).startswith("sleep 60") for p in tree):
                break
            time.sleep(0.2)
        workers = {p for p in tree if "stages.kernels --worker" in _command(p)}
        assert workers and any(_command(p).startswith("sleep 60") for p in tree), "the worker never got busy"

        host.send_signal(stop)
        # The host stops its stage with SIGINT and gives it 10 s before SIGKILL, then joins its output reader for
        # up to 10 s more; beside another test process on two cores a SIGINT run took over 30 s to return once.
        host.wait(timeout=60)
        time.sleep(5)

        assert [(p, _command(p)) for p in sorted(tree) if _alive(p)] == []
    finally:
        if host.poll() is None:
            host.kill()
        for pid in _descendants(host.pid) if host.poll() is None else ():
            os.kill(pid, signal.SIGKILL)
