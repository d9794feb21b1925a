"""The local pool (the default executor): this machine's devices, one shard at a time on each.

``--devices cpu`` (the default on a CPU recipe) is one device: the shards run one after the other, as the rounds
always did. ``--devices 0,1`` runs two shards at once, one per GPU; ``--devices cpu,cpu`` two CPU devices. Each
device gets its share of the CPUs (``prbench.executors.node.cpu_slots``), where its shards run and pin their timed
workers. A thread per device takes the next shard; the calling thread hears of each finished one, and on Ctrl-C
stops them all.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from foundation.io_errors import no_space_in
from prbench.executors import MAX_ATTEMPTS, DeviceSlot, RunnerSpec, ShardFailed, ShardLoss, ShardOutcome, ShardTask
from prbench.executors.node import NodeRunners, cpu_slots, node_name
from prbench.runners import Runner, StageLost

_POLL_S = 0.2  # how often the calling thread looks up from waiting (Ctrl-C is only seen between waits)


@dataclass
class _Attempt:
    task: ShardTask
    number: int = 1
    lost: tuple[ShardLoss, ...] = ()  # the attempts before this one


class LocalPool:
    name = "local"

    def __init__(self, devices: list[str], platform: str = "cpu", say: Callable[[str], None] = print,
                 make: Callable[[RunnerSpec], Runner] | None = None, stream_output: bool | None = None) -> None:
        node = node_name()
        self.slots = [DeviceSlot(node, d, cpu_slots(i, len(devices))) for i, d in enumerate(devices)]
        self.platform = platform
        self.say = say
        # One device: the stage's own lines go to the terminal as before; several: one line per finished shard.
        stream = len(self.slots) == 1 if stream_output is None else stream_output
        self.node = NodeRunners(node, say=say, stream_output=stream, make=make)

    def run(self, tasks: list[ShardTask], done: Callable[[ShardOutcome], None]) -> None:
        pending: queue.Queue[_Attempt] = queue.Queue()
        for task in tasks:
            pending.put(_Attempt(task))
        # Each attempt's outcome, with the seconds it took (what a lost one cost).
        results: queue.Queue[tuple[_Attempt, DeviceSlot, float | BaseException, float]] = queue.Queue()
        stop = threading.Event()

        def device_loop(slot: DeviceSlot) -> None:
            while not stop.is_set():
                try:
                    attempt = pending.get_nowait()
                except queue.Empty:
                    return
                started = time.monotonic()
                try:
                    outcome: float | BaseException = self.node.run_shard(attempt.task, slot)
                except BaseException as exc:  # the calling thread decides; KeyboardInterrupt after interrupt()
                    outcome = exc
                results.put((attempt, slot, outcome, time.monotonic() - started))

        remaining = len(tasks)
        threads: list[threading.Thread] = []
        failure: BaseException | None = None
        try:
            while remaining:
                # Lost shards go back in the queue: start a loop for every idle device while there is work.
                threads = [t for t in threads if t.is_alive()]
                for slot in self.slots[len(threads):] if not stop.is_set() else []:
                    if pending.empty():
                        break
                    thread = threading.Thread(target=device_loop, args=(slot,), daemon=True)
                    thread.start()
                    threads.append(thread)
                try:
                    attempt, slot, outcome, took = results.get(timeout=_POLL_S)
                except queue.Empty:
                    if stop.is_set() and not any(t.is_alive() for t in threads) and results.empty():
                        break  # a failure stopped the devices, and the shards they were running have ended
                    continue
                remaining -= 1
                if isinstance(outcome, float):
                    done(ShardOutcome(attempt.task.key, slot, outcome, attempt.number, self.node.facts(),
                                      attempt.lost))
                elif isinstance(outcome, StageLost) and attempt.number < MAX_ATTEMPTS:
                    self.say(f"{attempt.task.key}: lost on {slot.describe()} after {took:.1f} s ({outcome}); "
                             "running it again")
                    pending.put(_Attempt(attempt.task, attempt.number + 1,
                                         (*attempt.lost, ShardLoss(slot, took, str(outcome)))))
                    remaining += 1
                elif failure is None:
                    failure = outcome
                    stop.set()  # no new shard; those running finish and are kept
                    if no_space_in(str(outcome)) is not None:
                        # A full disk: the running shards cannot write their results either (a model round ran
                        # on for 75 s to fail the same way): stop them now, as Ctrl-C does.
                        self.say(f"{attempt.task.key}: the disk is full; stopping the running shards")
                        self.node.interrupt()
        except KeyboardInterrupt:
            stop.set()
            self.say("interrupted: stopping the running shards (finished ones are kept)")
            self.node.interrupt()
            for thread in threads:
                thread.join()
            raise
        for thread in threads:
            thread.join()
        if isinstance(failure, StageLost):
            raise ShardFailed(f"lost {MAX_ATTEMPTS} times: {failure}") from None
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Nothing to let go: the runners hold no process between shards."""
