"""What runs where a shard is placed (this machine for the local pool, a Ray actor's node): make the shard's
runner, have the variant's image there, run the shard's steps, and say what the node is.

A docker shard names its image by content tag. A node that lacks it builds it from the image's lock and the
store (``prbench.images.image_lock.plan_from_lock`` + ``build_and_lock``: the same inputs give the same tag; with a
shared store, or one carried there with ``invoke store export/import``, no network is needed) and writes that build's
lock next to the side's, as ``<side>/nodes/<node>.lock.json``. The node's facts (host name, kernel, CPU, GPUs,
driver, and for docker the image id it ran) go back with every shard into the run's ``lock.json`` (``nodes``).
A node is named by its host name, or by ``PRBENCH_NODE_NAME`` in its environment (`node_name`).
"""

from __future__ import annotations

import os
import platform as host_platform
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from foundation.errors import UserError
from prbench.executors import DeviceSlot, RunnerSpec, ShardTask, placed
from prbench.runners import Runner, StageFailed

NODE_NAME_ENV = "PRBENCH_NODE_NAME"


def node_name() -> str:
    """How the run names this node: ``$PRBENCH_NODE_NAME`` where set (two Ray nodes on one machine: each raylet
    started with its own, which its actors inherit), else the host name."""
    return os.environ.get(NODE_NAME_ENV) or socket.gethostname()


def cpu_slots(index: int, count: int, affinity: set[int] | None = None) -> frozenset[int]:
    """The CPUs of device ``index`` of ``count`` (CPU devices or GPUs): the CPUs this process may use, split in
    ``count`` parts from the last CPU down (the paired stage pins to the last CPU it may use; CPU 0 takes the
    interrupts). More devices than CPUs share them. An index beyond ``count`` wraps around: a Ray actor's GPU id
    is the GPU's number on the machine (``CUDA_VISIBLE_DEVICES=2,3`` gives ids 2 and 3 of a node with two GPUs)."""
    cpus = sorted(affinity if affinity is not None else os.sched_getaffinity(0), reverse=True)
    index %= count
    if count <= len(cpus):
        per = len(cpus) // count
        return frozenset(cpus[index * per:(index + 1) * per])
    return frozenset({cpus[index % len(cpus)]})


class NodeRunners:
    """The runners of one node, made on first use and kept (a docker runner's image is found or built once)."""

    def __init__(self, node: str, say: Callable[[str], None] = print, die_with_parent: bool = True,
                 stream_output: bool = False, make: Callable[[RunnerSpec], Runner] | None = None) -> None:
        self.node = node
        self.make = make  # instead of the runner a spec names (tests: a runner that fakes the stage)
        self.say = say
        self.die_with_parent = die_with_parent
        self.stream_output = stream_output
        self._runners: dict[RunnerSpec, Runner] = {}
        self._facts: dict[RunnerSpec, dict[str, Any]] = {}
        self._lock = threading.Lock()
        # The runners running a shard now, once per shard: the devices share a runner per spec, so one shard
        # ending must not take the runner off the list while another still runs on it.
        self._active: list[Runner] = []
        self._host: dict[str, Any] | None = None

    def runner(self, spec: RunnerSpec) -> Runner:
        with self._lock:
            if spec not in self._runners:
                self._runners[spec], self._facts[spec] = self._make(spec)
            return self._runners[spec]

    def facts(self) -> dict[str, Any]:
        """What this node is, and the image ids its docker runners use (the host's facts are read once: asking
        the GPU tools costs a process per shard otherwise)."""
        if self._host is None:
            self._host = {"host": socket.gethostname(), "kernel": host_platform.release(),
                          "machine": host_platform.machine(), "cpu": _cpu_model(), "gpus": _gpu_names()}
        facts: dict[str, Any] = dict(self._host)
        for spec, extra in self._facts.items():
            if extra:
                facts.setdefault("images", {})[spec.image or ""] = extra
        return facts

    def _make(self, spec: RunnerSpec) -> tuple[Runner, dict[str, Any]]:
        if self.make is not None:
            return self.make(spec), {}
        if spec.kind == "local":
            from prbench.runners.local import LocalRunner

            return LocalRunner(python=spec.python, stream_output=self.stream_output,
                               die_with_parent=self.die_with_parent), {}
        if spec.kind == "docker":
            from prbench.runners.docker import DockerRunner, run_labels

            image_id = self._image_here(spec)
            runner = DockerRunner(image_id, spec.platform, writable=list(spec.writable),
                                  stream_output=self.stream_output,
                                  labels=run_labels(spec.run) if spec.run is not None else None)
            return runner, {"id": image_id, "same_as_host": image_id == spec.image_id}
        raise UserError(f"executor: unknown runner kind {spec.kind!r}")

    def _image_here(self, spec: RunnerSpec) -> str:
        """The image's id on this node: present by its content tag, else built from its lock and the store."""
        from prbench.images.docker_engine import docker_client, image_present

        assert spec.image is not None
        client = docker_client()
        image = image_present(client, spec.image)
        if image is not None:
            return str(image.id)
        if spec.lock is None or not spec.lock.is_file():
            raise UserError(f"node {self.node}: image {spec.image} is not here and there is no lock to build it from")
        from prbench.images.content_store import Store
        from prbench.images.image_lock import build_and_lock, plan_from_lock, read_lock

        self.say(f"node {self.node}: building {spec.image} from {spec.lock} and the store")
        with tempfile.TemporaryDirectory(prefix="prbench-node-build-") as tmp:
            plan, drift = plan_from_lock(read_lock(spec.lock), overlay_dir=Path(tmp))
            for name in drift:
                self.say(f"node {self.node}: warning: {name} differs from {spec.lock}")
            outcome = build_and_lock(plan, client, spec.lock.parent / "nodes" / "images",
                                     lock_path=spec.lock.parent / "nodes" / f"{self.node}.lock.json",
                                     store=Store.at(spec.store), emit=self.say)
        if outcome.result.tag != spec.image:
            raise UserError(f"node {self.node}: the lock {spec.lock} builds {outcome.result.tag}, not {spec.image}")
        return outcome.result.image_id

    def run_shard(self, task: ShardTask, slot: DeviceSlot) -> float:
        """Run the shard's steps on ``slot``; its wall time in seconds. A missing output is the shard's failure."""
        started = time.monotonic()
        for step in task.steps:
            runner = self.runner(step.runner)
            with self._lock:
                self._active.append(runner)
            try:
                runner.run(placed(step.command, slot))
            finally:
                with self._lock:
                    self._active.remove(runner)
        missing = [p for p in task.outputs if not p.exists()]
        if missing:
            raise StageFailed(f"{task.key}: finished on {slot.describe()} but did not write {missing[0]}")
        return time.monotonic() - started

    def interrupt(self) -> None:
        """Stop every stage running on this node now (Ctrl-C on the host)."""
        with self._lock:
            active = list(dict.fromkeys(self._active))  # each runner once
        # At once, not one runner after the other: each waits out its stages' grace (prbench.termination's bound).
        stops = [threading.Thread(target=runner.interrupt, daemon=True) for runner in active]
        for stop in stops:
            stop.start()
        for stop in stops:
            stop.join()


def _cpu_model() -> str:
    from prbench.images.image_lock import cpu_model

    return cpu_model()


def _gpu_names() -> list[str]:
    from prbench.images.image_lock import gpu_names

    return gpu_names()
