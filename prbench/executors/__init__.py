"""Executors: where the shards of a comparison's timing rounds run. ``local`` (this machine's devices, the
default) and ``ray`` (one actor per GPU of a Ray cluster).

A shard (`ShardTask`) is one or more stage commands that must run one after the other on the same device: the
paired stage over some blocks of a round, both sides interleaved (local recipes), or the base image's run and then
the PR image's (docker recipes). An executor places each shard on a device (`DeviceSlot`), adds where it put it to
the commands (``--device``, ``--node``; the CPUs of a CPU device as the command's ``cpus``), runs them through the
runner the shard names (`RunnerSpec`: made where the shard runs, since a runner holds a Docker client or a path to
a Python), and reports each finished shard (`ShardOutcome`). A shard whose process was killed from outside
(``StageLost``, or a Ray actor that died with its node) is run again on another device, up to `MAX_ATTEMPTS` times;
a shard that failed on its own (a stage's error) stops the run. Each lost attempt is kept with the shard
(`ShardLoss`: where, after how many seconds, why), and a run records it as `ShardRedo` (``redone`` in the summary of
the shard's stage in the run's manifest.json). Ctrl-C stops every running shard as Ctrl-C stops
a stage (SIGINT, then SIGKILL) and raises KeyboardInterrupt; finished shards are in the run directory and are not
redone (``prbench.compare.round_sharding``).

The executor is chosen with ``--executor local|ray``; `open_executor` makes it, importing Ray only for ``ray``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from foundation.errors import UserError
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
class ShardLoss:
    """An attempt of a shard that was lost: where it ran, and the seconds from its start until the executor heard
    of the loss (what it cost: the work lost, and the wait to learn that the node or process was gone)."""

    slot: DeviceSlot
    lost_s: float
    reason: str


@dataclass(frozen=True)
class ShardOutcome:
    """A finished shard: where it ran (the last attempt), how long, after how many attempts, and the lost ones."""

    key: str
    slot: DeviceSlot
    wall_s: float
    attempts: int
    facts: dict[str, object] = field(default_factory=dict)  # the node's facts (``prbench.executors.node``)
    lost: tuple[ShardLoss, ...] = ()  # the attempts before this one, in order

    def redos(self) -> list[ShardRedo]:
        return [ShardRedo(self.key, number, loss.slot, round(loss.lost_s, 3), loss.reason, self.slot)
                for number, loss in enumerate(self.lost, start=1)]


@dataclass(frozen=True)
class ShardRedo:
    """A lost attempt of a shard that finished on a later one, as the manifest records it: in the summary of the
    shard's stage, ``"redone": [{"shard", "attempt", "lost_on", "lost_s", "reason", "redone_on"}, ...]``, where
    ``lost_on`` and ``redone_on`` are placements (``{"node", "device", "cpus"}``, as a round's ``shards`` name them)
    and ``lost_s`` the seconds the attempt cost (`ShardLoss`). Part of manifest.json's format (its version:
    ``prbench.runs.run_store.MANIFEST_FORMAT_VERSION``)."""

    shard: str
    attempt: int  # which attempt was lost (1: the first)
    lost_on: DeviceSlot
    lost_s: float
    reason: str
    redone_on: DeviceSlot  # where the shard finished

    def to_dict(self) -> dict[str, object]:
        return {"shard": self.shard, "attempt": self.attempt, "lost_on": _placement(self.lost_on),
                "lost_s": self.lost_s, "reason": self.reason, "redone_on": _placement(self.redone_on)}


def _placement(slot: DeviceSlot) -> dict[str, object]:
    return {"node": slot.node, "device": slot.device, "cpus": sorted(slot.cpus) if slot.cpus else []}


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
