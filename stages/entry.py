"""The one entry wrapper of every stage's ``main``: how a stage ends is decided here, not in each stage.

- a bad command line (argparse) or a ``UserError``: one line ``error: <message>``, exit 2 — the runners turn
  that line into the host's one-line error, so it must be the stage's only ``error:`` line;
- what the machine refused (``OSError``, a file that is not UTF-8 or not JSON): ``foundation.io_errors``'s one
  line, exit 1;
- an interrupt: exit 130 (what the stage kept is resumed next time); a stage's loop asks `raise_if_stopped` between
  its units of work, so an interrupt Python dropped where it landed still stops it there;
- anything else is a bug and keeps its traceback (Python's own exit 1).

A stage that returned, or ended in one of the first three ways, leaves the process without the interpreter's
teardown (see :func:`end_process`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from foundation.errors import UserError
from foundation.io_errors import stage_exit_code

USER_ERROR_EXIT = 2  # argparse's own code for a bad command line; a bad input is the same kind of mistake
INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

StageMain = Callable[[list[str] | None], int]


class StageArgumentParser(argparse.ArgumentParser):
    """argparse without its usage block on a mistake: the error becomes a ``UserError`` (one line)."""

    def error(self, message: str) -> NoReturn:
        raise UserError(message)


def error_line(message: str) -> None:
    """The stage's one-line user error, as the runners look for it (stderr is merged into the log)."""
    print(f"error: {message}", file=sys.stderr, flush=True)


_stop_requested = False  # set by the stage's SIGINT handler (`run_as_script`)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT in a stage: the KeyboardInterrupt Python's default handler raises, remembered.

    Python raises it wherever the main thread is, and inside a weakref callback or a ``__del__`` it prints
    "Exception ignored in: ..." and drops it: a suite stopped after its first model then compiled and measured the
    second (Dynamo's weakref callbacks, in 8 of 8 stops on an idle machine), until the host's SIGKILL or the end.
    """
    global _stop_requested
    _stop_requested = True
    raise KeyboardInterrupt


def raise_if_stopped() -> None:
    """Raise the stage's interrupt again where a loop may stop: once requested, whether or not it arrived."""
    if _stop_requested:
        raise KeyboardInterrupt


def stage_main(main: StageMain, argv: list[str] | None = None) -> int:
    """Run a stage's ``main(argv)`` and turn how it ended into the stage's exit code (see the module doc)."""
    try:
        return stage_exit_code(lambda: main(argv))
    except UserError as exc:
        error_line(str(exc))
        return USER_ERROR_EXIT
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT


def run_as_script(main: StageMain) -> NoReturn:
    """``if __name__ == "__main__": run_as_script(main)`` — the process's exit code is the wrapper's."""
    # A host started from a background job or under nohup passes SIGINT on as ignored; the runners stop a stage
    # with SIGINT first so it can finish its current write, so the stage takes Ctrl-C back whatever it inherited.
    signal.signal(signal.SIGINT, _interrupt)
    end_process(stage_main(main))


def end_process(code: int) -> NoReturn:
    """Exit with ``code`` once the exit handlers have run, without the interpreter's teardown.

    Why: a process that imported torch, Dynamo and Inductor spends about a second of CPU after its last line
    (1.6 s with transformers) clearing some 1,500 modules and collecting their objects, and a comparison starts
    dozens of such processes (each side's stages, and per round a driver and a worker per side). Nothing a stage
    leaves depends on that teardown: its files are closed when written (``foundation.atomic_io``), and what
    libraries must do at exit (stop Inductor's compile workers, flush logging, release file locks) are exit
    handlers, which run here as at a normal exit."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away, or a stream the stage closed
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)
