"""SIGTERM and SIGHUP end a task the way Ctrl-C does.

A cancelled CI job, ``timeout``, a closed terminal: the host gets SIGTERM or SIGHUP, whose default action ends the
process on the spot, and a stage running in a container or in a process group of its own outlives it. Raised in
the main thread as `Terminated` (a ``KeyboardInterrupt``), they take Ctrl-C's path instead: the running stages are
stopped, their containers removed, the run's lock released and finished work kept; ``prbench.commands.cli.user_facing``
then exits with ``128 + signal`` (143 for SIGTERM) and one line.

Ctrl-C reaches a task whatever it inherited: a host started as a background job of a script (a CI runner's
``pytest &``) begins with SIGINT ignored, and then ``kill -INT`` or a Ctrl-C on the script would leave it running
until its stage ends (a compile of minutes). So the task takes SIGINT back for its duration, as stages do.

The stop is bounded: a stage gets `STOP_GRACE_S` after its SIGINT to finish its current atomic write before its
process group is killed, and its output `OUTPUT_DRAIN_S` more to reach the log; with the host's own exit that keeps
a task's end within 10 s of the signal on a busy machine (tests/test_worker_lifeline.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_S = 5.0  # a stopped stage's time to finish its current write (after SIGINT), then SIGKILL
OUTPUT_DRAIN_S = 2.0  # after a stopped stage's group is killed: its last output's time to reach the log


class Terminated(KeyboardInterrupt):
    """The process was asked to end (SIGTERM, SIGHUP); everything that stops work on Ctrl-C stops it here too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process ended by the signal


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """For the block: SIGTERM and SIGHUP raise `Terminated` in the main thread (elsewhere: nothing changes).

    Only the first signal raises: a second one (a CI runner repeats its SIGTERM) would cut short the stop it
    started, and leave the very container the first one is removing. SIGTERM or SIGHUP the process was started
    with ignored (``nohup`` ignores SIGHUP) stays ignored; SIGINT is taken back (see the module's doc), and the
    three are unblocked in the main thread (a starter's thread that blocked them passes its mask on). The
    handlers and the mask in place before are back after the block. A library that turns whatever its wait was
    interrupted by into a plain ``KeyboardInterrupt`` (Ray's ``wait`` and ``get`` do) does not hide the signal:
    what leaves the block is `Terminated`.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if received:
            return
        received.append(signum)
        raise Terminated(signum)

    previous = {signum: signal.getsignal(signum) for signum in (*TERMINATING_SIGNALS, signal.SIGINT)}
    for signum in TERMINATING_SIGNALS:
        if previous[signum] is not signal.SIG_IGN:
            signal.signal(signum, handler)
    if previous[signal.SIGINT] in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {*TERMINATING_SIGNALS, signal.SIGINT})
    try:
        yield
    except KeyboardInterrupt as exc:
        if received and not isinstance(exc, Terminated):
            raise Terminated(received[0]) from exc
        raise
    finally:
        _restore(previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextlib.contextmanager
def handlers_kept() -> Iterator[None]:
    """For a block that installs signal handlers of its own (``ray.init`` makes SIGTERM ``sys.exit``, which would
    skip every stop on the Ctrl-C path): ours are back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (*TERMINATING_SIGNALS, signal.SIGINT)}
    try:
        yield
    finally:
        _restore(previous)


def _restore(previous: dict[signal.Signals, Any]) -> None:
    for signum, earlier in previous.items():
        # None: a handler installed outside Python, which cannot be put back; the default is the closest.
        signal.signal(signum, earlier if earlier is not None else signal.SIG_DFL)
