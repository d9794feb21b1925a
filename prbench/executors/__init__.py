"""Executors: where the shards of a comparison's timing rounds run. ``local`` (this machine's devices, the
default) and ``ray`` (one actor per GPU of a Ray cluster).

A shard (`ShardTask`) is one or more stage commands that must run one after the other on the same device: the
paired stage over some blocks of a round, both sides interleaved (local recipes), or the base image's run and then
the PR image's (docker recipes). An executor places each shard on a device (`DeviceSlot`), adds where it put it to
the commands (``--device``, ``--node``; the CPUs of a CPU device as the command's ``cpus``), runs them through the
runner the shard names (`RunnerSpec`: made where the shard runs, since a runner holds a Docker client or a path to
a Python), and reports each finished shard (`ShardOutcome`). A shard whose process was killed from outside
(``StageLost``, or a Ray actor that died with its node) is run again on another device, up to `MAX_ATTEMPTS` times;
a shard that failed on its own (a stage's error) stops the run. Ctrl-C stops every running shard as Ctrl-C stops
a stage (SIGINT, then SIGKILL) and raises KeyboardInterrupt; finished shards are in the run directory and are not
redone (``prbench.compare.shard_rounds``).

The executor is chosen with ``--executor local|ray``; `open_executor` makes it, importing Ray only for ``ray``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from analysis.errors import UserError
from prbench.runners import StageCommand

EXECUTORS = ("local", "ray")
MAX_ATTEMPTS = 3  # a shard lost this many times (killed processes, dead nodes) fails the run
RAY_INSTALL_HINT = 'pip install -e ".[ray]"'


@dataclass(frozen=True)
class RunnerSpec:
    """How a node runs a shard's stage, as data (it travels to the node): this Python, or a variant's image.

    A docker runner names the image by its content tag; a node without it builds it from ``lock`` and the store
    at ``store`` (``prbench.executors.node``). ``writable``: the directories the container may write (the run).
    """

    kind: str  # "local" or "docker"
    platform: str = "cpu"
    python: str | None = None  # local: the interpreter whose torch the stage uses
    image: str | None = None  # docker: the image's content tag
    image_id: str | None = None  # docker: the id the host built or found (a node's own id may differ)
    lock: Path | None = None  # docker: the image's lock.json, to build it where it is missing
    store: Path | None = None  # docker: the store the lock's items are in
    writable: tuple[Path, ...] = ()
    run: Path | None = None  # docker: the run directory its containers are labelled with (to find what is left)


@dataclass(frozen=True)
class StageStep:
    """One stage command of a shard, with the runner it needs (the command's callbacks are not part of it)."""

    runner: RunnerSpec
    command: StageCommand


@dataclass(frozen=True)
class ShardTask:
    """A unit of work placed on one device: its steps run one after the other; ``outputs`` must exist after."""

    key: str  # how progress lines and errors name it, e.g. "kernels round 3 shard 2/4"
    steps: tuple[StageStep, ...]
    outputs: tuple[Path, ...]


@dataclass(frozen=True)
class DeviceSlot:
    """A device a shard runs on: a GPU index, or the CPU; ``cpus``: the node's CPUs given to the device (its
    shard's stage runs on them, and pins its timed workers to the last of them)."""

    node: str
    device: str  # "cpu" or a GPU index as the node's processes see it
    cpus: frozenset[int] | None = None

    def describe(self) -> str:
        if self.device == "cpu":
            shown = ",".join(map(str, sorted(self.cpus))) if self.cpus else "any"
            return f"{self.node} CPU {shown}"
        return f"{self.node} GPU {self.device}"


@dataclass(frozen=True)
class ShardOutcome:
    """A finished shard: where it ran (the last attempt), how long, and after how many attempts."""

    key: str
    slot: DeviceSlot
    wall_s: float
    attempts: int
    facts: dict[str, object] = field(default_factory=dict)  # the node's facts (``prbench.executors.node``)


class ShardFailed(UserError):
    """A shard failed on its own (a stage's error), or was lost more than MAX_ATTEMPTS times."""


class Executor(Protocol):
    name: str

    def run(self, tasks: list[ShardTask], done: Callable[[ShardOutcome], None]) -> None:
        """Run every task (several at once where there are devices); call ``done`` (in the calling thread) as each
        finishes. Raises ShardFailed for a shard that failed, KeyboardInterrupt after stopping every running
        shard on Ctrl-C."""
        ...

    def close(self) -> None:
        """Let the devices go (a Ray executor's actors)."""
        ...


def placed(command: StageCommand, slot: DeviceSlot) -> StageCommand:
    """The command as it runs on ``slot``: the stage is told the device and node, and runs on the slot's CPUs."""
    return dataclasses.replace(command, args=[*command.args, "--device", slot.device, "--node", slot.node],
                               cpus=slot.cpus, on_line=None)


def check_executor(name: str, ray_address: str | None) -> str:
    """``--executor`` and ``--ray-address`` at the door (before anything runs)."""
    if name not in EXECUTORS:
        raise UserError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS)}")
    if ray_address is not None and name != "ray":
        raise UserError("--ray-address: only with --executor ray")
    if name == "ray":
        address = ray_address or "auto"
        if not _ray_address_ok(address):
            raise UserError(f"--ray-address {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
        _require_ray()
    return name


def _ray_address_ok(address: str) -> bool:
    if address == "auto":
        return True
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    return bool(host) and port.isdigit() and "/" not in host


def _require_ray() -> None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("ray")
    except (ImportError, ValueError):  # a broken or blocked install is no install
        spec = None
    if spec is None:
        raise UserError(f"--executor ray: Ray is not installed; install the extra with: {RAY_INSTALL_HINT}")


def open_executor(name: str, *, devices: list[str], platform: str, ray_address: str | None = None,
                  code_root: Path | None = None, say: Callable[[str], None] = print) -> Executor:
    """The executor ``name``: the local pool over ``devices``, or the Ray cluster at ``ray_address``."""
    if name == "ray":
        _require_ray()
        try:
            from prbench.executors.ray_cluster import RayExecutor
        except ImportError as exc:  # installed, but its import fails (a half-removed or mismatched install)
            raise UserError(f"--executor ray: Ray is installed but cannot be imported ({exc}); reinstall it with: "
                            f"{RAY_INSTALL_HINT}") from exc

        return RayExecutor(ray_address or "auto", platform=platform, code_root=code_root, say=say)
    from prbench.executors.local_pool import LocalPool

    return LocalPool(devices, platform=platform, say=say)
