"""The Ray executor: one actor per GPU of a Ray cluster (``num_gpus=1``), each running one shard at a time on its
device, both sides of the shard there (the paired stage's two live workers, or the two images one after the other).

``--ray-address auto`` joins the cluster this machine belongs to (``ray start`` ran here, or ``RAY_ADDRESS``);
``ray://HOST:PORT`` goes through Ray Client; ``HOST:PORT`` joins a cluster's head directly. Every node must see the
run directory and the code at the same paths as this machine (a shared file system), and, for local recipes, the
same Python at the same path (the stages run there as they run here); a docker recipe's image is found on each
node by its content tag or built there from the side's lock and the store (``prbench.executors.node``).

A CPU recipe runs on "GPUs" the cluster was started with (``ray start --num-gpus N``): each actor is then a CPU
device with its share of the node's CPUs. That is how the tests and ``benchmarks/scale.py`` use a one-machine
cluster.

An actor that dies (its node went down, its process was killed) costs the shard it was running: the shard goes
back in the queue, a new actor is asked for (wherever the cluster has a free GPU), and the run goes on with the
actors it has. The lost attempt (where, the seconds from its start until Ray reported the actor gone) goes with the
shard's outcome (`ShardLoss`).

Ctrl-C (and SIGTERM, ``prbench.termination``) asks every actor to stop its stage (SIGINT, as on the host), then
kills the actors. Stages started by an actor die with it (``LocalRunner(die_with_parent=True)``); a
container does not, so before the shard runs again a task on the dead actor's node removes the containers that
actor started (found by their labels: the run and the actor's pid, ``prbench.runners.docker``), and when the
executor closes, every node it used is rid of the run's containers. A node that is gone took its containers along.

Ray is imported by this module only, and this module only by ``prbench.executors.open_executor`` for ``ray``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from foundation.errors import UserError
from prbench.executors import MAX_ATTEMPTS, DeviceSlot, ShardFailed, ShardLoss, ShardOutcome, ShardTask
from prbench.executors.node import NodeRunners, cpu_slots, node_name
from prbench.runners import CODE_ROOT, OWNER_LABEL, RUN_LABEL, StageLost
from prbench.termination import STOP_GRACE_S, handlers_kept

PROBE_TIMEOUT_S = 10.0
ACTOR_READY_S = 120.0  # a new actor that is not placed by then means the cluster has no free GPU for it
_POLL_S = 0.5
# After Ctrl-C: how long running shards get to stop (their runner's grace, and a moment for the reply) before
# their actors are killed.
_STOP_GRACE_S = STOP_GRACE_S + 2.0
_CLEANUP_S = 60.0  # how long removing a node's left containers may take before the run goes on without it


class ShardActor:
    """Lives on one GPU of one node: runs the shards it is given there, one at a time."""

    def __init__(self, platform: str) -> None:
        node = node_name()
        gpu = str(ray.get_gpu_ids()[0])
        # The GPU's share of the node's CPUs; a fake GPU of a CPU-only cluster is the CPU device of that number.
        here = ray.get_runtime_context().get_node_id()
        count = next(int(n["Resources"].get("GPU", 1)) for n in ray.nodes() if n["NodeID"] == here)
        self.slot = DeviceSlot(node, "cpu" if platform == "cpu" else gpu, cpu_slots(int(gpu), count))
        self.runners = NodeRunners(node, die_with_parent=True)

    def where(self) -> tuple[DeviceSlot, int, str]:
        import os

        return self.slot, os.getpid(), ray.get_runtime_context().get_node_id()

    def run_shard(self, task: ShardTask) -> tuple[float, dict[str, Any]]:
        return self.runners.run_shard(task, self.slot), self.runners.facts()

    def interrupt(self) -> None:
        self.runners.interrupt()


@dataclass
class _Attempt:
    task: ShardTask
    number: int = 1
    lost: tuple[ShardLoss, ...] = ()  # the attempts before this one
    started: float = 0.0  # when it was given to its actor (time.monotonic)


@dataclass
class _Actor:
    handle: Any
    slot: DeviceSlot | None = None
    asked_at: float = 0.0
    pid: int = 0  # the actor's process: the owner of the containers it starts
    node_id: str = ""  # Ray's id of its node: where a task must run to remove those containers


def remove_left_containers(labels: dict[str, str]) -> list[str]:
    """On a node (a Ray task placed there): remove the containers with ``labels``; the short ids removed."""
    from prbench.images.docker_engine import docker_client
    from prbench.runners.docker import remove_containers

    return remove_containers(docker_client(), labels)


class RayExecutor:
    name = "ray"

    def __init__(self, address: str, platform: str, code_root: Path | None = None,
                 say: Callable[[str], None] = print) -> None:
        self.platform = platform
        self.say = say
        root = str(code_root or CODE_ROOT)
        _probe(address)
        try:
            with handlers_kept():  # ray.init makes SIGTERM a plain exit, which would skip stopping the cluster's work
                ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": root}}, log_to_driver=False,
                         logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            raise UserError(f"--ray-address {address}: cannot join the Ray cluster ({_first_line(exc)}); start one "
                            "with `ray start --head` or give its address") from None
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            ray.shutdown()
            raise UserError(f"--ray-address {address}: the Ray cluster has no GPU; start its nodes with GPUs "
                            "(`ray start --num-gpus N` on a CPU-only cluster gives each actor a share of the CPUs)")
        # num_cpus=0: the actor's device is its GPU; two calls at once, so interrupt() reaches a running shard.
        self._remote = ray.remote(ShardActor).options(num_gpus=1, num_cpus=0, max_concurrency=2, max_restarts=0)
        self._cleanup = ray.remote(remove_left_containers)
        self.gpus = gpus
        self.actors: list[_Actor] = []  # asked for on the first shards: no GPU is held while the host compiles
        self.nodes: dict[str, str] = {}  # Ray node id → name, of every node an actor ran on
        self.runs: set[Path] = set()  # the run directories of the docker shards given (their containers' label)
        self.say(f"ray: {gpus} GPU(s) in the cluster at {address}: one actor each")

    def _ask_for_actor(self) -> _Actor:
        return _Actor(self._remote.remote(self.platform), asked_at=time.monotonic())

    def start_actors(self) -> None:
        """One actor per GPU of the cluster (once; those that died are replaced as shards are lost)."""
        if not self.actors:
            self.actors = [self._ask_for_actor() for _ in range(self.gpus)]

    def run(self, tasks: list[ShardTask], done: Callable[[ShardOutcome], None]) -> None:
        self.runs.update(run for task in tasks for run in _container_runs(task))
        self.start_actors()
        pending: deque[_Attempt] = deque(_Attempt(t) for t in tasks)
        starting: dict[Any, _Actor] = {a.handle.where.remote(): a for a in self.actors if a.slot is None}
        idle = [a for a in self.actors if a.slot is not None]
        running: dict[Any, tuple[_Actor, _Attempt]] = {}
        failure: BaseException | None = None
        try:
            while (pending and failure is None) or running:
                while idle and pending and failure is None:
                    actor, attempt = idle.pop(), pending.popleft()
                    attempt.started = time.monotonic()
                    running[actor.handle.run_shard.remote(attempt.task)] = (actor, attempt)
                if not running and not starting:
                    raise ShardFailed(f"ray: no actor left to run {pending[0].task.key} (the cluster lost its GPUs)")
                ready, _ = ray.wait([*running, *starting], num_returns=1, timeout=_POLL_S)
                for ref in ready:
                    if ref in starting:
                        actor = starting.pop(ref)
                        if self._placed(actor, ref):
                            idle.append(actor)
                        continue
                    actor, attempt = running.pop(ref)
                    outcome = self._outcome(ref, actor, attempt)
                    if isinstance(outcome, ShardOutcome):
                        done(outcome)
                        idle.append(actor)
                    elif isinstance(outcome, _Lost):
                        assert actor.slot is not None  # it ran a shard, so it was placed
                        loss = ShardLoss(actor.slot, time.monotonic() - attempt.started, outcome.reason)
                        self.say(f"{attempt.task.key}: lost on {_where(actor)} after {loss.lost_s:.1f} s "
                                 f"({outcome.reason})")
                        if attempt.number >= MAX_ATTEMPTS:
                            failure = failure or ShardFailed(f"{attempt.task.key}: lost {MAX_ATTEMPTS} times, last on "
                                                             f"{_where(actor)}: {outcome.reason}")
                        else:
                            pending.append(_Attempt(attempt.task, attempt.number + 1, (*attempt.lost, loss)))
                        if outcome.actor_died:
                            self._remove_containers_of(actor, attempt.task)  # before the shard runs again
                            replacement = self._replace(actor)
                            starting[replacement.handle.where.remote()] = replacement
                        else:
                            idle.append(actor)
                    else:
                        failure = failure or outcome
                self._drop_unplaced(starting)
        except KeyboardInterrupt:
            self._stop_running(running)
            raise
        if failure is not None:
            raise failure

    def _outcome(self, ref: Any, actor: _Actor, attempt: _Attempt) -> ShardOutcome | _Lost | BaseException:
        try:
            wall_s, facts = ray.get(ref)
        except RayActorError as exc:
            return _Lost(f"its actor died: {_first_line(exc)}", actor_died=True)
        except RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            if isinstance(cause, StageLost):
                return _Lost(str(cause), actor_died=False)
            return cause if isinstance(cause, UserError) else ShardFailed(f"{attempt.task.key}: {_first_line(exc)}")
        assert actor.slot is not None
        return ShardOutcome(attempt.task.key, actor.slot, float(wall_s), attempt.number, dict(facts),
                            attempt.lost)

    def _placed(self, actor: _Actor, ref: Any) -> bool:
        try:
            actor.slot, actor.pid, actor.node_id = ray.get(ref)
        except (RayActorError, RayTaskError) as exc:
            self.say(f"ray: an actor did not start ({_first_line(exc)})")
            self.actors.remove(actor)
            return False
        self.nodes[actor.node_id] = actor.slot.node
        self.say(f"ray: actor pid {actor.pid} on {actor.slot.describe()}")
        return True

    def _remove_containers_of(self, dead: _Actor, task: ShardTask) -> None:
        """The containers the dead actor started for ``task``'s run are still running on its node (nothing waits
        for them any more): remove them there, so the shard's next attempt has its device to itself."""
        assert dead.slot is not None
        for run in _container_runs(task):
            labels = {RUN_LABEL: str(run), OWNER_LABEL: f"{dead.slot.node}:{dead.pid}"}
            self._remove_on(dead.node_id, labels, f"the containers of the dead actor (pid {dead.pid})")

    def _remove_on(self, node_id: str, labels: dict[str, str], what: str) -> None:
        node = self.nodes.get(node_id, node_id[:12])
        placement = NodeAffinitySchedulingStrategy(node_id, soft=False)
        try:
            removed = ray.get(self._cleanup.options(num_cpus=0, scheduling_strategy=placement).remote(labels),
                              timeout=_CLEANUP_S)
        except (RayError, UserError) as exc:  # the node is gone (its containers with it), no engine
            self.say(f"ray: could not remove {what} on {node} ({_first_line(exc)})")
            return
        if removed:
            self.say(f"ray: removed {what} on {node}: {', '.join(removed)}")

    def _replace(self, dead: _Actor) -> _Actor:
        self.actors.remove(dead)
        with contextlib.suppress(RayError):
            ray.kill(dead.handle)  # one Ray calls "unavailable" may come back: it must not hold its GPU then
        replacement = self._ask_for_actor()
        self.actors.append(replacement)
        return replacement

    def _drop_unplaced(self, starting: dict[Any, _Actor]) -> None:
        """An actor the cluster has no GPU for (its node is gone) would wait forever: give up on it."""
        for ref, actor in list(starting.items()):
            if time.monotonic() - actor.asked_at > ACTOR_READY_S:
                self.say(f"ray: no GPU for a new actor after {ACTOR_READY_S:.0f} s; going on without it")
                ray.kill(actor.handle)
                self.actors.remove(actor)
                del starting[ref]

    def _stop_running(self, running: dict[Any, tuple[_Actor, _Attempt]]) -> None:
        self.say("interrupted: stopping the shards running on the cluster (finished ones are kept)")
        busy = {id(a): a for a, _ in running.values()}.values()
        for actor in busy:
            actor.handle.interrupt.remote()
        with contextlib.suppress(GetTimeoutError):
            ray.wait(list(running), num_returns=len(running), timeout=_STOP_GRACE_S)
        self.close()

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor.handle)
        self.actors = []
        # What a killed actor was running (Ctrl-C past the grace period), or a dead one left where its removal
        # failed: nothing of the run stays on the nodes it used.
        for node_id in self.nodes:
            for run in sorted(self.runs):
                self._remove_on(node_id, {RUN_LABEL: str(run)}, f"the containers left of run {run.name}")
        self.nodes = {}
        ray.shutdown()


@dataclass(frozen=True)
class _Lost:
    reason: str
    actor_died: bool


def _probe(address: str) -> None:
    """A head that does not answer is one line now (Ray itself retries for minutes, logging as it goes)."""
    target = address
    if address == "auto":  # RAY_ADDRESS, else the cluster `ray start` last started on this machine
        from ray._private.services import canonicalize_bootstrap_address

        try:
            target = canonicalize_bootstrap_address("auto") or ""
        except (ConnectionError, ValueError):
            target = ""
        if not target:
            raise UserError("--ray-address auto: no Ray cluster on this machine (no RAY_ADDRESS, no `ray start`); "
                            "start one with `ray start --head` or give its address")
    host, _, port = target.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise UserError(f"--ray-address {address}: nothing answers at {target} ({exc.strerror or exc}); start the "
                        "cluster with `ray start --head` or give its address") from None


def _container_runs(task: ShardTask) -> set[Path]:
    """The runs whose labels ``task``'s containers carry (none for a local recipe's shard)."""
    return {step.runner.run.resolve() for step in task.steps
            if step.runner.kind == "docker" and step.runner.run is not None}


def _where(actor: _Actor) -> str:
    return actor.slot.describe() if actor.slot else "an actor"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
